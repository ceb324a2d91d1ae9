"""The test config's data model (DESIGN §3): what a loaded, validated config holds.

Every node remembers where it came from (``Pos``) so errors, ``explain`` and the
JSON report can point at the exact line of the YAML under review.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .inputs import ModuleInputs

MODES = ("mandatory_success", "xfail", "xfail_strict", "skip")
# Labels are free names (Torch Spyre's tiers: smoke, core, full, device_critical, ...);
# these are the usual ones. `full` selects everything; `suite_<group>` is no label but a
# selection by the config's folder or file name (``labels.py``).
LABELS = ("smoke", "unit", "integration", "regression", "trunk", "core", "full")
LABEL_FORM = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")
DEFAULT_UNLISTED_MODE = "skip"
TOKENS = ("TORCH_ROOT", "TORCH_DEVICE_ROOT")

# Canonical dtype names are torch's own (``str(torch.float16)`` without "torch.").
DTYPES = frozenset(
    [
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex32",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn_x2",
        "quint8",
        "qint8",
        "qint32",
        "quint4x2",
        "quint2x4",
        "bits1x8",
        "bits2x4",
        "bits4x2",
        "bits8",
        "bits16",
    ]
)
DTYPE_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
}
# A Python import path: dotted identifiers ("mypkg.layers.MyLinear").
DOTTED_FORM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# An op, module or marker name as torch spells it: dotted identifiers ("add",
# "nn.functional.relu"), where a part after the first may hold a hyphen (an OpInfo's
# variant: "nn.functional.interpolate.nearest-exact").
NAME_FORM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_-]*)*")
TAG_FORM = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.]*")
REGEX_CHARS = frozenset(".^$*+?{}[]\\|()")


@dataclass(frozen=True)
class Pos:
    """A place in a config file (1-based line and column)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Description:
    """An item's or entry's ``description``: why it is there, and where it is written."""

    text: str
    pos: Pos  # of the description's value

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Precision:
    atol: float | None = None
    rtol: float | None = None


@dataclass(frozen=True)
class DtypeSpec:
    name: str  # canonical
    pos: Pos
    precision: Precision | None = None
    force_xfail: bool = False
    description: Description | None = field(default=None, compare=False)


@dataclass(frozen=True)
class OpSpec:
    name: str  # OpInfo name without a "torch." prefix
    pos: Pos
    dtypes: tuple[DtypeSpec, ...] | None = None
    force_xfail: bool = False
    # `edits.ops.include` only: markers of this op's generated variants (with the entry's).
    tags: tuple[str, ...] = ()
    description: Description | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ModuleSpec:
    name: str  # as written, e.g. "torch.nn.Linear"
    pos: Pos
    # `edits.modules.include` only: a custom module, built from its import path with the
    # config's inputs (``inputs.py``) instead of being looked up in module_db.
    inputs: ModuleInputs | None = field(default=None, compare=False)
    description: Description | None = field(default=None, compare=False)

    @property
    def short(self) -> str:
        """The ModuleInfo spelling: "nn.Linear"."""
        return self.name.removeprefix("torch.")


@dataclass(frozen=True)
class Selection:
    """An include/exclude pair of one kind of edit."""

    include: tuple = ()
    exclude: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)


@dataclass(frozen=True)
class Edits:
    dtypes: Selection = Selection()
    ops: Selection = Selection()
    modules: Selection = Selection()
    # `functions.cpu_move`: methods of the test (assertions such as `assertEqual`) that
    # get every tensor argument moved to the CPU first, so results compare on the host.
    cpu_move: tuple[str, ...] = ()
    # The descriptions of `cpu_move` items, by method name (only those that have one).
    cpu_move_descriptions: tuple[tuple[str, Description], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.dtypes or self.ops or self.modules or self.cpu_move)


@dataclass(frozen=True)
class NamePattern:
    """One entry of ``names``: ``Class::method`` or ``method``, literal or full-match regex."""

    text: str
    pos: Pos
    cls: str | None
    method: str
    is_regex: bool

    def matches(self, cls: str | None, method: str) -> bool:
        if self.is_regex:
            if self.cls is not None and (cls is None or not re.fullmatch(self.cls, cls)):
                return False
            return re.fullmatch(self.method, method) is not None
        if self.cls is not None and self.cls != cls:
            return False
        return self.method == method


