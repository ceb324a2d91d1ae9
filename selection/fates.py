"""Every test's fate: what a backend's config decides for a test, why, on which line, and
what its runs made of it, for the run page (what the config left out) and the test page.

A config is read with the engine's own loader and matching rules (`crcr_reuse.loader`,
`crcr_reuse.matching`), over the inventory's files instead of a test tree on disk: the web
process has no tree. A test id, in any of the forms a person pastes, is brought back to its
generic test by the engine's own rule (`static_scan.generic_name`). Steps of `resolve`:
1. cut the id's parts: an optional file path (`….py`), an optional class, the test name,
   without pytest's `[…]` parameters;
2. drop the class's device suffix (`TestFooPRIVATEUSE1` → `TestFoo`);
3. ask the inventory and the proposals, at once, for every generic test whose name is a
   `_`-cut prefix of the name (`test_x_privateuseone_float32` → `test_x`, `test_x_privateuseone`…);
4. per file and class, keep the longest (`generic_name`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from crcr_reuse.loader import ConfigError, load_text
from crcr_reuse.matching import Decision, FileRules, Rules
from crcr_reuse.static_scan import DEVICE_SUFFIX, generic_name, name_prefixes
from django.core.cache import cache
from django.db.models import Q
from django.urls import reverse

from runs.models import Run, TestResult
from selection.configdescriptions import line_url
from selection.configwriter import file_key
from selection.models import ConfigVersion, InventorySnapshot, Proposal, TestFile, UpstreamTest

# Where the inventory's files play ${TORCH_ROOT} when a page reads a config: nothing is read
# from there, the loader matches the config's paths against the inventory's list.
TREE = "/torch-tree"
SKIPPED, UNLISTED, DESELECTED = "skipped", "unlisted", "deselected"
ROWS_PER_FILE = 100  # of a file's left-out tests listed on the run page
ROWS_SHOWN = 1500  # of all files' (the rest are counted, and found by the test search)
KEPT = 24 * 3600  # seconds a finished run's list stays in the cache


@dataclass(frozen=True)
class TestKey:
    """A generic test, as the inventory, proposals and results key it."""

    __test__ = False  # not a pytest test class

    file_path: str
    class_name: str
    test_name: str

    @property
    def name(self) -> str:
        return f"{self.class_name}::{self.test_name}" if self.class_name else self.test_name

    def __str__(self) -> str:
        return f"{self.file_path}::{self.name}"


@dataclass(frozen=True)
class Query:
    """A test id as typed: its file (or ""), class (generic, or None) and test name."""

    text: str
    path: str
    cls: str | None
    name: str


def parse(text: str) -> Query:
    """The parts of a test id in any of its forms (steps 1-2 of `resolve`)."""
    text = text.strip()
    parts = [part.strip() for part in text.partition("[")[0].split("::") if part.strip()]
    path = file_key(parts.pop(0)) if parts and parts[0].endswith(".py") else ""
    name = parts[-1] if parts else ""
    cls = DEVICE_SUFFIX.sub("", parts[-2]) if len(parts) >= 2 else None
    return Query(text, path.lstrip("/"), cls or None, name)


def resolve(query: Query) -> list[TestKey]:
    """The generic tests a test id names, from the latest inventory and the proposals."""
    if not query.name:
        return []
    wanted = Q(test_name__in=name_prefixes(query.name))
    if query.cls is not None:
        wanted &= Q(class_name=query.cls)
    listed = UpstreamTest.objects.filter(wanted, file__snapshot=latest_snapshot())
    proposed = Proposal.objects.filter(wanted)
    if query.path:  # a path as the run names it, or its end
        listed = listed.filter(Q(file__path=query.path) | Q(file__path__endswith="/" + query.path))
        proposed = proposed.filter(
            Q(file_path=query.path) | Q(file_path__endswith="/" + query.path)
        )
    found = {
        *listed.values_list("file__path", "class_name", "test_name"),
        *proposed.values_list("file_path", "class_name", "test_name").distinct(),
    }
    by_class: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path, cls, name in found:
        by_class[(path, cls)].add(name)
    keys = []
    for (path, cls), names in sorted(by_class.items()):
        generic, _ = generic_name(query.name, names)
        if generic in names:
            keys.append(TestKey(path, cls, generic))
    return keys


def named_by_pattern(text: str, backends: list[Any]) -> list[TestKey]:
    """The inventory's tests a config entry's name written exactly as `text` (a regex, or a
    name the inventory lacks) matches, in the latest config of any of the backends."""
    text, snapshot = text.strip(), latest_snapshot()
    versions = ConfigVersion.objects.filter(backend__in=backends).order_by(
        "backend_id", "-number"
    ).distinct("backend_id").select_related("backend")  # fmt: skip
    patterns = []
    for version in versions:
        if text not in version.yaml_text:
            continue
        reading = read(version, snapshot)
        entries = reading.rules.config.files if reading.rules else []
        patterns += [
            (entry, pattern)
            for entry in entries
            for test in entry.tests
            for pattern in test.names
            if pattern.text == text
        ]
    keys: set[TestKey] = set()
    for entry, pattern in patterns:
        paths = [path.removeprefix(TREE + "/") for path in entry.files]
        tests = UpstreamTest.objects.filter(file__snapshot=snapshot, file__path__in=paths)
        keys |= {
            TestKey(path, cls, name)
            for path, cls, name in tests.values_list("file__path", "class_name", "test_name")
            if pattern.matches(cls or None, name)
        }
    return sorted(keys, key=str)


def latest_snapshot() -> InventorySnapshot | None:
    return InventorySnapshot.objects.order_by("-created_at", "-pk").first()


def snapshot_of(shas: list[str]) -> InventorySnapshot | None:
    """The inventory of the tree at one of the SHAs, else the latest one."""
    found = InventorySnapshot.objects.filter(pytorch_sha__in=shas).order_by("-created_at").first()
    return found or latest_snapshot()


# -- a config over an inventory --------------------------------------------------------------


@dataclass
class Reading:
    """A config version read over an inventory's files: its rules, or why it cannot be."""

    version: ConfigVersion
    rules: Rules | None
    problem: str = ""

    def decide(self, key: TestKey) -> Decision | None:
        """The config's decision for the test; None when the config lists not its file."""
        rules = self.file_rules(key.file_path)
        return rules.decide(key.class_name or None, key.test_name) if rules else None

    def file_rules(self, path: str) -> FileRules | None:
        return self.rules.for_file(f"{TREE}/{path}", resolved=True) if self.rules else None

    def line_url(self, line: int) -> str:
        backend, number = self.version.backend.slug, self.version.number
        return line_url(reverse("selection:configversion_detail", args=[backend, number]), line)

    def blame_url(self, line: int) -> str:
        backend, number = self.version.backend.slug, self.version.number
        return reverse("selection:configversion_blame", args=[backend, number]) + f"#L{line}"


