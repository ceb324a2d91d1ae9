"""Which config entry, mode and edits apply to a test, and which variants survive.

A test is keyed by (file, generic class, generic test name), never by node id.
Order of precedence:
1. files entries naming the file exactly come before glob entries, in config order;
2. within them, a literal name beats a regex (a full match); among equals the first entry
   wins, as in Torch Spyre's framework (``tests/oot_framework/oot_test_base_common.py``:
   exact names, then ``re.fullmatch`` patterns, in entry order);
3. a test no entry names gets the file's ``unlisted_test_mode`` (default ``skip``).
A test's name is its attribute name on the class (``names.py`` says which name a collected
test has); a ``functools.wraps`` method's base ``__name__`` is never matched, only noted
(``base_names``), so ``lint`` can say why a pattern that only a base name matches is dead.
Upstream's device restrictions (``only_for``/``except_for`` classes, ``@onlyOn``-style
decorators) hold unless the test's tests entry, or else its files entry, says
``bypass_device_restrictions: true``.
Variant rules (``VariantFilter``): an excluded dtype/op/module is dropped; an
included one is kept even if the global list lacks it; otherwise the global
``supported_*`` lists, when present, decide; an op's own ``dtypes`` narrow its
dtypes further. A custom module (``module_path``) is added to the test's ``@modules``
list in the dtypes of its own inputs, which only ``edits.dtypes.exclude`` drops.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .labels import selects
from .schema import (
    Config,
    DtypeSpec,
    Edits,
    FileEntry,
    GlobalSection,
    ModuleSpec,
    NamePattern,
    OpSpec,
    Pos,
    Precision,
    TestEntry,
)


class VariantFilter:
    """Decides which op / dtype / module variants of one generic test are generated."""

    def __init__(self, global_: GlobalSection, edits: Edits | None = None):
        edits = edits or Edits()
        self.global_dtypes = _by_name(global_.supported_dtypes)
        self.global_ops = _by_name(global_.supported_ops)
        self.global_modules = (
            None
            if global_.supported_modules is None
            else {m.short: m for m in global_.supported_modules}
        )
        self.include_dtypes: dict[str, DtypeSpec] = {d.name: d for d in edits.dtypes.include}
        self.exclude_dtypes = {d.name for d in edits.dtypes.exclude}
        self.include_ops: dict[str, OpSpec] = {o.name: o for o in edits.ops.include}
        self.exclude_ops = {o.name for o in edits.ops.exclude}
        self.include_modules: dict[str, ModuleSpec] = {m.short: m for m in edits.modules.include}
        self.exclude_modules = {m.short for m in edits.modules.exclude}
        # Nothing to filter: collection can take torch's variants as they come.
        self.trivial = (
            not edits
            and global_.supported_dtypes is None
            and global_.supported_ops is None
            and global_.supported_modules is None
        )
        dtype_specs = [*(global_.supported_dtypes or ()), *edits.dtypes.include]
        op_specs = [*(global_.supported_ops or ()), *edits.ops.include]
        op_dtypes = [d for op in op_specs for d in op.dtypes or ()]
        self.has_precision = any(d.precision for d in dtype_specs + op_dtypes)
        self.has_force = any(spec.force_xfail for spec in dtype_specs + op_specs + op_dtypes)
        self._dtype_cache: dict[tuple[str, tuple[str, ...]], bool] = {}

    def op_spec(self, names: Iterable[str]) -> OpSpec | None:
        for name in names:
            if name in self.include_ops:
                return self.include_ops[name]
        for name in names:
            if self.global_ops is not None and name in self.global_ops:
                return self.global_ops[name]
        return None

    def op_tags(self, names: Iterable[str]) -> tuple[str, ...]:
        """The markers an ``edits.ops.include`` item gives its op's variants."""
        return next((self.include_ops[n].tags for n in names if n in self.include_ops), ())

    @property
    def custom_modules(self) -> list[ModuleSpec]:
        """Included modules the config builds itself (``module_path``), not excluded."""
        return [
            m
            for m in self.include_modules.values()
            if m.inputs is not None and m.short not in self.exclude_modules
        ]

    def op_allowed(self, names: tuple[str, ...]) -> bool:
        """``names``: an OpInfo's name and full name ("div", "div.floor_rounding")."""
        if any(name in self.exclude_ops for name in names):
            return False
        if any(name in self.include_ops for name in names):
            return True
        return self.global_ops is None or any(name in self.global_ops for name in names)

    def dtype_allowed(self, dtype: str, op_names: tuple[str, ...] = ()) -> bool:
        key = (dtype, op_names)
        allowed = self._dtype_cache.get(key)
        if allowed is None:
            allowed = self._dtype_cache[key] = self._dtype_allowed(dtype, op_names)
        return allowed

    def _dtype_allowed(self, dtype: str, op_names: tuple[str, ...]) -> bool:
        if dtype in self.exclude_dtypes:
            return False
        if dtype in self.include_dtypes:
            return True
        spec = self.op_spec(op_names) if op_names else None
        if spec is not None and spec.dtypes is not None:
            return any(d.name == dtype for d in spec.dtypes)
        return self.global_dtypes is None or dtype in self.global_dtypes

    def module_allowed(self, short_name: str) -> bool:
        if short_name in self.exclude_modules:
            return False
        if short_name in self.include_modules:
            return True
        return self.global_modules is None or short_name in self.global_modules

    def tolerance(self, dtype: str, op_names: tuple[str, ...] = ()) -> Precision | None:
        """Most specific precision: the test's include, then the op's dtype, then global."""
        if not self.has_precision:
            return None
        if dtype in self.include_dtypes and self.include_dtypes[dtype].precision:
            return self.include_dtypes[dtype].precision
        spec = self.op_spec(op_names) if op_names else None
        for op_dtype in (spec.dtypes or ()) if spec else ():
            if op_dtype.name == dtype and op_dtype.precision:
                return op_dtype.precision
        if self.global_dtypes and dtype in self.global_dtypes:
            return self.global_dtypes[dtype].precision
        return None

    def forced_xfail(self, dtypes: Iterable[str], op_names: tuple[str, ...] = ()) -> str | None:
        if not self.has_force:
            return None
        spec = self.op_spec(op_names) if op_names else None
        if spec is not None and spec.force_xfail:
            return f"op {spec.name} has force_xfail ({spec.pos})"
        for dtype in dtypes:
            found = self.include_dtypes.get(dtype) or (self.global_dtypes or {}).get(dtype)
            if found is not None and found.force_xfail:
                return f"dtype {dtype} has force_xfail ({found.pos})"
        return None

    @property
    def extra_dtypes(self) -> list[str]:
        return list(self.include_dtypes)


