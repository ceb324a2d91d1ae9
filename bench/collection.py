"""Collection overhead of the reuse plugin against plain pytest, same files, same device.

    .venv/bin/python bench/collection.py [--rounds 3] [--files test_ops.py ...]

Files: ``$TORCH_ROOT/test/test_binary_ufuncs.py`` and ``test_view_ops.py`` when
``TORCH_ROOT`` is set (a PyTorch checkout, or single upstream files; ``--files``
names others of its test/ folder, measured together), else every file of the
project's upstream-style tree (tests/upstream/test).

Compared, alternately, in fresh processes:
- plain: ``pytest --collect-only`` with the reference device registered by
  importing it (``-p crcr_reuse.reference_device``) and the plugin blocked;
- plugin: the same plus ``--reuse-config`` naming a generated config of a few
  hundred entries (one per generic test of the files, a share of them ``xfail``,
  some with dtype edits, padded with names that match nothing) whose unlisted
  tests stay ``mandatory_success``, so both runs collect the same tests.
Both restrict torch's device bases to privateuse1 (as the plugin does).

Figures: median wall time and median peak RSS (``ru_maxrss`` of each child);
ratios plugin ÷ plain. Targets: both ratios ≤ 1.10 (aim 1.03); exit 1 if missed.
For information it also times a realistic config (unlisted tests skipped).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crcr_reuse.launcher import PytestRun, TestEnvironment  # noqa: E402
from crcr_reuse.static_scan import scan_file  # noqa: E402

TARGET = 1.10
PADDING_TO = 300


def test_files(names: list[str]) -> tuple[Path, list[Path]]:
    torch_root = os.environ.get("TORCH_ROOT")
    if torch_root:
        folder = Path(torch_root).resolve() / "test"
        return folder.parent, [folder / name for name in names]
    tree = ROOT / "tests" / "upstream"
    return tree, sorted((tree / "test").glob("test_*.py"))


def generated_config(files: list[Path], unlisted: str, every: int = 1) -> str:
    """A config of a few hundred entries over the files' generic tests (every n-th one)."""
    lines = ["test_suite_config:", "  labels: [trunk]", "  files:"]
    entries = 0
    for path in files:
        lines += [f"    - path: {path}", f"      unlisted_test_mode: {unlisted}", "      tests:"]
        for index, test in enumerate(scan_file(str(path))):
            if index % every:
                continue
            name = f"{test.cls}::{test.name}" if test.cls else test.name
            mode = "xfail" if index % 5 == 0 else "mandatory_success"
            lines += [
                f"        # Why: generated entry {index}.",
                f"        - names: ['{name}']",
                f"          mode: {mode}",
            ]
            if index % 7 == 0:
                lines.append("          edits: {dtypes: {exclude: [{name: bits16}]}}")
            entries += 1
        while entries < PADDING_TO * (files.index(path) + 1) // len(files):
            lines += [
                f"        - names: [TestNothing::test_padding_{entries}]",
                "          mode: skip",
            ]
            entries += 1
    return "\n".join(lines) + "\n"


def run_once(pytest: PytestRun) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MiB) and collected-test count of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(
        pytest.argv(),
        cwd=pytest.working_dir,
        env=dict(pytest.environment.variables),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", output)
    if child.returncode != 0 or not found:
        raise SystemExit(f"collection failed ({child.returncode}):\n{output[-3000:]}")
    return wall, usage.ru_maxrss / 1024, int(found.group(1))


def environment() -> TestEnvironment:
    """This process's environment without pytest's and Django's variables, torch's
    device bases restricted to privateuse1; no device module (each run names its own)."""
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    variables["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"
    return TestEnvironment(sys.executable, variables)


def commands(rootdir: Path, files: list[Path], config: Path) -> dict[str, PytestRun]:
    """Both collections. No tree: the plugin takes ${TORCH_ROOT} from the environment."""
    collect = PytestRun(
        environment(),
        None,
        files=[str(f) for f in files],
        collect_only=True,
        rootdir=rootdir,
        cwd=rootdir,
        extra_args=["-p", "no:django"],
    )
    plain = ["-p", "no:django", "-p", "no:crcr_reuse", "-p", "crcr_reuse.reference_device"]
    return {
        "plain": replace(collect, extra_args=plain),
        "plugin": replace(collect, configs=[config]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--files",
        nargs="+",
        default=["test_binary_ufuncs.py", "test_view_ops.py"],
        help="files of $TORCH_ROOT/test",
    )
    args = parser.parse_args()
    rootdir, files = test_files(args.files)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.yaml"
        config.write_text(generated_config(files, "mandatory_success"))
        realistic = Path(tmp) / "realistic.yaml"
        realistic.write_text(generated_config(files, "skip", every=3))
        runs = commands(rootdir, files, config)
        results: dict[str, list[tuple[float, float, int]]] = {"plain": [], "plugin": []}
        for _ in range(args.rounds):
            for name, pytest in runs.items():
                results[name].append(run_once(pytest))
        skip_run = run_once(commands(rootdir, files, realistic)["plugin"])
    entries = generated_config(files, "mandatory_success").count("- names:")
    return report(files, entries, results, skip_run)


def report(
    files: list[Path],
    entries: int,
    results: dict[str, list[tuple[float, float, int]]],
    skip_run: tuple[float, float, int],
) -> int:
    wall = {name: statistics.median(r[0] for r in runs) for name, runs in results.items()}
    memory = {name: statistics.median(r[1] for r in runs) for name, runs in results.items()}
    counts = {name: {r[2] for r in runs} for name, runs in results.items()}
    print(f"files: {', '.join(str(f) for f in files)}")
    print(f"config: {entries} entries; unlisted tests mandatory_success")
    for name in results:
        walls = ", ".join(f"{r[0]:.2f}" for r in results[name])
        print(
            f"{name:>6}: {sorted(counts[name])} tests collected; wall {wall[name]:.2f} s (runs {walls}); peak RSS {memory[name]:.0f} MiB"
        )
    if counts["plain"] != counts["plugin"]:
        print("note: the two runs collected different numbers of tests")
    wall_ratio = wall["plugin"] / wall["plain"]
    memory_ratio = memory["plugin"] / memory["plain"]
    print(f"wall-time ratio plugin/plain: {wall_ratio:.3f} (target <= {TARGET}, aim 1.03)")
    print(f"peak-memory ratio plugin/plain: {memory_ratio:.3f} (target <= {TARGET})")
    print(f"info: listing a third of the tests, the rest skipped, the plugin collects {skip_run[2]} tests in "
          f"{skip_run[0]:.2f} s ({skip_run[0] / wall['plain']:.3f} of plain), peak RSS {skip_run[1]:.0f} MiB")  # fmt: skip
    return 0 if wall_ratio <= TARGET and memory_ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
