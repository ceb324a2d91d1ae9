"""Bench: one real upstream test file through crcr end to end, as a backend team runs it.

    TORCH_ROOT=/folder/holding/test DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/real_run.py --file test_view_ops.py [--workers 1] [--decisions F]

In a scratch tree holding only that file of $TORCH_ROOT/test (and the local shim
`conftest.py` beside it), a database of its own (created on DATABASE_URL's server and
dropped afterwards), a private redis-server and real Celery workers (solo pool,
queues `default`, `device` and `relay`), with the reference device:
1. selection: the `run_selection` task on the workers (inventory, stage 1, the
   operator capture and stage 4 in chunks, stage 3); its decisions become the backend's
   config v2, as a reviewer approving them all would make it;
2. a real run: the demo's merged-PR dispatch (a real GitHub `pull_request` webhook,
   a local stand-in upstream clone) through the intake, the gate, the trigger and
   planning; its shards on the workers; results stored;
3. the HUD: the run's callbacks delivered to the relay simulator.
With --decisions F, the selection's decisions are also written to F (JSON), for
`selection_quality.py --decisions F` to measure them without selecting again; with
--approved F the selection is not run: F's decisions become config v2 and the run starts
(test_ops.py's selection alone takes over two hours of both cores).
Printed: each phase's wall time, the selection's proposals, the run's shards with their
durations, results per outcome, the HUD callbacks delivered. Exit 1 when a phase fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from private_redis import start_redis
from selection_workers import start_workers

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = Path(tempfile.mkdtemp(prefix="crcr-real-run-"))


def own_database(url: str) -> tuple[str, str]:
    """A fresh database on `url`'s server: (its URL, its name)."""
    import psycopg

    name = f"crcr_real_run_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}")), name


def drop_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def build_tree(source: Path) -> Path:
    tree = SCRATCH / "tree"
    (tree / "test").mkdir(parents=True)
    shutil.copyfile(source, tree / "test" / source.name)  # a symlink would change node ids
    shim = source.with_name("conftest.py")
    if shim.exists():
        shutil.copyfile(shim, tree / "test" / "conftest.py")
    return tree


