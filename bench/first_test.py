"""Bench: from a dispatch accepted to its first test started, on a PyTorch-sized tree.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/crcr_bench .venv/bin/python bench/first_test.py \
        [--files 1000] [--per-file 100] [--rounds 1]

On the big tree of `bigtree.py` (built or taken from its cache: the tree is prepared
before anything is timed), in the same run:
- plain: `pytest --collect-only` of the tree for privateuse1 with the reference device
  (`bigtree.plain_collection`);
- crcr: a real Celery worker (solo pool, queues default and device, as
  tests/workers.py starts one) on a private redis-server, already started and ready;
  the clock starts when a push dispatch is handed to the intake (`runs.dispatch.receive`:
  stored, the gate queued) and stops when a shard's progress log holds its first
  `start` line. In between, as in production: the gate accepts it (the backend's
  policy builds pushes), the trigger and its run are created, the tree's publishing is
  a no-op on one host, planning registers the installed artifacts, collects the ids the
  config selects (every file of the tree, unlisted tests `mandatory_success`) with the
  reuse plugin, cuts them into shards and queues them; the worker claims one and its
  pytest process generates that shard's tests and starts the first.
Rounds alternate the two. Figure: the CPU time (user + system) the worker and every
process it started used from the dispatch to the first test (read from /proc: the
worker is still running), ÷ the plain collection's, medians (target <= 1.5); the
wall-time ratio is printed beside it (on a shared 2-core host it swings by half
between identical runs). Also printed: when the run was created, its shards stored
and the first shard claimed. The database is `DATABASE_URL`'s (the bench's runs end
in error afterwards) or, without it, a fresh SQLite file. Exit 1 when the target is
missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import bigtree
from private_redis import start_redis

ROOT = bigtree.ROOT
TARGET = 1.5
STOPPED = "stopped by bench/first_test.py once its first test had started"
SCRATCH = Path(tempfile.mkdtemp(prefix="crcr-first-test-"))
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/**/test_*.py
      unlisted_test_mode: mandatory_success
"""


def setup(tree: Path, broker: str) -> None:
    """This process's Django, on the bench's database, broker and tree."""
    os.environ.update(
        CRCR_VAR_DIR=str(SCRATCH / "var"), CELERY_BROKER_URL=broker, TORCH_ROOT=str(tree),
        DEBUG="true", DJANGO_SETTINGS_MODULE="crcr_site.settings", DATABASE_CONN_MAX_AGE="0",
    )  # fmt: skip
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_backend() -> int:
    from runs.models import Backend
    from selection.models import ConfigVersion

    backend = Backend.objects.create(
        slug=f"first-test-{uuid.uuid4().hex[:8]}", name="First test bench",
        repository="crcr/first-test-bench", device_module=bigtree.DEVICE,
        extension_points=["eager"], gate_policy={"build_pushes": True},
    )  # fmt: skip
    ConfigVersion.objects.create(
        backend=backend, number=1, yaml_text=CONFIG, sha256=ConfigVersion.hash_text(CONFIG)
    )
    return backend.pk


def start_worker(storage: Path, log: Path) -> subprocess.Popen[bytes]:
    """A solo-pool worker on both queues, returned once it says it is ready."""
    env = dict(os.environ, CRCR_STORAGE_ROOT=str(storage))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "crcr_site", "worker", "--pool", "solo",
             "-Q", "default,device", "-n", f"first-test-{os.getpid()}@%h", "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 300
    while b" ready." not in log.read_bytes():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return worker


def stop(worker: subprocess.Popen[bytes], broker: str) -> None:
    """Kill the worker and its tests; empty the broker of the shards it left queued."""
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    port = broker.rsplit(":", 1)[1].split("/")[0]
    subprocess.run(["redis-cli", "-p", port, "flushall"], capture_output=True, check=True)


def dispatch(backend_id: int) -> None:
    """A push to main, handed to the intake as the API hands it over."""
    from runs import dispatch as intake
    from runs.models import Backend, Dispatch

    # GitHub's push payload as far as the intake and the gate read it.
    payload = {
        "ref": "refs/heads/main",
        "before": "0" * 40,
        "after": uuid.uuid4().hex[:20] * 2,
        "created": False,
        "deleted": False,
        "repository": {"full_name": "pytorch/pytorch"},
    }
    body = {"event_type": "push", "delivery_id": str(uuid.uuid4()), "payload": payload}
    backend = Backend.objects.get(pk=backend_id)
    intake.receive(backend, body, json.dumps(body).encode(), Dispatch.Source.CRCR)


