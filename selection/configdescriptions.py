"""What a config version's `description`s say and where: beside their lines on the config
page, and beside the ops, dtypes and modules a proposal touches in the review queue.

A version's text never changes, so its descriptions are read once (from the YAML
parser's events, no test tree needed: the engine's loader would resolve every path) and
kept in the cache under its hash. Steps of `scan`:
1. parse the text (each event keeps its line);
2. follow the mappings and sequences it opens, remembering the keys above each one, the
   files entry's `path` and the tests entry's `names`;
3. every mapping with a `description` is one `Described`: the item's first line, the
   description's own line, its text, where it sits (`edits.ops.include`,
   `global.supported_dtypes`, `tests`, `files`…) and its `name`. A YAML alias is not
   followed: an aliased item's description shows where it is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml
from crcr_reuse.schema import canonical_dtype
from django.core.cache import cache
from django.urls import reverse

from selection.configwriter import file_key
from selection.models import ConfigVersion

# The kinds of a proposal's edits and the config lists that describe their items.
PLACES = {
    "ops": ("edits.ops.include", "edits.ops.exclude", "global.supported_ops"),
    "dtypes": ("edits.dtypes.include", "edits.dtypes.exclude", "global.supported_dtypes"),
    "modules": ("edits.modules.include", "edits.modules.exclude", "global.supported_modules"),
}


@dataclass(frozen=True)
class Described:
    line: int  # the item's first line (1-based)
    description_line: int
    text: str
    where: str  # "edits.ops.include", "global.supported_ops", "tests", "files", …
    name: str = ""  # the item's `name` ("" for files and tests entries)
    file: str = ""  # the path of the files entry it sits in
    tests: tuple[str, ...] = ()  # the names of the tests entry it sits in

    @property
    def label(self) -> str:
        return f"{self.where} {self.name}".strip()


def scan(text: str) -> list[Described]:
    """Every description of a config text, in the text's order; none when it is not YAML.

    From the parser's events, not composed nodes: a 2.5 MB config with 20,000
    descriptions composes in 3.9 s and parses in 0.6 s."""
    if "description" not in text:
        return []
    stack: list[_Frame] = []
    described: list[_Frame] = []
    try:
        for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            kind = _KINDS.get(type(event))
            if kind is _SCALAR and stack:
                stack[-1].scalar(event)
            elif kind is _START:
                stack.append(_Frame.opened(event, stack[-1] if stack else None))
            elif kind is _END:
                frame = stack.pop()
                if "description" in frame.fields:
                    described.append(frame)
                if stack:
                    stack[-1].key = None  # the parent's value is done
    except yaml.YAMLError:
        return []
    found = [frame.described() for frame in described]
    return sorted((d for d in found if d.text), key=lambda d: (d.line, d.description_line))


_SCALAR, _START, _END = "scalar", "start", "end"
_KINDS = {
    yaml.ScalarEvent: _SCALAR, yaml.AliasEvent: _SCALAR,
    yaml.MappingStartEvent: _START, yaml.SequenceStartEvent: _START,
    yaml.MappingEndEvent: _END, yaml.SequenceEndEvent: _END,
}  # fmt: skip


@dataclass(slots=True)
class _Frame:
    """A mapping or sequence being read: the keys above it, its scalar fields (with the
    lines of their values), and the files and tests entries it sits in."""

    keys: tuple[str, ...]
    line: int
    is_map: bool
    fields: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    key: str | None = None  # a mapping's key whose value comes next
    names: list[str] | None = None  # a tests entry's `names` as a list
    collects: _Frame | None = None  # the tests entry a `names` list belongs to
    file: _Frame | None = None
    tests: _Frame | None = None

    @classmethod
    def opened(cls, event: Any, parent: _Frame | None) -> _Frame:
        keys = (
            () if parent is None else parent.keys + ((parent.key or "",) if parent.is_map else ())
        )
        is_map = isinstance(event, yaml.MappingStartEvent)
        frame = cls(keys, event.start_mark.line + 1, is_map)
        frame.file, frame.tests = (parent.file, parent.tests) if parent else (None, None)
        if is_map and keys[-1:] == ("files",):
            frame.file = frame
        elif is_map and keys[-1:] == ("tests",):
            frame.tests = frame
        elif not is_map and parent is not None and parent.tests is parent and parent.key == "names":
            frame.collects, parent.names = parent, []
        return frame

    def scalar(self, event: Any) -> None:
        value = getattr(event, "value", None)  # an alias has none
        if not self.is_map:
            if self.collects is not None and self.collects.names is not None and value is not None:
                self.collects.names.append(str(value))
        elif self.key is None:
            self.key = str(value)
        else:
            if value is not None:
                self.fields[self.key], self.lines[self.key] = str(value), event.start_mark.line + 1
            self.key = None

    def described(self) -> Described:
        tests = self.tests
        names = tests.names if tests and tests.names is not None else None
        return Described(
            line=self.line, description_line=self.lines["description"],
            text=self.fields["description"].strip(), where=_where(self.keys),
            name=self.fields.get("name", ""),
            file=self.file.fields.get("path", "") if self.file else "",
            tests=tuple(names) if names is not None else (
                (tests.fields["names"],) if tests and "names" in tests.fields else ()
            ),
        )  # fmt: skip


def _where(keys: tuple[str, ...]) -> str:
    for start in ("edits", "global"):
        if start in keys:
            return ".".join(keys[keys.index(start) :])
    return keys[-1] if keys else ""


def of_version(version: ConfigVersion, text: str | None = None) -> list[Described]:
    """The version's descriptions, from the cache; on a miss from ``text`` when the caller
    has read it, else read here."""
    key = f"configdescriptions:{version.sha256}"
    found = cache.get(key)
    if found is None:
        if text is None:
            text = ConfigVersion.objects.values_list("yaml_text", flat=True).get(pk=version.pk)
        found = scan(text)
        cache.set(key, found, timeout=None)
    return found


def notes_by_line(found: Iterable[Described]) -> dict[int, list[Described]]:
    """The descriptions to show beside an item's first line: those written on a line of
    their own (one on the item's line is already in sight)."""
    notes: dict[int, list[Described]] = {}
    seen = set()
    for described in found:
        where = (described.line, described.description_line)
        # An item a YAML alias repeats is walked once per use, yet written once.
        if described.description_line != described.line and where not in seen:
            notes.setdefault(described.line, []).append(described)
        seen.add(where)
    return notes


# -- the review queue --------------------------------------------------------------------------


def attach(proposals: Iterable[Any]) -> None:
    """Give each proposal `described`: (kind, name, description, its line's URL) for each
    op, dtype or module its edits touch that the backend's latest config describes.

    One query for the latest versions of the page's backends (none when no proposal has
    edits), and one per version whose descriptions the cache lacks."""
    proposals = list(proposals)
    for proposal in proposals:
        proposal.described = []
    touching = [p for p in proposals if p.edits]
    if not touching:
        return
    latest = (
        ConfigVersion.objects.filter(backend_id__in={p.backend_id for p in touching})
        .order_by("backend_id", "-number")
        .distinct("backend_id")
        .select_related("backend")
        .only("pk", "number", "sha256", "backend_id", "backend__slug")
    )
    for version in latest:
        found = of_version(version)
        url = reverse("selection:configversion_detail", args=[version.backend.slug, version.number])
        for proposal in (p for p in touching if p.backend_id == version.backend_id):
            proposal.described = _for_proposal(proposal, found, url)


def _for_proposal(proposal: Any, found: list[Described], url: str) -> list[tuple[str, ...]]:
    shown: list[tuple[str, ...]] = []
    for kind, change in proposal.edits.items():
        names = {
            str(item.get("name", ""))
            for items in (change.values() if isinstance(change, dict) else ())
            for item in (items if isinstance(items, list) else ())
            if isinstance(item, dict)
        }
        for name in sorted(names):
            best = _best(proposal, kind, name, found)
            if best is not None:
                shown.append((kind[:-1], name, best.text, line_url(url, best.line), best.label))
    return shown


def line_url(url: str, line: int) -> str:
    """The config page at the line: its window of lines starts there when the first
    window does not hold it."""
    from selection.views.configpage import LINES_SHOWN

    return f"{url}#L{line}" if line <= LINES_SHOWN else f"{url}?start={line}#L{line}"


def _best(proposal: Any, kind: str, name: str, found: list[Described]) -> Described | None:
    """The description of the item in the proposal's own tests entry, else in the
    global list, else the first elsewhere."""
    wanted = _normal(kind, name)
    places = PLACES.get(kind, ())
    matches = [d for d in found if d.where in places and _normal(kind, d.name) == wanted]
    test = f"{proposal.class_name}::{proposal.test_name}" if proposal.class_name else ""
    for d in matches:
        path = file_key(d.file)
        same_file = path == proposal.file_path or proposal.file_path.endswith("/" + path)
        if same_file and (test in d.tests or proposal.test_name in d.tests):
            return d
    return next((d for d in matches if d.where.startswith("global.")), None) or next(
        iter(matches), None
    )


def _normal(kind: str, name: str) -> str:
    if kind == "dtypes":
        return canonical_dtype(name) or name
    return name.removeprefix("torch.")
