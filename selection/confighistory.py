"""A backend's config history: its versions, and which version (and decision) wrote each line.

`blame(version)` walks the backend's versions from v1 to `version`:
1. read every version's text in one query, the config PRs that produced them and
   those PRs' proposals (with their reviewers) in two more, whatever the length;
2. v1's lines all come from v1; for each next version, `configdiff.Matcher`
   on the previous text's lines: an unchanged line keeps its origin, an inserted
   or replaced line gets the new version;
3. each line is placed in its YAML entry (the `- path:` file and the `- names:`
   test entry with its `# Why:` comment and its keys), and the proposals of the
   origin's PR that name that entry's tests (else that file) are its decisions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Prefetch, QuerySet

from runs.models import Backend
from selection import configdiff
from selection.configwriter import file_key
from selection.models import ConfigChange, ConfigVersion, Proposal

PATH = re.compile(r"^\s*-\s+path:\s*(?P<path>.+?)\s*$")
NAMES = re.compile(r"^(?P<pad>\s*)-\s+names:\s*\[(?P<names>.*)\]\s*$")


def versions(backend: Backend) -> QuerySet[ConfigVersion]:
    """The backend's versions newest first, with who merged each and its config PR (no text)."""
    return (
        ConfigVersion.objects.filter(backend=backend)
        .select_related("created_by", "merged_from")
        .defer("yaml_text", "merged_from__proposed_text")
        .order_by("-number")
    )


@dataclass
class BlameLine:
    number: int
    text: str
    version: ConfigVersion
    change: ConfigChange | None
    proposals: list[Proposal] = field(default_factory=list)
    first: bool = True  # the first line of a run with the same origin: the page annotates it
    span: int = 1  # on a first line, the length of its run (the annotation's rowspan)


@dataclass(frozen=True)
class _Entry:
    file: str = ""
    names: frozenset[str] = frozenset()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _names(flow: str) -> frozenset[str]:
    return frozenset(name.strip().strip("\"'") for name in flow.split(",") if name.strip())


def entries(lines: list[str]) -> list[_Entry]:
    """Per line, the file it is under and the tests of the `- names:` entry it belongs to."""
    out = []
    current = ""
    for line in lines:
        path = PATH.match(line)
        if path:
            current = file_key(path["path"].strip("\"'"))
        out.append(_Entry(current))
    for index, line in enumerate(lines):
        match = NAMES.match(line)
        if not match:
            continue
        dash, entry = len(match["pad"]), _Entry(out[index].file, _names(match["names"]))
        out[index] = entry
        below = index + 1  # the entry's own keys: deeper than its dash
        while below < len(lines) and lines[below].strip() and _indent(lines[below]) > dash:
            out[below] = entry
            below += 1
        above = index - 1  # its comment block (`# Why: …`) right above, at the dash's column
        while (
            above >= 0 and lines[above].lstrip().startswith("#") and _indent(lines[above]) == dash
        ):
            out[above] = entry
            above -= 1
    return out


def _origins(history: list[ConfigVersion]) -> list[ConfigVersion]:
    """For each line of the last version's text, the version that last wrote it."""
    origin: list[ConfigVersion] = []
    previous: list[str] = []
    for version in history:
        lines = version.yaml_text.splitlines()
        # Anchored on unique lines: difflib alone is quadratic in a long config's repeats.
        matcher = configdiff.Matcher(None, previous, lines, autojunk=False)
        carried: list[ConfigVersion] = []
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            carried += origin[i1:i2] if tag == "equal" else [version] * (j2 - j1)
        origin, previous = carried, lines
    return origin


def _decisions(change: ConfigChange | None, entry: _Entry) -> list[Proposal]:
    if change is None or not entry.file:
        return []
    in_file = [
        p
        for p in change.proposals.all()
        if p.file_path == entry.file or p.file_path.endswith("/" + entry.file)
    ]
    named = [
        p for p in in_file if (f"{p.class_name}::{p.test_name}" if p.class_name else p.test_name)
        in entry.names
    ]  # fmt: skip
    return named or in_file


def blame(version: ConfigVersion) -> list[BlameLine]:
    """Each line of the version's text with the version, config PR and decisions behind it."""
    history = list(
        ConfigVersion.objects.filter(backend_id=version.backend_id, number__lte=version.number)
        .select_related("created_by")
        .order_by("number")
    )
    reviewed = Proposal.objects.select_related("reviewer").order_by(
        "file_path", "class_name", "test_name"
    )
    changes: dict[Any, ConfigChange] = {
        change.merged_version_id: change
        for change in ConfigChange.objects.filter(merged_version__in=history)
        .defer("proposed_text")
        .prefetch_related(Prefetch("proposals", queryset=reviewed))
    }
    lines = history[-1].yaml_text.splitlines() if history else []
    out: list[BlameLine] = []
    head: BlameLine | None = None  # the first line of the current run
    for number, (text, origin, entry) in enumerate(
        zip(lines, _origins(history), entries(lines), strict=True), start=1
    ):
        change = changes.get(origin.pk)
        row = BlameLine(number, text, origin, change, _decisions(change, entry))
        if head is not None and (head.version.pk, head.proposals) == (origin.pk, row.proposals):
            row.first = False
            head.span += 1
        else:
            head = row
        out.append(row)
    return out
