"""What a shard costs: crcr's shard worker against plain pytest on the same test ids.

Builds a test tree from the bundled upstream-style tree (tests/upstream: its files
copied `--copies` times, the planted crash and hang file left out), collects its test
ids once with plain pytest, then alternates, `--rounds` times, in fresh processes:
- plain: `pytest @ids` with the reference device registered (`-p
  crcr_reuse.reference_device`, the reuse plugin blocked), torch's device bases
  restricted to privateuse1, output to a log;
- crcr: `runs.shard_worker.execute` on a shard holding the same ids, as a device
  worker runs it: the claim, the worker's environment recorded, the executor
  (`runs.crash_pinning`: the reuse plugin with a config listing the files, the progress
  log fsynced per line, JUnit XML checked against it) and the store (every result, the
  shard done, its failures classified, the duration history) in the database
  DATABASE_URL names (else a fresh SQLite file).
Both sides pay the start-up of their pytest process (importing torch's test machinery).
Figure: median crcr / median plain wall time. Target <= 1.10.

    .venv/bin/python bench/shard_cost.py [--copies 3] [--rounds 5] [--ids FILE]
"""

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crcr_reuse.launcher import PytestRun, TestEnvironment  # noqa: E402
from crcr_reuse.outcomes import canonical  # noqa: E402

TARGET = 1.10
SOURCE = ROOT / "tests" / "upstream"
DEVICE = "crcr_reuse.reference_device"
# Crashes and hangs on purpose (tests/upstream/README.md): pinning them is another bench.
LEFT_OUT_FILES = ("test_planted_faults.py",)
# Tests that fail in a way crcr re-runs alone (a mismatch, a flaky counter): the
# retries are work plain pytest never does. The lgamma tests stay: they fail as an
# unsupported operator, which crcr stores and classifies but does not re-run.
LEFT_OUT_TESTS = ("test_known_wrong_expectation", "test_wrong_on_purpose", "test_flaky_counter")


def build_tree(scratch: Path, copies: int) -> tuple[Path, list[str]]:
    """The tree (copy 0 under the original names) and its test files, relative."""
    tree = scratch / "tree"
    (tree / "test").mkdir(parents=True)
    for extra in ("pytest.ini", "refdev_faults.yaml"):
        shutil.copy(SOURCE / extra, tree / extra)
    shutil.copy(SOURCE / "test" / "conftest.py", tree / "test" / "conftest.py")
    files = []
    for copy in range(copies):
        for source in sorted((SOURCE / "test").glob("test_*.py")):
            if source.name in LEFT_OUT_FILES:
                continue
            name = f"{source.stem}_copy{copy}.py" if copy else source.name
            shutil.copy(source, tree / "test" / name)
            files.append(f"test/{name}")
    return tree, files


def config_text(files: list[str]) -> str:
    """Every file listed, every test mandatory_success: crcr runs what plain pytest runs."""
    lines = ["test_suite_config:", "  files:"]
    for name in files:
        lines += [
            f"    - path: ${{TORCH_ROOT}}/{name}",
            "      unlisted_test_mode: mandatory_success",
        ]
    return "\n".join(lines) + "\n"


def plain_pytest(tree: Path, scratch: Path) -> PytestRun:
    """Plain pytest for the reference device: no crcr plugin, output to a log."""
    environment = TestEnvironment.for_device(None, tree, tmpdir=scratch / "plain-tmp")
    return PytestRun(
        environment.with_variables(PYTORCH_TESTING_DEVICE_ONLY_FOR="privateuse1"),
        tree,
        extra_args=["-p", "no:crcr_reuse", "-p", DEVICE],
    )


def collect(plain: PytestRun, files: list[str]) -> list[str]:
    """The tree's test ids as plain pytest spells them, less the tests left out."""
    done = replace(plain, files=files, collect_only=True).run(600)
    ids = [line for line in done.stdout.splitlines() if "::" in line and " " not in line]
    if done.returncode != 0 or not ids:
        raise SystemExit(f"collection failed ({done.returncode}):\n{done.stdout[-3000:]}")
    return [i for i in ids if not any(name in i for name in LEFT_OUT_TESTS)]


