"""Issue 33's bar: Torch Spyre's published test configs still import and validate.

    SPYRE_ROOT=/path/to/torch-spyre .venv/bin/python bench/spyre_configs.py [ROOT]

ROOT (the argument, else ``$SPYRE_ROOT``): a Torch Spyre checkout, or a copy of its
``tests/configs/`` tree (``ROOT/tests/configs`` when it exists, else ROOT itself). Spyre's
files cannot live in the repository, so CI checks the importer on small configs written
after Spyre's (tests/engine/test_spyre_import.py, and this script on a tiny tree in
tests/crcr_site/test_bench_scripts.py); this script is the check on the real ones.

Every YAML file with a top-level ``test_suite_config`` is a config. Each is imported with
the engine's importer (as ``python -m crcr_reuse import-spyre``, op includes checked
against torch's op_db) and its output loaded with the engine's loader (as ``python -m
crcr_reuse validate``), ``${TORCH_ROOT}`` and ``${TORCH_DEVICE_ROOT}`` pointing at scratch
folders holding an empty file at every path the config names. Printed: configs found,
imported, validated, failed (each failure with its error); the importer's report over
every config; the ``description``s of the sources by place and how many the imported
configs still hold (same place, same text). Exit 1 when a config fails; 0 with
"skipped: ..." when there is no tree.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "engine"))

from crcr_reuse.loader import ConfigError, load_configs  # noqa: E402
from crcr_reuse.spyre import ImportProblem, ImportReport, import_text, in_op_db  # noqa: E402

PLACES = (
    "edits.ops.include",
    "edits.modules.include",
    "global.supported_dtypes",
    "edits.ops.exclude",
    "tests entries",
    "other",
)
TOKEN = re.compile(r"\$\{(TORCH_ROOT|TORCH_DEVICE_ROOT)\}")


def configs_under(root: Path) -> tuple[list[Path], int]:
    """The configs under root's config tree, and how many YAML files are not configs."""
    tree = root / "tests" / "configs" if (root / "tests" / "configs").is_dir() else root
    configs, others = [], 0
    for path in sorted(p for p in tree.rglob("*") if p.suffix in (".yaml", ".yml")):
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            document = None  # the importer names the problem if it looks like a config
            if "test_suite_config" in path.read_text(encoding="utf-8", errors="replace"):
                configs.append(path)
                continue
        if isinstance(document, dict) and "test_suite_config" in document:
            configs.append(path)
        else:
            others += 1
    return configs, others


def place(keys: tuple[str, ...]) -> str:
    """Where a mapping holding a `description` sits (its keys from the top, lists skipped)."""
    for name in PLACES[:4]:
        parts = tuple(name.split("."))
        if keys[-len(parts) :] == parts:
            return name
    if keys[-2:] == ("global_config", "supported_dtypes"):
        return "global.supported_dtypes"
    if keys[-2:] == ("files", "tests"):
        return "tests entries"
    return "other: " + ".".join(k for k in keys if k != "test_suite_config")


def descriptions(node: Any, keys: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """(place, text) of every `description` in a loaded config."""
    if isinstance(node, dict):
        if "description" in node:
            yield place(keys), str(node["description"]).strip()
        for key, value in node.items():
            yield from descriptions(value, (*keys, str(key)))
    elif isinstance(node, list):
        for item in node:
            yield from descriptions(item, keys)


def placeholders(config: Path, document: Any, roots: dict[str, Path], scratch: Path) -> None:
    """An empty file at every path the imported config names (globs filled in)."""
    suite = document.get("test_suite_config") if isinstance(document, dict) else None
    entries = suite.get("files") if isinstance(suite, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        raw = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(raw, str):
            continue
        text = TOKEN.sub(lambda m: str(roots[m.group(1)]), raw)
        text = re.sub(r"\[([^]])[^]]*\]", r"\1", re.sub(r"\*\*/?", "", text))
        target = Path(config.parent, text.replace("*", "x").replace("?", "x")).resolve()
        if "${" not in text and target.is_relative_to(scratch):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()


def check(
    source: Path, name: str, scratch: Path, report: ImportReport, kept: Counter[tuple[str, str]]
) -> tuple[str, str] | None:
    """Import and validate one config; (step, error) when it fails."""
    text = source.read_text(encoding="utf-8")
    try:
        imported, _ = import_text(text, name, report, known_op=in_op_db)
    except ImportProblem as error:
        return "import", str(error)
    out = scratch / "imported" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(imported, encoding="utf-8")
    document = yaml.safe_load(imported)
    kept.update(descriptions(document))
    roots = {token: scratch / "roots" / token for token in ("TORCH_ROOT", "TORCH_DEVICE_ROOT")}
    placeholders(out, document, roots, scratch)
    try:
        load_configs([out], {token: str(path) for token, path in roots.items()})
    except ConfigError as error:
        return "validate", str(error).replace(str(scratch) + "/", "")
    return None


def main(argv: list[str]) -> int:
    given = argv[0] if argv else os.environ.get("SPYRE_ROOT", "")
    root = Path(given) if given else None
    if root is None or not root.is_dir():
        print(f"skipped: no Torch Spyre tree (argument or SPYRE_ROOT: {given or 'unset'})")
        return 0
    configs, others = configs_under(root)
    report, failures = ImportReport(), []
    sources: Counter[tuple[str, str]] = Counter()
    kept: Counter[tuple[str, str]] = Counter()
    with tempfile.TemporaryDirectory(prefix="crcr-spyre-") as tmp:
        scratch = Path(tmp).resolve()
        for source in configs:
            name = str(source.relative_to(root))
            with contextlib.suppress(yaml.YAMLError):  # the importer reports it
                sources.update(descriptions(yaml.safe_load(source.read_text(encoding="utf-8"))))
            failure = check(source, name, scratch, report, kept)
            if failure:
                failures.append((name, *failure))
    print(f"Torch Spyre configs under {root} ({others} other YAML files left alone)")
    failed_import = sum(1 for _, step, _ in failures if step == "import")
    for what, count in (
        ("found", len(configs)),
        ("imported", len(configs) - failed_import),
        ("validated", len(configs) - len(failures)),
        ("failed", len(failures)),
    ):
        print(f"  {what:<10}{count:>6}")
    for name, step, error in failures:
        print(f"FAILED ({step}) {name}:\n    " + error.replace("\n", "\n    "))
    print("\nimporter's report:\n" + report.text())
    print_descriptions(sources, kept)
    print("all configs import and validate" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


def print_descriptions(sources: Counter[tuple[str, str]], kept: Counter[tuple[str, str]]) -> None:
    """The sources' descriptions by place, and how many the imported configs still hold."""
    print(f"\n{'descriptions by place':<26}{'sources':>9}{'kept':>9}")
    for where in PLACES:
        mine = {key: n for key, n in sources.items() if key[0].split(":")[0] == where}
        survived = sum(min(n, kept[key]) for key, n in mine.items())
        print(f"  {where:<24}{sum(mine.values()):>9}{survived:>9}")
    other = Counter(
        key[0].removeprefix("other: ") for key in sources.elements() if key[0].startswith("other: ")
    )
    if other:
        print("  (other: " + ", ".join(f"{k} {n}" for k, n in sorted(other.items())) + ")")
    total = sum(min(n, kept[key]) for key, n in sources.items())
    print(f"  {'all':<24}{sum(sources.values()):>9}{total:>9}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
