"""A config diff as rows a page renders: hunks with old and new line numbers, unified or split.

`hunks(old, new)` groups `difflib.SequenceMatcher`'s opcodes with three lines of
context (as `diff -u` does) and turns each group into
- `unified` rows: one per line, `-` lines before `+` lines, each with the line
  numbers it has on the old and the new side (None where it has none), and
- `split` rows: old and new side by side; a replaced block pairs its lines in
  order, the shorter side padded with empty cells.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

CONTEXT = 3


@dataclass(frozen=True)
class Line:
    """One line of one side: its number there (None: no line on this side), text and kind."""

    number: int | None
    text: str
    kind: str  # "context", "add", "remove" or "empty"

    @property
    def sign(self) -> str:
        return {"add": "+", "remove": "-"}.get(self.kind, " ")


@dataclass(frozen=True)
class UnifiedRow:
    old: int | None
    new: int | None
    line: Line


@dataclass(frozen=True)
class SplitRow:
    old: Line
    new: Line


@dataclass
class Hunk:
    header: str  # @@ -a,b +c,d @@
    unified: list[UnifiedRow] = field(default_factory=list)
    split: list[SplitRow] = field(default_factory=list)


EMPTY = Line(None, "", "empty")


def _range(start: int, count: int) -> str:
    """A hunk header's range as diff -u writes it (1-based; an empty range names the line before)."""
    if count == 1:
        return str(start + 1)
    return f"{start + 1 if count else start},{count}"


def hunks(old: str, new: str, context: int = CONTEXT) -> list[Hunk]:
    """The diff of two texts as hunks with both line numbers; [] when they are equal."""
    a, b = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    out = []
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        header = (
            f"@@ -{_range(first[1], last[2] - first[1])} +{_range(first[3], last[4] - first[3])} @@"
        )
        hunk = Hunk(header)
        for tag, i1, i2, j1, j2 in group:
            same = tag == "equal"
            olds = [Line(i + 1, a[i], "context" if same else "remove") for i in range(i1, i2)]
            news = [Line(j + 1, b[j], "context" if same else "add") for j in range(j1, j2)]
            if same:
                pairs = list(zip(olds, news, strict=True))
                hunk.unified += [UnifiedRow(o.number, n.number, o) for o, n in pairs]
                hunk.split += [SplitRow(o, n) for o, n in pairs]
                continue
            hunk.unified += [UnifiedRow(o.number, None, o) for o in olds]
            hunk.unified += [UnifiedRow(None, n.number, n) for n in news]
            for index in range(max(len(olds), len(news))):
                hunk.split.append(
                    SplitRow(
                        olds[index] if index < len(olds) else EMPTY,
                        news[index] if index < len(news) else EMPTY,
                    )
                )
        out.append(hunk)
    return out
