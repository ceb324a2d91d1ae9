"""Celery tasks of reproducibility: thin adapters over the named modules."""

from celery import shared_task

from reproducibility import bisect, bundles, environment
from reproducibility.models import WorkerEnvironment


@shared_task(time_limit=300)
def capture_environment(run_id: int | None = None) -> int:
    """Record the environment of the worker that picks this task up; returns the row id."""
    row = WorkerEnvironment.objects.create(run_id=run_id, **environment.capture())
    return row.pk


@shared_task(time_limit=1800)
def build_bundle(bundle_id: int) -> None:
    """Build a run's repro bundle (claims the row; a redelivery of a claimed one does nothing)."""
    bundles.build(bundle_id)


@shared_task(time_limit=600)
def prune_bundles() -> int:
    """Daily: delete the archives of bundles past CRCR_BUNDLE_RETENTION_DAYS."""
    return len(bundles.prune())


@shared_task(time_limit=6 * 3600)
def run_bisection(bisection_id: int) -> None:
    """Bisect on a device host: it runs the failing tests at each midpoint commit."""
    bisect.run(bisection_id)
