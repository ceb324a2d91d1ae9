"""The reference device's speed per operator and per variant (issue 34 item 2).

Two figures, measured in fresh processes alternating `--rounds` times (the minimum of
each side counts: these machines are noisy):
1. per operator: a loop of small operators (add, mul, sum, mm, a view and a slice, a
   comparison and `any`) on device tensors, C++ kernels against Python ones, the CPU's
   own time beside them;
2. per variant: the bundled upstream-style files (or `--files` under TORCH_ROOT, e.g.
   PyTorch's own test_view_ops.py), every test `mandatory_success`, each test's whole
   run timed by `variant_clock.py` (collection left out), on five sides:
   - cpu plain: plain pytest on the CPU, no crcr (torch's own per-test cost);
   - cpu plugin: the CPU variants through the reuse plugin;
   - today: the device through the plugin as before issue 34: Python kernels, torch's
     own `extract_test_fn`, pytest's per-report parsing of source files
     (CRCR_REFDEV_NATIVE=0 CRCR_REUSE_TORCH_STACK=1 CRCR_REUSE_TRACEBACK_CACHE=0);
   - python: Python kernels with the plugin as it is now;
   - c++: C++ kernels with the plugin as it is now.
   It prints ms per variant (all, and the passing ones alone: a failure's cost is
   pytest's report of it), today / c++ (target >= 10), python / c++ (the kernels alone)
   and c++ / cpu plain (the floor: a device cannot beat torch's own per-test cost by
   its kernels; the plugin's harness stand-in, which the cpu plugin side has too, can).
   The outcomes of today, python and c++ must be the same test for test.
Exit 1 when an outcome differs or a target is missed. A machine without a C++ compiler
has no C++ kernels: the script says so and exits 1.

    .venv/bin/python bench/refdev_speed.py [--rounds 3] [--files test_view_ops.py ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "engine"))

from crcr_reuse.launcher import PytestRun, TestEnvironment  # noqa: E402

TARGET = 10.0
DEVICE = "crcr_reuse.reference_device"
BUNDLED = ROOT / "tests" / "upstream" / "test"
BUNDLED_FILES = ("test_ops_reuse.py", "test_modules_reuse.py", "test_dtypes_reuse.py")
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


# side: (device module, variables); a cpu side runs torch's CPU variants only.
SIDES: dict[str, tuple[str | None, dict[str, str]]] = {
    "cpu plain": (None, {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu"}),
    "cpu plugin": (DEVICE, {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu"}),
    "today": (
        DEVICE,
        {
            "CRCR_REFDEV_NATIVE": "0",
            "CRCR_REUSE_TORCH_STACK": "1",
            "CRCR_REUSE_TRACEBACK_CACHE": "0",
        },
    ),
    "python": (DEVICE, {"CRCR_REFDEV_NATIVE": "0"}),
    "c++": (DEVICE, {"CRCR_REFDEV_NATIVE": "1"}),
}


def per_variant(tree: Path, side: str, timeout: float) -> dict[str, tuple[float, str]]:
    """Each test's (seconds, outcome) on one side."""
    device, variables = SIDES[side]
    clock = tree / "clock.json"
    clock.unlink(missing_ok=True)
    environment = TestEnvironment.for_device(device, tree).with_variables(
        CRCR_REFDEV_FAULTS="{}",
        CRCR_BENCH_CLOCK=str(clock),
        PYTHONPATH=os.pathsep.join([str(ROOT / "engine"), str(ROOT / "bench")]),
        **variables,
    )
    run = PytestRun(
        environment,
        tree,
        files=[str(path) for path in sorted((tree / "test").glob("test_*.py"))],
        configs=[tree / "all.yaml"] if device else [],
        extra_args=["-p", "variant_clock"],
    )
    done = run.run(timeout=timeout)
    if not clock.exists():
        raise SystemExit(f"{side}: no test ran\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {
        name: (seconds, outcome)
        for name, (seconds, outcome) in json.loads(clock.read_text()).items()
    }


