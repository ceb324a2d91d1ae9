#!/usr/bin/env python3
"""Reproduce a crcr run from its bundle (this file is the bundle's `reproduce` script).

Standard library only, so it runs from a freshly unpacked bundle:

    python reproduce --verify                 # every file against manifest.json
    python reproduce --list                   # shards and tests with their recorded outcomes
    python reproduce --test NODE_ID [--test NODE_ID ...]
    python reproduce --shard N
    python reproduce --all
    python reproduce --create-env DIR [--wheels W] [--dry-run]   # the run's environment

Steps of a re-run:
1. verify the bundle (refuses a tampered one unless --no-verify);
2. find the test tree: the bundle's `tree/` (crcr's bundled tree), else
   --torch-root / $TORCH_ROOT, which must be a checkout at the recorded SHA;
3. run pytest with the interpreter in $PYTHON (else this one), the bundle's
   config, the reuse plugin and the recorded environment variables, in a fresh
   `work/<time>/` folder (JUnit XML, progress log, output);
4. compare each test's outcome class (outcome and failure category) with the
   recorded one; exit 0 when all match, 1 when one differs, 2 on an error.

The pytest plugins (`crcr_reuse`, `crcr_reuse.progress_log`) come from crcr's engine:
the interpreter must have it installed (`pip install <crcr checkout>/engine` at the
commit in metadata.json), or the recorded checkout must still exist here.

A run whose combination was built (a build command) ran in an environment made from
its wheels and pinned test requirements: `--create-env` makes the same one from the
same wheels (the bundle's `artifacts/`, or `--wheels DIR`), each checked by SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
MANIFEST = "manifest.json"
WORK = "work"  # re-runs write here; not part of the bundle
# Multiprocessing's sockets go to $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, 107 bytes at most.
SOCKET_TMPDIR_ROOM = 107 - len("/pymp-xxxxxxxx/listener-xxxxxxxx")
PASSING = ("passed", "xfailed", "xpassed")
FAILING = ("failed", "error", "crashed", "timed_out")
OUTCOME_CATEGORY = {"crashed": "crash", "timed_out": "timeout"}
DEVICE_SUFFIX = re.compile(r"(PRIVATEUSE1|PRIVATEUSEONE)$")
DROPPED_ENV = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "CELERY_BROKER_URL")
PROBE = (
    "import importlib.metadata as m, crcr_reuse.plugin, crcr_reuse.progress_log; "
    "print(any(e.name == 'crcr_reuse' for e in m.entry_points(group='pytest11')))"
)


class BundleError(Exception):
    """Something about the bundle or this host stops the re-run; the message says what."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unsafe(relative: str) -> bool:
    parts = Path(relative).parts
    return not parts or Path(relative).is_absolute() or ".." in parts


def verify_folder(root: Path) -> list[str]:
    """Problems found comparing the folder with its manifest, each naming its file."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        entries = {entry["path"]: entry for entry in manifest["files"]}
    except (OSError, ValueError, KeyError, TypeError) as error:
        return [f"{MANIFEST}: missing or unreadable ({error})"]
    problems = []
    for relative, entry in sorted(entries.items()):
        path = root / relative
        if _unsafe(relative):
            problems.append(f"{relative}: unsafe path in the manifest")
        elif not path.is_file():
            problems.append(f"{relative}: missing")
        elif (found := sha256_file(path)) != entry.get("sha256"):
            problems.append(
                f"{relative}: SHA-256 mismatch (manifest {str(entry.get('sha256'))[:16]}…, "
                f"file {found[:16]}…)"
            )
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        relative = path.relative_to(root).as_posix()
        if relative != MANIFEST and relative.split("/")[0] != WORK and relative not in entries:
            problems.append(f"{relative}: not in the manifest")
    return problems


def canonical(node_id: str) -> str:
    """A node id with the backend's class suffix in one spelling (torch flips it)."""
    parts = node_id.split("::")
    if len(parts) == 3:
        parts[1] = DEVICE_SUFFIX.sub("PRIVATEUSE1", parts[1])
    return "::".join(parts)


def load_metadata(root: Path) -> dict[str, Any]:
    return json.loads((root / "metadata.json").read_text(encoding="utf-8"))


