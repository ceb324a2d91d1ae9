"""Import Torch Spyre's test configs into crcr's strict form, keeping Spyre's meaning.

Spyre's OOT test framework reads the same schema family with looser rules (its
pydantic models drop unknown keys, and its defaults differ). The importer rewrites
a Spyre config so crcr's loader reads it and selects what Spyre's framework would:
- Spyre's defaults written out: a tests entry without `mode` is `mandatory_success`;
  a file without `unlisted_test_mode` is `xfail` (crcr's default is `skip`);
- `names` as a string becomes a list; a glob-like or regex class part
  (`'*TestModule*::test_forward'`) is dropped, since Spyre never matches the class:
  the name then matches the method in every class, as in Spyre;
- `supported_ops` / `supported_modules` written as plain strings become `{name: …}`;
  an empty `supported_ops: []` (Spyre: no filter) is dropped (crcr: nothing supported);
- `labels` of the suite, a files entry (Spyre writes the origin config's there when it
  merges configs) and a tests entry stay: crcr selects by them as Spyre's TEST_TYPE does
  (`--reuse-labels`, ``labels.py``) and marks each test `testtype__<label>`; a label
  that is no label name (or a `suite_…` selection) is dropped; `no_grad` stays;
- `edits.ops.include`: a model-op item (with `sample_inputs_func` or `kwargs`: Spyre runs
  it only in its own model-ops test) is dropped; an item that only names an op stays, with
  its `tags` (crcr adds the op to the test's `@ops` list and marks its variants with them)
  when the op is in torch's op_db (`known_op`: `in_op_db` for the command; without it they
  stay unchecked). Spyre lists such an item on upstream tests but never adds the op;
- `edits.modules.include` items with a `module_path` (custom modules) stay with their
  `constructor_inputs` / `forward_inputs` / `sample_inputs_func` (crcr builds them:
  ``inputs.py``); inputs of an item without `module_path` are dropped (Spyre ignores
  them too); `sample_inputs_func` beside `forward_inputs` is dropped (Spyre reads the latter);
  an input tensor's `device_layout` (Spyre's on-device tiling) is dropped, and a module
  whose inputs crcr cannot build (`init: file`, `config_path`, `model_id`, `cache`, a
  module argument) is dropped whole, each counted in the report;
- `description` stays: crcr reads it as the entry's reason; `functions.cpu_move` stays
  (crcr moves the listed methods' tensor arguments to the CPU for the listed tests only,
  where Spyre patches the test's whole class).
Whatever has no meaning for crcr (model-op samples, input seeds, per-module dtypes of
`supported_modules`, top-level `cases`, …) is removed and reported once per key with how
often it occurred (`ImportReport`), and so is what crcr keeps with a meaning of its own.
Comments and anchors are kept (ruamel.yaml round trip), so reasons written as comments
stay reasons.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from .schema import LABEL_FORM, TAG_FORM, config_op_name
from .spyre_names import drop_later_modes, entry_notes
from .yaml_limits import YamlLimitError, check

SPYRE_MODE = "mandatory_success"  # an entry without `mode`
SPYRE_UNLISTED = "xfail"  # a file without `unlisted_test_mode`

# Keys crcr drops, with why (the report's wording), by the key's place.
WHY = {
    "cases": "model-op cases (Spyre's model-ops test only)",
    "global.input_config": "Spyre's input seeds for its model-ops samples",
    "labels.invalid": "labels that are no label name (or a suite_<group> selection)",
    "edits.modules.include.inputs.device_layout": "Spyre's on-device tiling of an input "
    "tensor (device_size, stride_map, device_dtype): the reference device keeps a tensor "
    "as plain strided memory, so it is built from its shape and stride alone",
    "edits.modules.include.inputs.init_file": "modules with tensors loaded from files "
    "(init: file): crcr builds inputs only from the config",
    "edits.modules.include.inputs.config_path": "modules with a HuggingFace config "
    "argument (config_path + config_kwargs): crcr builds `<config:…>` values only",
    "edits.modules.include.inputs.model_id": "modules with a pretrained model argument "
    "(model_id): crcr does not download models",
    "edits.modules.include.inputs.cache": "modules with a primed KV cache argument: crcr "
    "has no cache spec",
    "edits.modules.include.inputs.module_path": "modules with an inner module argument: "
    "crcr builds the tested module only",
    "edits.ops.include": "model-op items (sample inputs): Spyre runs them only in its model-ops test",
    "edits.ops.include.not_in_op_db": "op includes naming no op of torch's op_db",
    "edits.ops.include.dtypes": "never read by Spyre on an op include",
    "edits.ops.include.force_xfail": "never read by Spyre on an op include",
    "edits.dtypes.include.force_xfail": "never read by Spyre on an edit",
    "edits.modules.include.constructor_inputs": "inputs of a module without module_path "
    "(Spyre ignores them too)",
    "edits.modules.include.forward_inputs": "inputs of a module without module_path",
    "edits.modules.include.sample_inputs_func": "inputs of a module without module_path",
    "edits.modules.include.sample_inputs_func.shadowed": "beside forward_inputs, which Spyre reads",
    "edits.modules.include.forward_inputs.empty": "an empty forward_inputs list (Spyre: none)",
    "edits.modules.include.apply_device_layout": "Spyre's device layout flag",
    "supported_modules.force_xfail": "never read by Spyre",
    "supported_modules.dtypes": "per-module dtypes of Spyre's custom modules",
    "supported_modules.constructor_inputs": "custom module constructor inputs",
    "supported_modules.forward_inputs": "custom module forward inputs",
    "supported_ops.empty": "an empty supported_ops list (Spyre: no op filter)",
    "names.class_pattern": "class patterns (Spyre ignores the class part of a name)",
    "tags.invalid": "tags that are not marker names",
}
KEYS = {
    "suite": ("labels", "files", "global"),
    "file": ("path", "unlisted_test_mode", "labels", "tests", "description"),
    "test": ("names", "mode", "tags", "labels", "no_grad", "edits", "description"),
    "edits": ("dtypes", "ops", "modules", "functions"),
    "dtype": ("name", "precision", "force_xfail", "description"),
    "op": ("name", "dtypes", "force_xfail", "description"),
    "op_include": ("name", "tags", "description"),
    "module": ("name", "description"),
    "module_include": (
        "name",
        "description",
        "module_path",
        "constructor_inputs",
        "forward_inputs",
        "sample_inputs_func",
    ),
    "global": ("supported_dtypes", "supported_ops", "supported_modules"),
}
CLASS_LITERAL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MODEL_OP_KEYS = ("sample_inputs_func", "kwargs")  # what makes an op include a model-op item
MODULE_INPUTS = ("constructor_inputs", "forward_inputs", "sample_inputs_func")
# Input arguments of Spyre's custom modules that crcr does not build.
UNBUILT_ARGUMENTS = ("config_path", "model_id", "cache", "module_path")
# Kept with crcr's own meaning (the report's "differs" lines).
OP_KEPT = (
    "edits.ops.include of an op in torch's op_db: crcr adds it to the test's @ops list, its "
    "tags marking its variants (Spyre reads op includes only in its model-ops test)"
)
OP_UNCHECKED = (
    "edits.ops.include naming an op, kept without checking torch's op_db: crcr adds an op_db "
    "op to the test's @ops list, its tags marking its variants (Spyre: model-ops test only)"
)
CUSTOM_MODULE = (
    "edits.modules.include with module_path: crcr builds its inputs on the test's device, "
    "<config:…> as an instance, in its inputs' dtypes (Spyre: on the host, float32/float16)"
)
CLASS_PART = (
    "names with a class part: crcr matches it against the test's class (Spyre ignores it); "
    "both match the method by its attribute name"
)
NARROWING = (
    "edits.modules.include: crcr adds to the test's own @modules list (Spyre also narrows it "
    "to the included modules: narrow it with edits.modules.exclude or supported_modules)"
)


class ImportProblem(Exception):
    """The text is not a Spyre config at all (not YAML, past the YAML limits, or no
    test_suite_config)."""


@dataclass
class ImportReport:
    """What the importer dropped or made explicit, counted per key over every config."""

    dropped: Counter[str] = field(default_factory=Counter)
    explicit: Counter[str] = field(default_factory=Counter)
    differs: Counter[str] = field(default_factory=Counter)
    configs: int = 0
    # Tests entries by test file (as written), with their config: for ``notes``.
    entries: dict[str, list[tuple[str, Any]]] = field(default_factory=dict, repr=False)
    dropped_names: list[str] = field(default_factory=list)  # ``drop_later_modes``

    @property
    def notes(self) -> list[str]:
        """Per name: where crcr's name matching differs from Spyre's (``spyre_names.py``)."""
        notes = [note for tests in self.entries.values() for note in entry_notes(tests)]
        return self.dropped_names + notes

    def text(self) -> str:
        lines = [f"imported {self.configs} Torch Spyre config(s)"]
        if self.explicit:
            lines.append("made explicit (Spyre's meaning, written out):")
            lines += [f"  {count:7d}  {what}" for what, count in sorted(self.explicit.items())]
        if self.differs:
            lines.append("kept, with crcr's meaning (which differs from Spyre's):")
            lines += [f"  {count:7d}  {what}" for what, count in sorted(self.differs.items())]
        if self.dropped:
            lines.append("dropped (no meaning for a privateuse1 backend in crcr):")
            for key, count in sorted(self.dropped.items(), key=lambda kv: (-kv[1], kv[0])):
                why = WHY.get(key) or (
                    "part of the model-op items dropped above"
                    if key.startswith("edits.ops.include.")
                    else "not read by Spyre's framework either"
                )
                lines.append(f"  {count:7d}  {key}: {why}")
        notes = self.notes
        if notes:
            lines.append("per entry, where crcr's name matching differs from Spyre's:")
            lines += [f"- {note}" for note in notes]
        return "\n".join(lines)


def _yaml() -> YAML:
    yaml = YAML()  # round trip: comments and key order stay
    yaml.width = 4096
    yaml.preserve_quotes = True
    return yaml


def import_text(
    text: str,
    name: str,
    report: ImportReport | None = None,
    known_op: Callable[[str], bool | None] | None = None,
) -> tuple[str, ImportReport]:
    """A Spyre config's text in crcr's strict form, and the report (added to `report`).

    ``known_op``: whether torch's op_db has an op (None: cannot tell), asked for op
    includes that only name an op; without it (no torch here) they are kept unchecked."""
    report = report if report is not None else ImportReport()
    try:
        check(text, name, ruamel=True)  # within the limits before anything expands an alias
    except YamlLimitError as error:
        raise ImportProblem(str(error)) from None
    try:
        document = _yaml().load(text)
    except Exception as error:  # ruamel raises many kinds; all mean "not YAML"
        raise ImportProblem(f"{name}: not YAML ({error})") from None
    if not isinstance(document, dict) or "test_suite_config" not in document:
        raise ImportProblem(f"{name}: no top-level 'test_suite_config' (not a Spyre config)")
    _Importer(report, known_op, name).document(document)
    report.configs += 1
    out = io.StringIO()
    _yaml().dump(document, out)
    return out.getvalue(), report


def in_op_db(name: str) -> bool | None:
    """Whether torch's op_db has an op of this name or full name (None: no torch here).
    Imports PyTorch's test machinery (seconds), once, when first asked."""
    names = _op_db_names()
    return None if names is None else config_op_name(name) in names


