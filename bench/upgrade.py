"""Bench: upgrading PyTorch when 10 % of the test files change, against a full selection.

    .venv/bin/python bench/upgrade.py [--copies 16] [--changed 0.1]

Builds tree A from the test files of $TORCH_ROOT (else the bundled tree), each
copied `--copies` times under new names, and tree B from A with 10 % of the files
changed (in each: one test's body edited, one test added, one removed). In one run:
- setup (not timed): a database that knows A (inventory, capture, stage 3);
- full: a fresh database, inventory of B and stages 1-3 on all of it
  (`pipeline.run_for_backend(device=False)`);
- upgrade: the database that knows A upgrades to B (`upgrade.upgrade(device=False)`):
  inventory (incremental), diff, capture and classification of the diff only.
Each phase is its own process; the device probe is warmed first so neither pays
it. Figure: upgrade / full, in CPU time of the phase and everything it ran
(target <= 0.20), and in wall time. Stage 4 is left out of both sides: it runs
the same diff-only set in the upgrade, so including it only adds the same
device time to both numerators' proportions.
Exit status 1 when the target is missed.

    .venv/bin/python bench/upgrade.py --old DIR --new DIR [--file test_reductions.py]

Use case B on real history: tree A holds DIR_old/test/FILE (and its conftest.py),
tree B DIR_new/test/FILE. The upgrade A -> B is compared with a full selection on
B: the tests and variants it classified against the file's totals, and the
decisions (mode and edits per test) that the review queue ends with (A's for the
unchanged tests, the upgrade's for the rest) against the full selection's.
Exit status 1 when any decision differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bigtree

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.20
PARENT = "test_suite_config:\n  files: []\n"


def build_trees(
    source: Path, scratch: Path, copies: int, share: float
) -> tuple[Path, Path, int, int]:
    """Tree A: each source file copied `copies` times under new names; tree B: A with
    every n-th copy changed (`change`)."""
    originals = bigtree.source_files(source)
    tree_a = bigtree.start_tree(source, scratch / "a")
    tree_b = bigtree.start_tree(source, scratch / "b")
    # Each copy starts with its own comment: PyTorch's files are all distinct, and the
    # operator index captures a text once for every file holding it (opindex.same_text),
    # so identical copies would measure that sharing, not an upgrade against a full run.
    texts = {
        f"{original.stem}_copy{n}.py": f"# copy {n} of {original.name}\n{original.read_text()}"
        for n in range(copies)
        for original in originals
    }
    bigtree.write_copies(tree_a, texts)
    step = max(1, round(1 / share))
    changed = 0
    for index, (name, text) in enumerate(texts.items()):
        if index % step == 0:
            texts[name], did = change(text)
            changed += did
    bigtree.write_copies(tree_b, texts)
    return tree_a, tree_b, len(texts), changed


def change(text: str) -> tuple[str, int]:
    """Edit one test body, add a test, remove a test (as an upstream commit would)."""
    tests = list(re.finditer(r"\n    def (test_\w+)\(self[^)]*\):\n", text))
    if len(tests) < 2:
        return text, 0
    first, last = tests[0], tests[-1]
    body_start = first.end()
    text = text[:body_start] + "        assert True  # upstream edit\n" + text[body_start:]
    tests = list(re.finditer(r"\n    def (test_\w+)\(self[^)]*\):\n", text))
    last = tests[-1]
    end = text.find("\n\n", last.end())
    removed = text[last.start() : end if end != -1 else len(text)]
    added = removed.replace(f"def {last.group(1)}(", f"def {last.group(1)}_renamed(", 1)
    return text.replace(removed, added, 1), 1


def phase(
    name: str, var: Path, storage: Path, tree: Path, sha: str, out: Path | None = None
) -> tuple[float, float]:
    env = dict(os.environ, CRCR_VAR_DIR=str(var), CRCR_STORAGE_ROOT=str(storage), DEBUG="true")
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, __file__, "--phase", name, "--tree", str(tree), "--sha", sha]
        + (["--out", str(out)] if out else []),
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise SystemExit(
            f"phase {name} failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}"
        )
    print(f"  {name}: {completed.stdout.strip().splitlines()[-1]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def run_phase(name: str, tree: Path, sha: str, out: str | None = None) -> None:
    """Inside a phase's own process (Django on that phase's SQLite database)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crcr_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from runs.models import Backend
    from selection import capabilities, pipeline, upgrade
    from selection.models import ConfigVersion

    call_command("migrate", verbosity=0)
    backend, created = Backend.objects.get_or_create(
        slug="reference",
        defaults={"name": "Reference device", "repository": "crcr/reference",
                  "device_module": "crcr_reuse.reference_device", "extension_points": ["eager"]},
    )  # fmt: skip
    if created:
        ConfigVersion.objects.create(
            backend=backend, number=1, yaml_text=PARENT, sha256=ConfigVersion.hash_text(PARENT)
        )
    if name == "probe":
        capabilities.probe_device(backend.device_module)
        print("device probed")
    elif name in ("setup", "full"):
        run = pipeline.run_for_backend(backend, tree, sha, device=False)
        print(f"{len(run.summary['decisions'])} tests classified; {run.summary['seconds']}")
        if out:
            Path(out).write_text(json.dumps(run.summary))
    else:
        run = upgrade.upgrade(backend, sha, tree, device=False)
        if out:
            Path(out).write_text(json.dumps(run.summary))
        diff = run.summary["diff"]
        print(
            f"{len(diff['added'])} added, {len(diff['changed'])} changed, {len(diff['removed'])} "
            f"removed, {diff['unchanged']} unchanged; {run.summary['classified']} classified; "
            f"inventory parsed {run.summary['inventory']['parsed']} files, "
            f"reused {run.summary['inventory']['reused']}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=16)
    parser.add_argument("--changed", type=float, default=0.1)
    parser.add_argument("--old", type=Path, help="a folder with test/FILE: tree A")
    parser.add_argument("--new", type=Path, help="a folder with test/FILE: tree B")
    parser.add_argument("--file", default="test_reductions.py")
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--sha", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        run_phase(args.phase, Path(args.tree), args.sha, args.out)
        return 0
    if args.old or args.new:
        return real_history(args.old.resolve(), args.new.resolve(), args.file)
    source = Path(os.environ.get("TORCH_ROOT") or ROOT / "tests" / "upstream").resolve()
    with tempfile.TemporaryDirectory(prefix="crcr-bench-upgrade-") as folder:
        scratch = Path(folder)
        tree_a, tree_b, files, changed = build_trees(source, scratch, args.copies, args.changed)
        print(f"source {source}: {files} files, {changed} changed ({changed / files:.0%})")
        storage = scratch / "storage"
        phase("probe", scratch / "known", storage, tree_a, "a" * 40)
        phase("setup", scratch / "known", storage, tree_a, "a" * 40)
        full_cpu, full_wall = phase("full", scratch / "fresh", storage, tree_b, "b" * 40)
        up_cpu, up_wall = phase("upgrade", scratch / "known", storage, tree_b, "b" * 40)
    print(f"full inventory + classification: {full_cpu:7.1f} s CPU, {full_wall:7.1f} s wall")
    print(f"upgrade (diff only):             {up_cpu:7.1f} s CPU, {up_wall:7.1f} s wall")
    ratio = up_cpu / full_cpu
    print(f"upgrade / full, CPU time:  {ratio:.3f} (target <= {TARGET})")
    print(f"upgrade / full, wall time: {up_wall / full_wall:.3f}")
    return 0 if ratio <= TARGET else 1


def real_history(old: Path, new: Path, file: str) -> int:
    """Upgrade tree A (old/test/FILE) to tree B (new/test/FILE), against a full run on B."""
    with tempfile.TemporaryDirectory(prefix="crcr-bench-history-") as folder:
        scratch = Path(folder)
        trees = []
        for source, name in ((old, "a"), (new, "b")):
            tree = bigtree.start_tree(source, scratch / name)
            shutil.copy(source / "test" / file, tree / "test" / file)
            trees.append(tree)
        storage = scratch / "storage"
        phase("probe", scratch / "known", storage, trees[0], "a" * 40)
        phase("setup", scratch / "known", storage, trees[0], "a" * 40, scratch / "setup.json")
        full_cpu, full_wall = phase(
            "full", scratch / "fresh", storage, trees[1], "b" * 40, scratch / "full.json"
        )
        up_cpu, up_wall = phase(
            "upgrade", scratch / "known", storage, trees[1], "b" * 40, scratch / "upgrade.json"
        )
        setup, full, up = (
            json.loads((scratch / f"{n}.json").read_text()) for n in ("setup", "full", "upgrade")
        )
    diff = up["diff"]
    touched = {"::".join(k) for k in diff["added"] + diff["changed"] + diff["removed"]}
    ends = {d["test"]: d for d in setup["decisions"] if d["test"] not in touched}
    ends.update({d["test"]: d for d in up["decisions"]})
    wanted = {d["test"]: d for d in full["decisions"]}
    differ = sorted(
        t for t in set(ends) | set(wanted)
        if (ends.get(t) or {}).get("mode") != (wanted.get(t) or {}).get("mode")
        or (ends.get(t) or {}).get("edits") != (wanted.get(t) or {}).get("edits")
    )  # fmt: skip
    tests, variants = full["capture"]["tests"], full["capture"]["variants"]
    got = up.get("captured") or {"tests": 0, "variants": 0}
    print(
        f"diff: {len(diff['added'])} added, {len(diff['changed'])} changed, "
        f"{len(diff['removed'])} removed, {diff['unchanged']} unchanged"
    )
    print(f"upgrade classified {up['classified']} of {len(wanted)} generic tests")
    print(
        f"upgrade captured {got['tests']} of {tests} tests, {got['variants']} of {variants} variants"
    )
    print(f"full selection on B: {full_cpu:7.1f} s CPU, {full_wall:7.1f} s wall")
    print(f"upgrade A -> B:      {up_cpu:7.1f} s CPU, {up_wall:7.1f} s wall")
    print(f"decisions (mode + edits) that differ from the full run: {len(differ)} of {len(wanted)}")
    for test in differ[:10]:
        print(f"  {test}: upgrade {ends.get(test)} / full {wanted.get(test)}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
