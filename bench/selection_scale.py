"""Bench: the inventory and selection stages 1-3 on a PyTorch-sized tree, against collecting it.

    .venv/bin/python bench/selection_scale.py [--files 1000] [--per-file 100] [--rounds 1]

On the big tree of `bigtree.py` (built or taken from its cache), in the same run:
- plain: `pytest --collect-only` of the tree for privateuse1 with the reference device
  (`bigtree.plain_collection`): what any CI pays to know its tests;
- pipeline: in a process of its own on a fresh SQLite database (so nothing is known
  yet and the database's work is in the measured process), the selection job of a
  backend on the reference device without stage 4 (`pipeline.run_for_backend(device=
  False)`): the inventory (parse, embed, store), stage 1, the operator capture (runs
  the chosen files' tests on the CPU, once per distinct file text: renamed copies take
  the capture of the file they copy), stage 3 (the device's operators probed, every
  generic test classified) and the proposals stored.
Rounds alternate the two. Figures, per generated variant on both sides (the plain
collection's count): the pipeline's CPU time (user + system of its process and every
process it started) ÷ the collection's (target <= 2; wall time printed beside it), and
the largest peak RSS among the pipeline's process and those it started (`ru_maxrss` of
itself and of its children; target <= 2048 MiB). Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bigtree

ROOT = bigtree.ROOT
TARGET, MEMORY_TARGET = 2.0, 2048
PARENT = "test_suite_config:\n  files: []\n"


def run_phase(tree: Path) -> None:
    """Inside the pipeline's own process: migrate, then time the job; one JSON line."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crcr_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from runs.models import Backend
    from selection import pipeline
    from selection.models import ConfigVersion

    call_command("migrate", verbosity=0)
    backend = Backend.objects.create(
        slug="reference", name="Reference device", repository="crcr/reference",
        device_module=bigtree.DEVICE, extension_points=["eager"],
    )  # fmt: skip
    ConfigVersion.objects.create(
        backend=backend, number=1, yaml_text=PARENT, sha256=ConfigVersion.hash_text(PARENT)
    )
    before = cpu_time()
    started = time.monotonic()
    run = pipeline.run_for_backend(backend, tree, device=False)
    wall = time.monotonic() - started
    summary = run.summary
    print(
        json.dumps(
            {"cpu": cpu_time() - before, "wall": wall,
             "self_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
             "child_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
             "tests": len(summary["decisions"]), "inventory": summary["inventory"],
             "capture": summary["capture"], "seconds": summary["seconds"]}
        )
    )  # fmt: skip


def cpu_time() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pipeline_phase(tree: Path, scratch: Path) -> dict[str, object]:
    """The job in a fresh process and database; what it reported."""
    env = dict(os.environ, CRCR_VAR_DIR=str(scratch), CRCR_STORAGE_ROOT=str(scratch / "storage"))
    env.update(DEBUG="true", TORCH_ROOT=str(tree))
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    completed = subprocess.run(
        [sys.executable, __file__, "--phase", str(tree)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    shutil.rmtree(scratch, ignore_errors=True)
    if completed.returncode != 0:
        raise SystemExit(
            f"the pipeline failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}"
        )
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bigtree.options(parser)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        run_phase(Path(args.phase))
        return 0
    tree = bigtree.from_options(args)
    plain: list[bigtree.Collected] = []
    piped: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="crcr-selection-scale-") as folder:
        for number in range(1, args.rounds + 1):
            plain.append(bigtree.collect(bigtree.plain_collection(tree.root)))
            collected = plain[-1]
            print(f"  round {number}: plain collection {collected.count} tests, "
                  f"{collected.cpu:.1f} s CPU, {collected.seconds:.1f} s wall, peak RSS {collected.peak_mib:.0f} MiB")  # fmt: skip
            piped.append(pipeline_phase(tree.root, Path(folder) / f"round-{number}"))
            print(f"  round {number}: pipeline {json.dumps(piped[-1])}")
    return report(plain, piped)


def report(plain: list[bigtree.Collected], piped: list[dict]) -> int:
    count = plain[0].count
    cpu = statistics.median(float(p["cpu"]) for p in piped)
    wall = statistics.median(float(p["wall"]) for p in piped)
    base_cpu = statistics.median(c.cpu for c in plain)
    base_wall = statistics.median(c.seconds for c in plain)
    memory = max(max(float(p["self_mib"]), float(p["child_mib"])) for p in piped)
    print(f"per generated variant ({count}): pipeline {1000 * cpu / count:.2f} ms CPU, "
          f"{1000 * wall / count:.2f} ms wall; plain collection {1000 * base_cpu / count:.2f} ms CPU, "
          f"{1000 * base_wall / count:.2f} ms wall; {piped[0]['tests']} generic tests classified")  # fmt: skip
    ratio = cpu / base_cpu
    print(f"wall-time ratio, for information: {wall / base_wall:.3f}")
    print(f"stages 1-3 / plain collection, CPU per test: {ratio:.3f} (target <= {TARGET})")
    print(f"peak RSS of the pipeline's processes, MiB: {memory:.0f} (target <= {MEMORY_TARGET})")
    return 0 if ratio <= TARGET and memory <= MEMORY_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
