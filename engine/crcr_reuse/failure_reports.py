"""pytest's failure reports with each source file parsed once per process, not once per report.

pytest's traceback shows each frame's whole statement: it finds the statement by
parsing the frame's file with `ast` and keeps the tree for that one report only. A
failing variant's traceback runs through torch's test harness (`common_utils`,
`common_device_type`, `opinfo/core`: over 300 KB of source), so every failure paid
0.1–0.4 s of parsing, where a passing variant costs the reference device about 3 ms
(`bench/refdev_speed.py`): a backend that fails thousands of variants spent most of
its run writing reports. The reuse plugin and the operator capture give pytest's
formatter one cache for the process: the same report, each file parsed once (a file
does not change while its tests run), the trees of the last `MAX_FILES` files kept.
Frames without a file of their own (`<string>`, `<frozen ...>`) are parsed per report,
as pytest does. `CRCR_REUSE_TRACEBACK_CACHE=0` keeps pytest's per-report cache.
"""

from __future__ import annotations

import ast
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

ENV_SWITCH = "CRCR_REUSE_TRACEBACK_CACHE"
MAX_FILES = 16
# pytest's formatter of tracebacks, by the names it has had (pytest 9: the first).
FORMATTERS = ("ExceptionInfoFormatter", "FormattedExcinfo")


class SharedTrees(OrderedDict[Any, ast.AST]):
    """The parsed files of every report in this process, the oldest dropped past MAX_FILES."""

    def get(self, key: Any, default: Any = None) -> Any:
        if not _a_file(key) or key not in self:
            return default
        self.move_to_end(key)
        return self[key]

    def __setitem__(self, key: Any, tree: ast.AST) -> None:
        if not _a_file(key):
            return
        super().__setitem__(key, tree)
        while len(self) > MAX_FILES:
            self.popitem(last=False)


TREES = SharedTrees()


def install() -> bool:
    """Give pytest's traceback formatter the process's cache (True when it has it)."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    from _pytest._code import code

    for name in FORMATTERS:
        formatter = getattr(code, name, None)
        if formatter is not None and "astcache" in getattr(formatter, "__dataclass_fields__", {}):
            break
    else:
        return False  # a pytest that keeps its trees otherwise: left as it is
    init = formatter.__init__
    if getattr(init, "_crcr_shared", False):
        return True

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.astcache = TREES

    __init__._crcr_shared = True  # type: ignore[attr-defined]
    formatter.__init__ = __init__
    return True


def _a_file(key: Any) -> bool:
    return isinstance(key, (str, Path)) and not str(key).startswith("<")
