"""PyTorch's own test files, one at a time: what crcr collects, selects and runs of each.

    TORCH_ROOT=/path/holding/test .venv/bin/python bench/upstream_files.py \
        [--files test_ops.py test_nn.py ...] [--device-limit 6000]

Upstream files cannot live in the repository; this is the manual check of issue 21
item 7 on the real ones. For each file, in a scratch tree of its own (a copy) and a
throwaway SQLite database, with the reference device:
1. the plugin collects the file for privateuse1 (a `conftest.py` beside the files is
   copied too: a local shim that back-fills a name an older file imports) under a config that lists it with every
   test `mandatory_success` (a file that does not import on this torch is reported with
   pytest's error line, and the rest of its row is empty);
2. the pipeline runs: the inventory (generic tests), stage 1 (is the file in scope),
   the operator capture on the CPU (tests and variants captured), stage 3 (proposals
   per mode) and, when the file collects at most `--device-limit` variants, stage 4
   on the device (variants run, proposals corrected); a bigger file's stage 4 is left
   out and the row says so (on this 2-core machine the reference device runs a few
   hundred variants a minute).
3. with `--plain`, plain pytest runs the file on the CPU (no plugin, no device), the
   baseline of the operator capture's cost (issue 34's bar: capture / plain <= 1.5).
One row per file, with the wall time of each stage; exit 1 when a stage failed on a
file that imports.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCRATCH = Path(tempfile.mkdtemp(prefix="crcr-upstream-files-"))
os.environ.pop("DATABASE_URL", None)
os.environ.pop("CELERY_BROKER_URL", None)
os.environ.update(
    CRCR_VAR_DIR=str(SCRATCH), DEBUG="true", DJANGO_SETTINGS_MODULE="crcr_site.settings"
)
FILES = [
    "test_ops.py",
    "test_modules.py",
    "test_nn.py",
    "test_torch.py",
    "test_unary_ufuncs.py",
    "test_reductions.py",
    "test_view_ops.py",
    "test_binary_ufuncs.py",
]

import django  # noqa: E402

django.setup()

from crcr_reuse.launcher import PytestRun, TestEnvironment  # noqa: E402
from django.core.management import call_command  # noqa: E402

from runs.models import Backend  # noqa: E402
from selection import pipeline  # noqa: E402
from selection.models import ConfigVersion, SelectionRun  # noqa: E402

COLLECTED = re.compile(r"(\d+)(?:/\d+)? tests? collected")
ERROR_LINE = re.compile(r"^E\s+(\w*(Error|Exception)\b.*)$", re.MULTILINE)


def collect(tree: Path, name: str) -> tuple[int | None, str]:
    """(variants collected for privateuse1, or None; the import error when there is one)."""
    config = tree / "all.yaml"
    config.write_text(
        "test_suite_config:\n  files:\n"
        f"    - path: ${{TORCH_ROOT}}/test/{name}\n      unlisted_test_mode: mandatory_success\n"
    )
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    run = PytestRun(
        TestEnvironment(sys.executable, variables),
        tree,
        files=[str(tree / "test" / name)],
        configs=[config],
        collect_only=True,
        rootdir=tree,
        cwd=tree,
        extra_args=["-p", "no:django"],
    )
    done = run.run(timeout=1800)
    found = COLLECTED.search(done.stdout)
    if done.returncode == 0 and found:
        return int(found.group(1)), ""
    errors = ERROR_LINE.findall(done.stdout + done.stderr)
    return None, (errors[-1][0] if errors else (done.stdout + done.stderr)[-300:]).strip()


def plain_seconds(tree: Path, name: str) -> float:
    """Wall time of plain pytest running the file on the CPU: no plugin, no device."""
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    run = PytestRun(
        TestEnvironment(sys.executable, variables), tree, files=[str(tree / "test" / name)],
        rootdir=tree, cwd=tree, extra_args=["-p", "no:django", "-p", "no:crcr_reuse"],
    )  # fmt: skip
    started = time.monotonic()
    run.run(timeout=7200)
    return time.monotonic() - started


def one_file(source: Path, limit: int, plain: bool = False) -> dict[str, object]:
    tree = SCRATCH / source.stem
    (tree / "test").mkdir(parents=True)
    shutil.copyfile(source, tree / "test" / source.name)  # a symlink would change node ids
    shim = source.with_name("conftest.py")
    if shim.exists():  # a local shim back-filling names older files import
        shutil.copyfile(shim, tree / "test" / "conftest.py")
    started = time.monotonic()
    variants, error = collect(tree, source.name)
    row: dict[str, object] = {
        "file": source.name, "collected": variants, "error": error,
        "collect_seconds": round(time.monotonic() - started),
    }  # fmt: skip
    if variants is None:
        return row
    backend = Backend.objects.create(
        slug=f"ref-{source.stem}".replace("_", "-")[:50], name=source.stem,
        repository="crcr/reference", device_module="crcr_reuse.reference_device",
        extension_points=["eager"],
    )  # fmt: skip
    parent = "test_suite_config:\n  files: []\n"
    ConfigVersion.objects.create(
        backend=backend, number=1, yaml_text=parent, sha256=ConfigVersion.hash_text(parent)
    )
    device = variants <= limit
    run = pipeline.run_for_backend(backend, tree, device=device)
    if run.status != SelectionRun.Status.DONE:
        row["error"] = run.error
        return row
    summary = run.summary
    modes = Counter(d["mode"] for d in summary["decisions"])
    row.update(
        generic=summary["inventory"].get("tests"),
        in_scope=source.name in " ".join(summary["stage1"].get("included", [])),
        captured=_captured(summary["capture"]),
        modes=dict(modes),
        device=_stage4(summary["stage4"])
        if device
        else f"left out ({variants} variants > {limit})",
        seconds=round(time.monotonic() - started),
        stages=summary.get("seconds", {}),
    )
    if plain:
        row["plain"] = round(plain_seconds(tree, source.name), 1)
    return row


def _captured(capture: dict) -> str:
    """Tests and variants the capture recorded, in how many processes, and what it lost."""
    lost = capture.get("lost_files") or []
    return (
        f"{capture['tests']} tests / {capture['variants']} variants in "
        f"{capture['processes']} processes" + (f", lost {', '.join(lost)}" if lost else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="+", default=FILES)
    parser.add_argument("--device-limit", type=int, default=6000)
    parser.add_argument("--plain", action="store_true", help="also time plain pytest (CPU)")
    args = parser.parse_args()
    if not os.environ.get("TORCH_ROOT"):
        raise SystemExit("set TORCH_ROOT to a folder holding PyTorch's test/ files")
    folder = Path(os.environ["TORCH_ROOT"]).resolve() / "test"
    call_command("migrate", verbosity=0)
    failed = False
    for name in args.files:
        if not (folder / name).exists():
            print(f"{name}: not in {folder}")
            continue
        try:
            row = one_file(folder / name, args.device_limit, args.plain)
        except Exception as error:  # one file's failure is that file's row
            failed = True
            print(f"{name}: failed: {type(error).__name__}: {error}")
            continue
        if row.get("collected") is None:
            print(f"{name}: does not import on this torch: {row['error']}")
            continue
        if row.get("error"):
            failed = True
            print(f"{name}: {row['collected']} collected; pipeline failed: {row['error']}")
            continue
        counts: dict[str, int] = row["modes"]  # type: ignore[assignment]
        modes = ", ".join(f"{mode} {count}" for mode, count in sorted(counts.items()))
        print(
            f"{name}: {row['collected']} variants collected; {row['generic']} generic tests "
            f"inventoried; in scope: {row['in_scope']}; captured {row['captured']}; "
            f"proposed: {modes}; device: {row['device']}; {row['seconds']} s",
            flush=True,
        )
        stages: dict[str, float] = row["stages"]  # type: ignore[assignment]
        laps = ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in stages.items())
        print(f"  {name} stages: collection {row['collect_seconds']} s, {laps}")
        if "plain" in row:
            capture = stages.get("operator index", 0.0)
            print(
                f"  {name} operator capture / plain pytest on the CPU: {capture:.0f} s / "
                f"{row['plain']} s = {capture / max(float(row['plain']), 1e-9):.2f} (target <= 1.5)"  # type: ignore[arg-type]
            )
    return 1 if failed else 0


def _stage4(figures: dict[str, int]) -> str:
    """Stage 4's figures in words: variants run, tests they stand for, proposals corrected."""
    return (
        f"{figures['ran']} variants of {figures.get('tests', 0)} tests run, "
        f"{figures.get('corrected', 0)} proposals corrected"
    )


if __name__ == "__main__":
    sys.exit(main())
