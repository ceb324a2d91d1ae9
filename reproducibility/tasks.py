from celery import shared_task

from reproducibility import environment
from reproducibility.models import WorkerEnvironment


@shared_task(time_limit=300)
def capture_environment(run_id: int | None = None) -> int:
    """Record the environment of the worker that picks this task up; returns the row id."""
    row = WorkerEnvironment.objects.create(run_id=run_id, **environment.capture())
    return row.pk
