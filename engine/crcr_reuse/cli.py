"""Command line: ``python -m crcr_reuse {validate,merge,explain,list,lint} ...``.

- ``validate CONFIG...``: load and merge; exit 2 with file:line:column errors.
- ``merge CONFIG...``: print the merged config as YAML (comments are not kept).
- ``explain TEST_ID --config CONFIG...``: which entry, mode and edits apply, and why.
- ``list --config CONFIG... [--labels smoke,core]``: per file and mode, how many generic
  tests (static, no torch); ``--collect`` runs pytest's collection through the plugin
  and counts the generated tests instead; ``--labels`` counts only the tests a label
  selection keeps (``labels.py``) and says how many it leaves out.
- ``lint --config CONFIG... [--strict]``: collects like ``list --collect``, then one
  line per dead, duplicate, conflicting or variant-spelled name (``lint.py``);
  ``--strict`` makes any problem exit 1 (a CI step), else they are warnings.
- ``import-spyre SRC... -o OUT``: Torch Spyre configs (files or folders) rewritten in
  crcr's strict form with Spyre's meaning made explicit (``spyre.py``), and one report
  of what was dropped or written out, per key with a count.
- ``export --format pytorch --config CONFIG... [-o OUT.py]``: the config as PyTorch's own
  ``PrivateUse1TestBase.set_test_configs(...)`` call (``pytorch_export.py``); what it
  cannot express goes to the module's header and to stderr, per kind with a count.
- ``import-pytorch SRC.py -o OUT.yaml [--path P]...``: such a call, read statically from a
  conftest or test module, as crcr's YAML (``pytorch_import.py``); exit 2 on bad input.
- ``run [--max-restarts N] [--progress FILE] -- PYTEST_ARGS``: pytest that resumes the
  remaining tests in a fresh process after a crash (``supervisor.py``); its exit status
  is 1 when a test failed or crashed.
Exit codes: 0 fine, 1 a test id/tree problem (or a lint problem under --strict),
2 an invalid config.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from . import lint, pytorch_commands, verdicts
from .document import config_document
from .labels import parse_selection
from .launcher import PytestRun, TestEnvironment
from .loader import ConfigError, load_configs
from .matching import Decision, Rules
from .schema import MODES, Config, Edits
from .static_scan import DEVICE_NAMES, TestId, resolve_test_id, scan_file


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "import-spyre":
        return _import_spyre(args)
    if args.command == "run":
        return _run(args)
    if args.command == "import-pytorch":
        return pytorch_commands.import_command(args)
    try:
        config = load_configs(
            args.configs, {"TORCH_ROOT": args.torch_root, "TORCH_DEVICE_ROOT": args.device_root}
        )
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    try:
        return int(args.handler(config, args) or 0)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m crcr_reuse", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--torch-root", help="value of ${TORCH_ROOT} (default: $TORCH_ROOT)")
    common.add_argument("--device-root", help="value of ${TORCH_DEVICE_ROOT}")
    validate = commands.add_parser("validate", parents=[common], help="check configs")
    validate.add_argument("configs", nargs="+")
    validate.set_defaults(handler=_validate)
    merge = commands.add_parser("merge", parents=[common], help="print the merged config")
    merge.add_argument("configs", nargs="+")
    merge.set_defaults(handler=_merge)
    explain = commands.add_parser("explain", parents=[common], help="why a test gets its mode")
    explain.add_argument("test_id", help="path::Class::test (generic or generated name)")
    explain.add_argument("--config", dest="configs", action="append", required=True)
    explain.set_defaults(handler=_explain)
    listing = commands.add_parser("list", parents=[common], help="tests per file and mode")
    listing.add_argument("--config", dest="configs", action="append", required=True)
    listing.add_argument(
        "--collect", action="store_true", help="count generated tests (imports torch)"
    )
    listing.add_argument("--device", help="device module for --collect")
    listing.add_argument(
        "--labels", action="append", default=[],
        help="count only the tests these labels select (smoke,core; full; suite_<group>)",
    )  # fmt: skip
    listing.set_defaults(handler=_list_command)
    lint = commands.add_parser(
        "lint", parents=[common], help="names that match nothing, repeat or conflict"
    )
    lint.add_argument("--config", dest="configs", action="append", required=True)
    lint.add_argument("--device", help="device module the collection imports")
    lint.add_argument("--strict", action="store_true", help="exit 1 on any problem (for CI)")
    lint.set_defaults(handler=_lint)
    spyre = commands.add_parser(
        "import-spyre", help="rewrite Torch Spyre configs in crcr's strict form"
    )
    spyre.add_argument("sources", nargs="+", help="Spyre config files, or folders of them")
    spyre.add_argument(
        "-o", "--output", required=True,
        help="a file (one source file) or a folder (mirrors the sources' layout)",
    )  # fmt: skip
    pytorch_commands.add_parsers(commands, common)
    run = commands.add_parser(
        "run", help="run pytest; after a crash, the remaining tests in a fresh process"
    )
    run.add_argument(
        "--max-restarts", type=int, default=10, metavar="N",
        help="fresh processes after crashes, at most (default 10)",
    )  # fmt: skip
    run.add_argument("--progress", help="keep the progress log here (default: a temporary file)")
    run.add_argument("pytest_args", nargs="*", help="pytest's arguments, after --")
    return parser


def _run(args: argparse.Namespace) -> int:
    from .supervisor import supervise

    try:
        progress = Path(args.progress) if args.progress else None
        return supervise(args.pytest_args, progress, max(0, args.max_restarts))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 4  # pytest's own status for a usage error


def _import_spyre(args: argparse.Namespace) -> int:
    """Import every source; write each next to the others under OUT; print the report."""
    from .spyre import ImportProblem, ImportReport, import_text, in_op_db

    found: list[tuple[Path, Path]] = []  # (source, path relative to the output)
    for source in map(Path, args.sources):
        if source.is_dir():
            for path in sorted(source.rglob("*.y*ml")):
                found.append((path, path.relative_to(source.parent)))
        elif source.is_file():
            found.append((source, Path(source.name)))
        else:
            print(f"error: {source}: no such file or folder", file=sys.stderr)
            return 2
    output = Path(args.output)
    single = len(found) == 1 and not output.is_dir() and not args.output.endswith("/")
    report, problems = ImportReport(), []
    for source, relative in found:
        try:
            text = source.read_text(encoding="utf-8")
            if len(found) > 1 and "test_suite_config" not in text:
                continue  # a folder's other YAML files (CI, models) are not configs
            imported, _ = import_text(text, str(source), report, known_op=in_op_db)
        except (ImportProblem, OSError, UnicodeDecodeError) as error:
            problems.append(str(error))
            continue
        target = output if single else output / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(imported, encoding="utf-8")
    print(report.text())
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problems or not report.configs else 0


def _validate(config: Config, args: argparse.Namespace) -> int:
    tests = sum(len(entry.tests) for entry in config.files)
    print(f"OK: {len(config.sources)} config(s), {len(config.files)} files entries "
          f"({len(config.all_files())} files), {tests} tests entries, labels {list(config.labels)}")  # fmt: skip
    return 0


def _merge(config: Config, args: argparse.Namespace) -> int:
    print(yaml.safe_dump({"test_suite_config": config_document(config)}, sort_keys=False), end="")
    return 0


def _explain(config: Config, args: argparse.Namespace) -> int:
    test = resolve_test_id(args.test_id)
    rules = Rules(config)
    file_rules = rules.for_file(test.path)
    print(f"test: {test}" + (f"  (generated variant: {test.variant})" if test.variant else ""))
    if file_rules is None:
        print("no files entry lists this file: the plugin does not collect it")
        return 0
    for entry in file_rules.entries:
        print(
            f"files entry: {entry.pos} path {entry.path} (unlisted_test_mode: {entry.unlisted_test_mode})"
        )
        if entry.description:
            print(f"  description ({entry.description.pos}): {entry.description.text}")
    decision = file_rules.decide(test.cls, *_explained_names(test, args.test_id))
    for line in explain_lines(decision, config, test.parts()):
        print(line)
    return 0


def _explained_names(test: TestId, given: str) -> tuple[str, str | None]:
    """(name, source) to match: a device variant goes by its generic test; another
    generated method (torch's @parametrize, a functools.wraps metaclass) by its own
    name first, then the generic test the static scan found as a source."""
    if not test.variant or set(test.variant.split("_")) & set(DEVICE_NAMES):
        return test.name, None
    return given.rsplit("::", 1)[-1], test.name


def explain_lines(
    decision: Decision, config: Config, variant: tuple[str | None, list[str]]
) -> list[str]:
    lines = []
    if decision.entry is None:
        lines.append(
            f"matched: no tests entry names it -> unlisted_test_mode of {decision.file_entry.pos}"
        )
    else:
        kind = (
            "regex (full match)"
            if decision.pattern and decision.pattern.is_regex
            else "literal name"
        )
        lines.append(
            f"matched: tests entry at {decision.entry.pos} by {kind} '{decision.pattern.text if decision.pattern else ''}'"
        )
    lines.append(f"mode: {decision.mode}")
    described = decision.entry.description if decision.entry else None
    where = f"  (its description, {described.pos})" if described else ""
    lines.append(f"reason: {decision.reason}{where}")
    lifted_by = decision.restrictions_lifted_by
    lines.append(
        f"device restrictions: bypassed (bypass_device_restrictions at {lifted_by})"
        if lifted_by
        else "device restrictions: upstream's hold (only_for/except_for, @onlyOn, @onlyCUDA...)"
    )
    lines += _edit_lines(decision)
    lines += _global_lines(config)
    lines += _variant_lines(decision, config, variant)
    if decision.labels or decision.no_grad:
        lines.append(
            f"labels: {', '.join(decision.labels) or '(none: full only)'}"
            + ("; runs under torch.no_grad()" if decision.no_grad else "")
        )
    tags = list(decision.tags) + [f"testtype__{label}" for label in decision.labels]
    lines.append(
        f"markers: {', '.join(tags + [f'mode__{decision.mode}'])} (+ op__/dtype__/module__ per variant)"
    )
    return lines


def _variant_lines(
    decision: Decision, config: Config, variant: tuple[str | None, list[str]]
) -> list[str]:
    """Each op, module and dtype of a generated variant: kept or filtered out, and under
    it the config item that decided so, with its description (``verdicts.py``)."""
    part, dtypes = variant
    filters, edits = decision.filters, decision.entry.edits if decision.entry else Edits()
    kind, names = verdicts.variant_names(part, edits, config) if part else ("op", ())
    op_names = names if kind == "op" else ()
    lines = []
    if kind == "module":
        verdict = "kept" if filters.module_allowed(names[0]) else "filtered out"
        lines += [f"variant module {names[0]}: {verdict}"]
        lines += [f"  {verdicts.module_verdict(names[0], edits, config)}"]
    elif part:
        verdict = "kept" if filters.op_allowed(op_names) else "filtered out"
        lines += [f"variant op {part}: {verdict}", f"  {verdicts.op_verdict(names, edits, config)}"]
    op = verdicts.op_item(op_names, edits, config) if op_names else None
    for dtype in dtypes:
        verdict = "kept" if filters.dtype_allowed(dtype, op_names) else "filtered out"
        lines.append(f"variant dtype {dtype}: {verdict}")
        lines.append(f"  {verdicts.dtype_verdict(dtype, op, edits, config)}")
    return lines


def _edit_lines(decision: Decision) -> list[str]:
    if decision.entry is None or not decision.entry.edits:
        return ["edits: none"]
    lines = []
    for kind in ("dtypes", "ops", "modules"):
        selection = getattr(decision.entry.edits, kind)
        for action in ("include", "exclude"):
            names = [getattr(item, "name", "") for item in getattr(selection, action)]
            if names:
                lines.append(f"edits: {kind} {action} {', '.join(names)}")
    if decision.entry.edits.cpu_move:
        lines.append(f"edits: compared on the CPU: {', '.join(decision.entry.edits.cpu_move)}")
    return lines + verdicts.described_items(decision.entry.edits)


def _global_lines(config: Config) -> list[str]:
    section = config.global_
    shown = []
    for label, items in (
        ("supported_dtypes", section.supported_dtypes),
        ("supported_ops", section.supported_ops),
        ("supported_modules", section.supported_modules),
    ):
        names = "(any)" if items is None else ", ".join(item.name for item in items)
        shown.append(f"global {label}: {names}")
    return shown


def _list_command(config_: Config, args: argparse.Namespace) -> int:
    args.labels = parse_selection(args.labels)  # ValueError: exit 1 naming the label
    rows = _collected_counts(config_, args) if args.collect else _static_counts(config_, args)
    left_out = sum(counts.pop(LEFT_OUT, 0) for counts in rows.values())
    width = max([len(path) for path in rows] + [4])
    print(f"{'file':<{width}}  " + "  ".join(f"{mode:>17}" for mode in MODES))
    for path, counts in sorted(rows.items()):
        print(f"{path:<{width}}  " + "  ".join(f"{counts.get(mode, 0):>17}" for mode in MODES))
    if args.labels:
        print(f"not selected by labels {','.join(args.labels)}: {left_out} tests")
    return 0


LEFT_OUT = "(labels)"  # a row's count of tests the label selection leaves out


def _static_counts(config: Config, args: argparse.Namespace) -> dict[str, Counter[str]]:
    rules = Rules(config)
    rows: dict[str, Counter[str]] = {}
    for path in rules.files:
        file_rules = rules.for_file(path)
        assert file_rules is not None
        counts: Counter[str] = Counter()
        for test in scan_file(path):
            decision = file_rules.decide(test.cls, test.name)
            counts[decision.mode if decision.selected_by(args.labels) else LEFT_OUT] += 1
        rows[_shown_path(path)] = counts
    return rows


def _collected_counts(config: Config, args: argparse.Namespace) -> dict[str, Counter[str]]:
    """Generated tests per file and mode, from a --collect-only run through the plugin."""
    document = collect_report(args)
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for record in document["tests"]:
        rows[_shown_path(record["file"])][record["mode"]] += 1
    for path, counts in document["collection"].get("per_file", {}).items():
        rows[_shown_path(path)]["skip"] += counts.get("skipped_variants", 0) + counts.get(
            "deselected_by_config", 0
        )
    if document["collection"].get("deselected_by_labels"):
        rows["(all files)"][LEFT_OUT] += document["collection"]["deselected_by_labels"]
    return rows


def collect_report(args: argparse.Namespace, every_file: bool = False) -> dict[str, Any]:
    """The JSON report of a --collect-only run of the plugin over ``args.configs``;
    ``every_file``: a file that fails to import fails it (its names would go unchecked)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "collect.json")
        pytest = PytestRun(
            TestEnvironment(sys.executable, os.environ, args.device),
            Path(args.torch_root) if args.torch_root else None,
            configs=[Path(os.path.abspath(path)) for path in args.configs],
            collect_only=True,
            json_report=Path(report),
            rootdir=Path(tmp),
            cwd=Path(tmp),
            extra_args=["-p", "no:django"],
            labels=getattr(args, "labels", ()),
        )
        done = pytest.run(timeout=3600)
        if not os.path.exists(report) or (every_file and done.returncode not in (0, 5)):
            raise ValueError(f"collection failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        with open(report) as handle:
            document: dict[str, Any] = json.load(handle)
    return document


def _lint(config: Config, args: argparse.Namespace) -> int:
    found = lint.problems(config, collect_report(args, every_file=True)["collection"])
    prefix = "" if args.strict else "warning: "
    for problem in found:
        print(prefix + lint.shown(problem))
    if not found:
        print(f"OK: every name of {len(config.sources)} config(s) matches a collected test")
    return 1 if found and args.strict else 0


def _shown_path(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
