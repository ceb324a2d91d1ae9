"""``import-pytorch SRC.py -o cfg.yaml``: PyTorch's ``set_test_configs(...)`` as crcr's YAML.

Read statically (``pytorch_read.py``); mapped as follows:
1. ``op_allowlist`` -> ``global.supported_ops`` (full names, which crcr matches too);
2. ``test_exclusions`` -> a ``skip`` tests entry per class (``Class::.*`` for ``"*"``)
   or per method; a method's ``{"dtypes": [...]}`` (newer torch) -> ``edits.dtypes.exclude``;
3. ``op_overrides``: a ``unittest.skip`` for one test -> that test's
   ``edits.ops.exclude``; for every test -> the op leaves the allowlist, or (without one)
   joins the exclusions of every entry and of a last ``.*`` entry; a dtype skip shared by
   every op -> ``global.supported_dtypes`` lacks it, one op's own -> that op's ``dtypes``;
   ``unittest.expectedFailure`` for one test -> an ``edits.ops.include`` item with
   ``force_xfail`` (crcr's ``xfail``, not strict), for every test -> the global item's;
4. ``bypass_device_restrictions = True`` anywhere -> every files entry's.
The files entries are the ``--path`` values (PyTorch's config holds no paths), with
``unlisted_test_mode: mandatory_success`` (PyTorch runs what it does not exclude).
What cannot be mapped is reported once per kind with a count.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import yaml

from .pytorch_config import Gaps, op_names, torch_dtypes
from .pytorch_read import CallValue, Dtype, ReadConfig, ReadError, Ref

DEFAULT_PATH = "${TORCH_ROOT}/test/test_*.py"
OTHER_DECORATOR = "decorators other than unittest.skip / unittest.expectedFailure"
ACTIVE_IF = "DecorateInfo active_if conditions"
TEST_DTYPE_SKIP = "dtype-limited skips of one op for some tests, dtype-limited xfails"
OP_DTYPES_NO_ALLOWLIST = "per-op dtype skips or xfails without an op_allowlist"
GLOBAL_XFAIL_NO_ALLOWLIST = "expectedFailure of an op for every test without an op_allowlist"
SUBSTRING = "test_exclusions string values other than '*' (torch 2.13 matches them as substrings)"
DTYPE_EXCLUSIONS = "dtype-level test_exclusions (newer torch; torch 2.13 drops the whole method)"
XFAIL_NOT_STRICT = "expectedFailure mapped to force_xfail (xfail: a pass is XPASS, not a failure)"
INCLUDE_ADDS = "force_xfail ops include: crcr adds the op where the test's @ops list lacks it"
GLOBAL_DTYPES = (
    "dtype skips shared by every op: crcr's global.supported_dtypes filters @dtypes tests too"
)
NAME_ALSO_MATCHES = "op names crcr also matches as OpInfo.name (variants of the same name)"
SEVERAL_CALLS = "several set_test_configs calls (each replaces the last; the last is read)"
BYPASS_SCOPE = "bypass_device_restrictions set on a class or a test: applied to every listed file"


@dataclass
class TestRecord:
    __test__ = False  # not a pytest test class

    mode: str = "mandatory_success"
    ops_exclude: set[str] = field(default_factory=set)
    ops_xfail: set[str] = field(default_factory=set)
    dtypes_exclude: set[str] = field(default_factory=set)


@dataclass
class Imported:
    records: dict[tuple[str | None, str | None], TestRecord] = field(
        default_factory=lambda: defaultdict(TestRecord)
    )
    allowlist: list[str] | None = None
    global_exclude: set[str] = field(default_factory=set)
    global_xfail: set[str] = field(default_factory=set)
    op_skip_dtypes: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # Scoped to some tests (class, test): op -> skipped dtypes; ops marked expectedFailure.
    test_skip_dtypes: dict[tuple[str | None, str | None], dict[str, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set))
    )
    test_xfail: dict[tuple[str | None, str | None], set[str]] = field(
        default_factory=lambda: defaultdict(set)
    )
    # Dtypes every op of the universe skips for every test: not in global.supported_dtypes.
    global_skips: set[str] = field(default_factory=set)
    gaps: Gaps = field(default_factory=Gaps)

    def universe(self) -> list[str]:
        """The ops every @ops test may run: the allowlist, else all of op_db."""
        if self.allowlist is not None:
            return self.allowlist
        return [op.full_name for op in op_names()]


def import_config(read: ReadConfig) -> Imported:
    """Map the read arguments (steps 1-3); ReadError for values of the wrong shape."""
    result = Imported()
    where = f"{read.path}:{read.line}"
    if read.calls > 1:
        result.gaps.add(SEVERAL_CALLS, where)
    allowlist = read.arguments.get("op_allowlist")
    if allowlist is not None:
        result.allowlist = list(dict.fromkeys(_strings(allowlist, where, "op_allowlist")))
    exclusions = read.arguments.get("test_exclusions") or {}
    if not isinstance(exclusions, dict):
        raise ReadError(f"{where}: test_exclusions must be a dict of class -> methods or '*'")
    for cls, methods in exclusions.items():
        _exclusion(result, where, str(cls), methods)
    overrides = read.arguments.get("op_overrides") or {}
    if not isinstance(overrides, dict):
        raise ReadError(f"{where}: op_overrides must be a dict of op full name -> [DecorateInfo]")
    for op, infos in overrides.items():
        for info in infos if isinstance(infos, list) else [infos]:
            _override(result, read.path, str(op), info)
    if result.global_exclude and result.allowlist is not None:
        result.allowlist = [op for op in result.allowlist if op not in result.global_exclude]
        result.global_exclude = set()
    if result.op_skip_dtypes:
        result.global_skips = set.intersection(
            *(result.op_skip_dtypes.get(op, set()) for op in result.universe())
        )
    _scoped(result)
    return result


def _scoped(result: Imported) -> None:
    """Per-test decorators that cover every op of the universe say something of the test.

    1. a dtype skipped for a test under every op (or globally for that op) -> the
       test's ``edits.dtypes.exclude``; any other dtype skip of one test is reported;
    2. expectedFailure for a test under every op -> its mode ``xfail_strict`` (exact);
       under some ops -> ``force_xfail`` include items (crcr's xfail, not strict).
    """
    if not result.test_skip_dtypes and not result.test_xfail:
        return
    universe = result.universe()
    for key, per_op in result.test_skip_dtypes.items():
        # The ops this test does not run (its own skips) say nothing of its dtypes.
        runs = [op for op in universe if op not in result.records[key].ops_exclude] or universe
        common = set.intersection(
            *(per_op.get(op, set()) | result.op_skip_dtypes.get(op, set()) for op in runs)
        )
        result.records[key].dtypes_exclude |= common - result.global_skips
        for op, dtypes in per_op.items():
            if dtypes - common - result.op_skip_dtypes.get(op, set()):
                result.gaps.add(TEST_DTYPE_SKIP, f"{_shown_key(key)}: {op}")
    for key, ops in result.test_xfail.items():
        if set(universe) - result.records[key].ops_exclude <= ops:
            if result.records[key].mode != "skip":
                result.records[key].mode = "xfail_strict"
            continue
        result.records[key].ops_xfail |= ops
        for op in sorted(ops):
            result.gaps.add(XFAIL_NOT_STRICT, f"{_shown_key(key)}: {op}")
            result.gaps.add(INCLUDE_ADDS, f"{_shown_key(key)}: {op}")


def _shown_key(key: tuple[str | None, str | None]) -> str:
    cls, method = key
    return f"{cls}::{method or '.*'}" if cls else (method or ".*")


def _strings(value: Any, where: str, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ReadError(f"{where}: {what} must be a list, tuple or set of strings")
    return value


def _exclusion(result: Imported, where: str, cls: str, methods: Any) -> None:
    if methods == "*":
        result.records[(cls, None)].mode = "skip"
    elif isinstance(methods, str):
        result.gaps.add(SUBSTRING, f"{where}: {cls}: {methods!r}")
        result.records[(cls, methods)].mode = "skip"
    elif isinstance(methods, dict):
        for method, spec in methods.items():
            dtypes = spec.get("dtypes") if isinstance(spec, dict) else None
            if not dtypes:
                result.records[(cls, str(method))].mode = "skip"
                continue
            result.gaps.add(DTYPE_EXCLUSIONS, f"{cls}::{method}")
            result.records[(cls, str(method))].dtypes_exclude |= set(_dtypes(dtypes, where))
    else:
        for method in _strings(methods, where, f"test_exclusions[{cls!r}]"):
            result.records[(cls, method)].mode = "skip"


def _dtypes(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, Dtype) for item in value):
        raise ReadError(f"{where}: dtypes must be a list of torch dtypes (torch.float32, ...)")
    return [item.name for item in value]


def _override(result: Imported, path: str, op: str, info: Any) -> None:
    """One ``DecorateInfo`` of ``op_overrides[op]``."""
    if not isinstance(info, CallValue) or info.name != "DecorateInfo":
        line = getattr(info, "line", 0)
        raise ReadError(
            f"{path}:{line}: op_overrides[{op!r}] holds something other than DecorateInfo(...)"
        )
    where = f"{path}:{info.line}"
    names = ["decorators", "cls_name", "test_name"]
    args = dict(zip(names, info.args, strict=False)) | info.kwargs
    if args.get("active_if", True) is not True:
        result.gaps.add(ACTIVE_IF, f"{where}: {op}")
        return
    dtypes = _dtypes(args["dtypes"], where) if args.get("dtypes") is not None else None
    key = (args.get("cls_name"), args.get("test_name"))
    decorators = args.get("decorators")
    for decorator in decorators if isinstance(decorators, list) else [decorators]:
        action = _action(decorator)
        if action is None:
            shown = getattr(decorator, "name", repr(decorator))
            result.gaps.add(OTHER_DECORATOR, f"{where}: {op}: {shown}")
        elif key == (None, None):
            _global_override(result, where, op, action, dtypes)
        elif action == "skip" and dtypes is not None:
            result.test_skip_dtypes[key][op] |= set(dtypes)
        elif action == "skip":
            result.records[key].ops_exclude.add(op)
        elif dtypes is not None:
            result.gaps.add(TEST_DTYPE_SKIP, f"{where}: {op}")
        else:
            result.test_xfail[key].add(op)


def _action(decorator: Any) -> str | None:
    if isinstance(decorator, CallValue) and decorator.name == "skip":
        return "skip"
    if isinstance(decorator, Ref) and decorator.name == "expectedFailure":
        return "xfail"
    return None


def _global_override(
    result: Imported, where: str, op: str, action: str, dtypes: list[str] | None
) -> None:
    if action == "skip" and dtypes is None:
        result.global_exclude.add(op)
    elif action == "skip":
        result.op_skip_dtypes[op] |= set(dtypes or ())
    elif dtypes is not None:
        result.gaps.add(TEST_DTYPE_SKIP, f"{where}: {op}")
    elif result.allowlist is None:
        result.gaps.add(GLOBAL_XFAIL_NO_ALLOWLIST, f"{where}: {op}")
    else:
        result.global_xfail.add(op)
        result.gaps.add(XFAIL_NOT_STRICT, f"{where}: {op}")


def document(imported: Imported, paths: list[str], bypass: bool) -> dict[str, Any]:
    """The ``test_suite_config`` of an import (step 4 and the YAML's shape)."""
    global_: dict[str, Any] = {}
    supported = _global_dtypes(imported, global_)
    if imported.allowlist is not None:
        global_["supported_ops"] = [_op_item(imported, op, supported) for op in imported.allowlist]
    exclude = sorted(imported.global_exclude)
    records = sorted(imported.records.items(), key=lambda i: (i[0][0] or "", i[0][1] or ""))
    tests = [_test_item(key, record, exclude) for key, record in records]
    tests = [item for item in tests if item["mode"] != "mandatory_success" or "edits" in item]
    if exclude:
        tests.append({"names": [".*"], "mode": "mandatory_success",
                      "edits": {"ops": {"exclude": [{"name": op} for op in exclude]}}})  # fmt: skip
    files = []
    for path in paths:
        entry: dict[str, Any] = {"path": path, "unlisted_test_mode": "mandatory_success"}
        if bypass:
            entry["bypass_device_restrictions"] = True
        if tests:
            entry["tests"] = tests
        files.append(entry)
    result: dict[str, Any] = {"files": files}
    if global_:
        result["global"] = global_
    return {"test_suite_config": result}


def _global_dtypes(imported: Imported, global_: dict[str, Any]) -> list[str] | None:
    """A dtype skip every op of the universe shares becomes the global dtype list."""
    common = imported.global_skips
    if imported.allowlist is None:
        # An op's own dtypes need a global op item, which would then be an allowlist.
        for op, dtypes in imported.op_skip_dtypes.items():
            if dtypes - common:
                imported.gaps.add(OP_DTYPES_NO_ALLOWLIST, op)
    if not common:
        return None
    supported = [d for d in torch_dtypes() if d not in common]
    global_["supported_dtypes"] = [{"name": d} for d in supported]
    imported.gaps.add(GLOBAL_DTYPES, "supported_dtypes: " + ", ".join(supported))
    return supported


def _op_item(imported: Imported, op: str, supported: list[str] | None) -> dict[str, Any]:
    item: dict[str, Any] = {"name": op}
    skipped = imported.op_skip_dtypes.get(op, set())
    common = set(torch_dtypes()) - set(supported) if supported is not None else set()
    if skipped - common:
        item["dtypes"] = [{"name": d} for d in torch_dtypes() if d not in skipped]
    if op in imported.global_xfail:
        item["force_xfail"] = True
    return item


def _test_item(
    key: tuple[str | None, str | None], record: TestRecord, global_exclude: list[str]
) -> dict[str, Any]:
    item: dict[str, Any] = {"names": [_shown_key(key)], "mode": record.mode}
    edits: dict[str, Any] = {}
    excluded = sorted(record.ops_exclude | set(global_exclude))
    ops: dict[str, Any] = {}
    if record.ops_xfail:
        ops["include"] = [{"name": op, "force_xfail": True} for op in sorted(record.ops_xfail)]
    if excluded:
        ops["exclude"] = [{"name": op} for op in excluded]
    if ops and record.mode != "skip":
        edits["ops"] = ops
    if record.dtypes_exclude:
        edits["dtypes"] = {"exclude": [{"name": d} for d in sorted(record.dtypes_exclude)]}
    if edits:
        item["edits"] = edits
    return item


def check_names(imported: Imported) -> None:
    """Report full names crcr would also match as another OpInfo's ``name``."""
    named = [*(imported.allowlist or ()), *imported.global_exclude]
    named += [op for record in imported.records.values() for op in record.ops_exclude]
    if not named:
        return
    by_name: dict[str, set[str]] = defaultdict(set)
    for op in op_names():
        by_name[op.name].add(op.full_name)
    for op in dict.fromkeys(named):
        if by_name.get(op, set()) - {op}:
            imported.gaps.add(NAME_ALSO_MATCHES, op)


def render(read: ReadConfig, imported: Imported, paths: list[str]) -> str:
    """The YAML text, its header naming the source and what was not mapped."""
    bypass = bool(read.bypass)
    for line, on_base in read.bypass:
        if not on_base:
            imported.gaps.add(BYPASS_SCOPE, f"{read.path}:{line}")
    lines = [f"# Imported by crcr from {read.path}:{read.line} (set_test_configs)."]
    if imported.gaps:
        lines.append("# Not mapped, or mapped with a different meaning:")
        lines += [f"# - {line}" for line in imported.gaps.lines()]
    text = yaml.safe_dump(document(imported, paths, bypass), sort_keys=False, width=100)
    return "\n".join(lines) + "\n" + text
