"""The engine as a backend team uses it: `python -m crcr_reuse run` on the bundled tree.

Standard library and the engine only: `make engine-alone` (part of `make test`) runs it
with the interpreter of a fresh virtual environment that holds the engine's wheel and
what it declares (no Django, nothing of crcr), with `--alone`. Every test's outcome is
compared with `tests/upstream/expected-outcomes.json`, which `--write` (run in crcr's own
environment) records: the installed engine is held to what it does inside crcr.

    python tests/engine/alone.py TREE [--alone] [--write]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

EXPECTED = "expected-outcomes.json"
# The bundled tree's hanging test ends by the plugin's limit, not the caller's.
TEST_TIMEOUT = "10"
KEPT_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL")
PROBE = "python:crcr_reuse.reference_device:probe"


def outcomes(python: str, tree: Path, scratch: Path) -> dict[str, str]:
    """Every test of `tree`'s config run on the reference device: node id -> outcome."""
    progress = scratch / "progress.jsonl"
    environment = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
    environment.update(
        TORCH_ROOT=str(tree),
        TMPDIR=str(scratch),
        CRCR_FLAKY_COUNTER=str(scratch / "flaky-counter"),  # fails once: a fresh counter
    )
    command = [
        python, "-m", "crcr_reuse", "run", "--progress", str(progress), "--",
        "-p", "no:cacheprovider", "-p", "crcr_reuse", "-q",
        "--reuse-config", str(tree / "crcr-config.yaml"),
        "--reuse-device", "crcr_reuse.reference_device",
        "--reuse-timeout", TEST_TIMEOUT, "test",
        # The device's health probe after every test: it never mistakes a test's own
        # fault (a crash, a hang, a deviating op) for a poisoned device.
        "--reuse-health-probe", PROBE, "--reuse-health-every", "1",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=tree, env=environment, capture_output=True, text=True, timeout=600
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"crcr_reuse run ended with {done.returncode}:\n{done.stderr[-4000:]}")
    from crcr_reuse.outcomes import read_progress
    from crcr_reuse.supervisor import shown

    records = read_progress(progress, ended=True).records
    return {node_id: shown(record) for node_id, record in sorted(records.items())}


def differences(expected: dict[str, str], found: dict[str, str]) -> list[str]:
    return [
        f"{node_id}: expected {expected.get(node_id, 'absent')}, got {found.get(node_id, 'absent')}"
        for node_id in sorted(expected.keys() | found.keys())
        if expected.get(node_id) != found.get(node_id)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--alone", action="store_true", help="check that no Django is here")
    parser.add_argument("--write", action="store_true", help="write the expected outcomes")
    args = parser.parse_args()
    tree = args.tree.resolve()
    import crcr_reuse

    print(f"crcr_reuse from {Path(crcr_reuse.__file__).parent}")
    if args.alone and importlib.util.find_spec("django") is not None:
        print("Django is importable here: this is not the engine alone", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="crcr-alone-") as scratch:
        found = outcomes(sys.executable, tree, Path(scratch))
    if args.write:
        (tree / EXPECTED).write_text(json.dumps(found, indent=1) + "\n")
        return 0
    wrong = differences(json.loads((tree / EXPECTED).read_text()), found)
    for line in wrong:
        print(line, file=sys.stderr)
    print(f"{len(found)} tests, {len(wrong)} outcomes differ from {EXPECTED}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
