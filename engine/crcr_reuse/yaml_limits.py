"""Bound a YAML text before anything expands it: size, aliases, expanded nodes, depth.

A YAML alias repeats the node its anchor names, so a few hundred bytes can stand for
10^9 nodes (billion laughs), and a walk over the loaded data (crcr's loader, Spyre's
importer, a planner) expands them all. Every place that reads a config's YAML calls
``check`` first; it refuses a text over a limit in milliseconds, naming the limit and
the file:line:column of the alias or node that crossed it.

Steps: refuse a text over ``MAX_BYTES``; read PyYAML's event stream (the C parser when
there is one; the parser keeps its own stacks, so a 10,000-deep ``[[[…]]]`` cannot
overflow Python's or C's stack, which composing it could); count each node as an
alias-expanding walk would, with one memo per anchor of the size of the subtree it
names, so the count costs one pass over the text however large the expansion; stop
at the first alias, nesting or node past a limit. An alias inside the node it names
(a cycle) is refused too: no walk over it ends. A text PyYAML cannot parse is left to
the caller's own loader to report (but libyaml's own nesting cap, 1,000, is past
MAX_DEPTH: refused); ``ruamel=True`` (the Spyre importer and crcr's config writer load
with ruamel.yaml) then reads it with ruamel's parser too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import yaml

from .schema import Pos

# Generous for real configs: Torch Spyre's largest model configs are 1-2 MB of text,
# ~120,000 nodes for 2 MB, nested ~15 deep, with a few anchors for repeated blocks.
# A walk over MAX_NODES costs the strict loader ~10 s and ~400 MB: the worst a text
# within the limits can ask of it.
MAX_BYTES = 8 * 1024 * 1024  # the text, UTF-8 encoded
MAX_ALIASES = 100_000  # alias uses (`*name`) in one text
MAX_NODES = 1_000_000  # scalars + lists + mappings, each alias counted as what it repeats
MAX_DEPTH = 100  # lists and mappings nested in each other

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DEEP = f"YAML limit: lists and mappings nest past the limit of {MAX_DEPTH} (MAX_DEPTH)"


class YamlLimitError(ValueError):
    """A YAML text crosses a limit; ``pos`` is where, ``message`` which limit."""

    def __init__(self, pos: Pos, message: str):
        self.pos, self.message = pos, message
        super().__init__(f"{pos}: {message}")


def check(text: str, source: str = "<text>", *, ruamel: bool = False) -> None:
    """Raise YamlLimitError when the text crosses a limit (see the module's steps)."""
    _check_size(text, source)
    try:
        _Count(source).events(yaml.parse(text, Loader=_LOADER))
        return
    except yaml.MarkedYAMLError as error:
        # libyaml scans ahead and stops at its own nesting cap (1,000) before one event
        # passes ours; reading on with PyYAML's Python parser could take seconds.
        if "nesting depth" in str(error.problem) and error.problem_mark:
            raise YamlLimitError(_pos(source, error.problem_mark), _DEEP) from None
    except yaml.YAMLError:
        pass  # not YAML: the loader reports where (PyYAML's Python parser would agree)
    if ruamel:  # ruamel's grammar differs a little: its parser reads the text then
        from ruamel.yaml import YAML

        _quietly(source, lambda: YAML(typ="rt").parse(text))


def _quietly(source: str, events: Callable[[], Iterable[Any]]) -> None:
    """Count a parser's events; a text that is not YAML to it is its loader's to report."""
    try:
        _Count(source).events(events())
    except YamlLimitError:
        raise
    except Exception:  # ruamel raises many kinds; all mean "not YAML"
        return


def safe_load(text: str, source: str = "<text>") -> Any:
    """``yaml.safe_load`` of a text within the limits (YamlLimitError otherwise)."""
    check(text, source)
    return yaml.safe_load(text)


def _check_size(text: str, source: str) -> None:
    if len(text) * 4 <= MAX_BYTES:  # UTF-8 spends at most 4 bytes a character
        return
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_BYTES:
        return
    head = data[:MAX_BYTES].decode("utf-8", "ignore")
    line = head.count("\n") + 1
    column = len(head) - (head.rfind("\n") + 1) + 1
    raise YamlLimitError(
        Pos(source, line, column),
        f"YAML limit: the text is {len(data):,} bytes, over the limit of {MAX_BYTES:,} bytes "
        "(MAX_BYTES); it crosses it here",
    )


class _Count:
    """One pass over a parser's events, counting the nodes an expanding walk would see."""

    def __init__(self, source: str):
        self.source = source
        self.total = 0  # nodes of the expanded document so far
        self.aliases = 0
        self.sizes: dict[str, int] = {}  # anchor -> expanded size of the node it names
        self.open: list[list[Any]] = []  # per open list/mapping: [anchor, expanded size]
        self.open_anchors: Counter[str] = Counter()

    def events(self, events: Iterable[Any]) -> None:
        for event in events:
            kind = type(event).__name__  # PyYAML's and ruamel's events share names
            if kind in ("SequenceStartEvent", "MappingStartEvent"):
                self.start(event)
            elif kind in ("SequenceEndEvent", "MappingEndEvent"):
                self.end()
            elif kind == "ScalarEvent":
                self.node(event, 1, "this value")
                if event.anchor:
                    self.sizes[event.anchor] = 1
            elif kind == "AliasEvent":
                self.alias(event)
            elif kind == "DocumentStartEvent":
                self.sizes.clear()  # anchors belong to one document

    def start(self, event: Any) -> None:
        if len(self.open) >= MAX_DEPTH:
            self.refuse(event, _DEEP)
        self.count(event, 1, "this list or mapping")
        self.open.append([event.anchor, 1])  # its children add to it; its end to its parent
        if event.anchor:
            self.open_anchors[event.anchor] += 1

    def end(self) -> None:
        anchor, size = self.open.pop()
        if anchor:
            self.sizes[anchor] = size
            self.open_anchors[anchor] -= 1
        if self.open:
            self.open[-1][1] += size

    def alias(self, event: Any) -> None:
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            self.refuse(
                event, f"YAML limit: more aliases than the limit of {MAX_ALIASES:,} (MAX_ALIASES)"
            )
        if self.open_anchors[event.anchor] > 0:
            cycle = f"alias *{event.anchor} is inside the node it names (a cycle)"
            self.refuse(event, f"YAML limit: {cycle}")
        # An unknown anchor is the loader's error to report; here it counts as one node.
        self.node(event, self.sizes.get(event.anchor, 1), f"alias *{event.anchor}")

    def node(self, event: Any, size: int, what: str) -> None:
        """A value or an alias of `size` expanded nodes, inside the innermost open node."""
        self.count(event, size, what)
        if self.open:
            self.open[-1][1] += size

    def count(self, event: Any, size: int, what: str) -> None:
        self.total += size
        if self.total > MAX_NODES:
            self.refuse(
                event,
                f"YAML limit: {what} takes the document past the limit of {MAX_NODES:,} nodes "
                f"(MAX_NODES) with aliases expanded ({size:,} here)",
            )

    def refuse(self, event: Any, message: str) -> None:
        raise YamlLimitError(_pos(self.source, event.start_mark), message)


def _pos(source: str, mark: Any) -> Pos:
    return Pos(source, mark.line + 1, mark.column + 1)
