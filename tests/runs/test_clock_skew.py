"""Leases are judged by the database's clock: a worker whose host clock is two minutes
off (ahead or behind) takes over no live work and loses none of its own.

The skew is the host's own clock as crcr reads it (`django.utils.timezone.now` in this
process); the database's clock is left alone."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from crcr_site.lib import leases
from runs import shard_worker
from runs.models import RelayCallback, Run, Shard
from runs.relay import outbox
from tests.factories import make_backend, make_config
from tests.reproducibility.builders import make_run
from tests.runs.relay_runs import dispatched_run, in_progress, make_due

pytestmark = pytest.mark.django_db

SKEW = timedelta(seconds=120)


@pytest.fixture(autouse=True)
def beats(settings):
    # Three missed beats (90 s) make a heartbeat stale: less than the skew.
    settings.CRCR_HEARTBEAT_SECONDS = 30
    settings.CRCR_SHARD_RETRIES = 3


@pytest.fixture
def run():
    backend = make_backend("acme")
    return make_run(backend, make_config(backend), status=Run.Status.RUNNING)


def skewed(monkeypatch, by: timedelta) -> None:
    """This process's host clock from now on: `by` off the true time."""
    true_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: true_now() + by)


def shard(run: Run, index: int) -> Shard:
    return Shard.objects.create(run=run, index=index, test_ids=["test/test_a.py::test_one"])


@pytest.mark.parametrize("ahead", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_skewed_worker_takes_over_no_live_shard(run, monkeypatch, ahead):
    live = shard(run, 0)
    assert shard_worker.claim(live.pk, "healthy") is not None
    skewed(monkeypatch, ahead)
    assert shard_worker.orphaned_shards() == []
    assert shard_worker.claim(live.pk, "skewed") is None
    live.refresh_from_db()
    assert (live.worker, live.attempts, live.status) == ("healthy", 1, Shard.Status.RUNNING)


@pytest.mark.parametrize("off", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_skewed_worker_keeps_its_own_shard_while_it_beats(run, monkeypatch, tmp_path, off):
    own = shard(run, 1)
    skewed(monkeypatch, off)
    claimed = shard_worker.claim(own.pk, "skewed")
    assert claimed is not None
    shard_worker.Heartbeat(claimed, Path(tmp_path)).refresh()  # a beat on its clock
    monkeypatch.undo()  # the other workers' clocks are right
    assert shard_worker.orphaned_shards() == []
    assert shard_worker.claim(own.pk, "another") is None
    own.refresh_from_db()
    assert (own.worker, own.attempts) == ("skewed", 1)


@pytest.mark.parametrize("off", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_planning_claim_is_judged_by_the_database_clock_too(run, monkeypatch, off):
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED)
    run.refresh_from_db()
    skewed(monkeypatch, off)
    assert leases.claim(run, Run.Status.QUEUED, Run.Status.PLANNING)  # its own, on its clock
    monkeypatch.undo()
    taken = Run.objects.get(pk=run.pk)
    assert not leases.claim(taken, Run.Status.QUEUED, Run.Status.PLANNING)
    skewed(monkeypatch, -off)  # and a worker off the other way
    assert not leases.claim(taken, Run.Status.QUEUED, Run.Status.PLANNING)
    assert Run.objects.get(pk=run.pk).claims == 1


@pytest.mark.parametrize("off", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_relay_lease_outlives_no_sender_clock(monkeypatch, tmp_path, off):
    """A sender takes a callback on a one-minute lease; a skewed one neither frees it
    early (ahead) nor writes a lease that ends before it was taken (behind)."""
    token = tmp_path / "relay-token"
    token.write_text("s3cret\n")
    backend = make_backend("acme", relay_url="http://127.0.0.1:9/", relay_token=f"file:{token}")
    make_config(backend)
    callback = in_progress(dispatched_run(backend))
    make_due(callback)
    skewed(monkeypatch, off)
    assert outbox.take(callback.pk, "skewed sender", timedelta(minutes=1)) is not None
    assert RelayCallback.objects.release_expired_leases() == 0
    monkeypatch.undo()
    assert RelayCallback.objects.release_expired_leases() == 0
    skewed(monkeypatch, -off)
    assert RelayCallback.objects.release_expired_leases() == 0
    assert outbox.take(callback.pk, "another sender", timedelta(minutes=1)) is None
    callback.refresh_from_db()
    assert (callback.status, callback.claimed_by) == ("sending", "skewed sender")
