"""Execute one shard on a device worker and store its results.

Steps:
1. claim the shard with a conditional update (pending, or running with a
   heartbeat gone silent: its worker died); losing the race ends the task;
2. verify every artifact of the run by hash, and take the combination's environment
   (runs.environments: built on this host from the run's wheels, once);
3. run the executor (crash pinning, hang watchdog, retries of failures that
   are not deterministic) while a heartbeat thread keeps the claim fresh, over the
   shard's tests without a stored result (an attempt a poisoned device ended kept some);
   a test process that fails before its tests, or goes silent outside them, is an
   infrastructure failure: the task gives the shard back and retries it;
   a poisoned device (its health probe failed) ends the attempt as infrastructure: the
   outcomes the device vouched for are stored, the shard goes back to the queue with the
   probe's verdict as its error, and a fresh attempt runs the rest;
4. store every attempt, mark the shard done, classify its failures and queue its
   HUD job's `completed` (per-job mode) in one transaction, fold the durations into
   the history, and finish the run when it was the last shard.
"""

import socket
from datetime import timedelta
from pathlib import Path

from crcr_reuse.outcomes import ReportError, TestRecord, canonical, read_progress
from django.conf import settings
from django.db import (
    close_old_connections,
    transaction,
)
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from crcr_site.lib import leases
from crcr_site.lib.redaction import redact
from runs import (
    artifacts,
    durations,
    environments,
    events,
    ingest,
    planning,
    results,
    workfiles,
    worktrees,
)
from runs.crash_pinning import DevicePoisoned, Executor, ProcessFailed, ShardSpec
from runs.models import Run, Shard, TestDuration
from runs.relay import outbox
from runs.triage import classify

# Failures that repeat by nature are not re-run: the op or dtype is missing, or
# the test cannot even be set up.
DETERMINISTIC = {"unsupported_op", "unsupported_dtype", "test_error"}
# The longest wait between two tries of a shard lost to infrastructure (seconds).
RETRY_BACKOFF_MAX = 900


class InfraError(Exception):
    """The shard could not run for a reason outside the tests; the task retries."""


class PoisonedError(InfraError):
    """The device went bad mid-attempt: a fresh attempt (a fresh device process) runs the
    tests it did not vouch for, at once."""


def claims_allowed() -> int:
    """How often a shard may be claimed: its first run and its retries."""
    return settings.CRCR_SHARD_RETRIES + 1


def claim(shard_id: int, worker: str) -> Shard | None:
    # Concurrency guard: only one worker moves a shard to running; a running
    # shard is taken over only when its heartbeat went silent (worker died),
    # and never once its claims ran out (the sweep fails it instead). Times are the
    # database's (`Now()`): a host whose clock is off must not judge a lease by it.
    claimable = Q(status=Shard.Status.PENDING) | Q(
        status=Shard.Status.RUNNING, heartbeat_at__lt=leases.stale_before()
    )
    won = Shard.objects.filter(claimable, pk=shard_id, attempts__lt=claims_allowed()).update(
        status=Shard.Status.RUNNING,
        attempts=F("attempts") + 1,
        worker=worker,
        started_at=Now(),
        heartbeat_at=Now(),
        tests_done=0,
    )
    return (
        Shard.objects.select_related("run__backend", "run__config_version").get(pk=shard_id)
        if won
        else None
    )


class Heartbeat(leases.Heartbeat):
    """Refresh the shard's heartbeat, and how many tests it has finished, while
    its tests run (the progress logs in `workdir` tell)."""

    def __init__(self, shard: Shard, workdir: Path) -> None:
        super().__init__(self.refresh)
        self.shard, self.workdir = shard, workdir
        # Tests an attempt that a poisoned device ended has stored already.
        self.stored = shard.tests_stored()

    def refresh(self) -> None:
        Shard.objects.filter(pk=self.shard.pk, worker=self.shard.worker).update(
            heartbeat_at=Now(), tests_done=self.tests_done()
        )

    def tests_done(self) -> int:
        done: set[str] = set()
        for log in self.workdir.glob("*.progress.jsonl"):
            try:
                done.update(read_progress(log, ended=False).records)
            except ReportError:
                continue  # the executor reports a broken log; progress just skips it
        return self.stored + len(done)


def should_retry(record: TestRecord) -> bool:
    return classify(record.message).category not in DETERMINISTIC


