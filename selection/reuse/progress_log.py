"""A pytest plugin that writes one JSON line per finished test, as it finishes.

The executor reads this log to know which tests a shard reported before its
process crashed or hung, so only the rest are re-run to pin the culprit. It
imports nothing from Django and is loaded with `-p selection.reuse.progress_log
--crcr-progress <file>`.
"""

import json
import os
from typing import Any

import pytest

MESSAGE_LIMIT = 8_000
ITEM_MARKERS = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("crcr").addoption(
        "--crcr-progress", default=None, help="append one JSON line per finished test here"
    )


class ProgressLog:
    def __init__(self, path: str) -> None:
        # Line-buffered append: a line is on disk before the next test starts.
        self.stream = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, record: dict[str, Any]) -> None:
        self.stream.write(json.dumps(record) + "\n")
        self.stream.flush()
        os.fsync(self.stream.fileno())

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            item.stash[ITEM_MARKERS] = sorted({mark.name for mark in item.iter_markers()})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        outcome = yield
        report = outcome.get_result()
        report.crcr_markers = item.stash.get(ITEM_MARKERS, [])

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        # A test that starts and never finishes is the one that crashed or hung.
        self.write({"node_id": nodeid, "event": "start"})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = _outcome(report)
        if outcome is None:
            return
        self.write(
            {
                "node_id": report.nodeid,
                "event": "finish",
                "outcome": outcome,
                "duration": round(report.duration, 4),
                "message": _message(report),
                "markers": getattr(report, "crcr_markers", []),
                "properties": [list(pair) for pair in report.user_properties],
            }
        )

    def pytest_sessionfinish(self) -> None:
        self.stream.close()


def _outcome(report: pytest.TestReport) -> str | None:
    """The test's outcome from the phase that decides it, or None for other phases."""
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if xfail:
            return "xpassed" if report.passed else "xfailed"
        return str(report.outcome)
    if report.when == "setup" and not report.passed:
        if report.skipped:
            return "xfailed" if xfail else "skipped"
        return "error"
    if report.when == "teardown" and report.failed:
        return "error"
    return None


def _message(report: pytest.TestReport) -> str:
    if report.passed:
        return ""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    text = report.longreprtext or ""
    return text[-MESSAGE_LIMIT:]


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--crcr-progress")
    if path:
        config.pluginmanager.register(ProgressLog(path), "crcr-progress-log")
