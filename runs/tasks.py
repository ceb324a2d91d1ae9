"""Celery tasks of the runs app: thin adapters over the named modules."""

from collections.abc import Callable

from celery import Task, shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import OperationalError

from crcr_site.lib import enqueue, leases
from runs import gate, planning, shard_worker, triggers, worktrees
from runs.models import Backend, Run
from runs.relay import outbox
from runs.upstream import RateLimitedError, UpstreamError


def _asking_upstream(task: Task, step: Callable[[int], object], dispatch_id: int) -> None:
    """Run a gate step; when upstream limits or fails us, retry the task with backoff."""
    try:
        step(dispatch_id)
    except RateLimitedError as error:
        raise task.retry(countdown=error.retry_after) from error
    except UpstreamError as error:
        raise task.retry(countdown=min(60 * 2**task.request.retries, 3600)) from error


@shared_task(bind=True, time_limit=300, max_retries=8)
def gate_dispatch(self, dispatch_id: int) -> None:
    """Gate a stored dispatch; upstream hiccups retry with backoff."""
    _asking_upstream(self, gate.gate, dispatch_id)


@shared_task(bind=True, time_limit=300, max_retries=8)
def recheck_dispatch(self, dispatch_id: int) -> None:
    """Decide a closed-without-label PR for good by asking upstream whether it landed."""
    _asking_upstream(self, gate.recheck, dispatch_id)


@shared_task(bind=True, time_limit=300, max_retries=3)
def trigger_nightly(self) -> None:
    """Beat: build the source commit of PyTorch's nightly for every backend."""
    for backend in Backend.objects.all():
        try:
            triggers.start_nightly(backend)
        except RateLimitedError as error:
            raise self.retry(countdown=error.retry_after) from error


@shared_task(time_limit=3600)
def publish_tree(run_id: int) -> None:
    """On a host with TORCH_ROOT: put a new run's test tree in storage for device hosts
    without a PyTorch clone (nothing to do on one host), then send its planning."""
    run = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).first()
    if run is None:
        return  # planned already: a redelivered message
    try:
        worktrees.publish(run)
    except worktrees.TestTreeError as error:
        planning.end(run, Run.Status.ERROR, f"the test tree could not be published: {error}")
        return
    enqueue.send(plan_run, run_id)


@shared_task(time_limit=3 * 3600)
def plan_run(run_id: int) -> None:
    """Collect a queued run's tests, cut them into shards and enqueue the shards."""
    planning.start(run_id)


@shared_task(bind=True, max_retries=None)
def execute_shard(self, shard_id: int) -> None:
    """Run one shard on this device host; infrastructure trouble retries with backoff."""
    try:
        shard_worker.execute(shard_id, worker=self.request.hostname)
    except (shard_worker.InfraError, OperationalError, OSError) as error:
        shard_worker.release(shard_id, str(error))
        if self.request.retries >= settings.CRCR_SHARD_RETRIES:
            shard_worker.fail(shard_id, f"gave up after {self.request.retries} retries: {error}")
            return
        # A poisoned device needs a fresh process, not a wait: the rest goes at once.
        countdown = min(30 * 2**self.request.retries, shard_worker.RETRY_BACKOFF_MAX)
        if isinstance(error, shard_worker.PoisonedError):
            countdown = 0
        raise self.retry(countdown=countdown) from error
    except Exception as error:
        # Not the infrastructure's doing (a bug, a value the database refuses): keep
        # the reason on the shard; the sweep runs it again until its claims run out,
        # then fails it with this reason.
        shard_worker.release(shard_id, f"{type(error).__name__}: {error}")
        raise


@shared_task(time_limit=60)
def requeue_orphaned_shards() -> list[int]:
    """Beat, and each worker start: shards whose worker died, or whose message the
    broker lost, go back to the queue."""
    shard_worker.give_up_exhausted()
    orphans = shard_worker.orphaned_shards()
    if enqueue.waiting(execute_shard) == 0:
        # Pending shards but nothing queued: the broker lost their messages. A shard
        # that still had one runs once all the same: the claim lets one task win.
        orphans += shard_worker.unqueued_shards()
    for shard_id in orphans:
        execute_shard.delay(shard_id)
    return orphans


@shared_task(time_limit=60)
def resend_lost_work() -> dict[str, list[int]]:
    """Beat: dispatches left ungated and runs left unplanned, whose message the broker
    never took or lost, are sent again (each task ignores work already done); a
    planning whose worker died is taken over, or given up once its attempts are spent."""
    sent: dict[str, list[int]] = {"gate": [], "recheck": []}
    before = enqueue.lost_before(gate_dispatch, settings.CRCR_LOST_WORK_SECONDS)
    if before is not None:
        sent["gate"], sent["recheck"] = gate.lost(before)
    for task, name in ((gate_dispatch, "gate"), (recheck_dispatch, "recheck")):
        for pk in sent[name]:
            task.delay(pk)
    # A run never planned starts again where it starts (its tree published, on `default`);
    # a planning whose worker died resumes on `device`.
    lost = [
        enqueue.lost_before(t, settings.CRCR_LOST_WORK_SECONDS) for t in (publish_tree, plan_run)
    ]
    sent["plan"] = leases.sweep(
        Run, Run.Status.QUEUED, Run.Status.PLANNING,
        resend=lambda run: publish_tree if run.status == Run.Status.QUEUED else plan_run,
        give_up=planning.give_up, lost_before=None if None in lost else lost[0],
    )  # fmt: skip
    return sent


@worker_ready.connect
def _requeue_on_start(sender: object = None, **kwargs: object) -> None:
    # A worker that starts after another died picks up its orphaned shards: now, and
    # once more when a worker that died just before has missed three heartbeats.
    requeue_orphaned_shards.delay()
    requeue_orphaned_shards.apply_async(countdown=3 * settings.CRCR_HEARTBEAT_SECONDS + 1)


@shared_task(time_limit=120)
def deliver_callback(callback_id: int) -> None:
    """Send one outbox row to the relay (retries reschedule this task)."""
    outbox.deliver(callback_id)


@shared_task(time_limit=60)
def deliver_due_callbacks() -> list[int]:
    """Beat: resend what is due, so a relay down for hours only delays callbacks."""
    due = outbox.due()
    for callback_id in due:
        deliver_callback.delay(callback_id)
    return due