def cpu_seconds() -> float:
    """CPU time of this process and of its children waited for so far."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def time_plain(plain: PytestRun, ids: Path, log: Path) -> tuple[float, float]:
    """Wall and CPU seconds of plain pytest over the ids."""
    cpu, started = cpu_seconds(), time.perf_counter()
    code = replace(plain, ids=ids).start(log).wait()
    elapsed = time.perf_counter() - started
    if code not in (0, 1):
        raise SystemExit(f"plain pytest exited {code}:\n{log.read_text()[-3000:]}")
    return elapsed, cpu_seconds() - cpu


def setup_django(scratch: Path, tree: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crcr_site.settings")
    os.environ.setdefault("DEBUG", "true")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch / 'bench.sqlite3'}")
    os.environ["CRCR_VAR_DIR"] = str(scratch / "var")  # storage and work folder: one host
    os.environ["TORCH_ROOT"] = str(tree)  # the run's tree (a folder, not a git checkout)
    os.environ["LOG_LEVEL"] = "WARNING"
    for name in ("CRCR_WORK_DIR", "CRCR_STORAGE_ROOT"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--no-input", verbosity=0)


def new_shard(backend: Any, config: Any, ids: list[str]) -> int:
    """A running run with the shard to time and a sibling that stays pending, so the
    run never finishes: finishing a run is the run's cost, not a shard's."""
    from runs.models import Run, Shard, Trigger

    trigger = Trigger.objects.create(backend=backend, kind="manual", pytorch_sha="0" * 40)
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name="shard cost", backend_version="0",
        pytorch_sha="0" * 40, test_suite_sha="0" * 40, config_version=config, status="running",
    )  # fmt: skip
    shard = Shard.objects.create(run=run, index=0, test_ids=ids)
    Shard.objects.create(run=run, index=1, test_ids=ids[:1])
    return shard.pk


def time_crcr(shard_id: int, count: int) -> tuple[float, float]:
    """Wall and CPU seconds (the worker's and its pytest process's) of the shard."""
    from runs import planning, shard_worker
    from runs.models import Shard

    cpu, started = cpu_seconds(), time.perf_counter()
    shard = shard_worker.execute(shard_id, worker="bench")
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    assert shard is not None
    shard = Shard.objects.get(pk=shard_id)
    attempt = planning.workdir_for(shard.run) / "shard-0" / "attempt-1"
    processes = len(list(attempt.glob("p*.ids")))
    stored = shard.results.count()
    unknown = shard.results.filter(message__startswith="not collected").count()
    if shard.status != "done" or stored != count or unknown or processes != 1:
        raise SystemExit(
            f"the shard ran unlike plain pytest: {shard.status} {shard.error}, {stored} of "
            f"{count} results, {unknown} ids unknown, {processes} pytest processes"
        )
    return elapsed, cpu


def backend_and_config(files: list[str]) -> tuple[Any, Any]:
    from runs.models import Backend
    from selection.models import ConfigVersion

    backend, _ = Backend.objects.get_or_create(
        slug="bench-shard-cost",
        defaults={"name": "bench-shard-cost", "device_module": DEVICE,
                  "repository": "bench/shard-cost"},
    )  # fmt: skip
    text = config_text(files)
    config = ConfigVersion.objects.filter(backend=backend, sha256=ConfigVersion.hash_text(text))
    number = ConfigVersion.objects.filter(backend=backend).count() + 1
    return backend, config.first() or ConfigVersion.objects.create(
        backend=backend, number=number, yaml_text=text, sha256=ConfigVersion.hash_text(text)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ids", type=Path, help="run these node ids (plain spelling)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as tmp:
        scratch = Path(tmp)
        tree, files = build_tree(scratch, options.copies)
        plain = plain_pytest(tree, scratch)
        ids = options.ids.read_text().split() if options.ids else collect(plain, files)
        ids_file = scratch / "plain.ids"
        ids_file.write_text("".join(f"{node_id}\n" for node_id in ids))
        setup_django(scratch, tree)
        from reproducibility import capture

        # A worker process records its host's facts (a `pip freeze`) once per
        # HOST_FACTS_SECONDS, not once per shard: warmed here as a busy worker has it.
        capture.host_facts(DEVICE)
        backend, config = backend_and_config(files)
        crcr_ids = [canonical(node_id) for node_id in ids]
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "crcr": []}
        for index in range(options.rounds):
            shard_id = new_shard(backend, config, crcr_ids)
            # Each round swaps which side goes first: drift in the machine's load
            # falls on both.
            for side in ("plain", "crcr") if index % 2 == 0 else ("crcr", "plain"):
                if side == "plain":
                    log = scratch / f"plain-{index}.log"
                    times["plain"].append(time_plain(plain, ids_file, log))
                else:
                    times["crcr"].append(time_crcr(shard_id, len(ids)))
    return report(len(ids), options.copies, times)


def report(count: int, copies: int, times: dict[str, list[tuple[float, float]]]) -> int:
    wall = {name: statistics.median(s[0] for s in samples) for name, samples in times.items()}
    cpu = {name: statistics.median(s[1] for s in samples) for name, samples in times.items()}
    database = os.environ["DATABASE_URL"].split(":")[0]
    print(f"{count} tests ({copies} copies of the bundled tree), database {database}")
    for name, samples in times.items():
        shown = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in samples)
        print(f"{name:>6}: median wall {wall[name]:.2f} s, CPU {cpu[name]:.2f} s (rounds {shown})")
    ratio = wall["crcr"] / wall["plain"]
    print(f"info: CPU time crcr / plain pytest {cpu['crcr'] / cpu['plain']:.3f}")
    print(f"shard wall time crcr / plain pytest: {ratio:.3f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
