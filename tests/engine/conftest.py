"""Shared helpers for the reuse tests: real pytest subprocesses over the upstream-style tree.

Every process that imports torch.testing pays ~10 s, so heavy runs are
declared once (``HEAVY_RUNS``), started as soon as collection knows which of
them the selected tests need, and run two at a time in the background while
the quick tests go on; a test asks for a run's result by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "tests" / "upstream"
TREE_TESTS = TREE / "test"
RUN_TIMEOUT = 300


@dataclass
class Run:
    """A finished subprocess: exit code, output, and the JSON report if one was asked for."""

    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any] = field(default_factory=dict)
    junit: str = ""

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def records(self) -> dict[str, dict[str, Any]]:
        """JSON records by node id."""
        return {record["nodeid"]: record for record in self.report.get("tests", [])}

    def names(self) -> set[str]:
        """Generated test function names of the JSON records."""
        return {record["nodeid"].rsplit("::", 1)[-1] for record in self.report.get("tests", [])}

    def by_name(self, name: str) -> dict[str, Any]:
        matches = [r for r in self.report["tests"] if r["nodeid"].endswith("::" + name)]
        assert len(matches) == 1, f"{name}: {len(matches)} records"
        return matches[0]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a child run: no settings of this suite leak into it."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "DJANGO_", "CRCR_", "PYTORCH_TESTING"))
        and key not in ("TORCH_ROOT", "TORCH_DEVICE_ROOT")
    }
    env.update(extra)
    # This checkout's engine, not the one installed (editable) in the virtualenv.
    engine = str(ROOT / "engine")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [engine, env.get("PYTHONPATH")]))
    return env


def run_pytest(
    args: list[str],
    workdir: Path,
    env: dict[str, str] | None = None,
    timeout: int = RUN_TIMEOUT,
    tree: Path = TREE,
) -> Run:
    """Run pytest with the reuse plugin from the tree's root (which has its own pytest.ini)."""
    report = workdir / "report.json"
    junit = workdir / "junit.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:django",
        "-p",
        "no:cacheprovider",
        "-p",
        "crcr_reuse",
        f"--rootdir={tree}",
        f"--reuse-json={report}",
        f"--junitxml={junit}",
        *args,
    ]
    done = subprocess.run(
        command,
        cwd=tree,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        report=json.loads(report.read_text()) if report.exists() else {},
        junit=junit.read_text() if junit.exists() else "",
    )


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: int = 120, args: list[str] | None = None
) -> Run:
    done = subprocess.run(
        [sys.executable, "-c", code, *(args or [])],
        cwd=ROOT,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(returncode=done.returncode, stdout=done.stdout, stderr=done.stderr)


# name -> function(workdir) -> result; filled by the test modules at import time.
HEAVY_RUNS: dict[str, Callable[[Path], Any]] = {}
# Longest first, so the two background slots finish together (seconds, measured).
EXPECTED_SECONDS = {
    "lint": 40,
    "xdist": 30,
    "run": 25,
    "supervisor": 12,
    "collect": 22,
    "collect_op_add": 16,
    "list_collect": 12,
    "generated_tree": 12,
    "spyre_names": 40,
}


def heavy_run(name: str) -> Callable[[Callable[[Path], Any]], Callable[[Path], Any]]:
    """Declare a background run; tests get its result with ``background.result(name)``."""

    def register(function: Callable[[Path], Any]) -> Callable[[Path], Any]:
        HEAVY_RUNS[name] = function
        return function

    return register


class Background:
    def __init__(self, root: Path):
        self.root = root
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.futures: dict[str, Future[Any]] = {}
        # Under pytest-xdist: the runs each file's tests read, started together when
        # one of them is first asked for (only the worker given that file needs them).
        self.siblings: dict[str, list[str]] = {}

    def start(self, names: list[str]) -> None:
        for name in names:
            if name not in self.futures:
                workdir = self.root / name
                workdir.mkdir(parents=True, exist_ok=True)
                self.futures[name] = self.pool.submit(HEAVY_RUNS[name], workdir)

    def result(self, name: str) -> Any:
        self.start([name, *self.siblings.get(name, [])])
        return self.futures[name].result()


_background: Background | None = None


def _get_background(factory: pytest.TempPathFactory) -> Background:
    global _background
    if _background is None:
        _background = Background(factory.mktemp("reuse-runs"))
    return _background


@pytest.fixture(scope="session")
def background(tmp_path_factory: pytest.TempPathFactory) -> Background:
    return _get_background(tmp_path_factory)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start, in the background, every heavy run a selected test asks for."""
    by_file: dict[str, list[str]] = {}
    for item in session.items:
        names = by_file.setdefault(item.nodeid.split("::", 1)[0], [])
        for marker in item.iter_markers("heavy_runs"):
            names += [name for name in marker.args if name not in names]
    wanted = sorted(
        dict.fromkeys(name for names in by_file.values() for name in names),
        key=lambda name: -EXPECTED_SECONDS.get(name, 5),
    )
    if not wanted:
        return
    background = _get_background(session.config._tmp_path_factory)  # type: ignore[attr-defined]
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Every xdist worker collects every test, but runs only the files it is given
        # (`--dist loadfile`): a file's runs start when one of its tests first asks.
        for names in by_file.values():
            for name in names:
                background.siblings[name] = names
    else:
        background.start(wanted)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "heavy_runs(*names): background subprocess runs this test reads"
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _background is not None:
        _background.pool.shutdown(wait=False, cancel_futures=True)
