"""Bars 1 and 2 of the reuse plugin, checked on PyTorch's own test files.

    TORCH_ROOT=/path/holding/test .venv/bin/python bench/upstream_check.py

Needs ``$TORCH_ROOT/test/test_view_ops.py`` and ``test_binary_ufuncs.py`` (a
checkout, or single files fetched beside each other; files newer than the wheel
may need a conftest.py shim there that back-fills a renamed import). Upstream
files cannot live in the repository, so CI checks the same properties on
tests/upstream (tests/engine/test_collection.py); this script is the
manual check on the real files. Expected sets come from plain pytest collecting
the same files for the same device, never from the plugin itself.

Bar 1: the config of the issue over test_view_ops.py collects exactly the
privateuse1 variants of the three tests, none in bool or int64, every dtype
variant marked ``dtype__<dtype>``; the run shows every test's outcome and the
summary counts what the config skipped.
Bar 2: over test_binary_ufuncs.py with supported_dtypes [bfloat16, float16,
float32], ``-m op__add`` selects exactly the ``add`` OpInfo variants in those
dtypes and ``-m dtype__float16`` exactly the float16 variants.
Exit 0 when every check holds.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crcr_reuse.launcher import PytestRun, TestEnvironment  # noqa: E402
from crcr_reuse.schema import DTYPES  # noqa: E402
from crcr_reuse.static_scan import scan_file  # noqa: E402

BAR_ONE = """\
test_suite_config:
  labels: [trunk]
  files:
    - path: ${TORCH_ROOT}/test/test_view_ops.py
      unlisted_test_mode: skip
      tests:
        - names: [TestOldViewOps::test_broadcast_tensors, TestViewOps::test_contiguous_self]
          mode: mandatory_success
        - names: [TestOldViewOps::test_broadcast_to]
          mode: mandatory_success
          edits: {dtypes: {exclude: [{name: bool}, {name: int64}]}}
  global:
    supported_dtypes: [{name: bfloat16}, {name: float16}, {name: float32}]
"""
BAR_TWO = """\
test_suite_config:
  labels: [trunk]
  files:
    - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py
      unlisted_test_mode: mandatory_success
  global:
    supported_dtypes: [{name: bfloat16}, {name: float16}, {name: float32}]