def first_start(backend_id: int, storage: Path, log: Path, timeout: float) -> float:
    """Wait for a shard's progress log to hold a `start` line; when it was seen."""
    from runs.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for progress in storage.glob("runs/*/shard-*/attempt-*/*.progress.jsonl"):
            if b'"event": "start"' in progress.read_bytes()[:4096]:
                return time.time()
        ended = Run.objects.filter(backend_id=backend_id, status__in=Run.FINISHED)
        failed = ended.exclude(error=STOPPED).first()
        if failed is not None:
            raise SystemExit(f"the run ended before a test started: {failed.error[-3000:]}")
        time.sleep(0.05)
    raise SystemExit(f"no test started within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process, the children it waited for, and its
    live descendants (read from /proc: the worker is still running)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def one_round(backend_id: int, broker: str, number: int, timeout: float) -> tuple[float, float]:
    """Wall and CPU seconds from the dispatch to its first test; prints the steps between."""
    from runs.models import Run

    folder = SCRATCH / f"round-{number}"
    storage, log = folder / "storage", folder / "worker.log"
    storage.mkdir(parents=True)
    worker = start_worker(storage, log)
    try:
        idle = tree_cpu(worker.pid)
        started = time.time()
        dispatch(backend_id)
        seen = first_start(backend_id, storage, log, timeout)
        cpu = tree_cpu(worker.pid) - idle
    finally:
        stop(worker, broker)
    run = Run.objects.filter(backend_id=backend_id).order_by("-pk").first()
    assert run is not None and run.started_at is not None
    claimed = min(s.started_at for s in run.shards.all() if s.started_at)
    print(
        f"  round {number}: run created at {run.created_at.timestamp() - started:.1f} s, "
        f"{run.shards.count()} shards stored at {run.started_at.timestamp() - started:.1f} s, "
        f"first claimed at {claimed.timestamp() - started:.1f} s, "
        f"first test started at {seen - started:.1f} s; the worker's processes used "
        f"{cpu:.1f} s of CPU"
    )
    return seen - started, cpu


def stopped(backend_id: int) -> None:
    """The bench's runs end in error, their shards too (their worker was killed): a
    shared database is left with nothing that looks like work in progress."""
    from django.utils import timezone

    from runs.models import Run, Shard

    why = STOPPED
    now = timezone.now()
    Shard.objects.filter(run__backend_id=backend_id).exclude(status=Shard.Status.DONE).update(
        status=Shard.Status.ERROR, error=why, finished_at=now
    )
    Run.objects.filter(backend_id=backend_id).update(
        status=Run.Status.ERROR, error=why, finished_at=now
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bigtree.options(parser)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    tree = bigtree.from_options(args)
    if "DATABASE_URL" not in os.environ:
        print("database: a fresh SQLite file")
    redis, broker = start_redis(SCRATCH)
    try:
        setup(tree.root, broker)
        backend_id = make_backend()
        plain: list[bigtree.Collected] = []
        first: list[tuple[float, float]] = []
        for number in range(1, args.rounds + 1):
            collected = bigtree.collect(bigtree.plain_collection(tree.root))
            plain.append(collected)
            print(
                f"  round {number}: plain collection {collected.count} tests in "
                f"{collected.seconds:.1f} s, {collected.cpu:.1f} s of CPU"
            )
            timeout = 20 * collected.seconds + 120
            first.append(one_round(backend_id, broker, number, timeout))
        stopped(backend_id)
    finally:
        redis.kill()
        redis.wait()
        shutil.rmtree(SCRATCH, ignore_errors=True)
    wall = statistics.median(w for w, _ in first) / statistics.median(c.seconds for c in plain)
    ratio = statistics.median(c for _, c in first) / statistics.median(c.cpu for c in plain)
    print(f"wall-time ratio, for information: {wall:.3f}")
    print(f"first test / plain collection, CPU: {ratio:.3f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
