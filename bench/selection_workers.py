"""Bench: a selection run's heavy work spread over device workers: two against one.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/crcr_bench \
        .venv/bin/python bench/selection_workers.py [--copies 3] [--chunk 500]

The same selection work twice, on the bundled tree's test files (not its planted crash
and hang: a minute each of nothing to share) copied `--copies` times under new names,
each copy with a line of its own (so the capture runs every copy, as it runs distinct
files), with a config that runs every test of them:
- one: one Celery worker process (solo pool, concurrency 1) on the `device` and
  `default` queues of a private redis-server;
- two: two such worker processes on this host.
Each round is a fresh backend's `run_selection` task (`selection.chunks`): the inventory
and stage 1, one capture chunk per file (`--chunk` variants at most), stage 3, stage 4's
collection, one device chunk per file, the proposals. Before the clock starts the tree's
inventory is taken and the device probed once (both are cached: the first round would
pay for them alone). The clock runs from the task sent to the run finished.
Figure: two ÷ one, wall time (target <= 0.65 on a 2-core host: the steps between the
chunks run on one worker either way). Exit 1 when it is missed. The database is
`DATABASE_URL`'s (PostgreSQL: workers on several processes share it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from private_redis import start_redis

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "tests" / "upstream"
FILES = [
    "test_dtypes_reuse.py",
    "test_plain_reuse.py",
    "test_ops_reuse.py",
    "test_modules_reuse.py",
]
TARGET = 0.65
SCRATCH = Path(tempfile.mkdtemp(prefix="crcr-selection-workers-"))


def build_tree(copies: int) -> tuple[Path, str]:
    """The bundled files, `copies` times each under new names; a config running them all."""
    tree = SCRATCH / "tree"
    (tree / "test").mkdir(parents=True)
    for name in ("pytest.ini", "refdev_faults.yaml", "test/conftest.py"):
        shutil.copy(BUNDLED / name, tree / name)
    entries = []
    for number in range(copies):
        for name in FILES:
            copy = f"test/{name.removesuffix('.py')}_{number}.py"
            text = (BUNDLED / "test" / name).read_text()
            (tree / copy).write_text(f"{text}\n# copy {number}\n")
            entries.append(
                f"    - path: ${{TORCH_ROOT}}/{copy}\n      unlisted_test_mode: mandatory_success\n"
            )
    config = (BUNDLED / "crcr-config.yaml").read_text()
    global_section = config[config.index("  global:") :]
    return tree, "test_suite_config:\n  files:\n" + "".join(entries) + global_section


def setup(tree: Path, broker: str, chunk: int) -> None:
    """This process's Django on the bench's database, broker and tree; the workers inherit
    the same environment."""
    if "DATABASE_URL" not in os.environ:
        raise SystemExit("set DATABASE_URL to a PostgreSQL database (workers share it)")
    os.environ.update(
        CRCR_VAR_DIR=str(SCRATCH / "var"), CELERY_BROKER_URL=broker, TORCH_ROOT=str(tree),
        DEBUG="true", DJANGO_SETTINGS_MODULE="crcr_site.settings", DATABASE_CONN_MAX_AGE="0",
        CRCR_STORAGE_ROOT=str(SCRATCH / "storage"), CRCR_SELECTION_CHUNK=str(chunk),
        CRCR_FLAKY_COUNTER=str(SCRATCH / "flaky-counter"), PYTHONPATH=str(ROOT),
    )  # fmt: skip
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def warm(tree: Path) -> None:
    """The inventory and the device's probe, before any clock: every round finds them."""
    from selection import inventory, pipeline
    from selection.capabilities import probe_device

    inventory.scan(tree, pipeline.tree_sha(tree))
    probe_device("crcr_reuse.reference_device")


def start_workers(
    count: int, folder: Path, queues: str = "default,device"
) -> list[subprocess.Popen[bytes]]:
    """`count` solo-pool workers on `queues`, returned once each says it is ready."""
    env = dict(os.environ)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    workers, logs = [], []
    for number in range(count):
        log = folder / f"worker-{number}.log"
        with log.open("wb") as output:
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "crcr_site", "worker", "--pool", "solo",
                 "-Q", queues, "-n", f"bench-{number}-{os.getpid()}@%h",
                 "--loglevel", "INFO"],
                cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            ))  # fmt: skip
        logs.append(log)
    deadline = time.monotonic() + 300
    for worker, log in zip(workers, logs, strict=True):
        while b" ready." not in log.read_bytes():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"a worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
    return workers


def one_round(workers: int, config: str, timeout: float) -> tuple[float, int, dict[str, float]]:
    """Wall seconds of one selection run on `workers` workers; how many chunks it ran, and
    the wall time of each of its stages (the capture and stage 4 include their chunks)."""
    from runs.models import Backend
    from selection import pipeline
    from selection.models import ConfigVersion, SelectionRun
    from selection.tasks import run_selection

    backend = Backend.objects.create(
        slug=f"workers-{uuid.uuid4().hex[:8]}", name="Selection workers bench",
        repository="crcr/selection-workers", device_module="crcr_reuse.reference_device",
        extension_points=["eager"],
    )  # fmt: skip
    ConfigVersion.objects.create(
        backend=backend, number=1, yaml_text=config, sha256=ConfigVersion.hash_text(config)
    )
    folder = SCRATCH / f"round-{workers}"
    folder.mkdir()
    started = start_workers(workers, folder)
    try:
        run = pipeline.start_run(backend, SelectionRun.Kind.SELECT)
        clock = time.monotonic()
        run_selection.delay(run.pk)
        while time.monotonic() - clock < timeout:
            run.refresh_from_db()
            if run.finished_at is not None:
                break
            time.sleep(0.2)
        wall = time.monotonic() - clock
    finally:
        for worker in started:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    if run.status != SelectionRun.Status.DONE:
        raise SystemExit(f"the run did not finish ({run.status}): {run.error[-3000:]}")
    return wall, run.chunks.count(), run.summary.get("seconds", {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3, help="copies of each bundled file")
    parser.add_argument("--chunk", type=int, default=500, help="CRCR_SELECTION_CHUNK")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    tree, config = build_tree(args.copies)
    redis, broker = start_redis(SCRATCH)
    try:
        setup(tree, broker, args.chunk)
        warm(tree)
        one, chunks, stages = one_round(1, config, args.timeout)
        print(f"  one worker: {one:.1f} s wall, {chunks} chunks, stages {stages}")
        two, chunks, stages = one_round(2, config, args.timeout)
        print(f"  two workers: {two:.1f} s wall, {chunks} chunks, stages {stages}")
    finally:
        redis.kill()
        redis.wait()
        shutil.rmtree(SCRATCH, ignore_errors=True)
    ratio = two / one
    print(f"selection_workers: two workers / one, wall: {ratio:.3f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
