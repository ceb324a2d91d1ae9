"""Redis restarted mid-run: the queued shard's message dies with it, beat's sweep
requeues it, and every test's result is stored exactly once."""

import time

import pytest

from crcr_site.celery import app
from runs.models import Run
from tests.factories import make_backend, make_config
from tests.waiting import wait_for
from tests.workers import (
    SMALL,
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


class Beat:
    """Send a periodic task by name to its queue, as `celery beat` does on schedule."""

    def __init__(self, broker: str, task: str, every: float) -> None:
        self.broker, self.task, self.every, self.last = broker, task, every, -every

    def tick(self) -> bool:
        if time.monotonic() - self.last >= self.every:
            # The project's app on an explicit connection to the private server. (A
            # second Celery app would become the current one, and every task the
            # suite sends later would lose its routes.)
            with app.connection_for_write(self.broker) as connection:
                app.send_task(self.task, queue="default", connection=connection)
            self.last = time.monotonic()
        return True


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
