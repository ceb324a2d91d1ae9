"""Where crcr's name matching deliberately differs from Torch Spyre's, per tests entry.

Both match a test by its attribute name, exact names before ``re.fullmatch``
patterns, in entry order. They part where several entries name one test: crcr
applies the first (``matching.py``); Spyre collects every entry naming it
(exact ones, then patterns), picks one per variant from the dtype in the
test's name (an entry whose ``edits.dtypes.include`` or the global dtypes hold
it, else one with no dtype list, else the first) and merges their dtypes,
modules and ``cpu_move`` edits (``tests/oot_framework/oot_test_base_common.py``,
``instantiate_test``). Read statically, a literal name shows it: every entry
whose literal or pattern also names it is listed, when one of them has edits
(without edits both pick the first entry alike), over every config imported
together (both merge same-path entries in order). Overlaps of two patterns
need the tests, and are not looked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .schema import is_regex


@dataclass(frozen=True)
class _Name:
    entry: int  # the tests entry's index among those naming its test file
    text: str
    cls: str | None
    method: str
    line: int
    column: int


def entry_notes(tests: list[tuple[str, Any]]) -> list[str]:
    """One line per literal name that several of ``tests`` name, at the first literal
    (the entry crcr applies); ``tests``: (config, tests entry) pairs of one test file,
    over every config imported, in merge order."""
    names = [name for index, (_, test) in enumerate(tests) for name in _names(index, test)]
    notes = []
    literals = [n for n in names if not is_regex(n.text)]
    for name in literals:
        others = sorted({n.entry for n in names if n.entry != name.entry and _names_it(n, name)})
        if any(n.entry < name.entry and _names_it(n, name) for n in literals):
            continue  # noted once, at the literal crcr applies (the first)
        if not others or not any(tests[i][1].get("edits") for i in [name.entry, *others]):
            continue
        source = tests[name.entry][0]
        places = [
            str(_line(tests[i][1]))
            if tests[i][0] == source
            else f"{tests[i][0]}:{_line(tests[i][1])}"
            for i in others
        ]
        where = f"line {places[0]}" if len(places) == 1 else f"lines {', '.join(places)}"
        notes.append(
            f"{source}:{name.line}:{name.column}: '{name.text}' is also named by the "
            f"entry at {where}: crcr applies only this one (exact names before patterns, in "
            "order); Spyre picks one per variant's dtype and merges their edits"
        )
    return notes


def _names(index: int, test: Any) -> list[_Name]:
    names = test.get("names") if isinstance(test, dict) else None
    if not isinstance(names, list):
        return []
    found = []
    for position, text in enumerate(names):
        if isinstance(text, str):
            cls, _, method = text.rpartition("::")
            line, column = _position(names, position)
            found.append(_Name(index, text, cls or None, method, line, column))
    return found


def _names_it(other: _Name, name: _Name) -> bool:
    """Whether ``other`` names the test a literal ``name`` names (in one class; the
    importer has already turned class patterns into bare method names)."""
    if other.cls is not None and name.cls is not None and other.cls != name.cls:
        return False
    if is_regex(other.text):
        return _full(other.method, name.method)
    return other.method == name.method


def _full(pattern: str, text: str) -> bool:
    try:
        return re.fullmatch(pattern, text) is not None
    except re.error:
        return False  # crcr's loader names a bad pattern


def _position(names: Any, position: int) -> tuple[int, int]:
    """1-based line and column of a names item (ruamel keeps 0-based ones)."""
    try:
        line, column = names.lc.item(position)
    except (AttributeError, KeyError, TypeError):
        return 0, 0
    return line + 1, column + 1


def _line(test: Any) -> int:
    try:
        return int(test.lc.line) + 1
    except AttributeError:
        return 0


def drop_later_modes(tests: list[Any], source: str) -> list[str]:
    """Remove a literal name from a tests entry when an earlier entry of the same files
    entry gives it another mode; one line per name removed.

    Spyre keeps both (``_build_test_entry_map``) and, for a variant whose dtype neither
    entry restricts, applies the first (``_select_entry_for_variant``), as crcr does;
    crcr's loader refuses a name given two modes in one files entry, so the later one,
    which neither applies, goes (an entry left without names goes with it).
    """
    first: dict[str, tuple[str, int]] = {}
    notes = []
    for test in tests:
        names, mode = test.get("names"), test.get("mode")
        if not isinstance(names, list):
            continue
        for position in reversed(range(len(names))):
            text = names[position]
            if not isinstance(text, str) or is_regex(text):
                continue
            earlier = first.get(text)
            if earlier is not None and earlier[0] != mode:
                line, column = _position(names, position)
                del names[position]
                notes.append(
                    f"{source}:{line}:{column}: '{text}' ({mode}) dropped: the entry at line "
                    f"{earlier[1]} gives it {earlier[0]}, which Spyre and crcr both apply"
                )
        for text in names:
            if isinstance(text, str) and not is_regex(text):
                first.setdefault(text, (str(mode), _line(test)))
    tests[:] = [t for t in tests if not isinstance(t.get("names"), list) or t["names"]]
    return notes
