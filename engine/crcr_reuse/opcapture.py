"""pytest plugin: record which aten operators each test calls (the operator index's input).

    pytest -p crcr_reuse.opcapture --opcapture-out ops.jsonl [test files...]

No Django. Per generated test it writes one JSON line: the generic test (file,
class without its device suffix, source method name), the OpInfo / dtype /
module variant, the operators it called split into "under test" and "helper",
its outcome and duration. How:
- eager tests run under a `TorchDispatchMode` that keeps each distinct
  `OpOverload` in a set (nothing else happens per call, to stay cheap);
- capture is paused inside `assertEqual` / `assert_close` (verification, and
  most of a test's op calls), and ops called inside `make_tensor`, or by
  `gradcheck` / `gradgradcheck` themselves (not by the function they check), count as
  helpers; for OpInfo tests only the ops of the declared OpInfo
  (`param_kwargs["op"]`) count as under test;
- capture is also paused in gradcheck's finite differences after the first nudge of
  each kind, in a check's backward pass that repeats a captured one (same tensors,
  vectors of the same layout), and in most of a gradcheck / gradgradcheck that repeats
  one the test already ran under capture (`repeated_checks`: module tests' partial
  derivatives); `CRCR_REUSE_CAPTURE_EVERY_CHECK=1` captures all of every check (to compare);
- the mode's `__torch_dispatch__` runs without torch's per-call dynamo guard (dynamo
  skips its code once instead; compiled tests run without the mode, below);
- compiled tests (their code calls `torch.compile` / `_dynamo.optimize`) run
  without the mode, which would make compilation run eagerly: their operators
  are read from the post-grad and AOT graphs torch writes to `TORCH_LOGS_OUT`
  (the runner sets `TORCH_LOGS=post_grad_graphs,aot_graphs`);
- lazy-tensor tests run without capture (the mode breaks them), marked so;
- a test that fails under capture runs once more without it: one that then passes
  failed because of the mode (a Tensor subclass built under it) and is recorded as
  passed, the capture's error kept beside it;
- torch's `extract_test_fn` is replaced by the reuse plugin's stand-in
  (`torch_harness`), and pytest's failure reports parse each file once per process
  (`failure_reports`), as in a device run: the same answers and reports, cheaper.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import time
import unittest
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from . import failure_reports, repeated_checks, torch_harness
from .devicetype import name_generated_tests
from .names import opinfo, param_kwargs, test_names

DEVICE_SUFFIX = re.compile(r"(CPU|CUDA|META|MPS|XPU|HPU|LAZY|PRIVATEUSE1|PRIVATEUSEONE)$")
GRAPH_OP = re.compile(r"torch\.ops\.(\w+)\.(\w+)\.(\w+)")
COMPILE_NAMES = frozenset({"compile", "optimize", "compile_fx"})
EVERY_CHECK = "CRCR_REUSE_CAPTURE_EVERY_CHECK"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("crcr-opcapture", "crcr: record the aten operators each test calls")
    group.addoption("--opcapture-out", metavar="JSONL", help="write one line per test here")
    group.addoption(
        "--opcapture-keys",
        metavar="FILE",
        help="run only these generic tests (lines file::Class::test); others are deselected",
    )
    group.addoption(
        "--opcapture-known",
        metavar="FILE",
        help="with --opcapture-keys: tests none of these lines names run as well "
        "(tests a file adds to its classes at import, which no source scan lists)",
    )
    group.addoption(
        "--opcapture-resume",
        action="store_true",
        help="leave out the tests --opcapture-out already holds a line for "
        "(a process started again where one that died stopped)",
    )
    group.addoption(
        "--opcapture-root",
        metavar="DIR",
        help="paths in the output are relative to this folder (default: the rootdir)",
    )


def pytest_configure(config: pytest.Config) -> None:
    out = config.getoption("--opcapture-out")
    if out:
        root = config.getoption("--opcapture-root") or str(config.rootpath)
        keys = config.getoption("--opcapture-keys")
        wanted = set(Path(keys).read_text().split()) if keys else None
        known_file = config.getoption("--opcapture-known")
        known = set(Path(known_file).read_text().split()) if known_file else None
        done = written_ids(Path(out)) if config.getoption("--opcapture-resume") else set()
        config.pluginmanager.register(
            Capture(Path(out), Path(root), wanted, known, done), "crcr-opcapture"
        )


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The lines an output file holds (the last one of a killed process, cut short, left out)."""
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return lines


