"""The command line's ``export --format pytorch`` and ``import-pytorch`` (see ``cli.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .schema import Config


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    export = commands.add_parser(
        "export", parents=[common], help="write the config in another tool's format"
    )
    export.add_argument("--format", required=True, choices=["pytorch"])
    export.add_argument("--config", dest="configs", action="append", required=True)
    export.add_argument("-o", "--output", help="the Python module to write (default: stdout)")
    export.set_defaults(handler=export_command)
    pytorch = commands.add_parser(
        "import-pytorch", help="read PyTorch's set_test_configs(...) call into crcr's YAML"
    )
    pytorch.add_argument("source", help="a Python file (conftest, test module) with the call")
    pytorch.add_argument("-o", "--output", required=True, help="the YAML config to write")
    pytorch.add_argument(
        "--path", dest="paths", action="append",
        help="test files the config lists (repeatable; default ${TORCH_ROOT}/test/test_*.py)",
    )  # fmt: skip


def export_command(config: Config, args: argparse.Namespace) -> int:
    from .pytorch_export import export_config, render

    result = export_config(config)
    text = render(result)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    for line in result.gaps.lines():
        print(f"crcr export: cannot express {line}", file=sys.stderr)
    print(
        f"crcr export: {len(result.allowlist or ())} allowlisted ops, "
        f"{sum(map(len, result.overrides.values()))} op overrides on {len(result.overrides)} ops, "
        f"{sum(map(len, result.exclusions.values()))} excluded tests in "
        f"{len(result.exclusions)} classes; {len(result.gaps.kinds)} kinds not expressible",
        file=sys.stderr,
    )
    return 0


def import_command(args: argparse.Namespace) -> int:
    """Read, map, render; nothing is written when the source cannot be read."""
    from .pytorch_import import DEFAULT_PATH, check_names, import_config, render
    from .pytorch_read import ReadError, read_source

    try:
        text = Path(args.source).read_text(encoding="utf-8")
        read = read_source(args.source, text)
        imported = import_config(read)
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: {args.source}:1: cannot read: {error}", file=sys.stderr)
        return 2
    except ReadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    check_names(imported)
    output = render(read, imported, args.paths or [DEFAULT_PATH])
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(output, encoding="utf-8")
    for line in imported.gaps.lines():
        print(f"crcr import-pytorch: not mapped: {line}", file=sys.stderr)
    print(f"crcr import-pytorch: wrote {args.output} ({len(imported.gaps.kinds)} kinds not mapped)")
    return 0
