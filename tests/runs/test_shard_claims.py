"""A shard that keeps failing outside its tests is given up with its reason, not re-run forever."""

from datetime import timedelta

import pytest
from crcr_reuse.outcomes import TestRecord
from django.utils import timezone

from runs import ingest, shard_worker, tasks
from runs.models import Run, Shard, TestResult
from tests.factories import make_backend, make_config
from tests.reproducibility.builders import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    backend = make_backend("acme")
    return make_run(backend, make_config(backend), status=Run.Status.RUNNING)


def stale_shard(run: Run, attempts: int, error: str = "") -> Shard:
    """A running shard whose worker stopped beating long ago."""
    return Shard.objects.create(
        run=run, index=attempts, test_ids=["test/test_a.py::TestA::test_one"],
        status=Shard.Status.RUNNING, attempts=attempts, error=error, worker="gone",
        heartbeat_at=timezone.now() - timedelta(hours=1),
    )  # fmt: skip


def test_a_shard_whose_claims_ran_out_is_failed_with_its_last_error(run, settings):
    settings.CRCR_SHARD_RETRIES = 3
    exhausted = stale_shard(run, attempts=4, error="DataError: value too long")
    Shard.objects.create(run=run, index=9, test_ids=[], status=Shard.Status.DONE)

    requeued = tasks.requeue_orphaned_shards()

    exhausted.refresh_from_db()
    assert exhausted.pk not in requeued
    assert exhausted.status == Shard.Status.ERROR
    assert exhausted.error == "gave up after 4 attempts: DataError: value too long"
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR and run.finished_at is not None


def test_a_shard_with_claims_left_is_handed_on_and_one_without_is_not_claimed(run, settings):
    settings.CRCR_SHARD_RETRIES = 3
    orphan, spent = stale_shard(run, attempts=1), stale_shard(run, attempts=4)

    assert shard_worker.orphaned_shards() == [orphan.pk]
    assert shard_worker.claim(spent.pk, "next-worker") is None
    assert shard_worker.claim(orphan.pk, "next-worker").attempts == 2


def test_a_node_id_far_past_500_characters_is_stored_whole(run):
    shard = Shard.objects.create(run=run, index=0, test_ids=[])
    node_id = "test/test_ops.py::TestCommonPRIVATEUSE1::test_out_" + "x" * 900 + "_float32"

    ingest.save(shard, [TestRecord(node_id, "passed", duration=0.1)])

    assert TestResult.objects.get().node_id == node_id
