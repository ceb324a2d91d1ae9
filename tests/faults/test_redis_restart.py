"""Redis restarted mid-run: the queued shard's message dies with it, beat's sweep
requeues it, and every test's result is stored exactly once."""

import pytest

from runs.models import Run
from tests.factories import make_backend, make_config
from tests.waiting import wait_for
from tests.workers import (
    SMALL,
    Beat,
    PrivateRedis,
    environment,
    finished,
    results_once,
    shard_log,
    start_worker,
    stop,
    trigger,
)


@pytest.fixture
def redis(tmp_path):
    # Never the shared server on 6379: other tests (and people) use it.
    with PrivateRedis(tmp_path) as server:
        yield server


def test_a_redis_restart_mid_shard_loses_no_shard_and_counts_each_result_once(
    transactional_db, redis, tmp_path
):
    backend = make_backend("redisfault")
    make_config(backend, SMALL)
    # Two shards: while a solo worker runs one, the other waits in Redis.
    env = environment(tmp_path, redis.url, CRCR_MAX_SHARD_SECONDS="8")
    worker = start_worker(env, "redisfault", log=tmp_path / "worker.log")
    try:
        trigger(env, "redisfault", "d" * 40)
        run = wait_for(
            lambda: Run.objects.filter(backend=backend, status="running").first(),
            timeout=300,
            what="the run to be planned",
        )
        assert run.shards.count() == 2
        first = wait_for(
            lambda: run.shards.filter(status="running").first(), what="a running shard"
        )
        wait_for(shard_log(tmp_path, run.uuid, first.index).exists, what="pytest to start")
        redis.kill()
        redis.start()
        assert redis.waiting("device") == 0  # the waiting shard's message is gone
        wait_for(
            lambda: run.shards.filter(pk=first.pk, status="done").exists(),
            timeout=300,
            what="the shard that was running to be stored",
        )
        waiting = run.shards.exclude(pk=first.pk).get()
        assert waiting.status == "pending" and waiting.attempts == 0
        # Beat sends the sweep every minute; a tick sent while the worker reconnects
        # may be lost, and the next one comes, so the test ticks until the shard runs.
        beat = Beat(redis.url, "runs.tasks.requeue_orphaned_shards", every=5)
        wait_for(
            lambda: beat.tick() and run.shards.filter(pk=waiting.pk, attempts=1).exists(),
            timeout=120,
            what="the sweep to requeue the lost shard",
        )
        run = finished(run)
    finally:
        stop(worker)
    assert set(run.shards.values_list("status", "attempts")) == {("done", 1)}
    results_once(run)
    assert run.status == "passed"
