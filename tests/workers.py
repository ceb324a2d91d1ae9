"""Separate Celery worker processes for fault tests: real workers on their own broker.

The suite's in-process worker consumes the configured Redis database, so each
test that starts workers of its own gives them another database (or a private
Redis server) where the suite's worker never sees their tasks.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from crcr_site.celery import app
from tests.waiting import wait_for

# A small config on the bundled tree: 15 tests of one file.
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


def database_url() -> str:
    """The test database as a URL, so a worker process writes where the test reads."""
    database = settings.DATABASES["default"]
    return f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"


def environment(tmp_path: Path, broker: str, **extra: str) -> dict[str, str]:
    """The environment of a worker (or a management command) for one test."""
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=broker,
        CRCR_HEARTBEAT_SECONDS="1",
        CRCR_STORAGE_ROOT=str(tmp_path / "storage"),
        DATABASE_CONN_MAX_AGE="0",
    )
    env.update(extra)
    return env


def start_worker(
    env: dict[str, str], name: str, log: Path | None = None, queues: str = "default,device"
) -> subprocess.Popen:
    """A solo-pool worker on `queues`; its output goes to `log`."""
    output = log.open("ab") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "crcr_site", "worker", "--pool", "solo",
         "-Q", queues, "-n", f"{name}@%h", "--loglevel", "INFO"],
        cwd=settings.BASE_DIR, env=env, stdout=output, stderr=subprocess.STDOUT,
    )  # fmt: skip


def start_web(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """The web exactly as the Procfile runs it, on `port`, once it answers; its output
    goes to `log`. `stop` stops it."""
    procfile = (Path(settings.BASE_DIR) / "Procfile").read_text()
    command = next(line for line in procfile.splitlines() if line.startswith("web:"))
    # The Procfile's `python` is this interpreter (the project's virtual environment).
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    web = subprocess.Popen(
        ["sh", "-c", "exec " + command.removeprefix("web:").strip()],
        cwd=settings.BASE_DIR, env=dict(env, PORT=str(port), PATH=path),
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: answers(port, "/accounts/login/"), timeout=60, what="the web to answer")
    except AssertionError:
        stop(web)
        raise
    return web


def answers(port: int, path: str, timeout: float = 5) -> bool:
    """Whether the web on `port` answers `path` with 200 within `timeout` seconds."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def stop(*workers: subprocess.Popen | None) -> None:
    """Warm shutdown of every worker still running."""
    for worker in workers:
        if worker and worker.poll() is None:
            worker.terminate()
            worker.wait(timeout=60)


def trigger(env: dict[str, str], backend: str, sha: str) -> None:
    """A manual run, started the way an operator starts one."""
    done = subprocess.run(
        [sys.executable, "manage.py", "trigger", "--backend", backend, "--sha", sha],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"manage.py trigger failed: {done.stderr}"


def shard_log(tmp_path: Path, run_uuid: object, index: int, attempt: int = 1) -> Path:
    """The first pytest process's output of a shard attempt."""
    attempt_dir = tmp_path / "storage" / "runs" / str(run_uuid) / f"shard-{index}"
    return attempt_dir / f"attempt-{attempt}" / "p001.log"


@contextmanager
def own_redis() -> Iterator[str]:
    """A Redis server of the test's own, without persistence: the suite's in-process
    worker, other tests and other pytest-xdist workers never see its queues."""
    with tempfile.TemporaryDirectory() as workdir, PrivateRedis(Path(workdir)) as server:
        yield server.url


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """A Redis server of the test's own, without persistence, that it may kill and restart."""

    def __init__(self, workdir: Path) -> None:
        if not shutil.which("redis-server"):
            pytest.fail("redis-server is missing: install Debian's redis-server package")
        self.port, self.workdir = free_port(), workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for(self.answers, timeout=30, what=f"redis-server on port {self.port}")

    def answers(self) -> bool:
        ping = ["redis-cli", "-p", str(self.port), "ping"]
        return subprocess.run(ping, capture_output=True, text=True).stdout.strip() == "PONG"

    def kill(self) -> None:
        """SIGKILL: every queued and unacknowledged message is gone with it."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def waiting(self, queue: str) -> int:
        """How many messages wait in a Celery queue (a Redis list named after it)."""
        length = ["redis-cli", "-p", str(self.port), "llen", queue]
        return int(subprocess.run(length, capture_output=True, text=True).stdout.strip() or 0)

    def __enter__(self) -> "PrivateRedis":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.kill()


def results_once(run: Any) -> None:
    """Every test the run planned has exactly one first attempt stored, and nothing else."""
    planned = [test_id for shard in run.shards.all() for test_id in shard.test_ids]
    firsts = Counter(run.results.filter(attempt=1).values_list("node_id", flat=True))
    assert len(planned) == len(set(planned)), "a test was planned on two shards"
    assert set(firsts) == set(planned)
    assert set(firsts.values()) == {1}


def finished(run: Any, timeout: float = 300) -> Any:
    """Wait for `run` to reach a final state; the fresh row."""
    from runs.models import Run

    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=Run.FINISHED).first(),
        timeout=timeout,
        what="the run to finish",
    )


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
