"""Bench: running real upstream tests under the operator capture vs. running them plainly.

    .venv/bin/python bench/opcapture.py [--files test/test_view_ops.py ...] [-k EXPR] [--rounds 2]
        [--sample N [--seed 34]]

The tree is $TORCH_ROOT (a PyTorch checkout, or a folder with real upstream test
files under test/), else the bundled upstream-style tree. Both variants run the
same files (the tests `-k` picks, if given; or a fixed random sample of `--sample`
of the tests the files collect on the CPU, `--seed` written down) in one pytest
process each, on the CPU, alternating, `--rounds` times. The figure held to the target is the CPU
time (user + system) of the pytest processes, capture over plain: it is what
running the tests costs, and unlike wall time it barely moves when other work
shares the machine. Also printed: the sum of the tests' own durations from JUnit
XML (wall clock, no import time) and the processes' wall time. Target: <= 1.5x.
Exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This checkout's engine, not whichever one the environment has installed.
sys.path[:0] = [str(ROOT / "engine"), str(ROOT)]

from crcr_reuse.launcher import (  # noqa: E402
    OperatorCapture,
    PytestRun,
    TestEnvironment,
    collected_ids,
)

TARGET = 1.5
# Only so that a hung test cannot hold the bench forever: far above any real run.
LIMIT_S = 4 * 3600


def cpu_variables(scratch: Path, capture: bool) -> dict[str, str]:
    variables = dict(
        os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR="cpu", PYTHONPATH=os.pathsep.join(sys.path[:2])
    )
    if capture:
        variables.update(
            TORCH_LOGS="post_grad_graphs,aot_graphs", TORCH_LOGS_OUT=str(scratch / "logs.txt")
        )
    return variables


def sampled(tree: Path, files: list[str], size: int, seed: int, scratch: Path) -> Path:
    """A file of `size` node ids drawn with `seed` from what the files collect on the CPU."""
    listing = PytestRun(
        TestEnvironment(sys.executable, cpu_variables(scratch, False)),
        tree,
        files=files,
        collect_only=True,
        rewrite_asserts=False,
        rootdir=tree,
        extra_args=["-o", "addopts="],
    ).run(timeout=LIMIT_S)
    ids = collected_ids(listing.stdout)
    if not ids:
        raise SystemExit(f"nothing collected:\n{listing.stdout[-2000:]}{listing.stderr[-2000:]}")
    drawn = sorted(random.Random(seed).sample(ids, min(size, len(ids))))
    print(f"sample: {len(drawn)} of {len(ids)} tests, seed {seed}")
    path = scratch / "sample.txt"
    path.write_text("\n".join(drawn) + "\n")
    return path


def run(
    tree: Path,
    files: list[str],
    capture: bool,
    scratch: Path,
    tag: str,
    keyword: str | None,
    ids: Path | None = None,
) -> tuple[float, float, float, int]:
    junit = scratch / f"{tag}.xml"
    pytest = PytestRun(
        TestEnvironment(sys.executable, cpu_variables(scratch, capture)),
        tree,
        files=[] if ids else files,
        ids=ids,
        junit=junit,
        rootdir=tree,
        # Paths in the capture relative to the tree: the rootdir, the plugin's own default.
        capture=OperatorCapture(scratch / f"{tag}.jsonl", tree) if capture else None,
        extra_args=["-o", "addopts=", *(["-k", keyword] if keyword else [])],
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    pytest.run(timeout=LIMIT_S)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    times = [float(case.get("time", 0)) for case in cases]
    return cpu, sum(times), wall, len(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="*", help="test files relative to the tree")
    parser.add_argument("-k", dest="keyword", help="pytest's -k: run only the tests it picks")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sample", type=int, help="run a fixed random sample of this many tests")
    parser.add_argument("--seed", type=int, default=34, help="the sample's seed")
    args = parser.parse_args()
    tree = Path(os.environ.get("TORCH_ROOT") or ROOT / "tests" / "upstream").resolve()
    default = ["test/test_view_ops.py"] if (tree / "test/test_view_ops.py").exists() else None
    files = (
        args.files
        or default
        or sorted(str(p.relative_to(tree)) for p in (tree / "test").glob("test_*.py"))
    )
    picked = f" -k {args.keyword!r}" if args.keyword else ""
    print(f"tree {tree}; files {', '.join(files)}{picked}; {args.rounds} rounds, alternating")
    totals = {"plain": [0.0, 0.0, 0.0], "capture": [0.0, 0.0, 0.0]}
    count = 0
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as folder:
        scratch = Path(folder)
        ids = sampled(tree, files, args.sample, args.seed, scratch) if args.sample else None
        for n in range(args.rounds):
            for name in ("plain", "capture"):
                cpu, tests, wall, count = run(
                    tree, files, name == "capture", scratch, f"{name}{n}", args.keyword, ids
                )
                for index, value in enumerate((cpu, tests, wall)):
                    totals[name][index] += value
                print(
                    f"  round {n + 1} {name:>7}: {count} tests, {cpu:7.2f} s CPU, "
                    f"{tests:7.2f} s in tests, {wall:7.2f} s wall"
                )
    cpu_ratio, test_ratio, wall_ratio = (
        totals["capture"][i] / totals["plain"][i] for i in range(3)
    )
    print(f"capture / plain, CPU time:      {cpu_ratio:.3f}x (target <= {TARGET}x)")
    print(f"capture / plain, time in tests: {test_ratio:.3f}x")
    print(f"capture / plain, wall time:     {wall_ratio:.3f}x")
    return 0 if cpu_ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
