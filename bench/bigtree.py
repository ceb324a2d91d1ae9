"""Bench input: a PyTorch-sized test tree made of renamed copies of the bundled files.

    .venv/bin/python bench/bigtree.py [--files 1000] [--per-file 100] [--seed 0] [--cache DIR]

PyTorch's `test/` holds about a thousand test files that generate about a hundred
thousand tests for one device. This builds a tree of that size from the bundled
upstream-style files (tests/upstream/test), for the benches that need one
(`selection_scale.py`, `first_test.py`) and for `upgrade.py`'s smaller trees:
1. calibrate: plain pytest collects each bundled file for privateuse1 with the
   reference device (`crcr_reuse.reference_device`), giving its variants;
2. each of `--files` files is a renamed copy of a bundled file, drawn by a seeded
   generator, in one of a few eager folders (test/, test/nn/, ...), its test classes
   repeated under new names until the file generates about `--per-file` variants (every
   copy of one bundled file is the same text: only its name differs, as in upgrade.py);
3. the tree is kept under the cache folder (`$CRCR_BENCH_CACHE`, else
   ~/.cache/crcr-bench), keyed by seed, size and a hash of the bundled files and of
   this generator, built in a scratch folder and renamed into place: a second run
   (another bench, the same bench again) reuses it.
Run alone, it builds (or finds) the tree, collects it with plain pytest and prints the
number of generated variants (the figure: about 100,000 at the default size).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from crcr_reuse.launcher import PytestRun, TestEnvironment, collected_ids  # noqa: E402

SOURCE = ROOT / "tests" / "upstream"
# Beside test/: the files pytest and the reference device read (the tree's own pytest
# config keeps crcr's out; the planted faults' profile).
TOP_LEVEL = ("pytest.ini", "refdev_faults.yaml")
HELPERS = ("conftest.py",)
# Eager folders only (`selection.scope.area_of`): stage 1 keeps every file, so the
# pipeline and plain collection see the same tests.
FOLDERS = ("", "", "nn", "linalg", "optim", "fx")
DEVICE = "crcr_reuse.reference_device"
TEST_CLASS = re.compile(r"^class (Test\w+)\(", re.MULTILINE)
MAIN_GUARD = re.compile(r'^if __name__ == "__main__":', re.MULTILINE)
COLLECTED = re.compile(r"(\d+)(?:/\d+)? tests? collected")
# Bump when the generator writes different trees: the cache key holds it.
GENERATOR_VERSION = "1"
MANIFEST = "manifest.json"
DEFAULT_FILES, DEFAULT_PER_FILE = 1000, 100


# -- shared with upgrade.py: trees of renamed copies ----------------------------------------


def source_files(source: Path) -> list[Path]:
    """The bundled (or `$TORCH_ROOT`'s) top-level test files, sorted."""
    return sorted((source / "test").glob("test_*.py"))


def start_tree(source: Path, tree: Path) -> Path:
    """An empty tree: test/ with the source's conftest, and the top-level files."""
    (tree / "test").mkdir(parents=True)
    for name in HELPERS:
        if (source / "test" / name).exists():
            shutil.copy(source / "test" / name, tree / "test" / name)
    for name in TOP_LEVEL:
        if (source / name).exists():
            shutil.copy(source / name, tree / name)
    return tree


def write_copies(tree: Path, copies: dict[str, str]) -> None:
    """Write each relative path's text under the tree's test/ folder."""
    for relative, text in copies.items():
        target = tree / "test" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


# -- the big tree ---------------------------------------------------------------------------


def repeated(text: str, times: int) -> str:
    """The file with its test classes written `times` times, renamed after the first.

    The classes and everything after them up to the `__main__` guard (instantiation
    calls) are the block repeated; each copy's class names get a suffix wherever the
    block names them, so every copy instantiates its own classes."""
    names = TEST_CLASS.findall(text)
    if times <= 1 or not names:
        return text
    first = TEST_CLASS.search(text)
    assert first is not None
    start = text.rfind("\n\n", 0, first.start()) + 1  # the class's decorators come with it
    guard = MAIN_GUARD.search(text, start)
    end = guard.start() if guard else len(text)
    block = text[start:end]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    extra = [pattern.sub(rf"\g<1>Copy{n}", block) for n in range(2, times + 1)]
    return text[:end] + "".join(extra) + text[end:]


def environment() -> TestEnvironment:
    """This process's variables (less pytest's and Django's), torch's device bases
    restricted to privateuse1, as `collection.py`'s plain baseline runs."""
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    variables["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"
    variables.pop("TORCH_ROOT", None)
    return TestEnvironment(sys.executable, variables)


def plain_collection(tree: Path, files: list[str] | None = None) -> PytestRun:
    """Plain `pytest --collect-only` of the tree for privateuse1, the reference device
    registered by importing it, crcr's plugin blocked: the baseline of every big-tree bench."""
    return PytestRun(
        environment(),
        None,
        files=files or ["test"],
        collect_only=True,
        rootdir=tree,
        cwd=tree,
        extra_args=["-p", "no:django", "-p", "no:crcr_reuse", "-p", DEVICE],
    )


@dataclass
class Collected:
    ids: list[str]
    count: int
    seconds: float
    cpu: float  # the collecting process's user + system time
    peak_mib: float  # its peak RSS


def collect(pytest: PytestRun) -> Collected:
    """Run one collection to the end: its ids, count, wall time and peak memory."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as output:
        child = subprocess.Popen(
            pytest.argv(), cwd=pytest.working_dir, env=dict(pytest.environment.variables),
            stdout=output, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    found = COLLECTED.search(text[-2000:])
    if os.waitstatus_to_exitcode(status) != 0 or not found:
        raise SystemExit(f"collection failed:\n{text[-3000:]}")
    ids = collected_ids(text)  # every id, spaces and brackets included
    cpu = usage.ru_utime + usage.ru_stime
    return Collected(ids, int(found.group(1)), seconds, cpu, usage.ru_maxrss / 1024)


def calibrate(source: Path) -> dict[str, int]:
    """Variants each bundled file generates for privateuse1 (one plain collection)."""
    names = [path.name for path in source_files(source)]
    collected = collect(plain_collection(source, [f"test/{name}" for name in names]))
    counts = dict.fromkeys(names, 0)
    for node_id in collected.ids:
        counts[Path(node_id.split("::")[0]).name] += 1
    return counts


def cache_root(cache: Path | None = None) -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crcr-bench"
    return Path(cache or os.environ.get("CRCR_BENCH_CACHE") or default)


def source_hash(source: Path) -> str:
    """The bundled files' identity (what the calibration depends on)."""
    digest = hashlib.sha256()
    for path in [*source_files(source), *(source / "test" / n for n in HELPERS)]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass
class BigTree:
    root: Path
    files: int
    expected_variants: int  # from the calibration: what plain collection should find
    contents: int  # distinct file texts
    built_seconds: float  # 0 when it came from the cache

    @property
    def manifest(self) -> dict[str, object]:
        return json.loads((self.root / MANIFEST).read_text())


def build(
    files: int = DEFAULT_FILES,
    per_file: int = DEFAULT_PER_FILE,
    seed: int = 0,
    cache: Path | None = None,
    source: Path = SOURCE,
) -> BigTree:
    """The tree for (seed, size), from the cache when an earlier run built it."""
    key = source_hash(source)
    name = f"bigtree-{key}-g{GENERATOR_VERSION}-s{seed}-f{files}-v{per_file}"
    root = cache_root(cache) / name
    if (root / MANIFEST).exists():
        data = json.loads((root / MANIFEST).read_text())
        return BigTree(root, data["files"], data["expected_variants"], data["contents"], 0.0)
    started = time.monotonic()
    counts = _calibration(source, cache_root(cache) / f"calibration-{key}.json")
    rng = random.Random(seed)
    kinds = sorted(name for name, count in counts.items() if count)
    texts = {name: (source / "test" / name).read_text() for name in kinds}
    times = {name: max(1, round(per_file / counts[name])) for name in kinds}
    copies: dict[str, str] = {}
    expected = 0
    for index in range(files):
        name = rng.choice(kinds)
        folder = rng.choice(FOLDERS)
        relative = str(Path(folder) / f"{Path(name).stem}_{index:04d}.py")
        copies[relative] = repeated(texts[name], times[name])
        expected += counts[name] * times[name]
    root.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{root.name}.", dir=root.parent))
    write_copies(start_tree(source, scratch / "tree"), copies)
    manifest = {
        "seed": seed, "files": files, "per_file": per_file, "source_hash": key,
        "expected_variants": expected, "contents": len(set(copies.values())),
        "times": times, "calibration": counts,
    }  # fmt: skip
    (scratch / "tree" / MANIFEST).write_text(json.dumps(manifest, indent=1))
    with contextlib.suppress(OSError):  # another process won the race: keep its tree
        (scratch / "tree").rename(root)
    shutil.rmtree(scratch, ignore_errors=True)
    return BigTree(root, files, expected, len(set(copies.values())), time.monotonic() - started)


def _calibration(source: Path, path: Path) -> dict[str, int]:
    if path.exists():
        return dict(json.loads(path.read_text()))
    counts = calibrate(source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(counts))
    return counts


def options(parser: argparse.ArgumentParser) -> None:
    """The tree's options, the same in every bench that uses it."""
    parser.add_argument("--files", type=int, default=DEFAULT_FILES, help="test files")
    parser.add_argument(
        "--per-file", type=int, default=DEFAULT_PER_FILE, help="variants a file generates"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=None, help="where trees are kept")


def from_options(args: argparse.Namespace) -> BigTree:
    tree = build(args.files, args.per_file, args.seed, args.cache)
    how = f"built in {tree.built_seconds:.1f} s" if tree.built_seconds else "from the cache"
    print(f"tree {tree.root}: {tree.files} test files ({tree.contents} distinct texts), {how}")
    return tree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options(parser)
    args = parser.parse_args()
    tree = from_options(args)
    collected = collect(plain_collection(tree.root))
    print(
        f"plain collection: {collected.count} tests in {collected.seconds:.1f} s, "
        f"peak RSS {collected.peak_mib:.0f} MiB (calibration expected {tree.expected_variants})"
    )
    bound = int(0.9 * args.files * args.per_file)
    print(f"generated variants: {collected.count} (target >= {bound})")
    return 0 if collected.count >= bound and collected.count == tree.expected_variants else 1


if __name__ == "__main__":
    sys.exit(main())