def read(version: ConfigVersion, snapshot: InventorySnapshot | None) -> Reading:
    """The version's rules over the snapshot's files (ConfigError: the problem, no rules)."""
    paths = TestFile.objects.filter(snapshot=snapshot).values_list("path", flat=True)
    text = ConfigVersion.objects.values_list("yaml_text", flat=True).get(pk=version.pk)
    try:
        config = load_text(
            text, "crcr-config.yaml", {"TORCH_ROOT": TREE}, Path(TREE),
            tree={f"{TREE}/{path}" for path in paths},
        )  # fmt: skip
    except ConfigError as error:
        problem = "; ".join(message for _, message in error.problems[:3])
        return Reading(version, None, "could not be read: " + problem.replace(TREE + "/", ""))
    return Reading(version, Rules(config))


def where(decision: Decision) -> int:
    """The config line that decides: the tests entry, else the file's unlisted_test_mode."""
    if decision.entry is not None:
        return decision.entry.pos.line
    entry = decision.file_entry
    return (entry.unlisted_pos or entry.pos).line


def reason(decision: Decision) -> str:
    """The decision's reason in words, the file's path as the config writes it."""
    if decision.entry is None:
        return f"not listed: the file's unlisted_test_mode is {decision.mode}"
    return decision.reason


# -- what the config left out of a run -------------------------------------------------------


