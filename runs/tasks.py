"""Celery tasks of the runs app: thin adapters over the named modules."""

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import OperationalError

from runs import execution, gate, planning, relay, triggers
from runs.models import Backend
from runs.upstream import RateLimitedError, UpstreamError


@shared_task(bind=True, time_limit=300, max_retries=8)
def gate_dispatch(self, dispatch_id: int) -> None:
    """Gate a stored dispatch; upstream hiccups retry with backoff."""
    try:
        gate.gate(dispatch_id)
    except RateLimitedError as error:
        raise self.retry(countdown=error.retry_after) from error
    except UpstreamError as error:
        raise self.retry(countdown=min(60 * 2**self.request.retries, 3600)) from error


@shared_task(bind=True, time_limit=300, max_retries=8)
def recheck_dispatch(self, dispatch_id: int) -> None:
    """Decide a closed-without-label PR for good by asking upstream whether it landed."""
    try:
        gate.recheck(dispatch_id)
    except RateLimitedError as error:
        raise self.retry(countdown=error.retry_after) from error
    except UpstreamError as error:
        raise self.retry(countdown=min(60 * 2**self.request.retries, 3600)) from error


@shared_task(bind=True, time_limit=300, max_retries=3)
def trigger_nightly(self) -> None:
    """Beat: build the source commit of PyTorch's nightly for every backend."""
    for backend in Backend.objects.all():
        try:
            triggers.start_nightly(backend)
        except RateLimitedError as error:
            raise self.retry(countdown=error.retry_after) from error


@shared_task(time_limit=3600)
def plan_run(run_id: int) -> None:
    """Collect a queued run's tests, cut them into shards and enqueue the shards."""
    planning.start(run_id)


@shared_task(bind=True, max_retries=None)
def execute_shard(self, shard_id: int) -> None:
    """Run one shard on this device host; infrastructure trouble retries with backoff."""
    try:
        execution.execute(shard_id, worker=self.request.hostname)
    except (execution.InfraError, OperationalError, OSError) as error:
        execution.release(shard_id, str(error))
        if self.request.retries >= settings.CRCR_SHARD_RETRIES:
            execution.fail_by_id(shard_id, f"gave up after {self.request.retries} retries: {error}")
            return
        raise self.retry(countdown=min(30 * 2**self.request.retries, 900)) from error


@shared_task(time_limit=60)
def requeue_orphaned_shards() -> list[int]:
    """Beat, and each worker start: shards whose worker died go back to the queue."""
    orphans = execution.orphaned_shards()
    for shard_id in orphans:
        execute_shard.delay(shard_id)
    return orphans


@worker_ready.connect
def _requeue_on_start(sender: object = None, **kwargs: object) -> None:
    # A worker that starts after another died picks up its orphaned shards.
    requeue_orphaned_shards.delay()


@shared_task(time_limit=120)
def deliver_callback(callback_id: int) -> None:
    """Send one outbox row to the relay (retries reschedule this task)."""
    relay.deliver(callback_id)


@shared_task(time_limit=60)
def deliver_due_callbacks() -> list[int]:
    """Beat: resend what is due, so a relay down for hours only delays callbacks."""
    due = relay.due()
    for callback_id in due:
        deliver_callback.delay(callback_id)
    return due
