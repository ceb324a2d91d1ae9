"""`python -m crcr_reuse run -- PYTEST_ARGS`: a pytest run that goes on after a crash.

For a backend's own CI, without crcr's shard executor (`runs/crash_pinning.py`)
or pytest-xdist (under xdist the reuse plugin reports a crash and the run goes on).

Steps:
1. run pytest with the user's arguments and the progress log in resume mode
   (`progress_log.py`): every test the log has an outcome for is deselected, so
   the first process, on an empty log, runs them all;
2. when the process ends mid-test (killed by a signal, or an exit status of its
   own), the test that started and never finished (`Progress.unfinished`) is
   recorded `crashed` in the log, with how the process ended, and a fresh process
   runs what is left, up to `--max-restarts` times;
3. from the log, which now holds every test once: one line per outcome, the
   crashed tests by name, and the JUnit XML the user asked for (each process's
   own would lack the tests of the one that crashed). Exit status 1 when a test
   failed, errored, crashed, passed a strict xfail or did not run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from .launcher import PytestRun, TestEnvironment
from .outcomes import (
    STRICT_XPASS,
    Progress,
    TestRecord,
    death,
    junit_address,
    read_progress,
    record_crash,
)
from .report import OUTCOME_ORDER

EXIT_OK = (0, 1, 5)  # pytest ended by itself: all passed, some failed, none collected
TESTS_FAILED = 1
INTERRUPTED = 2  # Ctrl-C, or errors during collection: pytest's own verdict, no restart
FAILING = ("failed", "error", "crashed", "xpassed_strict")
JUNIT_OPTIONS = ("--junitxml", "--junit-xml")
# How pytest's junitxml writes an outcome: (element, its type); a pass has none.
JUNIT_ELEMENTS = {
    "failed": ("failure", None),
    "crashed": ("failure", None),
    "xpassed_strict": ("failure", None),
    "error": ("error", None),
    "skipped": ("skipped", "pytest.skip"),
    "xfailed": ("skipped", "pytest.xfail"),
}


def supervise(args: Sequence[str], progress: Path | None, max_restarts: int) -> int:
    """Run pytest with `args` until every test has an outcome (or no restart is left);
    print the summary, write the JUnit XML, return the exit status."""
    pytest_args, junit = without_junit(args)
    if progress is not None:
        return _supervise(pytest_args, junit, progress, max_restarts)
    with tempfile.TemporaryDirectory(prefix="crcr-run-") as folder:
        return _supervise(pytest_args, junit, Path(folder) / "progress.jsonl", max_restarts)


def _supervise(args: list[str], junit: Path | None, progress: Path, max_restarts: int) -> int:
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.write_text("")  # a run starts from an empty log
    pytest = PytestRun(
        TestEnvironment(sys.executable, os.environ),
        None,
        progress=progress,
        resume=True,
        cwd=Path.cwd(),
        extra_args=args,
        terse=False,
    )
    status, restarts, reported = _run_resuming(pytest, progress, max_restarts)
    for line in summary(reported, restarts):
        print(line)
    if junit is not None:
        write_junit(junit, reported)
    if status not in EXIT_OK:  # pytest's own verdict: interrupted, a usage error, killed
        return status if status > 0 else 128 - status  # the shell's way to say a signal
    failing = any(shown(record) in FAILING for record in reported.records.values())
    return TESTS_FAILED if failing or reported.remaining() else status


def _run_resuming(
    pytest: PytestRun, progress: Path, max_restarts: int
) -> tuple[int, int, Progress]:
    """(the run's status so far, how many restarts, the log as it ends): the last
    process's own, or `TESTS_FAILED` once a test crashed."""
    restarts = 0
    while True:
        status = pytest.call()
        reported = read_progress(progress, ended=status >= 0)
        culprit = reported.unfinished()
        if culprit is None or status == INTERRUPTED:
            if status < 0:
                print(f"crcr: {death(status)}, outside any test", file=sys.stderr)
            return status, restarts, reported
        name = reported.spelled[culprit]
        record_crash(progress, name, death(status))
        reported = read_progress(progress, ended=True)
        left = reported.remaining()
        if not left:
            return TESTS_FAILED, restarts, reported
        if restarts == max_restarts:
            print(f"crcr: {name}: {death(status)}; {len(left)} tests not run "
                  f"(--max-restarts {max_restarts} reached)", file=sys.stderr)  # fmt: skip
            return TESTS_FAILED, restarts, reported
        restarts += 1
        print(f"crcr: {name}: {death(status)}; resuming {len(left)} tests in a fresh "
              f"process (restart {restarts} of {max_restarts})", file=sys.stderr)  # fmt: skip


def without_junit(args: Sequence[str]) -> tuple[list[str], Path | None]:
    """The user's pytest arguments without --junitxml, and its file."""
    kept: list[str] = []
    junit = None
    rest = iter(args)
    for arg in rest:
        option, equals, value = arg.partition("=")
        if option not in JUNIT_OPTIONS:
            kept.append(arg)
            continue
        value = value if equals else next(rest, "")
        if not value:
            raise ValueError(f"{option} needs a file")
        junit = Path(value)
    return kept, junit


def shown(record: TestRecord) -> str:
    """The outcome as the user's pytest counts it: a strict xfail that passed fails
    (crcr itself keeps it as an unexpected pass, `outcomes.settled`)."""
    if record.outcome == "xpassed" and record.message.startswith(STRICT_XPASS):
        return "xpassed_strict"
    return record.outcome


def summary(reported: Progress, restarts: int) -> list[str]:
    """One line per outcome, every test counted once; then each crashed test."""
    counts = Counter(shown(record) for record in reported.records.values())
    counts["not run"] = len(reported.remaining())
    processes = f"{restarts + 1} pytest process" + ("es" if restarts else "")
    # On a line of its own: a crashed pytest leaves its progress line unfinished.
    lines = ["", f"crcr run: {sum(counts.values())} tests in {processes}"]
    order = [*OUTCOME_ORDER, *sorted(set(counts) - set(OUTCOME_ORDER) - {"not run"}), "not run"]
    lines += [f"  {outcome:<15} {counts[outcome]}" for outcome in order if counts[outcome]]
    for node_id, record in reported.records.items():
        if record.outcome == "crashed":
            lines.append(f"crashed: {reported.spelled[node_id]}: {record.message}")
    return lines


def write_junit(path: Path, reported: Progress) -> None:
    """Every test of the log once, as pytest's junitxml writes it (messages as the log
    keeps them: the last 8,000 characters; no captured output)."""
    suite = ElementTree.Element("testsuite", name="pytest")
    counts: Counter[str] = Counter()
    for node_id, record in reported.records.items():
        classname, name = junit_address(reported.spelled[node_id])
        case = ElementTree.SubElement(
            suite, "testcase", classname=classname, name=name, time=f"{record.duration:.3f}"
        )
        if record.properties:
            properties = ElementTree.SubElement(case, "properties")
            for key, value in record.properties:
                ElementTree.SubElement(properties, "property", name=str(key), value=str(value))
        element, kind = JUNIT_ELEMENTS.get(shown(record), (None, None))
        if element is not None:
            counts[element] += 1
            result = ElementTree.SubElement(case, element, message=_headline(record.message))
            result.text = record.message
            if kind is not None:
                result.set("type", kind)
    total = sum(record.duration for record in reported.records.values())
    suite.attrib.update(
        errors=str(counts["error"]),
        failures=str(counts["failure"]),
        skipped=str(counts["skipped"]),
        tests=str(len(reported.records)),
        time=f"{total:.3f}",
        timestamp=datetime.now(UTC).isoformat(),
    )
    root = ElementTree.Element("testsuites", name="pytest tests")
    root.append(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _headline(message: str) -> str:
    """The line of a report that says what went wrong: pytest's first `E` line, else
    the last line (a skip's reason, a crash's cause)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    errors = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
    headline = errors[0] if errors else lines[-1] if lines else ""
    return headline.removeprefix("Skipped: ")