@dataclass
class LeftOut:
    key: TestKey
    fate: str  # SKIPPED, UNLISTED or DESELECTED
    mode: str
    reason: str
    line: int
    line_url: str
    blame_url: str


@dataclass
class FileLeftOut:
    path: str
    tests: list[LeftOut] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def more(self) -> int:
        return sum(self.counts.values()) - len(self.tests)


@dataclass
class RunLeftOut:
    files: list[FileLeftOut]
    unlisted_files: list[tuple[str, int]]  # files the config does not list, and their tests
    snapshot_sha: str = ""
    problem: str = ""

    @property
    def total(self) -> int:
        return sum(sum(f.counts.values()) for f in self.files)


def left_out(run: Any) -> RunLeftOut | None:
    """Per file, the inventory's tests the run's config left out (skipped by an entry, not
    listed in a file whose unlisted_test_mode skips them, or, once the run ended, meant to
    run yet without a result: deselected), and the files the config does not list.
    None without an inventory. A finished run's list is kept in the cache."""
    ended = run.finished_at.timestamp() if run.is_finished and run.finished_at else None
    key = f"run-left-out:{run.pk}:{ended}" if ended else ""
    if key and (kept := cache.get(key)) is not None:
        return kept or None
    found = _left_out(run, with_deselected=ended is not None)
    if key:
        cache.set(key, found or "", timeout=KEPT)
    return found


def _left_out(run: Any, with_deselected: bool) -> RunLeftOut | None:
    snapshot = snapshot_of([run.test_suite_sha, run.pytorch_sha])
    if snapshot is None:
        return None
    version = run.config_version
    found = decided(version, snapshot)
    if isinstance(found, str):
        return RunLeftOut([], [], snapshot.pytorch_sha, found)
    tests, unlisted = found
    ran = set(run.results.values_list("file_path", "class_name", "test_name").distinct())
    reading = Reading(version, None)  # its links
    files: dict[str, FileLeftOut] = {}
    shown = 0
    for test in tests:
        fate = test.fate or (DESELECTED if with_deselected else "")
        if not fate or (fate == DESELECTED and astuple(test.key) in ran):
            continue
        entry = files.setdefault(test.key.file_path, FileLeftOut(test.key.file_path))
        entry.counts[fate] = entry.counts.get(fate, 0) + 1
        if len(entry.tests) < ROWS_PER_FILE and shown < ROWS_SHOWN:
            shown += 1
            entry.tests.append(
                LeftOut(test.key, fate, test.mode, test.reason, test.line,
                        reading.line_url(test.line), reading.blame_url(test.line))
            )  # fmt: skip
    return RunLeftOut(list(files.values()), unlisted, snapshot.pytorch_sha)


@dataclass(frozen=True)
class Decided:
    """An inventory test as a config decides it: its fate when the config leaves it out
    (else ""), its mode, the reason shown for it and the deciding line."""

    key: TestKey
    fate: str
    mode: str
    reason: str
    line: int


def decided(
    version: ConfigVersion, snapshot: InventorySnapshot
) -> tuple[list[Decided], list[tuple[str, int]]] | str:
    """Every inventory test of the files the config lists as it decides it, and the files it
    lists not (with their tests); or why the config cannot be read. A version and a snapshot
    never change: kept in the cache (a 10,000-entry config takes a second to read)."""
    key = f"config-fates:{version.sha256}:{snapshot.pk}"
    if (kept := cache.get(key)) is not None:
        return kept
    reading = read(version, snapshot)
    if reading.rules is None:
        return reading.problem
    tests = UpstreamTest.objects.filter(file__snapshot=snapshot).order_by(
        "file__path", "class_name", "line", "test_name"
    )
    out: list[Decided] = []
    unlisted: dict[str, int] = {}
    for path, cls, name in tests.values_list("file__path", "class_name", "test_name"):
        test = TestKey(path, cls, name)
        decision = reading.decide(test)
        if decision is None:
            unlisted[path] = unlisted.get(path, 0) + 1
            continue
        left = decision.mode == "skip"
        fate = (SKIPPED if decision.entry is not None else UNLISTED) if left else ""
        why = reason(decision) if left else _deselected(decision)
        out.append(Decided(test, fate, decision.mode, why, where(decision)))
    found = (out, sorted(unlisted.items()))
    cache.set(key, found, timeout=KEPT)
    return found