def execute(shard_id: int, worker: str | None = None) -> Shard | None:
    """Run a shard end to end; None when another worker owns it."""
    worker = worker or socket.gethostname()
    shard = claim(shard_id, worker)
    if shard is None:
        return None
    run = shard.run
    outbox.job_started(run, shard)
    workdir = planning.workdir_for(run) / f"shard-{shard.index}" / f"attempt-{shard.attempts}"
    try:
        tree = worktrees.tree_for_run(run)
        # Registered artifacts are checked here; stored wheels as this host fetches them.
        for artifact in run.artifacts.filter(file=""):
            artifacts.verify(artifact)
        # The heartbeat covers building the environment too: that may take minutes.
        with Heartbeat(shard, workdir), environments.prepared(run.artifacts.all()) as built:
            records = run_tests(shard, built, tree, workdir)
    except artifacts.ArtifactError as error:
        fail(shard.pk, f"artifact check failed: {error}")
        return shard
    except worktrees.TestTreeError as error:
        fail(shard.pk, f"no test tree: {error}")
        return shard
    except ProcessFailed as error:
        raise InfraError(str(error)) from error
    except DevicePoisoned as poisoned:
        close_old_connections()
        keep(shard, poisoned.kept)
        left = len(shard.test_ids) - shard.tests_stored()
        why = f"attempt {shard.attempts}: {poisoned}; {left} tests go to a fresh attempt"
        raise PoisonedError(why) from poisoned
    except ReportError as error:
        # Re-running would most likely write the same broken report: fail the
        # shard with the reason instead of storing part of it.
        close_old_connections()
        fail(shard.pk, f"corrupt test report: {error}")
        return shard
    finally:
        publish_outputs(workdir)
    close_old_connections()
    store(shard, records)
    remember_durations(run.backend.device_module, records)
    results.finish_if_done(run.pk)
    return shard


def publish_outputs(workdir: Path) -> None:
    """Send the attempt's reports and logs to storage, for every host (the bundle's)."""
    try:
        workfiles.publish(workdir)
    except Exception as error:  # any storage backend's own error: the task retries
        raise InfraError(f"the shard's reports could not be sent to storage: {error}") from error


def run_tests(
    shard: Shard, built: environments.Environment, tree: Path, workdir: Path
) -> list[TestRecord]:
    """The shard's tests in the combination's environment, every attempt of each."""
    run = shard.run
    environment = planning.environment_for(run, tree, built)
    events.shard_attempt_started.send(
        Run, run=run, shard=shard, environment=environment, built=built
    )
    stored = set(shard.results.values_list("node_id", flat=True))
    spec = ShardSpec(
        ids=[node_id for node_id in shard.test_ids if canonical(node_id) not in stored],
        workdir=workdir,
        pytest=planning.pytest_for(run, tree, environment),
        timeout=settings.CRCR_SHARD_TIMEOUT,
        test_timeout=settings.CRCR_TEST_TIMEOUT,
        quiet_timeout=settings.CRCR_QUIET_TIMEOUT,
    )
    return Executor(spec, should_retry).run()


def store(shard: Shard, records: list[TestRecord]) -> None:
    """A shard's tests ran: it ends done, with its results, in one transaction.

    Steps: mark the shard done; store every attempt; classify its failures (their
    verdicts are the run's too); queue its HUD job's `completed` (per-job mode). All
    commit together: a done shard always has its results, verdicts and callback.
    """
    with transaction.atomic():
        # Concurrency guard: only the worker holding the shard marks it done; one whose
        # claim was taken over (its heartbeat went silent) stores nothing.
        done = Shard.objects.filter(
            pk=shard.pk, status=Shard.Status.RUNNING, worker=shard.worker
        ).update(status=Shard.Status.DONE, finished_at=timezone.now())
        if not done:
            return  # another worker took the shard over: its results count, not ours
        ingest.save(shard, records)
        # An earlier attempt that a poisoned device ended may have stored some already.
        Shard.objects.filter(pk=shard.pk).update(tests_done=shard.tests_stored())
        shard.refresh_from_db(fields=["status", "finished_at", "tests_done"])
        results.classify_failures(shard.run, shard)
        outbox.shard_finished(shard)


def keep(shard: Shard, records: list[TestRecord]) -> None:
    """Store what an attempt ended by a poisoned device vouched for; the shard stays
    running until the task gives it back (`release`), for a fresh attempt."""
    with transaction.atomic():
        # Concurrency guard: only the worker holding the shard stores for it (a row lock
        # until the commit: a takeover waits, then sees these results and skips them).
        held = Shard.objects.select_for_update().filter(
            pk=shard.pk, status=Shard.Status.RUNNING, worker=shard.worker
        )
        if held.exists():
            ingest.save(shard, records)


