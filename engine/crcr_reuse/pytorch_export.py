"""``export --format pytorch``: a crcr config as PyTorch's ``set_test_configs(...)`` call.

The exported module, imported after the backend and before the test files, makes
torch's own instantiation select what crcr's plugin selects, as far as PyTorch's
config can say it (``pytorch_config.py``). Steps:
1. every generic test of the listed files is read from source (no import) and
   decided by the config's rules (``matching.py``), so regex names and
   ``unlisted_test_mode`` resolve to today's tests;
2. ``skip`` tests of classes given to ``instantiate_device_type_tests`` go to
   ``test_exclusions``;
3. with ``global.supported_ops``: ``op_allowlist`` is every op_db full name some
   ``@ops`` test of the config runs (the global list and ``edits.ops.include``);
4. per op (op_db full names): a dtype the global lists drop gets a skip for every test;
   an op or dtype a test's own edits drop gets a skip for that test; an ``xfail`` /
   ``xfail_strict`` ``@ops`` test gets ``unittest.expectedFailure``;
5. what none of this can say is listed, per kind with a count (``Gaps``), in the
   module's header and on stderr.
Skips made by ``op_overrides`` leave the variant generated (reported skipped);
crcr never generates it. A comparison counts both as "not run".
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field

from .matching import Decision, Rules, VariantFilter
from .pytorch_config import Gaps, OpName, ScannedTest, op_names, scan_tests, torch_dtypes
from .schema import Config

# Kinds of what PyTorch's config cannot express. The first ones change which tests run.
SKIP_OUTSIDE = (
    "skip of a test torch's device instantiation does not make (plain unittest, function)"
)
CLASS_CLASH = "one class name in several files, its tests decided differently"
DTYPES_NON_OPS = "dtype filters of @dtypes tests without @ops (PyTorch filters only per op)"
DTYPE_UNSKIP = "a test's dtype include the global dtype list lacks (a global skip cannot be undone)"
DTYPE_INCLUDE = "dtypes include adds dtypes upstream does not declare"
OP_INCLUDE = "ops include adds the op where upstream's @ops list lacks it"
MODULES = "module filters of @modules tests (supported_modules, edits.modules)"
CUSTOM_MODULES = "custom modules (module_path)"
BYPASS = "bypass_device_restrictions of some files or tests (PyTorch's is per class)"
ONLY_FOR = "classes instantiated only for other devices stay so (crcr instantiates them)"
# These keep the selection, but change an outcome or a report.
XFAIL_NON_OPS = "xfail modes of tests without @ops (op_overrides decorate @ops variants only)"
XFAIL_STRICT = "xfail exported as unittest.expectedFailure (a pass fails: xfail_strict)"
FORCE_XFAIL = "force_xfail of ops or dtypes"
TOLERANCES = "per-dtype tolerances (precision)"
TAGS = "tags and labels (markers)"
CPU_MOVE = "edits.functions.cpu_move"
UNLISTED = "unlisted_test_mode: skip names today's tests; tests upstream adds later will run"
SELECTION_KINDS = (
    SKIP_OUTSIDE, CLASS_CLASH, DTYPES_NON_OPS, DTYPE_UNSKIP, DTYPE_INCLUDE, OP_INCLUDE,
    MODULES, CUSTOM_MODULES, BYPASS, ONLY_FOR,
)  # fmt: skip
SKIP_OP = "crcr config: op not selected for this test"
SKIP_DTYPE = "crcr config: dtype not selected"


@dataclass(frozen=True)
class Override:
    """One ``DecorateInfo`` of ``op_overrides``."""

    action: str  # "skip_op", "skip_dtype" or "xfail"
    cls: str | None = None
    test: str | None = None
    dtypes: frozenset[str] | None = None


@dataclass
class PytorchConfig:
    """What ``set_test_configs`` gets, and what it cannot say."""

    source: str
    files: list[str]
    allowlist: list[str] | None = None
    overrides: dict[str, list[Override]] = field(default_factory=dict)
    exclusions: dict[str, list[str]] = field(default_factory=dict)
    bypass: bool = False
    gaps: Gaps = field(default_factory=Gaps)


@dataclass(frozen=True)
class Decided:
    path: str  # as shown (relative to the working folder when below it)
    test: ScannedTest
    decision: Decision

    @property
    def shown(self) -> str:
        return self.test.shown(self.path)


def export_config(config: Config) -> PytorchConfig:
    """PyTorch's config for ``config`` (imports op_db when op rules need it)."""
    rules = Rules(config)
    decided = []
    for path in rules.files:
        file_rules = rules.for_file(path, resolved=True)
        assert file_rules is not None
        for test in scan_tests(path):
            decided.append(Decided(shown_path(path), test, file_rules.decide(test.cls, test.name)))
    result = PytorchConfig(", ".join(config.sources), [shown_path(p) for p in rules.files])
    _exclusions(result, decided)
    _op_rules(result, decided, rules.global_filter, config)
    _config_gaps(result, decided, config)
    return result


