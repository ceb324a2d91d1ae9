"""Merge several loaded configs into one (DESIGN §3: "Several configs merge").

Rules: files entries with the same expanded ``path`` combine their tests (in
config order); ``labels`` and the ``global`` lists union; a scalar set twice to
different values is a conflict naming both places: ``unlisted_test_mode`` and
``bypass_device_restrictions``, a dtype's precision or force_xfail, an op's dtypes,
and the mode of a literal test name listed twice for the same file. A files entry's or
a global item's ``description`` is the first config's that gives one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .loader import ConfigError
from .schema import Config, FileEntry, GlobalSection, Pos

T = TypeVar("T")


def merge_configs(configs: Sequence[Config]) -> Config:
    problems: list[tuple[Pos, str]] = []
    merged = Config(sources=tuple(s for config in configs for s in config.sources))
    merged.labels = tuple(dict.fromkeys(label for c in configs for label in c.labels))
    by_pattern: dict[str, FileEntry] = {}
    for config in configs:
        for entry in config.files:
            if entry.pattern not in by_pattern:
                copy = dataclasses.replace(entry, tests=list(entry.tests))
                by_pattern[entry.pattern] = copy
                merged.files.append(copy)
            else:
                _combine_file(by_pattern[entry.pattern], entry, problems)
    for entry in merged.files:
        _check_name_modes(entry, problems)
    merged.global_ = _merge_global([c.global_ for c in configs], problems)
    if problems:
        raise ConfigError(problems)
    return merged


def _combine_file(target: FileEntry, entry: FileEntry, problems: list[tuple[Pos, str]]) -> None:
    _combine_setting(target, entry, "unlisted_test_mode", "unlisted_pos", problems)
    _combine_setting(target, entry, "bypass_device_restrictions", "bypass_pos", problems)
    target.tests.extend(entry.tests)
    target.description = target.description or entry.description


def _combine_setting(
    target: FileEntry, entry: FileEntry, key: str, pos_key: str, problems: list[tuple[Pos, str]]
) -> None:
    """A files entry's setting: taken from the first config that writes it; another
    config writing a different value is a conflict."""
    pos, value, current = getattr(entry, pos_key), getattr(entry, key), getattr(target, key)
    if pos is None:
        return
    if getattr(target, pos_key) is None:
        setattr(target, key, value)
        setattr(target, pos_key, pos)
    elif current != value:
        problems.append(
            (
                pos,
                f"conflicting {key} for '{entry.path}': '{_yaml(value)}' here, "
                f"'{_yaml(current)}' at {getattr(target, pos_key)}",
            )
        )


def _yaml(value: Any) -> Any:
    """A setting as the config spells it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else value


def _check_name_modes(entry: FileEntry, problems: list[tuple[Pos, str]]) -> None:
    """A literal name listed twice for one file must not ask for two modes."""
    seen: dict[tuple[str | None, str], tuple[str, Pos]] = {}
    for test in entry.tests:
        for name in test.names:
            if name.is_regex:
                continue
            key = (name.cls, name.method)
            if key in seen and seen[key][0] != test.mode:
                mode, pos = seen[key]
                problems.append(
                    (
                        name.pos,
                        f"conflicting mode for '{name.text}': '{test.mode}' here, '{mode}' at {pos}",
                    )
                )
            seen.setdefault(key, (test.mode, name.pos))


def _merge_global(sections: list[GlobalSection], problems: list[tuple[Pos, str]]) -> GlobalSection:
    merged = GlobalSection()
    merged.supported_dtypes = _union(
        [s.supported_dtypes for s in sections],
        key=lambda d: d.name,
        same=lambda a, b: (a.precision, a.force_xfail) == (b.precision, b.force_xfail),
        what="dtype",
        problems=problems,
    )
    merged.supported_ops = _union(
        [s.supported_ops for s in sections],
        key=lambda o: o.name,
        same=lambda a, b: _op_key(a) == _op_key(b),
        what="op",
        problems=problems,
    )
    merged.supported_modules = _union(
        [s.supported_modules for s in sections],
        key=lambda m: m.short,
        same=lambda a, b: True,
        what="module",
        problems=problems,
    )
    return merged


def _op_key(op: Any) -> Any:
    dtypes = None if op.dtypes is None else tuple((d.name, d.precision) for d in op.dtypes)
    return (dtypes, op.force_xfail)


def _union(
    lists: list[tuple[T, ...] | None],
    key: Callable[[T], str],
    same: Callable[[T, T], bool],
    what: str,
    problems: list[tuple[Pos, str]],
) -> tuple[T, ...] | None:
    """Union of optional lists by key; None when no config declared the list."""
    if all(items is None for items in lists):
        return None
    result: dict[str, T] = {}
    for items in lists:
        for item in items or ():
            name = key(item)
            if name in result and not same(result[name], item):
                earlier = getattr(result[name], "pos", "?")
                problems.append(
                    (item.pos, f"conflicting settings for {what} '{name}' (also at {earlier})")  # type: ignore[attr-defined]
                )
            if name in result and not getattr(result[name], "description", True):
                # The same item described in a later config only: its description is kept.
                result[name] = dataclasses.replace(result[name], description=item.description)  # type: ignore[type-var,attr-defined]
            result.setdefault(name, item)
    return tuple(result.values())
