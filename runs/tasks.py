"""Celery tasks of the runs app: thin adapters over the named modules."""

from celery import shared_task

from runs import gate, triggers
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