def shown_path(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _exclusions(result: PytorchConfig, decided: list[Decided]) -> None:
    skipped: dict[tuple[str, str], set[bool]] = defaultdict(set)
    for item in decided:
        test, skip = item.test, item.decision.mode == "skip"
        if test.device_class and test.cls:
            skipped[(test.cls, test.name)].add(skip)
            if skip and test.name not in result.exclusions.setdefault(test.cls, []):
                result.exclusions[test.cls].append(test.name)
        elif skip:
            result.gaps.add(SKIP_OUTSIDE, item.shown)
        if skip and item.decision.entry is None:
            result.gaps.add(UNLISTED, item.path)
    for (cls, name), modes in skipped.items():
        if len(modes) > 1:
            result.gaps.add(CLASS_CLASH, f"{cls}::{name}")
    result.exclusions = {cls: names for cls, names in result.exclusions.items() if names}


def _op_rules(
    result: PytorchConfig, decided: list[Decided], global_filter: VariantFilter, config: Config
) -> None:
    """Steps 3 and 4: the allowlist and the per-op decorators of ``@ops`` tests."""
    ops_tests = [d for d in decided if d.test.has_ops and d.decision.mode != "skip"]
    needed = config.global_.supported_ops is not None or any(
        not d.decision.filters.trivial or d.decision.mode != "mandatory_success" for d in ops_tests
    )
    if not ops_tests or not needed:
        return
    universe = op_names()
    if config.global_.supported_ops is not None:
        allowed = {
            op.full_name
            for op in universe
            if global_filter.op_allowed(op.names)
            or any(d.decision.filters.op_allowed(op.names) for d in ops_tests)
        }
        result.allowlist = sorted(allowed)
        universe = tuple(op for op in universe if op.full_name in allowed)
    dtypes = torch_dtypes()
    for op in universe:
        overrides = result.overrides.setdefault(op.full_name, [])
        dropped = _dropped_dtypes(global_filter, op, dtypes)
        if dropped:
            overrides.append(Override("skip_dtype", dtypes=dropped))
        for item in ops_tests:
            overrides += _test_overrides(result.gaps, item, op, dropped, dtypes)
    result.overrides = {name: found for name, found in result.overrides.items() if found}


def _dropped_dtypes(filters: VariantFilter, op: OpName, dtypes: tuple[str, ...]) -> frozenset[str]:
    return frozenset(d for d in dtypes if not filters.dtype_allowed(d, op.names))


def _test_overrides(
    gaps: Gaps, item: Decided, op: OpName, dropped: frozenset[str], dtypes: tuple[str, ...]
) -> list[Override]:
    """The decorators one ``@ops`` test needs for one op beyond the global ones."""
    filters, cls, name = item.decision.filters, item.test.cls, item.test.name
    if not filters.op_allowed(op.names):
        return [Override("skip_op", cls, name)]
    found = []
    if item.decision.mode in ("xfail", "xfail_strict"):
        found.append(Override("xfail", cls, name))
    own = _dropped_dtypes(filters, op, dtypes)
    if own - dropped:
        found.append(Override("skip_dtype", cls, name, frozenset(own - dropped)))
    for dtype in sorted(dropped - own):
        gaps.add(DTYPE_UNSKIP, f"{item.shown}: {op.full_name} {dtype}")
    return found


def _config_gaps(result: PytorchConfig, decided: list[Decided], config: Config) -> None:
    """Kinds of the config's own that no part of ``set_test_configs`` carries."""
    gaps, global_ = result.gaps, config.global_
    dtype_rules = global_.supported_dtypes is not None
    for item in decided:
        decision, test = item.decision, item.test
        if decision.mode == "skip":
            continue
        edits = decision.entry.edits if decision.entry else None
        if (
            "dtypes" in test.decorators
            and not test.has_ops
            and (dtype_rules or (edits and edits.dtypes))
        ):
            gaps.add(DTYPES_NON_OPS, item.shown)
        if "modules" in test.decorators and (
            global_.supported_modules is not None or (edits and edits.modules)
        ):
            gaps.add(MODULES, item.shown)
        if decision.mode in ("xfail", "xfail_strict") and not test.has_ops:
            gaps.add(XFAIL_NON_OPS, item.shown)
        if decision.mode == "xfail" and test.has_ops:
            gaps.add(XFAIL_STRICT, item.shown)
    for entry in config.files:
        for test_entry in entry.tests:
            where = str(test_entry.pos)
            edits = test_entry.edits
            for dtype in edits.dtypes.include:
                gaps.add(DTYPE_INCLUDE, f"{where}: {dtype.name}")
                if dtype.precision:
                    gaps.add(TOLERANCES, f"{dtype.pos}: {dtype.name}")
            for op in edits.ops.include:
                gaps.add(OP_INCLUDE, f"{op.pos}: {op.name}")
                if op.force_xfail or any(d.force_xfail for d in op.dtypes or ()):
                    gaps.add(FORCE_XFAIL, f"{op.pos}: {op.name}")
            for module in edits.modules.include:
                if module.inputs is not None:
                    gaps.add(CUSTOM_MODULES, f"{module.pos}: {module.name}")
            if test_entry.tags:
                gaps.add(TAGS, f"{where}: {', '.join(test_entry.tags)}")
            if edits.cpu_move:
                gaps.add(CPU_MOVE, f"{where}: {', '.join(edits.cpu_move)}")
    _global_gaps(gaps, config)
    _bypass(result, config)


def _global_gaps(gaps: Gaps, config: Config) -> None:
    global_ = config.global_
    for dtype in global_.supported_dtypes or ():
        if dtype.precision:
            gaps.add(TOLERANCES, f"{dtype.pos}: {dtype.name}")
        if dtype.force_xfail:
            gaps.add(FORCE_XFAIL, f"{dtype.pos}: {dtype.name}")
    for op in global_.supported_ops or ():
        for dtype in op.dtypes or ():
            if dtype.precision:
                gaps.add(TOLERANCES, f"{dtype.pos}: {op.name} {dtype.name}")
        if op.force_xfail or any(d.force_xfail for d in op.dtypes or ()):
            gaps.add(FORCE_XFAIL, f"{op.pos}: {op.name}")
        for tag in op.tags:
            gaps.add(TAGS, f"{op.pos}: {tag}")
    for label in config.labels:
        gaps.add(TAGS, f"label {label}")


def _bypass(result: PytorchConfig, config: Config) -> None:
    """PyTorch's switch is one class attribute: exported when every listed test has it."""
    lifted = [e.bypass_device_restrictions for e in config.files] + [
        t.bypass_device_restrictions for e in config.files for t in e.tests
    ]
    file_values = [e.bypass_device_restrictions for e in config.files]
    if not any(lifted):
        return
    result.gaps.add(ONLY_FOR, "instantiate_device_type_tests(only_for=/except_for=)")
    everywhere = all(file_values) and all(
        t.bypass_device_restrictions is not False for e in config.files for t in e.tests
    )
    if everywhere:
        result.bypass = True
        return
    for entry in config.files:
        if entry.bypass_device_restrictions and entry.bypass_pos:
            result.gaps.add(BYPASS, str(entry.bypass_pos))
        for test in entry.tests:
            if test.bypass_device_restrictions is not None:
                result.gaps.add(BYPASS, str(test.pos))


def render(result: PytorchConfig) -> str:
    """The Python module: header comments (what cannot be expressed), then the call."""
    names = _dtype_constants(result)
    lines = _header(result) + [
        "",
        "import unittest",
        "",
        "import torch",
        "from torch.testing._internal.common_device_type import PrivateUse1TestBase",
        "from torch.testing._internal.opinfo.core import DecorateInfo",
        "",
        f"_SKIP_OP = unittest.skip({_q(SKIP_OP)})",
        f"_SKIP_DTYPE = unittest.skip({_q(SKIP_DTYPE)})",
    ]
    lines += [
        f"{name} = ({', '.join(f'torch.{d}' for d in sorted(dtypes))},)"
        for dtypes, name in names.items()
    ]
    lines += ["", "PrivateUse1TestBase.set_test_configs(", *_arguments(result, names), ")"]
    if result.bypass:
        lines += ["", "# Every listed test lifts upstream's @onlyOn-style restrictions.",
                  "PrivateUse1TestBase.bypass_device_restrictions = True"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _header(result: PytorchConfig) -> list[str]:
    lines = [
        f'"""PyTorch\'s accelerator test config, exported by crcr from {result.source}.',
        "",
        "Import it after the backend and before the test files (a conftest, or pytest -p).",
        '"""',
        "",
        "# Exported for: " + (", ".join(result.files) or "(no files)"),
    ]
    if result.gaps:
        lines.append("# Not expressible in set_test_configs (crcr's plugin applies these):")
        lines += [f"# - {line}" for line in result.gaps.lines()]
    if result.allowlist is not None:
        lines += [
            "# Note: torch fails a whole file when the allowlist leaves one of its @ops tests",
            '# no op ("An empty op_list"); crcr generates nothing for it. Skip such a test.',
        ]
    return lines


def _arguments(result: PytorchConfig, names: dict[frozenset[str], str]) -> list[str]:
    lines = []
    if result.allowlist is not None:
        lines.append("    op_allowlist=[")
        lines += [f"        {_q(name)}," for name in result.allowlist]
        lines.append("    ],")
    if result.overrides:
        lines.append("    op_overrides={")
        for name, overrides in sorted(result.overrides.items()):
            shown = ", ".join(_decorate_info(o, names) for o in overrides)
            lines.append(f"        {_q(name)}: [{shown}],")
        lines.append("    },")
    if result.exclusions:
        lines.append("    test_exclusions={")
        lines += [
            f"        {_q(cls)}: [{', '.join(map(_q, tests))}],"
            for cls, tests in sorted(result.exclusions.items())
        ]
        lines.append("    },")
    return lines


def _dtype_constants(result: PytorchConfig) -> dict[frozenset[str], str]:
    sets = dict.fromkeys(o.dtypes for found in result.overrides.values() for o in found if o.dtypes)
    return {dtypes: f"_DTYPES_{index}" for index, dtypes in enumerate(sets) if dtypes}


def _decorate_info(override: Override, dtype_names: dict[frozenset[str], str]) -> str:
    decorator = {"skip_op": "_SKIP_OP", "skip_dtype": "_SKIP_DTYPE"}.get(
        override.action, "unittest.expectedFailure"
    )
    args = [decorator]
    if override.cls is not None:
        args += [_q(override.cls), _q(override.test or "")]
    if override.dtypes:
        args.append(f"dtypes={dtype_names[override.dtypes]}")
    return f"DecorateInfo({', '.join(args)})"


def _q(text: str) -> str:
    """A Python string literal in double quotes (ruff's style)."""
    return json.dumps(text)
