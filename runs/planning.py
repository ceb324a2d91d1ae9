"""Plan a run: collect its test ids with the reuse plugin, then cut them into shards.

Steps:
1. write the run's config and collect (`pytest --collect-only`) on the run's
   test tree with the device registered: the config applied to the tree;
2. estimate each id from the duration history of this device (then the file's
   median, the group's, a default; see runs.durations);
3. group by area, cap each shard's estimate, balance longest-first, and store
   the shards with their ids and estimates; then enqueue them.
A later attempt of a run (`runs.attempts`) skips 1-3: it takes its previous attempt's
failed shards as they were.
"""

import tempfile
from dataclasses import replace
from pathlib import Path

from crcr_reuse.launcher import PytestRun, TestEnvironment, collected_ids
from crcr_reuse.outcomes import canonical
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from crcr_site.lib import enqueue, leases
from runs import (
    areas,
    artifacts,
    attempts,
    environments,
    events,
    sharding,
    workfiles,
    worktrees,
)
from runs.models import Run, Shard, TestDuration
from runs.relay import outbox

# The build command's output, in the run's folder.
BUILD_LOG = "build.log"


class PlanningError(Exception):
    """Collection failed: the message is what pytest said (a bad config, a broken tree)."""


def workdir_for(run: Run) -> Path:
    """The run's folder in this host's work folder (`runs.workfiles`)."""
    path = workfiles.work_root() / "runs" / str(run.uuid)
    path.mkdir(parents=True, exist_ok=True)
    return path


def environment_for(
    run: Run, tree: Path, built: environments.Environment | None = None
) -> TestEnvironment:
    """The interpreter and variables every pytest process of the run gets: the
    combination's environment (`environments.prepared`), else this worker's own."""
    return TestEnvironment.for_device(
        run.backend.device_module, tree, python=built.python if built else None,
        tmpdir=tmpdir_for(run),
    )  # fmt: skip


# A Unix socket's path holds at most 107 bytes, and Python's multiprocessing puts its
# listeners (torch.multiprocessing's shared tensors, DataLoader workers) at
# $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX: a TMPDIR longer than this breaks such tests.
SOCKET_TMPDIR_ROOM = 107 - len("/pymp-xxxxxxxx/listener-xxxxxxxx")


def tmpdir_for(run: Run) -> Path:
    """The run's own temporary folder, apart from other runs'."""
    return socket_safe(workdir_for(run) / "tmp", run.uuid.hex[:16])


def socket_safe(path: Path, tag: str) -> Path:
    """`path` for a TMPDIR, or, where it leaves a Unix socket no room, a short folder of
    the system's named after `tag` (unique to its user: a run, a bisected commit)."""
    for candidate in (path, Path(tempfile.gettempdir()) / f"crcr-{tag}"):
        if len(str(candidate)) <= SOCKET_TMPDIR_ROOM:
            return candidate
    return Path("/tmp") / f"crcr-{tag}"


def write_config(run: Run) -> Path:
    path = workdir_for(run) / "config.yaml"
    path.write_text(run.config_version.yaml_text)
    return path


def pytest_for(run: Run, tree: Path, environment: TestEnvironment | None = None) -> PytestRun:
    """A pytest process of the run: its environment, its tree, its config, its
    trigger's label selection (`--reuse-labels`) and its backend's health probe."""
    environment = environment or environment_for(run, tree)
    labels = tuple(label for label in run.trigger.labels.split(",") if label)
    return PytestRun(
        environment, tree, configs=[write_config(run)], labels=labels,
        health_probe=run.backend.health_probe or None,
        health_every=settings.CRCR_HEALTH_PROBE_EVERY if run.backend.health_probe else None,
    )  # fmt: skip


def collect(pytest: PytestRun) -> list[str]:
    """Node ids of every test the run's config selects on its test tree."""
    completed = replace(pytest, collect_only=True, rewrite_asserts=False).run(timeout=1800)
    # Ids in one spelling of the backend's class suffix, as results are stored.
    ids = [canonical(line) for line in collected_ids(completed.stdout)]
    if completed.returncode not in (0, 5) or (completed.returncode == 0 and not ids):
        tail = (completed.stdout + completed.stderr)[-3000:]
        raise PlanningError(f"collection failed (exit {completed.returncode}):\n{tail}")
    return ids


