"""A test process that goes silent outside any test (stuck before collecting, as a hung
import or a deadlocked device driver would be) is killed at CRCR_QUIET_TIMEOUT, through a
real device worker: the attempt ends as infrastructure with where it was stuck kept, the
shard is retried, and the run still passes."""

import shutil

from runs.models import Failure, Run, Shard
from tests.factories import make_backend, make_config, make_user
from tests.runs.treeconfig import TREE
from tests.workers import (
    SMALL,
    environment,
    finished,
    results_once,
    shard_log,
    start_worker,
    stop,
    trigger,
)

QUIET_SECONDS = 60  # past a loaded host's silent start (importing torch's test machinery, ~10 s)

# Appended to the tree's conftest: a shard's test process (the one with a progress log;
# planning's collection has none) waits on a "device" for ever the first time only.
SILENT_ONCE = """
import sys
import time
from pathlib import Path

_MARKER = Path({marker!r})
if any(arg.startswith("--crcr-progress") for arg in sys.argv) and not _MARKER.exists():
    _MARKER.write_text("went silent once")

    def wait_for_the_device():
        time.sleep(3600)

    wait_for_the_device()
"""


def test_a_silent_test_process_is_ended_and_its_shard_retried_as_infrastructure(
    transactional_db, broker, tmp_path, client
):
    tree = tmp_path / "tree"
    shutil.copytree(TREE, tree)
    marker = tmp_path / "went-silent"
    with (tree / "test" / "conftest.py").open("a") as conftest:
        conftest.write(SILENT_ONCE.format(marker=str(marker)))
    backend = make_backend("quiet")
    make_config(backend, SMALL)
    env = environment(tmp_path, broker, TORCH_ROOT=str(tree), CRCR_QUIET_TIMEOUT=str(QUIET_SECONDS))
    worker = start_worker(env, "quiet", log=tmp_path / "worker.log")
    try:
        trigger(env, "quiet", "c" * 40)
        run = finished(Run.objects.get(backend=backend), timeout=900)
    finally:
        stop(worker)
    assert marker.exists()  # the first attempt did go silent
    shard = Shard.objects.get(run=run)
    assert (shard.status, shard.attempts) == ("done", 2)
    # The first attempt's record: the limit, and where the process was stuck (its stack).
    assert f"printed nothing for {QUIET_SECONDS} s outside any test" in shard.error
    assert "wait_for_the_device" in shard.error
    assert "wait_for_the_device" in shard_log(tmp_path, run.uuid, 0, attempt=1).read_text()
    # Infrastructure, not a test's verdict: the retry ran every test once, the run passed.
    assert run.status == Run.Status.PASSED
    results_once(run)
    assert not Failure.objects.filter(run=run).exists()
    assert not run.results.filter(outcome="timed_out").exists()
    client.force_login(make_user("reader"))
    page = client.get(f"/runs/{run.uuid}/").content.decode()
    assert f"printed nothing for {QUIET_SECONDS} s outside any test" in page
    assert "wait_for_the_device" in page
