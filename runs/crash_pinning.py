"""Run a shard's tests in pytest subprocesses: crash pinning and per-test retries.

Pure Python (no Django): the caller gives it the ids and the process to run
them in (a `crcr_reuse.launcher.PytestRun`: environment, tree, configs) and
gets back every attempt of every test.

Steps:
1. run all ids in one pytest process, with a progress log of started and
   finished tests and a whole-shard timeout;
2. if the process died by a signal or timed out, the test that started and
   never finished is the culprit: it is re-run alone to confirm, then recorded
   as `crashed` / `timed_out`; the ids not reported yet go to a fresh process
   and the loop continues until every id has an outcome (a process that dies once every
   id has ended, at its exit, blames no test);
   a process silent while no test runs (`quiet_timeout`: nothing on its output and
   nothing in its progress log; stuck importing, collecting, loading the device, or
   between two tests) is killed and raises `ProcessSilent`: no test is to blame;
3. each failure the caller wants retried is re-run alone in a fresh process up
   to `max_attempts` in all: a pass then makes the test flaky (as PyTorch's own CI
   retries); with `retry_together`, the failures of a round are re-run in one fresh
   process instead (crashes in it pinned as in step 2): one process start a round, not
   one a failure, for callers whose failures are mostly deterministic (stage 4);
4. a process stopped by the device's health probe (`health_probe.POISONED_EXIT`) ends
   the shard's attempt at once (`DevicePoisoned`): it keeps only the outcomes the device
   vouched for (tests that did not fail, run before its last healthy probe); every other
   test is for a fresh attempt.
"""

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from crcr_reuse import launcher
from crcr_reuse.health_probe import POISONED_EXIT
from crcr_reuse.launcher import PytestRun
from crcr_reuse.outcomes import (
    FAILING,
    Poisoning,
    Progress,
    TestRecord,
    canonical,
    death,
    read_progress,
)

from runs.report_files import check_junit

EXIT_OK = (0, 1, 5)  # all passed, some failed, none collected: pytest ended normally
WATCH_INTERVAL = 0.5
# A process run for one test still imports torch's test machinery first (~10 s, far
# more on a loaded host); the hang watchdog, not this allowance, bounds the test.
STARTUP_SECONDS = 300
# What ended a process that did not end by itself.
SHARD_TIMEOUT, HUNG, SILENT = "shard timeout", "test hung", "silent"
SILENT_TAIL_BYTES = 16_000


class ProcessFailed(Exception):
    """pytest itself failed before running any test (a broken plugin, a bad argument,
    a device that does not load): an infrastructure failure, not the tests'."""


class ProcessSilent(ProcessFailed):
    """A test process wrote nothing for the quiet limit while no test was running, and was
    killed: infrastructure (a hung import or collection, a deadlocked device driver, a dead
    plugin), not a test's verdict. The message ends with the process's last output."""


class DevicePoisoned(Exception):
    """The device's health probe failed: the attempt ends as infrastructure. `kept`: the
    first attempts the device vouched for; the rest of the shard never ran or is suspect."""

    def __init__(self, poisoning: Poisoning, kept: list[TestRecord]) -> None:
        super().__init__(poisoning.describe())
        self.poisoning, self.kept = poisoning, kept


@dataclass
class ProcessResult:
    progress: Progress
    exit_code: int | None
    timed_out: bool
    output_tail: str

    @property
    def records(self) -> dict[str, TestRecord]:
        return self.progress.records

    @property
    def died(self) -> bool:
        return self.timed_out or self.exit_code not in EXIT_OK


@dataclass
class ShardSpec:
    ids: Sequence[str]
    workdir: Path
    # Every process of the shard is this one with its own ids and outputs.
    pytest: PytestRun
    timeout: float = 1800
    test_timeout: float = 300
    # Silence with no test running: the per-test limit judges a test's silence, this one
    # every other (the two never judge the same silence, so neither must exceed the other).
    quiet_timeout: float = 300
    max_attempts: int = 3
    # Retry a round's failures in one process rather than each alone (step 3).
    retry_together: bool = False