def _by_name(items: tuple[Any, ...] | None) -> dict[str, Any] | None:
    return None if items is None else {item.name: item for item in items}


@dataclass
class Decision:
    """What the config says about one generic test."""

    mode: str
    file_entry: FileEntry
    filters: VariantFilter
    entry: TestEntry | None = None
    pattern: NamePattern | None = None

    @property
    def reason(self) -> str:
        if self.entry is None:
            return f"unlisted (unlisted_test_mode: {self.mode} for {self.file_entry.path})"
        return self.entry.reason or f"listed as '{self.pattern.text if self.pattern else '?'}'"

    def entry_ref(self) -> dict[str, Any] | None:
        if self.entry is None:
            return None
        pos = self.entry.pos
        return {
            "config": pos.file,
            "line": pos.line,
            "column": pos.column,
            "names": [name.text for name in self.entry.names],
            "matched": self.pattern.text if self.pattern else None,
        }

    @property
    def tags(self) -> tuple[str, ...]:
        return self.entry.tags if self.entry else ()

    @property
    def labels(self) -> tuple[str, ...]:
        """The test's labels (its ``testtype__`` markers): those of its files entry (or
        config), then its tests entry's own."""
        if self.entry is None:
            return self.file_entry.labels
        return tuple(dict.fromkeys(self.entry.group_labels + self.entry.labels))

    def selected_by(self, selection: tuple[str, ...]) -> bool:
        """Whether a label selection (``--reuse-labels``) keeps the test (``labels.py``)."""
        if not selection:
            return True
        if self.entry is None:
            return selects(selection, self.file_entry.labels, (), self.file_entry.source)
        return selects(selection, self.entry.group_labels, self.entry.labels, self.entry.source)

    @property
    def no_grad(self) -> bool:
        return self.entry is not None and self.entry.no_grad

    @property
    def restrictions_lifted_by(self) -> Pos | None:
        """Where the config lifts upstream's device restrictions for this test (None: they
        hold): its tests entry's ``bypass_device_restrictions``, else its files entry's."""
        if self.entry is not None and self.entry.bypass_device_restrictions is not None:
            return self.entry.pos if self.entry.bypass_device_restrictions else None
        file_entry = self.file_entry
        return file_entry.bypass_pos if file_entry.bypass_device_restrictions else None

    @property
    def bypasses_restrictions(self) -> bool:
        return self.restrictions_lifted_by is not None


