"""A device worker killed (SIGKILL) mid-shard: a new worker finishes the run, and
every test's result is stored exactly once."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from django.conf import settings

from runs.models import Run, Shard
from tests.factories import make_backend, make_config
from tests.runs.treeconfig import tree_config
from tests.waiting import wait_for

# A separate Redis database, so the suite's in-process worker never sees these tasks.
BROKER = "redis://127.0.0.1:6379/13"
SMALL = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestTensorBasics::test_known_wrong_expectation]
          mode: xfail
        - names: [TestTensorBasics::test_cpu_only]
          mode: skip
  global:
    supported_dtypes: [{name: float32}, {name: float64}, {name: int64}, {name: bool}]
"""


def environment(tmp_path) -> dict[str, str]:
    database = settings.DATABASES["default"]
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    return dict(
        os.environ,
        DATABASE_URL=url,
        CELERY_BROKER_URL=BROKER,
        CRCR_HEARTBEAT_SECONDS="1",
        CRCR_STORAGE_ROOT=str(tmp_path / "storage"),
        DATABASE_CONN_MAX_AGE="0",
    )


def start_worker(env, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "crcr_site", "worker", "--pool", "solo",
         "-Q", "default,device", "-n", f"{name}@%h", "--loglevel", "INFO"],
        cwd=settings.BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def broker():
    subprocess.run(["redis-cli", "-n", "13", "flushdb"], check=True, capture_output=True)
    yield BROKER
    subprocess.run(["redis-cli", "-n", "13", "flushdb"], check=True, capture_output=True)


def test_a_killed_worker_loses_no_result_and_duplicates_none(transactional_db, broker, tmp_path):
    assert tree_config()  # the bundled tree is there
    backend = make_backend("killme")
    make_config(backend, SMALL)
    env = environment(tmp_path)
    first = start_worker(env, "first")
    second = None
    try:
        subprocess.run(
            [sys.executable, "manage.py", "trigger", "--backend", "killme", "--sha", "c" * 40],
            cwd=settings.BASE_DIR, env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        shard = wait_for(
            lambda: Shard.objects.filter(run__backend=backend, status="running").first(),
            timeout=300,
            what="a running shard",
        )
        log = tmp_path / "storage" / "runs" / str(shard.run.uuid) / "shard-0" / "attempt-1"
        wait_for(lambda: (log / "p001.log").exists(), timeout=60, what="pytest to start")
        time.sleep(3)  # well into the shard: torch's test machinery is loading
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        shard.refresh_from_db()
        assert shard.status == "running" and shard.attempts == 1
        second = start_worker(env, "second")
        run = wait_for(
            lambda: Run.objects.filter(backend=backend, status__in=Run.FINISHED).first(),
            timeout=600,
            what="the run to finish on the new worker",
        )
    finally:
        for worker in (first, second):
            if worker and worker.poll() is None:
                worker.terminate()
                worker.wait(timeout=60)
    shard.refresh_from_db()
    assert shard.attempts == 2 and shard.status == "done"
    firsts = Counter(run.results.filter(attempt=1).values_list("node_id", flat=True))
    assert set(firsts) == set(shard.test_ids)
    assert set(firsts.values()) == {1}
    assert run.status == "passed"
