"""Celery tasks of the selection pipeline: thin adapters over the named modules.

Route them to the `device` queue (crcr_site.celery task_routes): stage 4 and enabling an operator run tests on the
backend's device, and the capture and embeddings import torch (never in the web).
"""

from celery import Task, shared_task
from django.conf import settings

from crcr_site.lib import enqueue, leases
from selection import enabling, pipeline
from selection.models import SelectionRun


@shared_task(time_limit=6 * 3600)
def run_selection(run_id: int) -> None:
    """Stages 1-4 for the run's backend; a redelivered task finds the run claimed and stops."""
    run = SelectionRun.objects.select_related("backend").get(pk=run_id)
    if run.claim():
        pipeline.run_for_backend(run.backend, run=run)


@shared_task(time_limit=3 * 3600)
def enable_operator(run_id: int) -> None:
    run = SelectionRun.objects.select_related("backend").get(pk=run_id)
    if run.claim():
        enabling.enable_operator(run.backend, run.argument, run=run)


def _task_of(run: SelectionRun) -> Task | None:
    """The task that runs a selection run of this kind (an upgrade runs in its command)."""
    return {
        SelectionRun.Kind.SELECT: run_selection,
        SelectionRun.Kind.ENABLE_OP: enable_operator,
    }.get(SelectionRun.Kind(run.kind))


def _give_up(run: SelectionRun, reason: str) -> None:
    if SelectionRun.objects.filter(pk=run.pk, status=run.status).exists():
        run.finish({}, error=reason)


@shared_task(time_limit=60)
def resend_lost_work() -> list[int]:
    """Beat: selection runs whose worker died are taken over (or given up once their
    attempts are spent); those whose message was lost are sent again."""
    return leases.sweep(
        SelectionRun, SelectionRun.Status.QUEUED, SelectionRun.Status.RUNNING,
        resend=_task_of, give_up=_give_up,
        lost_before=enqueue.lost_before(run_selection, settings.CRCR_LOST_WORK_SECONDS),
    )  # fmt: skip