def written_ids(path: Path) -> set[str]:
    """The node ids of the tests an output file holds a line for."""
    return {line["node_id"] for line in read_lines(path) if "node_id" in line}


def op_name(op: Any) -> str:
    """aten.add.Tensor -> add.Tensor; other namespaces keep theirs: prims::sum.default."""
    text = str(op)
    namespace, _, rest = text.partition(".")
    return rest if namespace == "aten" else f"{namespace}::{rest}"


def graph_ops(text: str) -> set[str]:
    """Operators named in printed FX graphs (TORCH_LOGS post_grad_graphs / aot_graphs)."""
    return {
        name if namespace == "aten" else f"{namespace}::{name}"
        for namespace, packet, overload in GRAPH_OP.findall(text)
        for name in [f"{packet}.{overload}"]
    }


class Capture:
    def __init__(
        self,
        out: Path,
        root: Path,
        wanted: set[str] | None = None,
        known: set[str] | None = None,
        done: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.wanted, self.known, self.done = wanted, known, done
        out.parent.mkdir(parents=True, exist_ok=True)
        # Line-buffered: what a crashed process recorded before it died is kept.
        self.stream = open(out, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self.root = root.resolve()
        self.recorder: Any = None
        self.current: dict[str, Any] | None = None
        self.logs = Path(os.environ["TORCH_LOGS_OUT"]) if os.environ.get("TORCH_LOGS_OUT") else None

    # -- set-up: wrap the helpers before any test module imports them -----------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        import torch
        import torch.testing
        from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

        name_generated_tests()  # before the test files instantiate their device tests
        capture = self

        class Recorder(TorchDispatchMode):
            """Keeps each distinct overload; `helper_depth` > 0 inside set-up helpers."""

            def __init__(self) -> None:
                super().__init__()
                self.ops: set[Any] = set()
                self.helper_ops: set[Any] = set()
                self.helper_depth = 0
                self.checks: list[repeated_checks.GradCheck] = []  # run under capture
                self.repeating = 0

            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # torch otherwise wraps __torch_dispatch__ in a per-call dynamo guard,
                # a fifth of the mode's cost per op; its frame is skipped once below.
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                (self.helper_ops if self.helper_depth else self.ops).add(func)
                return func(*args, **(kwargs or {}))

        from torch._dynamo.eval_frame import skip_code

        skip_code(Recorder.__torch_dispatch__.__code__)
        self.recorder_class = Recorder

        def paused(fn: Any) -> Any:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if capture.recorder is None:
                    return fn(*args, **kwargs)
                with _disable_current_modes():
                    return fn(*args, **kwargs)

            return wrapper

        def helper(fn: Any) -> Any:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                recorder = capture.recorder
                if recorder is None:
                    return fn(*args, **kwargs)
                recorder.helper_depth += 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    recorder.helper_depth -= 1

            return wrapper

        def checker(fn: Any) -> Any:
            """gradcheck / gradgradcheck: their own operators (random probe vectors and
            their norms, Jacobian comparisons) are helpers; the function under test they
            are given still counts as under test."""

            @functools.wraps(fn)
            def wrapper(func: Any, *args: Any, **kwargs: Any) -> Any:
                recorder = capture.recorder
                if recorder is None or not callable(func):
                    return fn(func, *args, **kwargs)

                def under_test(*inner: Any, **inner_kwargs: Any) -> Any:
                    saved, recorder.helper_depth = recorder.helper_depth, 0
                    try:
                        return func(*inner, **inner_kwargs)
                    finally:
                        recorder.helper_depth = saved

                under_test.checked = func  # type: ignore[attr-defined]  # repeats see through it

                recorder.helper_depth += 1
                try:
                    return fn(under_test, *args, **kwargs)
                finally:
                    recorder.helper_depth -= 1

            return wrapper

        from torch.testing._internal import common_utils

        if os.environ.get(EVERY_CHECK) != "1":
            repeated_checks.install(lambda: capture.recorder)
        for module in (torch.autograd, common_utils):
            for name in ("gradcheck", "gradgradcheck"):
                if callable(getattr(module, name, None)):
                    setattr(module, name, checker(getattr(module, name)))
        common_utils.TestCase.assertEqual = paused(common_utils.TestCase.assertEqual)
        torch.testing.assert_close = paused(torch.testing.assert_close)
        wrapped_make_tensor = helper(getattr(torch.testing, "make_tensor"))  # noqa: B009
        setattr(torch.testing, "make_tensor", wrapped_make_tensor)  # noqa: B010 (no stub for it)
        for module_name in ("torch.testing._creation", "torch.testing._internal.common_utils"):
            module = __import__(module_name, fromlist=["make_tensor"])
            if hasattr(module, "make_tensor"):
                setattr(module, "make_tensor", wrapped_make_tensor)  # noqa: B010

    # -- per test -------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # torch's stack walk costs an OpInfo test most of its time, captured or not;
        # a failure's report, the parsing of torch's files.
        torch_harness.install()
        failure_reports.install()

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.wanted is None and not self.done:
            return
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            (kept if self._runs(item) else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept

    def _runs(self, item: pytest.Item) -> bool:
        if item.nodeid in self.done:
            return False
        if self.wanted is None:
            return True
        entry = self._describe(item)
        key = f"{entry['file']}::{entry['class']}::{entry['test']}"
        return key in self.wanted or (self.known is not None and key not in self.known)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        entry = self._describe(item)
        self.current = entry
        log_start = self._log_size()
        started = time.perf_counter()
        try:
            if entry["how"] != "eager":
                return (yield)
            self.recorder = self.recorder_class()
            try:
                with self.recorder:
                    return (yield)
            finally:
                entry["ops"], entry["helper_ops"] = self._split(entry, self.recorder)
                self.recorder = None
        finally:
            entry["seconds"] = round(time.perf_counter() - started, 4)
            if entry["how"] == "compiled":
                entry["ops"] = sorted(graph_ops(self._log_since(log_start)))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, pytest.TestReport]:
        report: pytest.TestReport = yield
        entry = self.current
        if call.when == "call" and report.failed and entry is not None and entry["how"] == "eager":
            entry["passes_uncaptured"] = _passes_uncaptured(item)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.current
        if entry is None or entry["node_id"] != report.nodeid:
            if report.when == "setup" and report.outcome != "passed":
                self._write({"node_id": report.nodeid, "outcome": _outcome(report), "ops": []})
            return
        if report.when == "call" or (report.when == "teardown" and report.failed):
            entry["outcome"] = _outcome(report)
            if report.failed and entry.pop("passes_uncaptured", False):
                # The capture's failure, not the test's: its CPU outcome is a pass.
                entry["outcome"] = "passed"
                entry["capture_failure"] = (report.longreprtext or "")[-2000:]
            elif report.failed:
                entry["message"] = (report.longreprtext or "")[-2000:]
        if report.when == "teardown":
            self._write(entry)
            self.current = None

    def pytest_sessionfinish(self) -> None:
        self.stream.close()

    # -- helpers ------------------------------------------------------------------------

    def _describe(self, item: pytest.Item) -> dict[str, Any]:
        cls = getattr(item, "cls", None)
        fn = inspect.getattr_static(cls, item.name, None) if cls is not None else None
        fn = fn if fn is not None else getattr(item, "function", None)
        params = param_kwargs(fn)
        op = opinfo(params)
        module = params.get("module_info")
        dtype = params.get("dtype", params.get("dtypes"))
        class_name = cls.__name__ if cls is not None else ""
        generic_class = (
            DEVICE_SUFFIX.sub("", class_name) if hasattr(cls, "device_type") else class_name
        )
        meta = getattr(fn, "_crcr_meta", None)  # the reuse plugin's annotation, on device runs
        lazy = "lazy" in class_name.lower() or getattr(cls, "device_type", "") == "lazy"
        return {
            "node_id": item.nodeid,
            "file": _relative(str(item.path), self.root),
            "class": meta.generic_class if meta is not None else generic_class,
            # Keyed as configs name it: a functools.wraps method by its attribute name.
            "test": meta.generic_test if meta is not None else test_names(item, fn, cls).key,
            "opinfo": getattr(op, "full_name", "") or getattr(op, "name", "")
            if op is not None
            else "",
            "aten_names": _declared(op),
            "dtype": _dtype_text(dtype),
            "module": f"torch.{module.name}" if module is not None else "",
            "how": "uncaptured" if lazy else ("compiled" if _compiles(fn) else "eager"),
            "outcome": "passed",
            "ops": [],
            "helper_ops": [],
        }

    def _split(self, entry: dict[str, Any], recorder: Any) -> tuple[list[str], list[str]]:
        ops = {op_name(op) for op in recorder.ops}
        helpers = {op_name(op) for op in recorder.helper_ops} - ops
        declared = entry.pop("aten_names")
        if declared:
            # An OpInfo test tests its declared op; anything else it calls is a helper.
            under = {op for op in ops if _packet(op) in declared}
            helpers |= ops - under
            ops = under
        return sorted(ops), sorted(helpers)

    def _write(self, entry: dict[str, Any]) -> None:
        entry.pop("aten_names", None)
        self.stream.write(json.dumps(entry) + "\n")

    def _log_size(self) -> int:
        try:
            return self.logs.stat().st_size if self.logs else 0
        except OSError:
            return 0

    def _log_since(self, offset: int) -> str:
        if self.logs is None or not self.logs.exists():
            return ""
        with self.logs.open("rb") as stream:
            stream.seek(offset)
            return stream.read().decode(errors="replace")


def _passes_uncaptured(item: pytest.Item) -> bool:
    """Whether a test that failed under the capture passes when run again without it.
    Some fail only under a dispatch mode (a Tensor subclass built from a tensor the mode
    has seen: "already associated to a python object"); their CPU outcome is a pass."""
    instance = getattr(item, "instance", None)
    try:
        if isinstance(instance, unittest.TestCase):
            result = unittest.TestResult()
            type(instance)(item.name).run(result)
            return result.wasSuccessful() and not (result.skipped or result.expectedFailures)
        item.runtest()
    except Exception:
        return False
    return True


def _declared(op: Any) -> list[str]:
    """Operator packets an OpInfo stands for: its aten name and its own name's last part."""
    if op is None:
        return []
    names = {getattr(op, "aten_name", None), op.name.split(".")[-1], op.name.replace(".", "_")}
    names |= {f"{n}_" for n in list(names) if n}
    return sorted(n for n in names if n)


def _packet(op: str) -> str:
    return op.split("::")[-1].split(".", 1)[0]


def _dtype_text(dtype: Any) -> str:
    if dtype is None:
        return ""
    if isinstance(dtype, (list, tuple)):
        return ",".join(str(d).removeprefix("torch.") for d in dtype)
    return str(dtype).removeprefix("torch.")


def _compiles(fn: Any) -> bool:
    """The test's own code calls torch.compile or dynamo (looked up through wrappers)."""
    seen = 0
    while fn is not None and seen < 10:
        code = getattr(fn, "__code__", None)
        if code is not None and COMPILE_NAMES & set(code.co_names):
            return True
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return False


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def _outcome(report: pytest.TestReport) -> str:
    if report.skipped:
        return "xfailed" if hasattr(report, "wasxfail") else "skipped"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "xpassed" if hasattr(report, "wasxfail") else "passed"
