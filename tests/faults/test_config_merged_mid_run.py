"""A config PR merged while a run of the previous version is in flight: the run
keeps the version it was planned with, down to the config its last shard ran."""

from runs.models import Run
from selection import configprs
from selection.models import Proposal
from tests.factories import make_backend, make_config, make_proposal, make_user
from tests.waiting import wait_for
from tests.workers import (
    SMALL,
    environment,
    finished,
    own_redis,
    results_once,
    shard_log,
    start_worker,
    stop,
    trigger,
)


def merge_skipping_fill(backend) -> None:
    """Review and merge a config PR that skips test_fill, as reviewers do on the pages."""
    make_proposal(
        backend, file_path="test/test_dtypes_reuse.py", class_name="TestTensorBasics",
        test_name="test_fill", mode=Proposal.Mode.SKIP, status=Proposal.Status.APPROVED,
        reason="fill is being rewritten",
    )  # fmt: skip
    author, reviewer = make_user("ada", role="reviewer"), make_user("rita", role="reviewer")
    change = configprs.open_change(backend, author)
    assert change is not None
    configprs.approve(change, reviewer, change.revision)
    configprs.merge(change, reviewer, change.revision)


def test_a_run_keeps_its_config_version_when_a_new_one_is_merged_mid_run(
    transactional_db, tmp_path
):
    backend = make_backend("cfgfault")
    planned_with = make_config(backend, SMALL)
    with own_redis() as broker:
        env = environment(tmp_path, broker, CRCR_MAX_SHARD_SECONDS="8")
        worker = start_worker(env, "cfgfault", log=tmp_path / "worker.log")
        try:
            trigger(env, "cfgfault", "f" * 40)
            run = wait_for(
                lambda: Run.objects.filter(backend=backend, status="running").first(),
                timeout=300,
                what="the run to be planned",
            )
            assert run.shards.count() == 2  # the second starts after the merge
            wait_for(shard_log(tmp_path, run.uuid, 0).exists, what="the first shard")
            merge_skipping_fill(backend)
            assert backend.config_versions.count() == 2
            assert not run.shards.filter(index=1).exclude(status="pending").exists()
            run = finished(run)
        finally:
            stop(worker)
    assert run.config_version == planned_with
    used = tmp_path / "storage" / "runs" / str(run.uuid) / "config.yaml"
    assert used.read_text() == planned_with.yaml_text  # as the last shard wrote it
    results_once(run)
    fills = run.results.filter(test_name__startswith="test_fill")
    assert fills.count() == 4 and set(fills.values_list("outcome", flat=True)) == {"passed"}
    assert run.status == "passed"
