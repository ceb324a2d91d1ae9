"""Plan a run: collect its test ids with the reuse plugin, then cut them into shards.

Steps:
1. write the run's config and collect (`pytest --collect-only`) on the run's
   test tree with the device registered: the config applied to the tree;
2. estimate each id from the duration history of this device (then the file's
   median, the group's, a default; see runs.durations);
3. group by area, cap each shard's estimate, balance longest-first, and store
   the shards with their ids and estimates; then enqueue them.
"""

from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from runs import areas, events, sharding, worktrees
from runs.models import Run, Shard, TestDuration
from runs.relay import outbox
from runs.report_files import canonical
from selection.reuse.launcher import PytestRun, TestEnvironment


class PlanningError(Exception):
    """Collection failed: the message is what pytest said (a bad config, a broken tree)."""


def workdir_for(run: Run) -> Path:
    path = Path(settings.MEDIA_ROOT) / "runs" / str(run.uuid)
    path.mkdir(parents=True, exist_ok=True)
    return path


def environment_for(run: Run, tree: Path) -> TestEnvironment:
    """The interpreter and variables every pytest process of the run gets."""
    # The run's own temporary files, apart from other runs'.
    return TestEnvironment.for_device(
        run.backend.device_module, tree, tmpdir=workdir_for(run) / "tmp"
    )


def write_config(run: Run) -> Path:
    path = workdir_for(run) / "config.yaml"
    path.write_text(run.config_version.yaml_text)
    return path


def pytest_for(run: Run, tree: Path, environment: TestEnvironment | None = None) -> PytestRun:
    """A pytest process of the run: its environment, its tree, its config."""
    environment = environment or environment_for(run, tree)
    return PytestRun(environment, tree, configs=[write_config(run)])


def collect(pytest: PytestRun) -> list[str]:
    """Node ids of every test the run's config selects on its test tree."""
    completed = replace(pytest, collect_only=True).run(timeout=1800)
    # Ids in one spelling of the backend's class suffix, as results are stored.
    lines = completed.stdout.splitlines()
    ids = [canonical(line) for line in lines if "::" in line and " " not in line]
    if completed.returncode not in (0, 5) or (completed.returncode == 0 and not ids):
        tail = (completed.stdout + completed.stderr)[-3000:]
        raise PlanningError(f"collection failed (exit {completed.returncode}):\n{tail}")
    return ids


def start(run_id: int) -> list[Shard]:
    """Claim a queued run, plan it and enqueue its shards (a redelivery does nothing)."""
    from runs.tasks import execute_shard

    # Concurrency guard: only one planner moves the run out of the queue.
    if not Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
        status=Run.Status.PLANNING
    ):
        return []
    run = Run.objects.select_related("backend", "config_version").get(pk=run_id)
    try:
        pytest = pytest_for(run, worktrees.tree_for(run.pytorch_sha))
        ids = collect(pytest)
    except (PlanningError, worktrees.TestTreeError) as error:
        end(run, Run.Status.ERROR, str(error))
        return []
    shards = plan(run, ids)
    events.run_planned.send(Run, run=run, pytest=pytest)
    if not shards:
        end(run, Run.Status.FAILED, "the config selected no test")
        return []
    outbox.job_started(run)
    for shard in shards:
        transaction.on_commit(partial(execute_shard.delay, shard.pk))
    return shards


def unplanned(before: datetime) -> list[int]:
    """Runs still queued since `before`: their planning message never arrived."""
    queued = Run.objects.filter(status=Run.Status.QUEUED, created_at__lt=before)
    return list(queued.values_list("pk", flat=True))


@transaction.atomic
def end(run: Run, status: str, error: str) -> None:
    """A run that ends before any shard ran: its status, reason and callbacks together."""
    run.status, run.error, run.finished_at = status, error, timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])
    outbox.run_finished(run)
    events.run_finished.send(Run, run=run)


def plan(run: Run, ids: list[str]) -> list[Shard]:
    """Create the run's shards from its ids and the device's duration history."""
    device = run.backend.device_module
    history = {
        test_id: seconds
        for test_id, seconds in TestDuration.objects.filter(device=device).values_list(
            "test_id", "seconds"
        )
    }
    items = [areas.TestItem(test_id=i, file=i.split("::")[0]) for i in ids]
    result = sharding.plan_shards(items, history, max_shard_seconds=settings.CRCR_MAX_SHARD_SECONDS)
    with transaction.atomic():
        shards = Shard.objects.bulk_create(
            Shard(run=run, index=s.index, test_ids=s.test_ids, estimated_seconds=s.seconds)
            for s in result.shards
        )
        Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=timezone.now())
    return shards