@cache
def _op_db_names() -> frozenset[str] | None:
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError:
        return None
    return frozenset(config_op_name(n) for op in op_db for n in (op.name, op.full_name))


class _Importer:
    def __init__(
        self,
        report: ImportReport,
        known_op: Callable[[str], bool | None] | None,
        source: str = "",
    ):
        self.report = report
        self.known_op = known_op
        self.source = source

    def drop(self, mapping: Any, allowed: tuple[str, ...], place: str) -> None:
        for key in [k for k in mapping if k not in allowed]:
            self.report.dropped[f"{place}.{key}" if place else str(key)] += 1
            del mapping[key]

    def document(self, document: Any) -> None:
        self.drop(document, ("test_suite_config",), "")
        suite = document["test_suite_config"]
        if not isinstance(suite, dict):
            return  # crcr's loader names the problem
        if "global_config" in suite and "global" not in suite:
            suite["global"] = suite.pop("global_config")
        self.drop(suite, KEYS["suite"], "test_suite_config")
        self.labels(suite)
        for entry in suite.get("files") or []:
            if isinstance(entry, dict):
                self.file(entry)
        if isinstance(suite.get("global"), dict):
            self.global_(suite["global"])

    def labels(self, item: Any) -> None:
        """An item's `labels` (suite, files or tests entry) without what is no label."""
        labels = item.get("labels")
        if not isinstance(labels, list):
            return
        for label in [x for x in labels if not _is_label(x)]:
            labels.remove(label)
            self.report.dropped["labels.invalid"] += 1
        if not labels:
            del item["labels"]

    def file(self, entry: Any) -> None:
        self.drop(entry, KEYS["file"], "files")
        self.labels(entry)
        path = entry.get("path")
        if isinstance(path, str) and "${PYTORCH}" in path:
            # The first Spyre configs (March 2026) named the PyTorch checkout so.
            entry["path"] = path.replace("${PYTORCH}", "${TORCH_ROOT}")
            self.report.explicit["${PYTORCH} (Spyre's first token) as ${TORCH_ROOT}"] += 1
        if "unlisted_test_mode" not in entry:
            entry.insert(_after(entry, "path"), "unlisted_test_mode", SPYRE_UNLISTED)
            self.report.explicit[f"unlisted_test_mode: {SPYRE_UNLISTED} (Spyre's default)"] += 1
        for test in entry.get("tests") or []:
            if isinstance(test, dict):
                self.test(test)
        if isinstance(entry.get("tests"), list):
            self.report.dropped_names += drop_later_modes(entry["tests"], self.source)
        tests = [(self.source, t) for t in entry.get("tests") or [] if isinstance(t, dict)]
        self.report.entries.setdefault(str(entry.get("path")), []).extend(tests)

    def test(self, test: Any) -> None:
        self.drop(test, KEYS["test"], "tests")
        self.labels(test)
        names = test.get("names")
        if isinstance(names, str):
            test["names"] = names = CommentedSeq([names])
            self.report.explicit["names written as one string, as a list"] += 1
        if isinstance(names, list):
            for index, name in enumerate(names):
                if isinstance(name, str):
                    names[index] = self.name(name)
        if "mode" not in test:
            test.insert(_after(test, "names"), "mode", SPYRE_MODE)
            self.report.explicit[f"mode: {SPYRE_MODE} (Spyre's default)"] += 1
        self.tags(test)
        if isinstance(test.get("edits"), dict):
            self.edits(test["edits"])
            if not test["edits"]:
                del test["edits"]

    def tags(self, item: Any) -> Any:
        """An item's `tags` list without the tags that are not marker names."""
        tags = item.get("tags")
        if isinstance(tags, list):
            for tag in [t for t in tags if not (isinstance(t, str) and TAG_FORM.fullmatch(t))]:
                tags.remove(tag)
                self.report.dropped["tags.invalid"] += 1
        return tags

    def name(self, name: str) -> str:
        cls, sep, method = name.rpartition("::")
        if sep and not CLASS_LITERAL.fullmatch(cls):
            self.report.dropped["names.class_pattern"] += 1
            return method
        if sep:
            self.report.differs[CLASS_PART] += 1
        return name

    def edits(self, edits: Any) -> None:
        self.drop(edits, KEYS["edits"], "edits")
        functions = edits.get("functions")
        if isinstance(functions, dict):
            self.drop(functions, ("cpu_move",), "edits.functions")
        ops = edits.get("ops")
        if isinstance(ops, dict):
            if "include" in ops:
                self.op_includes(ops)
            self.items(ops.get("exclude"), KEYS["op"], "edits.ops.exclude")
            if not ops:
                del edits["ops"]
        dtypes = edits.get("dtypes")
        if isinstance(dtypes, dict):
            for way in ("include", "exclude"):
                self.items(dtypes.get(way), KEYS["dtype"], f"edits.dtypes.{way}")
        modules = edits.get("modules")
        if isinstance(modules, dict):
            self.module_includes(modules.get("include"))
            self.items(modules.get("exclude"), KEYS["module"], "edits.modules.exclude")

    def op_includes(self, ops: Any) -> None:
        """Keep the op includes crcr can honour (in place: a YAML alias shares the list)."""
        included = ops["include"]
        if isinstance(included, list):
            included[:] = [item for item in included if self.op_include(item)]
        if not included:
            del ops["include"]

    def op_include(self, item: Any) -> bool:
        if not isinstance(item, dict):
            return True  # crcr's loader names the problem
        if any(_has_inputs(item.get(key)) for key in MODEL_OP_KEYS):
            self.report.dropped["edits.ops.include"] += 1
            for key in [k for k in item if k != "name"]:
                self.report.dropped[f"edits.ops.include.{key}"] += 1
            return False
        known = self.known_op(str(item.get("name"))) if self.known_op else None
        if known is False:
            self.report.dropped["edits.ops.include.not_in_op_db"] += 1
            return False
        for key in MODEL_OP_KEYS:
            item.pop(key, None)  # empty, so nothing is lost
        self.drop(item, KEYS["op_include"], "edits.ops.include")
        self.tags(item)
        self.report.differs[OP_UNCHECKED if known is None else OP_KEPT] += 1
        return True

    def module_includes(self, items: Any) -> None:
        """Custom modules (`module_path`) keep their inputs; other items lose them; a
        custom module whose inputs crcr cannot build goes (in place: aliases share it)."""
        items = items if isinstance(items, list) else []
        items[:] = [item for item in items if not self.unbuildable(item)]
        for item in (i for i in items if isinstance(i, dict)):
            self.drop(item, KEYS["module_include"], "edits.modules.include")
            if "module_path" not in item:
                for key in [k for k in MODULE_INPUTS if k in item]:
                    self.report.dropped[f"edits.modules.include.{key}"] += 1
                    del item[key]
                continue
            if item.get("forward_inputs") == []:
                self.report.dropped["edits.modules.include.forward_inputs.empty"] += 1
                del item["forward_inputs"]
            elif "forward_inputs" in item and "sample_inputs_func" in item:
                self.report.dropped["edits.modules.include.sample_inputs_func.shadowed"] += 1
                del item["sample_inputs_func"]
            self.report.differs[CUSTOM_MODULE] += 1
        if items:
            self.report.differs[NARROWING] += 1

    def unbuildable(self, item: Any) -> bool:
        """Whether a custom module's inputs hold what crcr cannot build (then counted);
        drops its tensors' `device_layout` (counted) either way."""
        if not isinstance(item, dict) or "module_path" not in item:
            return False
        found: set[str] = set()
        for key in MODULE_INPUTS:
            specs = item.get(key)
            for spec in specs if isinstance(specs, list) else [specs]:
                if isinstance(spec, dict):
                    values = list(spec.get("args") or []) + list(
                        (spec.get("kwargs") or {}).values()
                    )
                    for value in values:
                        found |= self.argument(value)
        for kind in sorted(found):
            self.report.dropped[f"edits.modules.include.inputs.{kind}"] += 1
        return bool(found)

    def argument(self, value: Any) -> set[str]:
        """What of one input argument crcr cannot build (its kinds), after dropping its
        tensors' `device_layout`."""
        if not isinstance(value, dict):
            return set()
        kinds = {key for key in UNBUILT_ARGUMENTS if key in value}
        tensors = [value.get("tensor")] + list(value.get("tensor_list") or [])
        for tensor in (t for t in tensors if isinstance(t, dict)):
            if "device_layout" in tensor:
                del tensor["device_layout"]
                self.report.dropped["edits.modules.include.inputs.device_layout"] += 1
            if tensor.get("init") == "file":
                kinds.add("init_file")
        return kinds

    def items(self, items: Any, allowed: tuple[str, ...], place: str) -> None:
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict):
                if place == "edits.dtypes.include" and "force_xfail" in item:
                    self.report.dropped[f"{place}.force_xfail"] += 1
                    del item["force_xfail"]
                self.drop(item, allowed, place)

    def global_(self, section: Any) -> None:
        self.drop(section, KEYS["global"], "global")
        self.items(section.get("supported_dtypes"), KEYS["dtype"], "supported_dtypes")
        ops = section.get("supported_ops")
        if isinstance(ops, list) and not ops:
            self.report.dropped["supported_ops.empty"] += 1
            del section["supported_ops"]
        elif isinstance(ops, list):
            self.named(ops, "supported_ops")
            self.items(ops, KEYS["op"], "supported_ops")
            for op in ops:
                if isinstance(op, dict):
                    self.items(op.get("dtypes"), KEYS["dtype"], "supported_ops.dtypes")
        modules = section.get("supported_modules")
        if isinstance(modules, list):
            self.items(modules, KEYS["module"], "supported_modules")

    def named(self, items: list[Any], place: str) -> None:
        for index, item in enumerate(items):
            if isinstance(item, str):
                items[index] = CommentedMap(name=item)
                self.report.explicit[f"{place} written as strings, as {{name: …}}"] += 1


def _is_label(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(LABEL_FORM.fullmatch(value))
        and not value.startswith("suite_")
    )


def _has_inputs(value: Any) -> bool:
    """Whether a model-op key holds anything (an empty `{args: [], kwargs: {}}` does not)."""
    if isinstance(value, dict):
        return any(_has_inputs(inner) for inner in value.values())
    return value not in (None, [], "")


def _after(mapping: Any, key: str) -> int:
    """The position just after `key` (the end when it is missing)."""
    keys = list(mapping)
    return keys.index(key) + 1 if key in keys else len(keys)
