"""``lint``: names in a config that cannot do what their author meant.

Problems, each tied to the name's place in its YAML:
1. a *dead* name: it matched no test when the plugin collected the config's
   files (the collection run's ``collection.unmatched``);
2. a dead name written as a *generated variant* (``test_add_cpu_float32``,
   ``TestFooPRIVATEUSE1::…``): the plugin keys tests by their generic name, so
   the generic name is suggested instead;
3. a *duplicate*: the same name twice among the entries of one test file;
4. *conflicting modes*: the same name given two different modes for one file;
5. a dead name that only a *base name* matches: the ``__name__`` a method generated
   with ``functools.wraps`` (Spyre's ``ParameterizedTestMeta``) keeps from its base
   function; tests go by their attribute names (``names.py``), so the methods are named.
Checks 3-4 read the config alone; 1, 2 and 5 need the collection, which the CLI runs
through the plugin exactly as ``list --collect`` does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .schema import Config, FileEntry, NamePattern, Pos, TestEntry
from .static_scan import DEVICE_NAMES, resolve_test_id, scan_file


@dataclass(frozen=True)
class Problem:
    pos: Pos
    message: str


def problems(config: Config, collection: dict[str, Any]) -> list[Problem]:
    """Every problem of a merged config, by position (``collection``: the JSON report's)."""
    # The collection ran elsewhere: a config's path may be spelled differently there.
    dead = {
        (os.path.realpath(item["config"]), item["line"], item["column"]): item.get("base_names")
        for item in collection["unmatched"]
    }
    found, repeated = _repeated_names(config)
    for file_entry, _, pattern in _names(config):
        pos = pattern.pos
        # A repeated name is dead as well (the first wins): its repetition says why.
        key = (os.path.realpath(pos.file), pos.line, pos.column)
        if key in dead and id(pattern) not in repeated:
            generic = generic_name(pattern, file_entry)
            if dead[key]:
                message = _base_names_only(pattern, dead[key])
            elif generic is not None:
                message = f"'{pattern.text}' names a generated variant: write the generic name '{generic}'"
            else:
                message = f"dead name '{pattern.text}': it matches no collected test"
            found.append(Problem(pos, message))
    return sorted(found, key=lambda p: (p.pos.file, p.pos.line, p.pos.column))


def _base_names_only(pattern: NamePattern, bases: dict[str, list[str]]) -> str:
    found = "; ".join(f"'{base}' of {', '.join(methods)}" for base, methods in bases.items())
    return (
        f"'{pattern.text}' matches only the base name {found} (functools.wraps): "
        "tests go by their attribute names, as in Torch Spyre"
    )


def _names(config: Config) -> list[tuple[FileEntry, TestEntry, NamePattern]]:
    return [
        (file_entry, test, pattern)
        for file_entry in config.files
        for test in file_entry.tests
        for pattern in test.names
    ]


def _repeated_names(config: Config) -> tuple[list[Problem], set[int]]:
    """Names listed twice for one test file: a duplicate, or two different modes."""
    found: list[Problem] = []
    reported: set[int] = set()
    seen: dict[tuple[str, str], tuple[NamePattern, TestEntry]] = {}
    for file_entry, test, pattern in _names(config):
        for path in file_entry.files:
            first = seen.setdefault((path, pattern.text), (pattern, test))
            if first[0] is pattern or id(pattern) in reported:
                continue
            reported.add(id(pattern))
            where = _where(first[0].pos, pattern.pos)
            if first[1].mode == test.mode:
                message = f"duplicate name '{pattern.text}' (first listed at {where})"
            else:
                message = (
                    f"conflicting modes for '{pattern.text}': {test.mode} here, "
                    f"{first[1].mode} at {where}"
                )
            found.append(Problem(pattern.pos, message))
    return found, reported


def _where(pos: Pos, problem: Pos) -> str:
    """``line:column`` in the problem's own config, else the whole position."""
    return f"{pos.line}:{pos.column}" if pos.file == problem.file else str(pos)


def generic_name(pattern: NamePattern, file_entry: FileEntry) -> str | None:
    """The generic name a literal variant name stands for; None when it is no variant."""
    if pattern.is_regex:
        return None
    words = pattern.method.split("_")
    devices = [index for index, word in enumerate(words) if index and word in DEVICE_NAMES]
    for path in file_entry.files:
        test_id = resolve_test_id(
            f"{path}::{pattern.cls}::{pattern.method}"
            if pattern.cls
            else f"{path}::{pattern.method}"
        )
        if any(t.cls == test_id.cls and t.name == pattern.method for t in scan_file(path)):
            name = pattern.method  # a real generic test: a variant only if the class is one
        elif test_id.variant and devices:
            name = test_id.name  # the static scan knows the generic test
        elif devices:
            # Generated at import time (invisible to the static scan): cut at the device.
            name = "_".join(words[: devices[-1]])
        else:
            name = pattern.method
        if name != pattern.method or test_id.cls != pattern.cls:
            return f"{test_id.cls}::{name}" if test_id.cls else name
    return None


def shown(problem: Problem) -> str:
    """A problem line with the config's path relative to the working directory."""
    relative = os.path.relpath(problem.pos.file) if problem.pos.file else ""
    path = problem.pos.file if relative.startswith("..") else relative
    return f"{path}:{problem.pos.line}:{problem.pos.column}: {problem.message}"
