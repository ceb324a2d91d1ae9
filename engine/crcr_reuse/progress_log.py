"""A pytest plugin that writes one JSON line per started and finished test, as it goes.

The executor reads this log to know which tests a shard reported before its
process crashed or hung, so only the rest are re-run to pin the culprit
(`outcomes.read_progress` reads it). It imports nothing from Django and is loaded
with `-p crcr_reuse.progress_log --crcr-progress <file>`.

`--crcr-progress-resume` makes a fresh process go on where the log stops: every
test the log has an outcome for (crashed included) is deselected at collection,
and the ids left to run are written as one `collected` line (the supervisor's
count of what a restart resumes).

A process with this log also writes every thread's Python stack to its original
output on SIGUSR1 (`STACKS_SIGNAL`), from the moment the plugin loads, before
pytest's capture and any conftest: the executor asks for them before it kills a
process gone silent, so its log says where it was stuck.
"""

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

import pytest

from .outcomes import ReportError, canonical, read_progress

MESSAGE_LIMIT = 8_000
PLUGIN_NAME = "crcr-progress-log"  # the log's registered name (the health probe writes to it)
ITEM_MARKERS = pytest.StashKey[list[str]]()
STACKS_SIGNAL = signal.SIGUSR1


# Where the stacks go: a duplicate of the process's own stderr, open for its life.
_stacks_output: list[TextIO] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    # A -p plugin's options are added as it loads, before pytest's capture redirects
    # stderr (and before any conftest runs): the duplicate is the process's real output.
    if not _stacks_output:
        _stacks_output.append(os.fdopen(os.dup(sys.stderr.fileno()), "w"))
        faulthandler.register(STACKS_SIGNAL, file=_stacks_output[0], all_threads=True)
    group = parser.getgroup("crcr")
    group.addoption(
        "--crcr-progress", default=None, help="append one JSON line per finished test here"
    )
    group.addoption(
        "--crcr-progress-resume",
        action="store_true",
        help="deselect every test the progress log already has an outcome for",
    )


class ProgressLog:
    def __init__(self, path: str, resume: bool = False) -> None:
        # Read before this process appends: what earlier processes reported.
        self.done = set(read_progress(Path(path), ended=True).records) if resume else None
        # Line-buffered append: every line is in the file before the next test starts,
        # so a test process that crashes loses none of them.
        self.stream = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, record: dict[str, Any], durable: bool = False) -> None:
        """Append a line; `durable` waits until it, and every line before it, is on the
        disk (fsync), so it survives the whole host going down too."""
        self.stream.write(json.dumps(record) + "\n")
        self.stream.flush()
        if durable:
            os.fsync(self.stream.fileno())

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.done:
            reported = [item for item in items if canonical(item.nodeid) in self.done]
            if reported:
                config.hook.pytest_deselected(items=reported)
                items[:] = [item for item in items if canonical(item.nodeid) not in self.done]
        for item in items:
            item.stash[ITEM_MARKERS] = sorted({mark.name for mark in item.iter_markers()})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        outcome = yield
        report = outcome.get_result()
        report.crcr_markers = item.stash.get(ITEM_MARKERS, [])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.done is not None:
            self.write({"event": "collected", "node_ids": [item.nodeid for item in session.items]})

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        # A test that starts and never finishes is the one that crashed or hung. Its start
        # is on the disk before it runs, even should it take the host down (a device
        # driver's fault); that fsync also carries the previous test's finish line, so
        # finish lines need none of their own: one fsync a test, not two (3 ms each here).
        self.write({"node_id": nodeid, "event": "start"}, durable=True)

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
        os.fsync(self.stream.fileno())  # the last test's finish line
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
        try:
            log = ProgressLog(path, resume=config.getoption("--crcr-progress-resume"))
        except ReportError as error:
            raise pytest.UsageError(f"--crcr-progress-resume: {error}") from None
        config.pluginmanager.register(log, PLUGIN_NAME)