def recorded_outcomes(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per test: its final recorded outcome, its category and every attempt's outcome."""
    categories = {f["node_id"]: f["category"] for f in meta.get("failures", [])}
    tests: dict[str, dict[str, Any]] = {}
    for attempt in sorted(meta.get("attempts", []), key=lambda a: a["attempt"]):
        entry = tests.setdefault(attempt["node_id"], {"attempts": [], "shard": attempt["shard"]})
        entry["attempts"].append(attempt["outcome"])
        entry["outcome"] = attempt["outcome"]
    for node_id, entry in tests.items():
        failing = entry["outcome"] in FAILING
        entry["category"] = categories.get(node_id, "") if failing else ""
    return tests


def choose_ids(meta: dict[str, Any], args: argparse.Namespace) -> list[str]:
    plan = {shard["index"]: shard["test_ids"] for shard in meta.get("plan", [])}
    if args.test:
        return [canonical(node_id) for node_id in args.test]
    if args.shard is not None:
        if args.shard not in plan:
            raise BundleError(f"no shard {args.shard}; the plan has {sorted(plan)}")
        return list(plan[args.shard])
    return [node_id for index in sorted(plan) for node_id in plan[index]]


def _git_head(tree: Path) -> str:
    completed = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return completed.stdout.strip()


def tree_fingerprint(root: Path) -> str:
    """SHA-1 over test/**/*.py names and contents (crcr's test suite identity for a folder)."""
    digest = hashlib.sha1()
    for source in sorted((root / "test").rglob("*.py")):
        digest.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def resolve_tree(root: Path, meta: dict[str, Any], torch_root: str | None) -> Path:
    """The folder that plays ${TORCH_ROOT}: the bundled tree, else the one the run used."""
    if (root / "tree" / "test").is_dir():
        return (root / "tree").resolve()
    recorded = meta["test_tree"]
    given = torch_root or os.environ.get("TORCH_ROOT")
    if not given:
        wanted = (
            f"a PyTorch checkout at {recorded.get('sha')}"
            if recorded.get("sha")
            else (
                f"the test tree at {recorded.get('path')} (fingerprint {recorded.get('fingerprint')})"
            )
        )
        raise BundleError(f"this bundle references its test tree: pass --torch-root {wanted}")
    tree = Path(given).resolve()
    if recorded.get("sha"):
        head = _git_head(tree)
        if head != recorded["sha"]:
            raise BundleError(f"{tree} is at {head or 'no git commit'}, not {recorded['sha']}")
    elif tree_fingerprint(tree) != recorded.get("fingerprint"):
        raise BundleError(f"{tree} is not the test tree the run used (its fingerprint differs)")
    return tree


def _probe(python: str, env: dict[str, str]) -> bool | None:
    """Whether crcr's plugins import in `python` (True: as an installed entry point)."""
    completed = subprocess.run(
        [python, "-c", PROBE], env=env, capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        return None
    return completed.stdout.strip() == "True"


def crcr_setup(python: str, meta: dict[str, Any], env: dict[str, str]) -> str:
    """Make crcr's plugins importable; returns the `-p` name of the reuse plugin."""
    installed = _probe(python, env)
    if installed is None:
        checkout = meta.get("crcr", {}).get("checkout", "")
        engine = Path(checkout, "engine") if checkout else None
        if engine is not None and (engine / "crcr_reuse").is_dir():
            paths = [str(engine), env.get("PYTHONPATH")]
            env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
            installed = _probe(python, env)
    if installed is None:
        commit = meta.get("crcr", {}).get("commit") or "the recorded commit"
        raise BundleError(
            f"{python} cannot import crcr's pytest plugins: install crcr's engine at {commit} "
            "(pip install <crcr checkout>/engine) or run with PYTHON=<a python that has it>"
        )
    return "crcr_reuse" if installed else "crcr_reuse.plugin"


def run_env(meta: dict[str, Any], tree: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    for name, value in meta.get("reproduce", {}).get("env", {}).items():
        env[name] = str(value).replace("${TORCH_ROOT}", str(tree))
    env.update(TORCH_ROOT=str(tree), TMPDIR=str(tmp))
    return env


def read_progress(path: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Finished tests (the worst phase wins) and the order tests started in."""
    results: dict[str, dict[str, Any]] = {}
    started: list[str] = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a killed process may leave its last line cut short
        node_id = canonical(entry["node_id"])
        if entry.get("event") == "start":
            started.append(node_id)
        elif node_id not in results or entry["outcome"] in FAILING:
            results[node_id] = entry
    return results, started


def run_pytest(
    python: str,
    ids: list[str],
    tree: Path,
    work: Path,
    plugin: str,
    env: dict[str, str],
    timeout: float,
) -> dict[str, dict[str, Any]]:
    """One pytest process over `ids`; a test left unfinished is crashed or timed out."""
    ids_file, progress, log = work / "ids.txt", work / "progress.jsonl", work / "pytest.log"
    ids_file.write_text("".join(f"{node_id}\n" for node_id in ids), encoding="utf-8")
    command = [
        python, "-m", "pytest", f"--reuse-ids={ids_file}",
        "-p", "crcr_reuse.progress_log", f"--crcr-progress={progress}",
        f"--junitxml={work / 'junit.xml'}", "-p", "no:cacheprovider", "-q", "--no-header", "-rN",
        "-p", plugin, f"--reuse-config={ROOT / 'config.yaml'}",
        f"--reuse-device={env.get('CRCR_REUSE_DEVICE', '')}", f"--reuse-torch-root={tree}",
    ]  # fmt: skip
    print("$", " ".join(command), flush=True)
    with log.open("wb") as output:
        try:
            subprocess.run(
                command, cwd=tree, env=env, stdout=output, stderr=subprocess.STDOUT, timeout=timeout
            )
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
    results, started = read_progress(progress)
    for node_id in started:
        if node_id not in results:
            outcome = "timed_out" if timed_out else "crashed"
            results[node_id] = {
                "outcome": outcome,
                "message": log.read_text(errors="replace")[-4000:],
            }
    return results


def category_of(outcome: str, message: str) -> str:
    """The failure category crcr would give (empty for a pass or a skip)."""
    if outcome not in FAILING:
        return ""
    if outcome in OUTCOME_CATEGORY:
        return OUTCOME_CATEGORY[outcome]
    try:
        from runs.triage import classify
    except ImportError:
        return "unknown (crcr's classifier is not importable)"
    return str(classify(message).category)


def compare(
    ids: list[str], now: dict[str, dict[str, Any]], recorded: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    rows = []
    for node_id in ids:
        entry = now.get(node_id, {"outcome": "error", "message": "not collected: unknown test id"})
        before = recorded.get(node_id, {})
        row = {
            "node_id": node_id,
            "recorded": before.get("outcome", "(not in the run)"),
            "recorded_category": before.get("category", ""),
            "recorded_attempts": before.get("attempts", []),
            "outcome": entry["outcome"],
            "category": category_of(entry["outcome"], entry.get("message", "")),
            "message": entry.get("message", "")[:4000],
        }
        row["same"] = (row["outcome"], row["category"]) == (
            row["recorded"],
            row["recorded_category"],
        )
        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        mark = "same" if row["same"] else "DIFFERENT"
        before = f"{row['recorded']} {row['recorded_category']}".strip()
        after = f"{row['outcome']} {row['category']}".strip()
        print(f"[{mark}] {row['node_id']}: recorded {before}; now {after}")
    same = sum(row["same"] for row in rows)
    print(f"reproduced {same} of {len(rows)} test outcome(s)")


def rerun(args: argparse.Namespace, meta: dict[str, Any]) -> int:
    python = args.python or os.environ.get("PYTHON") or sys.executable
    tree = resolve_tree(ROOT, meta, args.torch_root)
    ids = choose_ids(meta, args)
    work = ROOT / WORK / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / "tmp"
    if len(str(tmp)) > SOCKET_TMPDIR_ROOM:  # as crcr's runs do (runs/planning.py)
        tmp = Path(tempfile.mkdtemp(prefix="crcr-"))
    tmp.mkdir(parents=True, exist_ok=True)
    env = run_env(meta, tree, tmp)
    plugin = crcr_setup(python, meta, env)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    timeout = args.timeout or float(meta.get("command", {}).get("shard_timeout") or 3600)
    now = run_pytest(python, ids, tree, work, plugin, env, timeout)
    rows = compare(ids, now, recorded_outcomes(meta))
    (work / "result.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    report(rows)
    print(f"files of this re-run: {work}")
    return 0 if all(row["same"] for row in rows) else 1


def list_plan(meta: dict[str, Any]) -> int:
    recorded = recorded_outcomes(meta)
    for shard in meta.get("plan", []):
        print(
            f"shard {shard['index']} ({len(shard['test_ids'])} tests, ~{shard['estimated_seconds']:.0f} s)"
        )
        for node_id in shard["test_ids"]:
            entry = recorded.get(node_id, {})
            print(f"  {node_id}  {' -> '.join(entry.get('attempts', [])) or '(no result)'}")
    return 0


def built_environment(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The combination's environment the run's tests ran in, when one was built."""
    for env in meta.get("environments", []):
        if (env.get("environment") or {}).get("kind") == "built":
            return dict(env["environment"])
    return None


def find_wheel(wheel: dict[str, Any], meta: dict[str, Any], wheels: Path | None) -> Path:
    """The artifact's wheel, from the bundle or `wheels`, checked by its SHA-256."""
    candidates = [
        ROOT / artifact["bundled_path"]
        for artifact in meta.get("artifacts", [])
        if artifact.get("sha256") == wheel["sha256"] and artifact.get("bundled_path")
    ]
    candidates += sorted(wheels.glob("*.whl")) if wheels else []
    for path in candidates:
        if path.is_file() and sha256_file(path) == wheel["sha256"]:
            return path
    raise BundleError(
        f"the wheel {wheel['name']} {wheel['version']} (sha256 {wheel['sha256']}) is neither "
        "in this bundle nor in --wheels DIR: download it from the run's artifacts"
    )


def create_env(target: Path, meta: dict[str, Any], dry_run: bool, wheels: Path | None) -> int:
    """A virtual environment like the run's: the combination's wheels and its pinned test
    requirements when one was built (checked by hash), else the worker's requirements.txt,
    the included wheels and crcr."""
    python = target / "bin" / "python"
    commands = [[sys.executable, "-m", "venv", str(target)]]
    built = built_environment(meta)
    if built is not None:
        files = [str(find_wheel(wheel, meta, wheels)) for wheel in built["wheels"]]
        commands.append([str(python), "-m", "pip", "install", "--no-deps", *files,
                         "-r", str(ROOT / "requirements.txt")])  # fmt: skip
        return run_commands(commands, python, dry_run)
    commands.append([str(python), "-m", "pip", "install", "-r", str(ROOT / "requirements.txt")])
    for artifact in meta.get("artifacts", []):
        if artifact.get("bundled_path"):
            commands.append(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--no-deps",
                    str(ROOT / artifact["bundled_path"]),
                ]
            )
    engine = Path(meta.get("crcr", {}).get("checkout") or "/nonexistent", "engine")
    if (engine / "pyproject.toml").is_file():  # the engine's plugins, from that checkout
        commands.append([str(python), "-m", "pip", "install", "--no-deps", "-e", str(engine)])
    return run_commands(commands, python, dry_run)


def run_commands(commands: list[list[str]], python: Path, dry_run: bool) -> int:
    for command in commands:
        print("$", " ".join(command), flush=True)
        if not dry_run:
            subprocess.run(command, check=True)
    print(f"then: PYTHON={python} python reproduce --all")
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="reproduce", description="Reproduce a crcr run from its bundle."
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--verify", action="store_true", help="check every file against the manifest"
    )
    action.add_argument(
        "--list", action="store_true", help="shards and tests with recorded outcomes"
    )
    action.add_argument("--test", action="append", metavar="NODE_ID", help="re-run this test")
    action.add_argument("--shard", type=int, metavar="N", help="re-run shard N")
    action.add_argument("--all", action="store_true", help="re-run every shard")
    action.add_argument("--create-env", metavar="DIR", help="create a venv from requirements.txt")
    parser.add_argument("--python", help="interpreter for pytest (default: $PYTHON, else this one)")
    parser.add_argument(
        "--torch-root", help="a PyTorch checkout at the run's SHA (no bundled tree)"
    )
    parser.add_argument("--timeout", type=float, help="seconds before the pytest process is killed")
    parser.add_argument("--dry-run", action="store_true", help="with --create-env: print only")
    parser.add_argument(
        "--wheels", type=Path, help="with --create-env: a folder holding the run's wheels"
    )
    parser.add_argument("--no-verify", action="store_true", help="skip the manifest check")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    problems = [] if args.no_verify and not args.verify else verify_folder(ROOT)
    if problems:
        print("the bundle does not match its manifest:", *problems, sep="\n  ", file=sys.stderr)
        return 2
    if args.verify:
        print(f"all files match {MANIFEST}")
        return 0
    meta = load_metadata(ROOT)
    try:
        if args.list:
            return list_plan(meta)
        if args.create_env:
            return create_env(Path(args.create_env).resolve(), meta, args.dry_run, args.wheels)
        return rerun(args, meta)
    except BundleError as error:
        print(f"reproduce: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