@dataclass
class FileRules:
    """The rules for one test file (all files entries matching it, most specific first)."""

    entries: list[FileEntry]
    global_filter: VariantFilter
    global_: GlobalSection
    used_patterns: set[int] = field(default_factory=set)
    base_names: dict[tuple[str | None, str], list[str]] = field(default_factory=dict)
    _cache: dict[tuple[str | None, tuple[str, ...]], Decision] = field(default_factory=dict)

    def decide(self, cls: str | None, method: str, source: str | None = None) -> Decision:
        """``method``: the test's name (its attribute name); ``source``: the source method of a
        plain test generated by torch's ``@parametrize``, matched after ``method``."""
        methods = (method,) if source is None or source == method else (method, source)
        decision = self._cached(cls, methods)
        if decision.pattern is not None:
            self.used_patterns.add(id(decision.pattern))
        return decision

    def may_select(self, selection: tuple[str, ...]) -> bool:
        """Whether a label selection can keep any test of the file (else it need not be
        collected): some files entry's labels, or some tests entry's, are selected."""
        return any(
            selects(selection, entry.labels, (), entry.source)
            or any(selects(selection, t.group_labels, t.labels, t.source) for t in entry.tests)
            for entry in self.entries
        )

    def note_base_name(self, cls: str | None, base: str, attribute: str) -> None:
        """A method whose ``__name__`` (``base``, from ``functools.wraps``) is not its name."""
        self.base_names.setdefault((cls, base), []).append(attribute)

    def base_name_matches(self, pattern: NamePattern) -> list[tuple[str, list[str]]]:
        """(base name, the methods carrying it) for each noted base name ``pattern`` matches."""
        return [
            (base, attributes)
            for (cls, base), attributes in self.base_names.items()
            if pattern.matches(cls, base)
        ]

    def bypasses_restrictions(self, cls: str, methods: Iterable[str]) -> bool:
        """Whether the config lifts upstream's device restrictions for any test of a class.

        Asked before the class exists on the device, so its names do not count as used
        (``unmatched_patterns``): the class may stay uninstantiated."""
        if not any(
            entry.bypass_device_restrictions
            or any(t.bypass_device_restrictions for t in entry.tests)
            for entry in self.entries
        ):
            return False
        return any(self._cached(cls, (method,)).bypasses_restrictions for method in methods)

    def _cached(self, cls: str | None, methods: tuple[str, ...]) -> Decision:
        key = (cls, methods)
        if key not in self._cache:
            self._cache[key] = self._decide(cls, methods)
        return self._cache[key]

    def _decide(self, cls: str | None, methods: tuple[str, ...]) -> Decision:
        for want_regex in (False, True):
            for method in methods:
                found = self._first(cls, method, want_regex)
                if found is not None:
                    file_entry, test, pattern = found
                    return Decision(
                        mode=test.mode,
                        file_entry=file_entry,
                        filters=self._filters(test),
                        entry=test,
                        pattern=pattern,
                    )
        first = self.entries[0]
        return Decision(mode=first.unlisted_test_mode, file_entry=first, filters=self.global_filter)

    def _first(
        self, cls: str | None, method: str, want_regex: bool
    ) -> tuple[FileEntry, TestEntry, NamePattern] | None:
        for file_entry in self.entries:
            for test in file_entry.tests:
                for pattern in test.names:
                    if pattern.is_regex == want_regex and pattern.matches(cls, method):
                        return file_entry, test, pattern
        return None

    def _filters(self, test: TestEntry) -> VariantFilter:
        return VariantFilter(self.global_, test.edits) if test.edits else self.global_filter


class Rules:
    """A merged config, indexed for fast per-file decisions."""

    def __init__(self, config: Config):
        self.config = config
        self.global_filter = VariantFilter(config.global_)
        self._by_file: dict[str, FileRules] = {}
        ordered = [e for e in config.files if not e.is_glob] + [
            e for e in config.files if e.is_glob
        ]
        for entry in ordered:
            for path in entry.files:
                rules = self._by_file.setdefault(
                    path, FileRules([], self.global_filter, config.global_)
                )
                rules.entries.append(entry)

    def for_file(self, path: str | os.PathLike[str], resolved: bool = False) -> FileRules | None:
        """The rules of a test file; ``resolved``: the path is already a real path."""
        return self._by_file.get(path if resolved else os.path.realpath(path))  # type: ignore[arg-type]

    def lists_file(self, path: str | os.PathLike[str]) -> bool:
        return os.path.realpath(path) in self._by_file

    @property
    def files(self) -> list[str]:
        return list(self._by_file)

    def base_name_matches(self, pattern: NamePattern) -> list[tuple[str, list[str]]]:
        """The noted base names (``FileRules.note_base_name``) a pattern matches, over files."""
        return [
            found
            for rules in self._by_file.values()
            if any(
                p is pattern for entry in rules.entries for test in entry.tests for p in test.names
            )
            for found in rules.base_name_matches(pattern)
        ]

    def unmatched_patterns(self) -> list[NamePattern]:
        """Names that matched no test of the files this run actually looked at."""
        used: set[int] = set()
        looked_at: set[int] = set()
        for rules in self._by_file.values():
            used |= rules.used_patterns
            if rules._cache:
                looked_at |= {id(entry) for entry in rules.entries}
        return [
            pattern
            for entry in self.config.files
            if id(entry) in looked_at
            for test in entry.tests
            for pattern in test.names
            if id(pattern) not in used
        ]