"""
SUPPORTED = {"bfloat16", "float16", "float32"}
DEVICE = "privateuseone"
# Only so that a hung process cannot hold the check forever: far above any real run.
LIMIT_S = 3600


def pytest_run(
    root: Path,
    *,
    files: Sequence[str] = (),
    configs: Sequence[Path] = (),
    json_report: Path | None = None,
    collect_only: bool = False,
    args: list[str],
) -> tuple[int, str]:
    """One pytest process in `root` (the rootdir, the working folder and $TORCH_ROOT, which
    the plugin reads itself); without configs a plain one."""
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    variables["TORCH_ROOT"] = str(root)
    variables["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"
    pytest = PytestRun(
        TestEnvironment(sys.executable, variables),
        None,
        configs=configs,
        files=files,
        collect_only=collect_only,
        json_report=json_report,
        rootdir=root,
        cwd=root,
        extra_args=["-p", "no:django", *args],
    )
    done = pytest.run(timeout=LIMIT_S)
    return done.returncode, done.stdout + done.stderr


def plain_ids(root: Path, test_file: Path) -> list[str]:
    """Every privateuse1 test plain pytest collects (device registered, no plugin)."""
    code, output = pytest_run(
        root,
        files=[str(test_file)],
        collect_only=True,
        args=["-p", "no:crcr_reuse", "-p", "crcr_reuse.reference_device"],
    )
    if code != 0:
        raise SystemExit(f"plain collection failed:\n{output[-3000:]}")
    return [line for line in output.splitlines() if "::" in line and " " not in line]


def split_name(test_file: Path, cls: str, name: str) -> tuple[str, str, list[str]]:
    """(generic test, op part, dtypes) of a generated name."""
    generic_cls = re.sub(r"PRIVATEUSE(1|ONE)$", "", cls)
    generics = [t.name for t in scan_file(str(test_file)) if t.cls == generic_cls]
    # Tests a file generates at import time are not in the source: take the name's head.
    fallback = name.split(f"_{DEVICE}")[0]
    matching = [g for g in generics if name == g or name.startswith(g + "_")]
    generic = max(matching, key=len, default=fallback)
    rest = name[len(generic) :].lstrip("_")
    op, _, suffix = rest.partition(DEVICE)
    return generic, op.rstrip("_"), parse_dtypes(suffix.lstrip("_"))


def parse_dtypes(suffix: str) -> list[str]:
    found: list[str] = []
    while suffix:
        name = max(
            (d for d in DTYPES if suffix == d or suffix.startswith(d + "_")), key=len, default=None
        )
        if name is None:
            return found + [suffix]
        found.append(name)
        suffix = suffix[len(name) :].lstrip("_")
    return found


def plugin_report(
    root: Path, config_text: str, args: list[str], tmp: Path, name: str, collect_only: bool
) -> tuple[int, str, dict]:
    config = tmp / f"{name}.yaml"
    config.write_text(config_text)
    report = tmp / f"{name}.json"
    code, output = pytest_run(
        root, configs=[config], json_report=report, collect_only=collect_only, args=args
    )
    if not report.exists():
        raise SystemExit(f"{name}: no report ({code}):\n{output[-3000:]}")
    return code, output, json.loads(report.read_text())


def check(ok: bool, what: str, failures: list[str]) -> None:
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def bar_one(root: Path, tmp: Path, failures: list[str]) -> None:
    test_file = root / "test" / "test_view_ops.py"
    wanted = {
        "TestOldViewOps::test_broadcast_tensors",
        "TestViewOps::test_contiguous_self",
        "TestOldViewOps::test_broadcast_to",
    }
    expected = set()
    for node_id in plain_ids(root, test_file):
        cls, name = node_id.split("::")[1:]
        generic, _, dtypes = split_name(test_file, cls, name)
        excluded = {"bool", "int64"} if generic == "test_broadcast_to" else set()
        key = f"{re.sub(r'PRIVATEUSE(1|ONE)$', '', cls)}::{generic}"
        if key in wanted and all(d in SUPPORTED - excluded for d in dtypes):
            expected.add(name)
    # What -v -rA alone set, after the launcher's -q and -rN: every test's outcome, every summary.
    code, output, report = plugin_report(
        root, BAR_ONE, ["--verbosity=1", "-rA"], tmp, "bar1", False
    )
    names = {r["nodeid"].rsplit("::", 1)[1] for r in report["tests"]}
    print(f"bar 1: collected {len(names)}: {sorted(names)}")
    print(f"bar 1: outcomes {report['summary']}; exit code {code}")
    check(
        names == expected,
        f"bar 1: exactly the expected privateuse1 variants ({len(expected)})",
        failures,
    )
    check(
        not any(re.search(r"_(bool|int64)$", n) for n in names),
        "bar 1: none in bool or int64",
        failures,
    )
    marked = all(f"dtype__{r['dtype']}" in r["markers"] for r in report["tests"] if r["dtype"])
    check(marked, "bar 1: every dtype variant carries its dtype__ marker", failures)
    shown = all(
        re.search(rf"::{re.escape(n)} (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)", output)
        for n in names
    )
    check(
        shown and all(r["outcome"] != "collected" for r in report["tests"]),
        "bar 1: every collected test shows its outcome",
        failures,
    )
    skipped = re.search(r"skip: (\d+) not collected by the config", output)
    print(f"bar 1: summary line: {skipped.group(0) if skipped else 'missing'}")
    check(
        skipped is not None and int(skipped.group(1)) > 0,
        "bar 1: the summary counts the skipped rest",
        failures,
    )


def bar_two(root: Path, tmp: Path, failures: list[str]) -> None:
    test_file = root / "test" / "test_binary_ufuncs.py"
    add, float16 = set(), set()
    for node_id in plain_ids(root, test_file):
        cls, name = node_id.split("::")[1:]
        _, op, dtypes = split_name(test_file, cls, name)
        if not all(d in SUPPORTED for d in dtypes):
            continue
        if op == "add":
            add.add(name)
        if "float16" in dtypes:
            float16.add(name)
    for marker, expected in (("op__add", add), ("dtype__float16", float16)):
        _, _, report = plugin_report(root, BAR_TWO, ["-m", marker], tmp, marker, True)
        names = {r["nodeid"].rsplit("::", 1)[1] for r in report["tests"]}
        print(f"bar 2: -m {marker} selects {len(names)} tests (plain pytest says {len(expected)})")
        check(
            names == expected, f"bar 2: -m {marker} selects exactly the expected variants", failures
        )


def main() -> int:
    if not os.environ.get("TORCH_ROOT"):
        print(
            "set TORCH_ROOT to a folder holding test/test_view_ops.py and test/test_binary_ufuncs.py"
        )
        return 2
    root = Path(os.environ["TORCH_ROOT"]).resolve()
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        bar_one(root, Path(tmp), failures)
        bar_two(root, Path(tmp), failures)
    print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
