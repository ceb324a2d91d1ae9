"""Celery tasks of reproducibility: thin adapters over the named modules."""

from celery import shared_task
from django.conf import settings

from crcr_site.lib import enqueue, leases
from reproducibility import bisect, bundles, environment, rerun
from reproducibility.models import Bisection, Bundle, WorkerEnvironment


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


@shared_task(time_limit=1800)
def prepare_rerun(rerun_id: int) -> None:
    """Check a re-run's bundle, give its run the parts the bundle names and send it to
    planning (or end it in error); a redelivery, once the run left the queue, does nothing."""
    rerun.prepare(rerun_id)


@shared_task(time_limit=60)
def resend_lost_work() -> dict[str, list[int]]:
    """Beat: bundles and bisections whose worker died are taken over (or given up once
    their attempts are spent); those whose message was lost are sent again."""
    seconds = settings.CRCR_LOST_WORK_SECONDS
    return {
        "bundles": leases.sweep(
            Bundle, Bundle.Status.PENDING, Bundle.Status.BUILDING,
            resend=lambda bundle: build_bundle, give_up=bundles.give_up,
            lost_before=enqueue.lost_before(build_bundle, seconds),
        ),
        "bisections": leases.sweep(
            Bisection, Bisection.Status.QUEUED, Bisection.Status.RUNNING,
            resend=lambda bisection: run_bisection, give_up=bisect.give_up,
            lost_before=enqueue.lost_before(run_bisection, seconds),
        ),
    }  # fmt: skip
