"""The active plugin: one object per pytest run that was given --reuse-config/--reuse-device.

Steps of a run: validate the configs (before torch is imported, so a bad config
fails fast and collects nothing), import the device module, install the
device-type hooks, point collection at the config's files, then at
``collection_modifyitems`` apply modes and markers to every test, and report.
Under pytest-xdist the controller neither imports torch nor collects; workers do,
and send their collection counts back through ``workeroutput``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import os
from collections import Counter, defaultdict
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import failure_reports, torch_harness
from .idlist import ShardFilter, normalize_class
from .labels import parse_selection
from .loader import ConfigError, load_configs
from .marking import PLACEHOLDER_VARIANTS, Marking
from .matching import Decision, Rules
from .names import dtype_name, flat, op_names, opinfo, param_kwargs, test_names
from .report import JsonReport, summary_lines
from .static_scan import DEVICE_SUFFIX as DEVICE_CLASS
from .timeouts import time_limit

ENV_DEVICE = "CRCR_REUSE_DEVICE"
# The methods a collected test compares on the CPU (its entry's `functions.cpu_move`).
CPU_MOVE = pytest.StashKey[tuple[str, ...]]()
# A collected test whose config entry says `bypass_device_restrictions: true`.
BYPASS = pytest.StashKey[bool]()
# A collected test whose config entry says `no_grad: true`.
NO_GRAD = pytest.StashKey[bool]()
DEFAULT_DEVICE = "crcr_reuse.reference_device"
MARKER_HELP = (
    "op__NAME: a generated test of OpInfo NAME (crcr reuse)",
    "dtype__NAME: a generated test in dtype NAME (crcr reuse)",
    "module__NAME: a generated test of ModuleInfo NAME (crcr reuse)",
    "testtype__LABEL: the config's labels (crcr reuse)",
    "mode__MODE: the config mode applied to the test (crcr reuse)",
)


def is_xdist_controller(namespace: argparse.Namespace) -> bool:
    # (xdist turns --dist "no" into "load" only later, when -n is given.)
    workers = getattr(namespace, "numprocesses", None)
    return bool(workers) and "PYTEST_XDIST_WORKER" not in os.environ


@dataclass(slots=True)
class Target:
    """One collected test as the config sees it (transient: built and used per item)."""

    path: str
    decision: Decision
    test: str
    variant: tuple[str | None, tuple[str, ...], str | None] = (None, (), None)
    forced: str | None = None
    op_tags: tuple[str, ...] = ()  # the tags its op's `edits.ops.include` item gives


def reports_skips(options: argparse.Namespace) -> bool:
    """Whether the tests the config skips are collected and reported as skipped.

    Not in a --collect-only run (planning's ids hold only tests to run) nor in a
    shard (its id list names only those): there they are deselected and counted."""
    return not (options.collectonly or options.reuse_ids)


class ReuseSession:
    def __init__(self, namespace: argparse.Namespace, rules: Rules | None, device: str):
        self.namespace = namespace
        self.rules = rules
        self.device = device
        self.backend: str | None = None
        self.controller = is_xdist_controller(namespace)
        self.shard = self._shard(namespace)
        self.hooks: Any = None
        self.report: JsonReport | None = None
        self.outcomes: dict[str, Counter[str]] = defaultdict(Counter)
        self.counts: Counter[str] = Counter()
        self.worker_stats: dict[str, Any] = {}
        self.missing_ids: list[str] = []
        self.deselected_per_file: Counter[str] = Counter()
        self.skipped_by_config = 0
        self._realpaths: dict[str, str] = {}
        self.labels = parse_selection(getattr(namespace, "reuse_labels", None) or ())
        self.files_by_labels: set[str] = set()  # files no selected label can keep
        self._chosen: dict[int, bool] = {}  # a decision's verdict under self.labels

    @classmethod
    def start(cls, namespace: argparse.Namespace) -> ReuseSession:
        """Validate configs, then (outside an xdist controller) register the device."""
        rules = None
        if namespace.reuse_config:
            tokens = {
                "TORCH_ROOT": namespace.reuse_torch_root,
                "TORCH_DEVICE_ROOT": namespace.reuse_device_root,
            }
            try:
                rules = Rules(load_configs(namespace.reuse_config, tokens))
            except ConfigError as error:
                raise pytest.UsageError(
                    f"crcr reuse: invalid config, nothing collected\n{error}"
                ) from None
        device = namespace.reuse_device or os.environ.get(ENV_DEVICE) or DEFAULT_DEVICE
        try:
            session = cls(namespace, rules, device)
        except ValueError as error:  # a bad --reuse-labels value
            raise pytest.UsageError(f"crcr reuse: --reuse-labels: {error}") from None
        if not session.controller:
            from .devicetype import DeviceTypeHooks, prepare_device

            session.backend = prepare_device(device)
            if rules is not None:
                session.hooks = DeviceTypeHooks(
                    rules, session.shard, placeholders=reports_skips(namespace)
                )
                session.hooks.install()
        return session

    def default_paths(self) -> list[str]:
        if self.rules is None:
            return []
        paths = self.shard.files if self.shard else self.rules.files
        return [path for path in paths if not self._left_out_by_labels(path)]

    def _left_out_by_labels(self, path: str) -> bool:
        """Whether no selected label keeps a test of this (real) path: it is not
        collected, since importing it would cost seconds for nothing (and counted)."""
        file_rules = self.rules.for_file(path, resolved=True) if self.rules else None
        if not self.labels or file_rules is None or file_rules.may_select(self.labels):
            return False
        self.files_by_labels.add(path)
        return True

    @staticmethod
    def _shard(namespace: argparse.Namespace) -> ShardFilter | None:
        if not namespace.reuse_ids:
            return None
        bases = [Path.cwd()] + (
            [Path(namespace.rootdir)] if getattr(namespace, "rootdir", None) else []
        )
        return ShardFilter.from_file(namespace.reuse_ids, bases)

    # -- configuration and collection -------------------------------------------

    def pytest_configure(self, config: pytest.Config) -> None:
        for line in MARKER_HELP:
            config.addinivalue_line("markers", line)
        if not hasattr(config, "workerinput"):
            labels = self.rules.config.labels if self.rules else ()
            self.report = JsonReport(self.namespace.reuse_json, labels)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = [
            f"crcr reuse: device module {self.device}"
            + (f" (backend {self.backend})" if self.backend else "")
        ]
        if self.rules is not None:
            sources = ", ".join(self.rules.config.sources)
            lines.append(f"crcr reuse: config {sources}; {len(self.rules.files)} test files")
            outside = [f for f in self.rules.files if not Path(f).is_relative_to(config.rootpath)]
            if outside:
                lines.append(
                    f"crcr reuse: {len(outside)} test files lie outside the rootdir {config.rootpath}: "
                    "node ids will lack their path; run from the test tree or pass --rootdir "
                    "(and write --reuse-config=FILE: a bare value can be taken for a path)"
                )
        return lines

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        if self.rules is None or collection_path.suffix != ".py" or collection_path.is_dir():
            return None
        if not collection_path.name.startswith("test"):
            return None
        wanted = self.shard.files if self.shard else None
        path = os.path.realpath(collection_path)
        if not self.rules.lists_file(path) or (wanted is not None and path not in wanted):
            return True
        return True if self._left_out_by_labels(path) else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.rules is None:
            return
        marking = Marking()
        reported = reports_skips(config.option)
        kept, by_config, by_shard, by_labels, seen = [], [], [], [], set()
        for item in items:
            target = self._target(item)
            if target is None:
                by_config.append(item)
                self.deselected_per_file[str(item.path)] += 1
                continue
            if self.labels and not self._chosen_by_labels(target.decision):
                by_labels.append(item)
                continue
            if marking.mode(target.decision, target.forced) == "skip":
                if reported:
                    self._keep_skipped(item, target, marking)
                    kept.append(item)
                else:
                    by_config.append(item)
                    self.deselected_per_file[target.path] += 1
                continue
            if self.shard is not None:
                cls = getattr(item, "cls", None)
                cls_name = cls.__name__ if cls is not None else None
                if not self.shard.wants(target.path, cls_name, item.name):
                    by_shard.append(item)
                    continue
                seen.add((target.path, normalize_class(cls_name or ""), item.name))
            marking.apply(
                item, target.decision, target.test, target.variant, target.forced, target.op_tags
            )
            entry = target.decision.entry
            if entry is not None and entry.edits.cpu_move:
                item.stash[CPU_MOVE] = entry.edits.cpu_move
            if target.decision.bypasses_restrictions:
                item.stash[BYPASS] = True
            if target.decision.no_grad:
                item.stash[NO_GRAD] = True
            kept.append(item)
        if by_config or by_shard or by_labels:
            config.hook.pytest_deselected(items=by_config + by_shard + by_labels)
        items[:] = kept
        self.counts.update(
            deselected_by_config=len(by_config) + self.skipped_by_config,
            deselected_by_shard=len(by_shard),
            deselected_by_labels=len(by_labels),
        )
        if self.shard is not None:
            self.missing_ids = self.shard.found(seen)

    def _chosen_by_labels(self, decision: Decision) -> bool:
        chosen = self._chosen.get(id(decision))
        if chosen is None:
            chosen = self._chosen[id(decision)] = decision.selected_by(self.labels)
        return chosen

    def _keep_skipped(self, item: pytest.Item, target: Target, marking: Marking) -> None:
        """Keep a test the config skips, marked to be skipped: JUnit and the JSON report
        count it. (A device test's placeholder stands for variants already counted.)"""
        variants = getattr(_function(item), PLACEHOLDER_VARIANTS, None)
        if variants is None:
            self.skipped_by_config += 1
            self.deselected_per_file[target.path] += 1
        marking.skip(item, target.decision, target.test, variants)

    def _target(self, item: pytest.Item) -> Target | None:
        """What the config says about one collected test; None for a file it does not list."""
        path = self._realpath(item.path)
        file_rules = self.rules.for_file(path, resolved=True) if self.rules else None
        if file_rules is None:
            return None
        cls = getattr(item, "cls", None)
        fn = _function(item, cls)
        generic = _generic_class(cls)
        names = test_names(item, fn, cls)
        if names.base is not None:
            file_rules.note_base_name(generic, names.base, names.name)
        decision = file_rules.decide(generic, names.name, names.source)
        test = f"{path}::{generic}::{names.key}" if generic else f"{path}::{names.key}"
        params = param_kwargs(fn)
        if not params:
            return Target(path, decision, test)
        op, module = opinfo(params), params.get("module_info")
        dtypes = tuple(
            dtype_name(d) for d in flat(params.get("dtype", params.get("dtypes"))) if d is not None
        )
        names_of_op = op_names(op) if op is not None else ()
        variant = (
            names_of_op[1] if names_of_op else None,
            dtypes,
            # A custom module (`module_path`) goes by the name its config gives it.
            getattr(module, "crcr_name", None) or f"torch.{module.name}" if module else None,
        )
        forced = decision.filters.forced_xfail(dtypes, names_of_op)
        op_tags = decision.filters.op_tags(names_of_op)
        return Target(path, decision, test, variant, forced, op_tags)

    def _realpath(self, path: Any) -> str:
        key = str(path)
        found = self._realpaths.get(key)
        if found is None:
            found = self._realpaths[key] = os.path.realpath(key)
        return found

    # -- running ------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        with (
            time_limit(self.namespace.reuse_timeout, item.nodeid),
            on_cpu(item),
            restrictions_bypassed(item),
            without_grad(item),
        ):
            return (yield)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not self.controller:  # before the first test: see each module
            torch_harness.install()
            failure_reports.install()
        if self.report is not None and self.report.path and session.config.option.collectonly:
            for item in session.items:
                self.report.collected(item.nodeid, item.user_properties)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.report is not None:
            self.report.start(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.report is not None:
            self.report.add(report)
            if report.when == "teardown":
                record = self.report.records[report.nodeid]
                self.outcomes[record["mode"] or "unknown"][record["outcome"]] += 1

    # -- finishing ------------------------------------------------------------------

    def _stats(self) -> dict[str, Any]:
        if self.hooks is not None:
            stats = self.hooks.stats.as_dict()
            stats.update(self.counts)
            stats["missing_ids"] = self.missing_ids
            stats["labels_selected"] = list(self.labels)
            stats["files_deselected_by_labels"] = sorted(self.files_by_labels)
            for path, count in self.deselected_per_file.items():
                stats["per_file"].setdefault(path, {})["deselected_by_config"] = count
            unmatched = self.rules.unmatched_patterns() if self.rules else []
            rules = self.rules
            stats["unmatched_names"] = [f"{p.text} ({p.pos})" for p in unmatched]
            stats["unmatched"] = [
                {
                    "name": p.text,
                    "config": p.pos.file,
                    "line": p.pos.line,
                    "column": p.pos.column,
                    "base_names": {
                        base: sorted(set(methods))
                        for base, methods in (rules.base_name_matches(p) if rules else [])
                    },
                }
                for p in unmatched
            ]
            return stats
        return dict(self.worker_stats)

    # pytest-xdist's hook: optional, so pytest without xdist accepts the plugin.
    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        raw = getattr(node, "workeroutput", {}).get("crcr_stats")
        if raw and not self.worker_stats:
            self.worker_stats = json.loads(raw)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        if hasattr(config, "workerinput"):
            config.workeroutput["crcr_stats"] = json.dumps(self._stats())  # type: ignore[attr-defined]
            return
        if self.report is not None:
            stats = self._stats()
            self.report.write(
                {
                    "configs": list(self.rules.config.sources) if self.rules else [],
                    "device": self.device,
                    "labels": list(self.rules.config.labels) if self.rules else [],
                    "collection": stats,
                }
            )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.rules is None:
            return
        stats = self._stats()
        terminalreporter.section("crcr reuse: tests per config mode")
        for line in summary_lines(self.outcomes, stats, stats):
            terminalreporter.line(line)


@contextlib.contextmanager
def on_cpu(item: pytest.Item) -> Iterator[None]:
    """While the test runs, each `cpu_move` method of its instance gets its tensor arguments
    moved to the CPU first; set on the instance, so no other test of the class sees it."""
    names = item.stash.get(CPU_MOVE, ())
    instance = getattr(item, "instance", None)
    if not names or instance is None:
        yield
        return
    for name in names:
        setattr(instance, name, _arguments_on_cpu(getattr(instance, name)))
    try:
        yield
    finally:
        for name in names:
            instance.__dict__.pop(name, None)


@contextlib.contextmanager
def restrictions_bypassed(item: pytest.Item) -> Iterator[None]:
    """While the test runs, its instance says torch's ``bypass_device_restrictions``: the
    ``@onlyOn`` decorators (``@onlyCUDA``, ``@onlyCPU``...) then run it instead of skipping
    it. Set on the instance, so no other test of the class sees it."""
    instance = getattr(item, "instance", None)
    if not item.stash.get(BYPASS, False) or instance is None:
        yield
        return
    instance.bypass_device_restrictions = True
    try:
        yield
    finally:
        instance.__dict__.pop("bypass_device_restrictions", None)


@contextlib.contextmanager
def without_grad(item: pytest.Item) -> Iterator[None]:
    """A `no_grad: true` test runs under ``torch.no_grad()`` (Torch Spyre's flag: a test
    that never calls backward need not record a graph for ops without autograd formulas)."""
    if not item.stash.get(NO_GRAD, False):
        yield
        return
    import torch

    with torch.no_grad():
        yield


def _arguments_on_cpu(method: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    def to_cpu(value: Any) -> Any:
        return value.cpu() if isinstance(value, torch.Tensor) else value

    @functools.wraps(method)
    def moved(*args: Any, **kwargs: Any) -> Any:
        return method(*tree_map(to_cpu, args), **tree_map(to_cpu, kwargs))

    return moved


def _function(item: pytest.Item, cls: Any = None) -> Any:
    cls = cls or getattr(item, "cls", None)
    name = getattr(item, "originalname", None) or item.name
    if cls is not None:
        found = cls.__dict__.get(name)
        if found is None:
            found = inspect.getattr_static(cls, name, None)
        if found is not None:
            return found
    return getattr(item, "function", None)


def _generic_class(cls: Any) -> str | None:
    """The generic class of a device class (``TestFooPRIVATEUSEONE`` -> ``TestFoo``)."""
    if cls is None:
        return None
    if DEVICE_CLASS.search(cls.__name__) and len(cls.__bases__) >= 2:
        return str(cls.__bases__[1].__name__)
    return str(cls.__name__)
