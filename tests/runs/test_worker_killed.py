"""A device worker killed (SIGKILL) mid-shard: a new worker finishes the run, and
every test's result is stored exactly once."""

import signal
import time
from collections import Counter

from runs.models import Run, Shard
from tests.factories import make_backend, make_config
from tests.runs.treeconfig import tree_config
from tests.waiting import wait_for
from tests.workers import (
    SMALL,
    environment,
    shard_log,
    start_worker,
    stop,
    trigger,
)


def test_a_killed_worker_loses_no_result_and_duplicates_none(transactional_db, broker, tmp_path):
    assert tree_config()  # the bundled tree is there
    backend = make_backend("killme")
    make_config(backend, SMALL)
    env = environment(tmp_path, broker)
    first = start_worker(env, "first", log=tmp_path / "first.log")
    second = None
    try:
        trigger(env, "killme", "c" * 40)
        shard = wait_for(
            lambda: Shard.objects.filter(run__backend=backend, status="running").first(),
            timeout=300,
            what="a running shard",
        )
        log = shard_log(tmp_path, shard.run.uuid, 0)
        wait_for(log.exists, timeout=60, what="pytest to start")
        time.sleep(3)  # well into the shard: torch's test machinery is loading
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        shard.refresh_from_db()
        assert shard.status == "running" and shard.attempts == 1
        second = start_worker(env, "second", log=tmp_path / "second.log")
        run = wait_for(
            lambda: Run.objects.filter(backend=backend, status__in=Run.FINISHED).first(),
            timeout=600,
            what="the run to finish on the new worker",
        )
    finally:
        stop(first, second)
    shard.refresh_from_db()
    assert shard.attempts == 2 and shard.status == "done"
    firsts = Counter(run.results.filter(attempt=1).values_list("node_id", flat=True))
    assert set(firsts) == set(shard.test_ids)
    assert set(firsts.values()) == {1}
    assert run.status == "passed"