def start(run_id: int) -> list[Shard]:
    """Claim a queued run, plan it and enqueue its shards (a redelivery does nothing)."""
    from runs.tasks import execute_shard

    run = Run.objects.select_related("backend", "config_version").filter(pk=run_id).first()
    # Concurrency guard: one planner holds the run; a dead planner's run is taken over.
    if run is None or not leases.claim(run, Run.Status.QUEUED, Run.Status.PLANNING):
        return []
    with leases.held(run, Run.Status.PLANNING):
        try:
            prepare_artifacts(run)
            tree = worktrees.tree_for_run(run)
            report(run, "preparing the combination's environment")
            with environments.prepared(run.artifacts.all()) as built:
                pytest = pytest_for(run, tree, environment_for(run, tree, built))
                # A later attempt re-runs its previous attempt's failed shards as they were.
                shards = attempts.shards_to_rerun(run)
                if not shards:
                    report(run, "collecting the tests the config selects")
                    shards = plan(run, collect(pytest))
        except (PlanningError, worktrees.TestTreeError, artifacts.ArtifactError) as error:
            end(run, Run.Status.ERROR, str(error))
            return []
        shards = store(run, shards)
    events.run_planned.send(Run, run=run, pytest=pytest)
    if not shards:
        end(run, Run.Status.FAILED, "the config selected no test")
        return []
    outbox.job_started(run)
    for shard in shards:
        enqueue.after_commit(execute_shard, shard.pk)
    return shards


def report(run: Run, stage: str) -> None:
    """What planning is doing now (the run page polls it)."""
    Run.objects.filter(pk=run.pk).update(stage=stage[:300])


def prepare_artifacts(run: Run) -> None:
    """Build (or register) the run's artifacts, unless it came with them (a re-run).

    This runs on the worker that plans the run, outside any transaction: a build may
    take hours. Its output is kept in the run's folder as `build.log`."""
    if run.artifacts.exists():
        return
    report(
        run,
        "building the artifacts"
        if settings.CRCR_BUILD_COMMAND
        else "registering the installed artifacts",
    )
    log = workdir_for(run) / BUILD_LOG
    try:
        built = artifacts.artifacts_for(
            run.pytorch_sha, run.backend, run.backend_version, log=log,
            progress=lambda line: report(run, f"building: {line}" if line else "building"),
        )  # fmt: skip
    finally:
        workfiles.publish(log)  # kept with the run for every host, failed or not
    run.artifacts.set(built)


def give_up(run: Run, reason: str) -> None:
    """A run whose planning never finished, however often it was taken up: it ends in error."""
    with transaction.atomic():
        planning = Run.objects.select_for_update().filter(pk=run.pk, status=run.status).first()
        if planning is not None and not planning.is_finished:
            end(planning, Run.Status.ERROR, reason)


@transaction.atomic
def end(run: Run, status: str, error: str) -> None:
    """A run that ends before any shard ran: its status, reason and callbacks together."""
    run.status, run.error, run.finished_at = status, error, timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])
    outbox.run_finished(run)
    events.run_finished.send(Run, run=run)


def plan(run: Run, ids: list[str]) -> list[Shard]:
    """The run's shards (unsaved) from its ids and the device's duration history."""
    device = run.backend.device_module
    history = {
        test_id: seconds
        for test_id, seconds in TestDuration.objects.filter(device=device).values_list(
            "test_id", "seconds"
        )
    }
    items = [areas.TestItem(test_id=i, file=i.split("::")[0]) for i in ids]
    result = sharding.plan_shards(items, history, max_shard_seconds=settings.CRCR_MAX_SHARD_SECONDS)
    return [
        Shard(run=run, index=s.index, test_ids=s.test_ids, estimated_seconds=s.seconds)
        for s in result.shards
    ]


def store(run: Run, shards: list[Shard]) -> list[Shard]:
    """Save the run's shards; a run with any is running from now."""
    if not shards:
        return []
    with transaction.atomic():
        saved = Shard.objects.bulk_create(shards)
        Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=timezone.now())
    return saved
