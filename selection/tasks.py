"""Celery tasks of the selection pipeline: thin adapters over the named modules.

Route them to the `device` queue (crcr_site.celery task_routes): stage 4 and enabling an operator run tests on the
backend's device, and the capture and embeddings import torch (never in the web).
"""

from celery import shared_task

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
