"""What a config version's `description`s say and where: beside their lines on the config
page, and beside the ops, dtypes and modules a proposal touches in the review queue.

A version's text never changes, so its descriptions are read once (a YAML compose of
the text, no test tree needed: the engine's loader would resolve every path) and kept
in the cache under its hash. Steps of `scan`:
1. compose the text (PyYAML's nodes keep each one's line);
2. walk it, remembering the keys above each node, the files entry's `path` and the tests
   entry's `names`;
3. every mapping with a `description` is one `Described`: the item's first line, the
   description's own line, its text, where it sits (`edits.ops.include`,
   `global.supported_dtypes`, `tests`, `files`…) and its `name`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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
    """Every description of a config text, in the text's order; none when it is not YAML."""
    if "description" not in text:
        return []
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return []
    found: list[Described] = []
    if root is not None:
        _walk(root, (), "", (), found)
    return found


def _walk(
    node: yaml.Node,
    keys: tuple[str, ...],
    file: str,
    tests: tuple[str, ...],
    found: list[Described],
) -> None:
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _walk(item, keys, file, tests, found)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    fields = {key.value: value for key, value in node.value if isinstance(key, yaml.ScalarNode)}
    if keys[-1:] == ("files",):
        file = _scalar(fields.get("path"))
    elif keys[-1:] == ("tests",):
        names = fields.get("names")
        tests = tuple(_scalar(n) for n in names.value) if isinstance(names, yaml.SequenceNode) else (_scalar(names),)  # fmt: skip
    text = _scalar(fields.get("description")).strip()
    if text:
        found.append(
            Described(
                line=node.start_mark.line + 1,
                description_line=fields["description"].start_mark.line + 1,
                text=text, where=_where(keys), name=_scalar(fields.get("name")),
                file=file, tests=tests,
            )
        )  # fmt: skip
    for key, value in fields.items():
        _walk(value, (*keys, str(key)), file, tests, found)


def _scalar(node: Any) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else ""


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
    for described in found:
        if described.description_line != described.line:
            notes.setdefault(described.line, []).append(described)
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
                shown.append((kind[:-1], name, best.text, _line_url(url, best.line), best.label))
    return shown


def _line_url(url: str, line: int) -> str:
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