def _deselected(decision: Decision) -> str:
    why = f" ({decision.entry.reason})" if decision.entry and decision.entry.reason else ""
    return (
        f"no variant ran{why}: the run's labels, upstream's device restrictions or the "
        "config's ops and dtypes left none"
    )


# -- a test's page -----------------------------------------------------------------------------

RUNS_LOOKED_AT = 20  # each backend's latest runs whose outcomes the test page shows


@dataclass
class Fate:
    """What one backend makes of one test: its config's decision, the proposals about it
    (the config PRs they went into) and its outcomes in the backend's latest runs."""

    backend: Any
    key: TestKey
    version: ConfigVersion | None = None
    listed: bool = False  # the config lists the test's file
    mode: str = ""
    reason: str = ""
    line: int = 0
    line_url: str = ""
    blame_url: str = ""
    problem: str = ""
    proposals: list[Proposal] = field(default_factory=list)
    outcomes: list[Any] = field(default_factory=list)


def fates(keys: list[TestKey], backends: list[Any]) -> list[Fate]:
    """Each backend's fate of each test: one query for the latest configs, one for the
    proposals (with their events and config PRs), one for the runs and one for outcomes."""
    latest = {
        version.backend_id: version
        for version in ConfigVersion.objects.filter(backend__in=backends)
        .order_by("backend_id", "-number")
        .distinct("backend_id")
        .select_related("backend")
        .defer("yaml_text")
    }
    snapshot = latest_snapshot()
    out = []
    for backend in backends:
        version = latest.get(backend.pk)
        reading = read(version, snapshot) if version is not None and keys and snapshot else None
        made = [_decided(Fate(backend, key, version), reading) for key in keys]
        for fate in made if version is not None and snapshot is None else ():
            fate.problem = "no inventory of the upstream tests yet, to read the config over"
        out += made
    if keys:
        _with_history(out, keys, backends)
    return out


def _with_history(out: list[Fate], keys: list[TestKey], backends: list[Any]) -> None:
    """Give each fate the proposals about its test and its outcomes in the latest runs."""
    by_test = Q()
    for key in keys:
        by_test |= Q(file_path=key.file_path, class_name=key.class_name, test_name=key.test_name)
    proposals = list(
        Proposal.objects.filter(by_test, backend__in=backends)
        .select_related("reviewer", "config_change")
        .prefetch_related("events__actor")
        .order_by("-created_at", "-pk")
    )
    runs = {
        run.pk: run
        for run in Run.objects.filter(backend__in=backends).order_by("-created_at")[
            : RUNS_LOOKED_AT * len(backends)
        ]
    }
    results = (
        TestResult.objects.filter(by_test, run_id__in=list(runs))
        .only("run_id", "node_id", "file_path", "class_name", "test_name", "outcome", "attempt",
              "duration", "message")
        .order_by("-run_id", "node_id", "-attempt")
    )  # fmt: skip
    for fate in out:
        fate.proposals = [
            p for p in proposals if p.backend_id == fate.backend.pk and _is(p, fate.key)
        ]
    for result in results:
        result.run = runs[result.run_id]
        for fate in out:
            if fate.backend.pk == result.run.backend_id and _is(result, fate.key):
                fate.outcomes.append(result)


def _is(row: Any, key: TestKey) -> bool:
    return (row.file_path, row.class_name, row.test_name) == (
        key.file_path, key.class_name, key.test_name,
    )  # fmt: skip


def _decided(fate: Fate, reading: Reading | None) -> Fate:
    if reading is None:
        return fate
    if reading.rules is None:
        fate.problem = reading.problem
        return fate
    decision = reading.decide(fate.key)
    if decision is None:
        return fate
    fate.listed, fate.mode, fate.reason = True, decision.mode, reason(decision)
    fate.line = where(decision)
    fate.line_url, fate.blame_url = reading.line_url(fate.line), reading.blame_url(fate.line)
    return fate