class Executor:
    def __init__(self, spec: ShardSpec, should_retry: Callable[[TestRecord], bool]) -> None:
        self.spec = spec
        self.should_retry = should_retry
        self.processes = 0
        self.firsts: dict[str, TestRecord] = {}  # each test's first attempt, as they end
        self.spec.workdir.mkdir(parents=True, exist_ok=True)

    def run(self) -> list[TestRecord]:
        """Every attempt of every id; each id ends with exactly one final outcome."""
        ids = [canonical(node_id) for node_id in self.spec.ids]
        final = self._run_pinning_crashes(ids, self.firsts)
        attempts = list(final.values())
        retried = [r for r in final.values() if r.outcome in FAILING and self.should_retry(r)]
        if self.spec.retry_together:
            return attempts + self._retry_together([r.node_id for r in retried])
        for record in retried:
            attempts += self._retry(record)
        return attempts

    def _run_pinning_crashes(
        self, ids: list[str], results: dict[str, TestRecord]
    ) -> dict[str, TestRecord]:
        pending = ids
        while pending:
            process = self.run_pytest(pending, self.spec.timeout)
            results.update({k: v for k, v in process.records.items() if k in pending})
            pending = [i for i in pending if i not in results]
            if not process.died:
                for node_id in pending:
                    results[node_id] = TestRecord(
                        node_id, "error", message="not collected: unknown test id"
                    )
                break
            culprit = process.progress.unfinished() or next(iter(pending), None)
            if culprit is None:  # it died once every test had ended (at exit, or timed out then)
                break
            results[culprit] = self._pin(culprit)
            pending = [i for i in pending if i != culprit]
        return results

    def _pin(self, node_id: str) -> TestRecord:
        """Re-run a suspected crash or hang alone; its own outcome there is the verdict."""
        alone = self.run_pytest([node_id], self.spec.test_timeout + STARTUP_SECONDS)
        if node_id in alone.records:
            return alone.records[node_id]
        if alone.timed_out:
            return TestRecord(
                node_id,
                "timed_out",
                duration=self.spec.test_timeout,
                message=f"timed out after {self.spec.test_timeout:.0f} s\n{alone.output_tail}",
            )
        return TestRecord(node_id, "crashed", message=_crash_message(alone))

    def _retry(self, first: TestRecord) -> list[TestRecord]:
        attempts = []
        for attempt in range(2, self.spec.max_attempts + 1):
            process = self.run_pytest([first.node_id], self.spec.test_timeout + STARTUP_SECONDS)
            record = process.records.get(first.node_id) or TestRecord(
                first.node_id,
                "timed_out" if process.timed_out else "crashed",
                message=_crash_message(process),
            )
            record.attempt = attempt
            attempts.append(record)
            if record.outcome not in FAILING:
                break
        return attempts

    def _retry_together(self, failing: list[str]) -> list[TestRecord]:
        """Rounds of one fresh process over the tests still failing, until they pass or
        have had `max_attempts` in all."""
        attempts: list[TestRecord] = []
        for attempt in range(2, self.spec.max_attempts + 1):
            if not failing:
                break
            round_ = self._run_pinning_crashes(failing, {})
            for record in round_.values():
                record.attempt = attempt
            attempts += round_.values()
            failing = [node_id for node_id, r in round_.items() if r.outcome in FAILING]
        return attempts

    def run_pytest(self, ids: Sequence[str], timeout: float) -> ProcessResult:
        """One pytest process over `ids`, killed with its process group on timeout."""
        self.processes += 1
        tag = f"p{self.processes:03d}"
        ids_file = self.spec.workdir / f"{tag}.ids"
        progress = self.spec.workdir / f"{tag}.progress.jsonl"
        junit = self.spec.workdir / f"{tag}.junit.xml"
        ids_file.write_text("".join(f"{node_id}\n" for node_id in ids))
        log = self.spec.workdir / f"{tag}.log"
        process = replace(self.spec.pytest, ids=ids_file, progress=progress, junit=junit).start(log)
        exit_code, ended_by = self._watch(process, log, progress, timeout)
        timed_out = ended_by is not None
        ended = not timed_out and exit_code is not None and exit_code >= 0
        reported = read_progress(progress, ended=ended)
        if ended and exit_code in EXIT_OK:
            check_junit(junit, reported.records.values())
        tail = log.read_bytes()[-4000:].decode(errors="replace")
        if ended_by == SILENT:
            # More of it: the threads' stacks it wrote on its way out say where it was stuck.
            stacks = log.read_bytes()[-SILENT_TAIL_BYTES:].decode(errors="replace")
            raise ProcessSilent(_silence_message(self.spec.quiet_timeout, tag, stacks))
        if exit_code == POISONED_EXIT and reported.poisoned is not None:
            raise self._poisoned(reported, reported.poisoned)
        if not reported.started and not timed_out and exit_code not in (0, 5):
            raise ProcessFailed(f"pytest exited with status {exit_code} before any test:\n{tail}")
        return ProcessResult(reported, exit_code, timed_out, tail)

    def _poisoned(self, reported: Progress, poisoning: Poisoning) -> DevicePoisoned:
        """What the attempt keeps: first attempts that did not fail (nor crash or hang),
        outside the tests run since the probe's last healthy answer."""
        # A retry's record never stands for a test's first attempt.
        firsts = {**reported.records, **self.firsts}
        suspects = set(poisoning.suspects)
        kept = [
            record
            for node_id, record in firsts.items()
            if record.outcome not in (*FAILING, "crashed", "timed_out") and node_id not in suspects
        ]
        return DevicePoisoned(poisoning, kept)

    def _watch(
        self, process: subprocess.Popen[bytes], log: Path, progress: Path, timeout: float
    ) -> tuple[int | None, str | None]:
        """Wait for the process; kill it when the shard runs too long, a test hangs or the
        process goes silent. Returns its exit status, and what ended it (None: it ended)."""
        started = time.time()
        deadline = time.monotonic() + timeout
        while True:
            try:
                return process.wait(timeout=WATCH_INTERVAL), None
            except subprocess.TimeoutExpired:
                pass
            ended_by = (
                SHARD_TIMEOUT
                if time.monotonic() > deadline
                else self._silence(started, log, progress)
            )
            if ended_by == SILENT:
                launcher.kill_with_stacks(process)  # where it is stuck, in its log
            elif ended_by is not None:
                launcher.kill(process)
            if ended_by is not None:
                return None, ended_by

    def _silence(self, started: float, log: Path, progress: Path) -> str | None:
        """HUNG when a test started and its progress log stayed silent for the per-test
        limit; SILENT when no test is running and neither the output nor the progress log
        changed for the quiet limit; else None."""
        now = time.time()
        progress_quiet = now - max(started, _mtime(progress))
        if progress_quiet < min(self.spec.test_timeout, self.spec.quiet_timeout):
            return None
        if _test_running(progress):
            return HUNG if progress_quiet >= self.spec.test_timeout else None
        quiet = now - max(started, _mtime(progress), _mtime(log))
        return SILENT if quiet >= self.spec.quiet_timeout else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _test_running(progress: Path) -> bool:
    """The progress log's last line is a test's start: that test is running."""
    try:
        with progress.open("rb") as stream:
            stream.seek(max(0, progress.stat().st_size - 4096))
            last = stream.read().splitlines()[-1]
    except (OSError, IndexError):
        return False
    return b'"event": "start"' in last


def _silence_message(limit: float, tag: str, tail: str) -> str:
    """What the shard's record says of a silent process: the limit, then the end of its
    output (its threads' stacks first among them: where it was stuck)."""
    return (
        f"the test process printed nothing for {limit:g} s outside any test "
        f"(CRCR_QUIET_TIMEOUT) and was killed; the end of its output ({tag}.log):\n"
        f"{tail.strip() or '(it printed nothing)'}"
    )


def _crash_message(process: ProcessResult) -> str:
    return f"{death(process.exit_code)}\n{process.output_tail}"
