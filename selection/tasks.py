"""Celery tasks of the selection pipeline: thin adapters over the named modules.

Route them to the `device` queue (crcr_site.celery task_routes): stage 4 and enabling an operator run tests on the
backend's device, and the capture and embeddings import torch (never in the web). The check
of a large submitted config runs on `default`: it needs the PyTorch tree, not the device.
"""

from celery import Task, shared_task
from django.conf import settings

from crcr_site.lib import enqueue, leases
from selection import chunk_worker, chunks, enabling, submissions
from selection.models import ConfigSubmission, SelectionChunk, SelectionRun


@shared_task(time_limit=6 * 3600)
def run_selection(run_id: int) -> None:
    """The run's next step (`selection.chunks`): its heavy work goes out in chunks; a
    redelivered task finds the step claimed and stops."""
    run = SelectionRun.objects.select_related("backend").get(pk=run_id)
    if chunks.claim(run):
        chunks.advance(run)


@shared_task(time_limit=6 * 3600)
def run_chunk(chunk_id: int) -> None:
    """One chunk of a selection run's capture or stage 4; a redelivered task finds it
    claimed (or ended) and stops."""
    chunk_worker.execute(chunk_id)


@shared_task(time_limit=3 * 3600)
def enable_operator(run_id: int) -> None:
    run = SelectionRun.objects.select_related("backend").get(pk=run_id)
    if run.claim():
        enabling.enable_operator(run.backend, run.argument, run=run)


@shared_task(time_limit=15 * 60)
def check_submission(submission_id: int) -> None:
    """Check a config submitted on a page; a redelivered task finds it claimed and stops."""
    submissions.check(ConfigSubmission.objects.get(pk=submission_id))


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
def resend_lost_work() -> dict[str, list[int]]:
    """Beat: selection runs, their chunks and config checks whose worker died are taken
    over (or given up once their attempts are spent); those whose message was lost are
    sent again."""
    lost = settings.CRCR_LOST_WORK_SECONDS
    runs = leases.sweep(
        SelectionRun, SelectionRun.Status.QUEUED, SelectionRun.Status.RUNNING,
        resend=_task_of, give_up=_give_up,
        lost_before=enqueue.lost_before(run_selection, lost),
    )  # fmt: skip
    checks = leases.sweep(
        ConfigSubmission, ConfigSubmission.Status.QUEUED, ConfigSubmission.Status.RUNNING,
        resend=lambda submission: check_submission, give_up=submissions.give_up,
        lost_before=enqueue.lost_before(check_submission, lost),
    )  # fmt: skip
    chunked = leases.sweep(
        SelectionChunk, SelectionChunk.Status.QUEUED, SelectionChunk.Status.RUNNING,
        resend=lambda chunk: run_chunk, give_up=chunks.give_up,
        lost_before=enqueue.lost_before(run_chunk, lost),
    )  # fmt: skip
    # A waiting run whose last chunk's worker died before it queued the run goes on.
    for run_id in chunks.stalled():
        enqueue.send(run_selection, run_id)
    return {"runs": runs, "submissions": checks, "chunks": chunked}