def fail(shard_id: int, reason: str) -> None:
    """An infrastructure failure of the whole shard; the run finishes without it. The
    status and its HUD job's `completed` (per-job mode) commit together."""
    with transaction.atomic():
        # A shard already done keeps its results (a step after `store` failed).
        Shard.objects.filter(pk=shard_id).exclude(status=Shard.Status.DONE).update(
            status=Shard.Status.ERROR, error=redact(reason), finished_at=timezone.now()
        )
        shard = Shard.objects.select_related("run__backend").get(pk=shard_id)
        outbox.shard_finished(shard)
    results.finish_if_done(shard.run_id)


def release(shard_id: int, reason: str) -> None:
    """Give a shard back after an infrastructure hiccup so a retry can claim it; its error
    (a test process's last output, for one) stays on the shard, without credentials."""
    Shard.objects.filter(pk=shard_id, status=Shard.Status.RUNNING).update(
        status=Shard.Status.PENDING, error=redact(reason)
    )


def remember_durations(device: str, records: list[TestRecord]) -> None:
    """Fold first-attempt durations into the per-device history, in one upsert."""
    firsts = {r.node_id: r.duration for r in records if r.attempt == 1 and r.duration > 0}
    known = {
        test_id: durations.DurationStats(seconds, spread, samples)
        for test_id, seconds, spread, samples in TestDuration.objects.filter(
            device=device, test_id__in=list(firsts)
        ).values_list("test_id", "seconds", "spread", "samples")
    }
    now = timezone.now()
    rows = []
    for test_id, seconds in firsts.items():
        stats = durations.update_duration(known.get(test_id), seconds)
        rows.append(TestDuration(test_id=test_id, device=device, seconds=stats.mean,
                                 spread=stats.spread, samples=stats.count, updated_at=now))  # fmt: skip
    # INSERT … ON CONFLICT DO UPDATE: new and known tests in one statement per batch (a
    # bulk_update's CASE per row took 17 s for a shard of 5,000 known tests). Concurrency:
    # two workers folding the same test at once both read the old row; the later write
    # wins and one sample is lost, as it was before: an estimate, not a record.
    TestDuration.objects.bulk_create(
        rows, batch_size=2000, update_conflicts=True, unique_fields=["test_id", "device"],
        update_fields=["seconds", "spread", "samples", "updated_at"],
    )  # fmt: skip


def give_up_exhausted() -> list[int]:
    """Fail the shards whose every allowed claim ended without results (the worker
    died, or the task failed, each time), with the last error, instead of running
    them again."""
    exhausted = Shard.objects.filter(
        Q(status=Shard.Status.PENDING)
        | Q(status=Shard.Status.RUNNING, heartbeat_at__lt=leases.stale_before()),
        attempts__gte=claims_allowed(),
    ).values_list("pk", "attempts", "error")
    for shard_id, attempts, error in exhausted:
        why = error or "its worker stopped each time"
        fail(shard_id, f"gave up after {attempts} attempts: {why}")
    return [shard_id for shard_id, _, _ in exhausted]


def orphaned_shards() -> list[int]:
    """Running shards whose worker stopped beating: it died mid-shard."""
    return list(
        Shard.objects.filter(
            status=Shard.Status.RUNNING,
            heartbeat_at__lt=leases.stale_before(),
            attempts__lt=claims_allowed(),
        ).values_list("pk", flat=True)
    )


def unqueued_shards() -> list[int]:
    """Pending shards of running runs that should have been taken by now: when the
    device queue is empty, their messages were lost with the broker (a Redis
    restarted without persistence loses every queued message)."""
    never_ran = Q(heartbeat_at__isnull=True, run__started_at__lt=leases.stale_before())
    # A released shard waits up to RETRY_BACKOFF_MAX for its retry's countdown.
    retry_overdue = Q(heartbeat_at__lt=leases.stale_before() - timedelta(seconds=RETRY_BACKOFF_MAX))
    return list(
        Shard.objects.filter(
            never_ran | retry_overdue,
            status=Shard.Status.PENDING,
            run__status=Run.Status.RUNNING,
            attempts__lt=claims_allowed(),
        ).values_list("pk", flat=True)
    )
