"""The reference device's speed: its C++ kernels against its Python ones (issue 34 item 2).

Two figures, each the Python kernels' time over the C++ kernels' time, measured in
fresh processes alternating `--rounds` times (the minimum of each side counts: these
machines are noisy), the CPU's own time printed beside them:
1. per operator: a loop of small operators (add, mul, sum, mm, a view and a slice, a
   comparison and `any`) on device tensors;
2. per variant: the bundled upstream-style files (or `--files` under TORCH_ROOT, e.g.
   PyTorch's own test_modules.py) run on the device through the reuse plugin with every
   test `mandatory_success`, less the same process collecting only; the outcomes of
   both sides must be the same test for test.
Target: per operator >= 10 (the issue's "10x faster"). A machine without a C++
compiler has no C++ kernels: the script says so and exits 1.

    .venv/bin/python bench/refdev_speed.py [--rounds 3] [--files test_modules.py ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "engine"))

from crcr_reuse.launcher import PytestRun, TestEnvironment  # noqa: E402

TARGET = 10.0
DEVICE = "crcr_reuse.reference_device"
BUNDLED = ROOT / "tests" / "upstream" / "test"
BUNDLED_FILES = ("test_ops_reuse.py", "test_modules_reuse.py", "test_dtypes_reuse.py")
OUTCOME = re.compile(r"^(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S+)", re.MULTILINE)
LOOP = """
import sys, time, torch
if sys.argv[1] != "cpu":
    import crcr_reuse.reference_device
x = torch.randn(8, 8, device=sys.argv[1]); y = torch.randn(8, 8, device=sys.argv[1])
def work():
    for _ in range(2000):
        z = (x + y) * 2; z.sum(); torch.mm(x, y); x.view(64)[3:9]; (x > 0).any()
work()
started = time.perf_counter(); work()
print((time.perf_counter() - started) / 14000)
"""


def per_operator(device: str, native: str) -> float:
    env = {**os.environ, "CRCR_REFDEV_NATIVE": native, "PYTHONPATH": str(ROOT / "engine")}
    done = subprocess.run(
        [sys.executable, "-c", LOOP, device], env=env, capture_output=True, text=True, check=True
    )
    return float(done.stdout.split()[-1])


def tree_with(files: list[Path], scratch: Path) -> Path:
    tree = scratch / "tree"
    (tree / "test").mkdir(parents=True)
    for source in files:
        shutil.copy(source, tree / "test" / source.name)
        if (source.parent / "conftest.py").exists():
            shutil.copy(source.parent / "conftest.py", tree / "test" / "conftest.py")
    listed = "".join(
        f"    - path: ${{TORCH_ROOT}}/test/{source.name}\n"
        "      unlisted_test_mode: mandatory_success\n"
        for source in files
    )
    (tree / "all.yaml").write_text(f"test_suite_config:\n  files:\n{listed}")
    return tree


def per_variant(tree: Path, native: str, timeout: float) -> tuple[float, dict[str, str]]:
    """(seconds the tests took, less collecting them; each test's outcome)."""
    environment = TestEnvironment.for_device(DEVICE, tree).with_variables(
        CRCR_REFDEV_NATIVE=native, CRCR_REFDEV_FAULTS="{}"
    )
    run = PytestRun(
        environment,
        tree,
        files=[str(path) for path in sorted((tree / "test").glob("test_*.py"))],
        configs=[tree / "all.yaml"],
        extra_args=["-rA"],
    )
    started = time.monotonic()
    replace(run, collect_only=True).run(timeout=timeout)
    collecting = time.monotonic() - started
    started = time.monotonic()
    done = run.run(timeout=timeout)
    running = time.monotonic() - started
    return running - collecting, dict(
        (name, outcome) for outcome, name in OUTCOME.findall(done.stdout)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", nargs="+", help="files under $TORCH_ROOT/test instead")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    check = subprocess.run(
        [sys.executable, "-c", "from crcr_reuse.reference_device import native; "
         "import sys; sys.exit(native.load() is None)"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "engine")}, capture_output=True, text=True,
    )  # fmt: skip
    if check.returncode != 0:
        print(f"no C++ kernels on this machine: {check.stderr.strip()}")
        return 1
    ops: dict[str, list[float]] = {side: [] for side in ("cpu", "python", "native")}
    for _ in range(args.rounds):
        ops["python"].append(per_operator("privateuseone", "0"))
        ops["native"].append(per_operator("privateuseone", "1"))
        ops["cpu"].append(per_operator("cpu", "1"))
    best = {side: min(times) for side, times in ops.items()}
    op_ratio = best["python"] / best["native"]
    print(
        f"per operator: Python kernels {best['python'] * 1e6:.1f} µs, C++ kernels "
        f"{best['native'] * 1e6:.1f} µs, the CPU {best['cpu'] * 1e6:.1f} µs"
    )
    if args.files:
        folder = Path(os.environ["TORCH_ROOT"]).resolve() / "test"
        files = [folder / name for name in args.files]
    else:
        files = [BUNDLED / name for name in BUNDLED_FILES]
    scratch = Path(tempfile.mkdtemp(prefix="crcr-refdev-speed-"))
    tree = tree_with(files, scratch)
    seconds: dict[str, list[float]] = {"python": [], "native": []}
    outcomes: dict[str, dict[str, str]] = {}
    for _ in range(args.rounds):
        for side, native in (("python", "0"), ("native", "1")):
            took, outcomes[side] = per_variant(tree, native, args.timeout)
            seconds[side].append(took)
    shutil.rmtree(scratch, ignore_errors=True)
    variants = len(outcomes["native"])
    differ = sorted(
        name
        for name in outcomes["python"]
        if outcomes["python"][name] != outcomes["native"].get(name)
    )
    variant_ratio = min(seconds["python"]) / max(min(seconds["native"]), 1e-9)
    print(
        f"per variant ({variants} variants of {', '.join(f.name for f in files)}): Python "
        f"kernels {min(seconds['python']) / max(variants, 1) * 1e3:.1f} ms, C++ kernels "
        f"{min(seconds['native']) / max(variants, 1) * 1e3:.1f} ms; outcomes that differ: "
        f"{len(differ)}{' (' + ', '.join(differ[:5]) + ')' if differ else ''}"
    )
    print(f"refdev_speed: per operator: {op_ratio:.1f} (target >= {TARGET:g})")
    print(f"refdev_speed: per variant: {variant_ratio:.2f}")
    return 0 if op_ratio >= TARGET and not differ else 1


if __name__ == "__main__":
    sys.exit(main())