@dataclass(frozen=True)
class TestEntry:
    __test__ = False  # not a pytest test class

    names: tuple[NamePattern, ...]
    mode: str
    pos: Pos
    tags: tuple[str, ...] = ()
    edits: Edits = Edits()
    reason: str = ""
    # True/False: this entry's tests do / do not ignore upstream's device restrictions;
    # None: the files entry decides (see ``FileEntry.bypass_device_restrictions``).
    bypass_device_restrictions: bool | None = None
    # Torch Spyre's per-test labels: with a label selection, the entry's tests run only
    # under a label they list (empty: whenever their file's labels are selected).
    labels: tuple[str, ...] = ()
    # The tests run under torch.no_grad() (Spyre: ops without an autograd formula).
    no_grad: bool = False
    # Set by the loader: the labels of the files entry or config this entry came from
    # (they survive a merge of configs) and that config's path (``suite_<group>``).
    group_labels: tuple[str, ...] = ()
    source: str = ""
    # Its `description` key (``reason`` falls back on the comment above the entry).
    description: Description | None = None


@dataclass
class FileEntry:
    path: str  # the path as written
    pattern: str  # tokens expanded, absolute; may hold glob characters
    files: tuple[str, ...]  # the files it matched (real paths)
    pos: Pos
    unlisted_test_mode: str = DEFAULT_UNLISTED_MODE
    unlisted_pos: Pos | None = None
    # Opt-in: classes upstream instantiates only for other devices (``only_for`` /
    # ``except_for``) are instantiated for privateuse1 too, and ``@onlyOn``-style
    # decorators (``@onlyCUDA``, ``@onlyCPU``...) let the tests run on the device.
    bypass_device_restrictions: bool = False
    bypass_pos: Pos | None = None
    tests: list[TestEntry] = field(default_factory=list)
    # The labels its tests are selected by: the entry's own `labels` (Spyre writes the
    # origin config's there when it merges configs), else its config's; and that
    # config's path. Resolved by the loader.
    labels: tuple[str, ...] = ()
    labels_pos: Pos | None = None
    source: str = ""
    description: Description | None = None

    @property
    def is_glob(self) -> bool:
        return any(char in self.pattern for char in "*?[")


@dataclass
class GlobalSection:
    supported_dtypes: tuple[DtypeSpec, ...] | None = None
    supported_ops: tuple[OpSpec, ...] | None = None
    supported_modules: tuple[ModuleSpec, ...] | None = None


@dataclass
class Config:
    sources: tuple[str, ...]
    labels: tuple[str, ...] = ()
    files: list[FileEntry] = field(default_factory=list)
    global_: GlobalSection = field(default_factory=GlobalSection)

    def all_files(self) -> list[str]:
        seen: dict[str, None] = {}
        for entry in self.files:
            seen.update(dict.fromkeys(entry.files))
        return list(seen)


def canonical_dtype(name: str) -> str | None:
    """The canonical dtype name for a config spelling, or None if unknown."""
    bare = name.removeprefix("torch.")
    bare = DTYPE_ALIASES.get(bare, bare)
    return bare if bare in DTYPES else None


def config_op_name(name: str) -> str:
    """An op's name as the config compares it: without a "torch." prefix, which a config
    may write and op_db itself uses for a few OpInfos ("torch._scaled_mm")."""
    return name.removeprefix("torch.")


def is_regex(text: str) -> bool:
    return any(char in REGEX_CHARS for char in text)


def marker_safe(text: str) -> str:
    """A marker-name spelling of an op, dtype or module name ("nn.Linear" -> "nn_Linear")."""
    return re.sub(r"\W", "_", text)


# Fields of torch-spyre's configs (same schema family) that crcr does not implement.
SPYRE_ONLY = {
    "input_config": "torch-spyre's input generation settings",
    "sample_inputs_func": "torch-spyre's model-op sample inputs",
    "cases": "torch-spyre's model-op cases",
}
