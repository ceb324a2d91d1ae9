"""A device that goes bad mid-shard: its health probe ends the shard's attempt as
infrastructure, naming the probe; the tests it did not vouch for run again in a fresh
attempt on another worker, and no failure of the poisoned device counts as a regression."""

import json
import re
import socket
import subprocess
import sys

from crcr_reuse.outcomes import read_progress
from django.conf import settings

from runs.models import Failure, Run, Shard
from tests.factories import make_backend, make_config, make_user
from tests.runs.treeconfig import tree_config
from tests.waiting import wait_for
from tests.workers import SMALL, environment, finished, results_once, start_worker, stop, trigger

PROBE = "python:crcr_reuse.reference_device:probe"
# The reference device computes wrong once it has run this many operators (in one
# process): mid-shard, where a test that must pass then fails on it.
POISON = json.dumps({"faults": [{"kind": "poison", "after_ops": 26}]})


def add_consumer(env: dict[str, str], queue: str, worker: str) -> None:
    """A running worker starts consuming `queue`, as an operator tells it to."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "crcr_site", "control", "add_consumer", queue,
         "--destination", worker],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert f"{worker}: OK" in done.stdout, done.stdout + done.stderr


def attempt_dir(tmp_path, run, attempt):
    return tmp_path / "storage" / "runs" / str(run.uuid) / "shard-0" / f"attempt-{attempt}"


def test_a_poisoned_device_ends_the_attempt_as_infra_and_a_fresh_worker_runs_the_rest(
    transactional_db, broker, tmp_path, client
):
    assert tree_config()  # the bundled tree is there
    backend = make_backend("poisoned", health_probe=PROBE)
    make_config(backend, SMALL)
    sick_env = environment(tmp_path, broker, CRCR_REFDEV_FAULTS=POISON)
    healthy_env = environment(tmp_path, broker)
    healthy_log = tmp_path / "healthy.log"
    # The healthy worker starts on `default` only: the sick one takes the shard first.
    healthy = start_worker(healthy_env, "healthy", log=healthy_log, queues="default")
    sick = None
    try:
        wait_for(lambda: " ready." in healthy_log.read_text(), timeout=120, what="healthy worker")
        sick = start_worker(sick_env, "sick", log=tmp_path / "sick.log")
        trigger(sick_env, "poisoned", "d" * 40)
        wait_for(
            lambda: Shard.objects.filter(run__backend=backend, worker__startswith="sick@").first(),
            timeout=300,
            what="the sick worker to claim the shard",
        )
        # Now the healthy worker takes device work too: idle, it gets the fresh attempt.
        add_consumer(healthy_env, "device", f"healthy@{socket.gethostname()}")
        run = finished(Run.objects.get(backend=backend), timeout=600)
    finally:
        stop(sick, healthy)

    shard = run.shards.get()
    # The first attempt ended as infrastructure, naming the probe; the second, on the
    # healthy worker, finished the shard.
    assert shard.error.startswith(f"attempt 1: device poisoned: health probe {PROBE} failed after ")
    assert shard.attempts == 2 and shard.status == Shard.Status.DONE
    assert shard.worker.startswith("healthy@")
    poisoned = read_progress(attempt_dir(tmp_path, run, 1) / "p001.progress.jsonl", ended=True)
    assert poisoned.poisoned is not None and poisoned.poisoned.probe == PROBE
    culprit = poisoned.poisoned.after
    assert poisoned.records[culprit].outcome == "failed"  # on the poisoned device
    # The second attempt ran the poisoned window and what never ran, nothing else.
    rerun = (attempt_dir(tmp_path, run, 2) / "p001.ids").read_text().split()
    kept = {
        node_id
        for node_id, record in poisoned.records.items()
        if record.outcome in ("passed", "xfailed") and node_id not in poisoned.poisoned.suspects
    }
    assert culprit in rerun and kept and not kept & set(rerun)
    assert set(rerun) | kept == {test_id for test_id in shard.test_ids}
    # Every test has one first attempt, and what failed on the poisoned device is not a
    # failure at all: it passed on the healthy one. The HUD job is green.
    results_once(run)
    assert run.results.get(node_id=culprit, attempt=1).outcome == "passed"
    assert not Failure.objects.filter(run=run).exists()
    assert run.status == Run.Status.PASSED
    # The run page's shard table says which attempt the device spoiled, and why.
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/").content.decode()
    # The shard row: done, then the error that ended its first attempt (its first line shown).
    assert re.search(
        rf"<td>done(?:<details[^>]*><summary>)?: attempt 1: device poisoned: health probe {re.escape(PROBE)} failed after ",
        page,
    )


def test_a_device_poisoned_at_every_attempt_ends_the_shard_in_error_never_red(
    transactional_db, broker, tmp_path
):
    backend = make_backend("rotten", health_probe=PROBE)
    make_config(backend, SMALL)
    # Poisoned from its first operator: the probe before the first test fails each time.
    always = json.dumps({"faults": [{"kind": "poison", "after_ops": 0}]})
    env = environment(tmp_path, broker, CRCR_REFDEV_FAULTS=always, CRCR_SHARD_RETRIES="1")
    worker = start_worker(env, "rotten", log=tmp_path / "rotten.log")
    try:
        trigger(env, "rotten", "e" * 40)
        run = finished(Run.objects.get(backend=backend), timeout=600)
    finally:
        stop(worker)
    shard = run.shards.get()
    assert shard.status == Shard.Status.ERROR and shard.attempts == 2
    assert shard.error.startswith(
        f"gave up after 1 retries: attempt 2: device poisoned: health probe {PROBE} failed "
        "before the first test: torch.ones(4).sum() on the device gave "
    )
    assert not run.results.exists()  # no test ran on the poisoned device, none is blamed
    assert run.status == Run.Status.ERROR  # infrastructure: the HUD job is not red