@dataclass
class Side:
    """One side's best round: its total, its passing variants' total, and outcomes."""

    total: float = float("inf")
    passing: float = float("inf")
    outcomes: dict[str, str] = field(default_factory=dict)

    def add(self, tests: dict[str, tuple[float, str]]) -> None:
        total = sum(seconds for seconds, _ in tests.values())
        if total < self.total:
            self.total = total
            self.passing = sum(s for s, outcome in tests.values() if outcome == "passed")
            self.outcomes = {name: outcome for name, (_, outcome) in tests.items()}

    def per_variant(self) -> float:
        return self.total / max(len(self.outcomes), 1)

    def ms(self) -> str:
        count = len(self.outcomes)
        passed = sum(outcome == "passed" for outcome in self.outcomes.values())
        return (
            f"{self.total / max(count, 1) * 1e3:6.1f} ms/variant ({count}), passing "
            f"{self.passing / max(passed, 1) * 1e3:6.1f} ms ({passed})"
        )


def variant_figures(
    tree: Path, files: list[Path], args: argparse.Namespace
) -> tuple[float, list[str]]:
    """Print the per-variant times and ratios; return today / c++ and the tests whose
    outcome differs between today, python and c++."""
    sides = {side: Side() for side in SIDES}
    for _ in range(args.rounds):
        for side, record in sides.items():
            record.add(per_variant(tree, side, args.timeout))
    print(f"per variant, {', '.join(f.name for f in files)} (best of {args.rounds}):")
    for side, record in sides.items():
        print(f"  {side:10s} {record.ms()}")
    differ = sorted(
        name
        for side in ("today", "python")
        for name, outcome in sides[side].outcomes.items()
        if sides["c++"].outcomes.get(name) != outcome
    )
    print(f"outcomes that differ (today, python, c++): {len(differ)} {differ[:5] or ''}")
    per = {side: record.per_variant() for side, record in sides.items()}
    figure = per["today"] / per["c++"]
    print(f"refdev_speed: per variant, today / c++: {figure:.2f} (target >= {TARGET:g})")
    for label, top, bottom in (
        ("python / c++ (the kernels alone)", "python", "c++"),
        ("c++ / cpu plain (the floor)", "c++", "cpu plain"),
        ("c++ / cpu plugin", "c++", "cpu plugin"),
    ):
        print(f"refdev_speed: per variant, {label}: {per[top] / per[bottom]:.2f}")
    return figure, differ


def operator_figure(rounds: int) -> float:
    """Print the per-operator times; return Python / C++."""
    ops: dict[str, list[float]] = {side: [] for side in ("cpu", "python", "native")}
    for _ in range(rounds):
        ops["python"].append(per_operator("privateuseone", "0"))
        ops["native"].append(per_operator("privateuseone", "1"))
        ops["cpu"].append(per_operator("cpu", "1"))
    best = {side: min(times) for side, times in ops.items()}
    op_ratio = best["python"] / best["native"]
    print(
        f"per operator: Python kernels {best['python'] * 1e6:.1f} µs, C++ kernels "
        f"{best['native'] * 1e6:.1f} µs, the CPU {best['cpu'] * 1e6:.1f} µs"
    )
    return op_ratio


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
    op_ratio = operator_figure(args.rounds)
    if args.files:
        folder = Path(os.environ["TORCH_ROOT"]).resolve() / "test"
        files = [folder / name for name in args.files]
    else:
        files = [BUNDLED / name for name in BUNDLED_FILES]
    scratch = Path(tempfile.mkdtemp(prefix="crcr-refdev-speed-"))
    try:
        figure, differ = variant_figures(tree_with(files, scratch), files, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"refdev_speed: per operator (python / c++): {op_ratio:.1f}")
    return 0 if figure >= TARGET and not differ else 1


if __name__ == "__main__":
    sys.exit(main())