def setup(tree: Path, database: str, broker: str) -> None:
    os.environ.update(
        DATABASE_URL=database, CELERY_BROKER_URL=broker, TORCH_ROOT=str(tree),
        CRCR_VAR_DIR=str(SCRATCH / "var"), CRCR_STORAGE_ROOT=str(SCRATCH / "storage"),
        CRCR_FLAKY_COUNTER=str(SCRATCH / "flaky-counter"), DEBUG="true",
        DJANGO_SETTINGS_MODULE="crcr_site.settings", DATABASE_CONN_MAX_AGE="0",
        PYTHONPATH=str(ROOT),
    )  # fmt: skip
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def wait(what: str, done, timeout: float, every: float = 1.0) -> float:
    """Seconds until `done()` holds; SystemExit past `timeout`."""
    clock = time.monotonic()
    while not done():
        if time.monotonic() - clock > timeout:
            raise SystemExit(f"{what}: not done after {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - clock


def select(backend, name: str, timeout: float, keep: Path | None) -> tuple[float, str]:
    """The selection on the workers; its decisions as config v2 (and, with `keep`, as JSON
    that `selection_quality.py --decisions` measures). (seconds, proposals)"""
    from selection import pipeline
    from selection.models import SelectionRun
    from selection.tasks import run_selection

    run = pipeline.start_run(backend, SelectionRun.Kind.SELECT)
    run_selection.delay(run.pk)

    def finished() -> bool:
        run.refresh_from_db()
        return run.finished_at is not None

    seconds = wait("the selection", finished, timeout)
    if run.status != SelectionRun.Status.DONE:
        raise SystemExit(f"the selection ended {run.status}: {run.error[-3000:]}")
    if keep is not None:
        kept = {key: run.summary[key] for key in ("decisions", "stage1")}
        keep.write_text(json.dumps(kept))
    proposals = approve(backend, run.summary["decisions"], name)
    summary = run.summary
    capture, stage4 = summary.get("capture") or {}, summary.get("stage4") or {}
    laps = ", ".join(f"{stage} {took:.0f} s" for stage, took in summary["seconds"].items())
    print(
        f"selection: {summary['inventory'].get('tests')} generic tests inventoried; captured "
        f"{capture.get('tests')} tests / {capture.get('variants')} variants; stage 4 ran "
        f"{stage4.get('ran')} variants of {stage4.get('tests')} tests, corrected "
        f"{stage4.get('corrected', 0)}; {run.chunks.count()} chunks; stages: {laps}"
    )
    return seconds, proposals


def approve(backend, decisions: list[dict], name: str) -> str:
    """The decisions as the backend's config v2, as a reviewer approving them all would
    make it; their count per mode."""
    from selection import configwriter, pipeline
    from selection.models import ConfigVersion

    chosen = pipeline.config_decisions(decisions)
    text = configwriter.standalone(pipeline.current_config(backend), chosen)
    ConfigVersion.objects.create(
        backend=backend, number=2, yaml_text=text, sha256=ConfigVersion.hash_text(text),
        message=f"the selection's decisions on {name}, all approved",
    )  # fmt: skip
    modes = Counter(d.mode for d in chosen)
    return ", ".join(f"{mode} {count}" for mode, count in sorted(modes.items()))


def real_run(backend, timeout: float) -> tuple[float, list]:
    """The demo's merged-PR dispatch through the intake; its runs once finished."""
    from demo import main_job

    dispatch = main_job.feed_dispatch(backend)

    def judged() -> bool:
        dispatch.refresh_from_db()
        return dispatch.verdict != dispatch.Verdict.PENDING

    wait("the gate", judged, timeout)
    if dispatch.verdict != dispatch.Verdict.ACCEPTED:
        raise SystemExit(f"the dispatch was {dispatch.verdict}: {dispatch.verdict_reason}")

    def finished() -> bool:
        dispatch.refresh_from_db()
        trigger = getattr(dispatch, "trigger", None)
        runs = list(trigger.runs.all()) if trigger is not None else []
        return bool(runs) and all(run.is_finished for run in runs)

    seconds = wait("the run", finished, timeout)
    return seconds, list(dispatch.trigger.runs.all())


def delivered(runs: list, timeout: float = 300) -> float:
    """Seconds until none of the runs' HUD callbacks is still pending."""
    from runs.models import RelayCallback

    def done() -> bool:
        pending = RelayCallback.objects.filter(run__in=runs, status=RelayCallback.Status.PENDING)
        return not pending.exists()

    return wait("the HUD callbacks", done, timeout)


def report(runs: list) -> None:
    from runs.models import RelayCallback, TestResult
    from runs.triage import error_line

    for run in runs:
        shards = list(run.shards.order_by("index"))
        print(f"run {run.job_name}: {run.status}; {len(shards)} shards")
        for shard in shards:
            took = (
                (shard.finished_at - shard.started_at).total_seconds()
                if shard.finished_at and shard.started_at
                else 0.0
            )
            print(
                f"  shard {shard.index}: {len(shard.test_ids)} tests, {shard.status}, {took:.0f} s, {shard.attempts} attempt(s)"
            )
        outcomes = Counter(
            TestResult.objects.filter(shard__run=run).values_list("outcome", flat=True)
        )
        print(
            "  results: "
            + ", ".join(f"{outcome} {count}" for outcome, count in sorted(outcomes.items()))
        )
        failing = TestResult.objects.filter(shard__run=run, outcome__in=TestResult.FAILING)
        for result in failing.order_by("node_id")[:10]:
            print(f"    {result.outcome}: {result.node_id}: {error_line(result.message)[:160]}")
        callbacks = Counter(run.callbacks.values_list("status", flat=True))
        delivered = callbacks.get(RelayCallback.Status.DELIVERED, 0)
        print(
            f"  HUD callbacks: {delivered} delivered of {sum(callbacks.values())} ({dict(callbacks)})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True, help="a file of $TORCH_ROOT/test")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument(
        "--decisions", type=Path, help="write the selection's decisions here (JSON)"
    )
    parser.add_argument(
        "--approved",
        type=Path,
        help="skip the selection: run with these decisions (a file --decisions wrote)",
    )
    args = parser.parse_args()
    # Stopped by SIGTERM (or SIGINT, which a background job ignores): clean up all the same.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    if not os.environ.get("TORCH_ROOT") or not os.environ.get("DATABASE_URL"):
        raise SystemExit("set TORCH_ROOT (a folder holding test/) and DATABASE_URL (PostgreSQL)")
    source = Path(os.environ["TORCH_ROOT"]).resolve() / "test" / args.file
    server = os.environ["DATABASE_URL"]
    tree = build_tree(source)
    database, name = own_database(server)
    redis, broker = start_redis(SCRATCH)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        setup(tree, database, broker)
        from demo import main_job

        main_job.create_demo_user()
        backend = main_job.load_backend().backend
        parent = "test_suite_config:\n  files: []\n"
        from selection.models import ConfigVersion

        backend.config_versions.update(yaml_text=parent, sha256=ConfigVersion.hash_text(parent))
        main_job.ensure_upstream()
        simulator = main_job.relay_simulator(backend)
        workers = start_workers(args.workers, SCRATCH, "default,device,relay")
        try:
            if args.approved:
                proposals = approve(
                    backend, json.loads(args.approved.read_text())["decisions"], args.file
                )
                print(f"selection: not run; {args.approved}'s decisions: {proposals}")
            else:
                seconds, proposals = select(backend, args.file, args.timeout, args.decisions)
                print(
                    f"selection on {args.workers} worker(s): {seconds:.0f} s; proposed {proposals}"
                )
            seconds, runs = real_run(backend, args.timeout)
            print(f"dispatch to finished run: {seconds:.0f} s")
            seconds = delivered(runs)
            print(f"finished run to its HUD callbacks delivered: {seconds:.0f} s")
            report(runs)
        finally:
            simulator.stop()
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        redis.kill()
        redis.wait()
        from django.db import connections

        connections.close_all()
        drop_database(server, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
