"""A config diff as rows a page renders: hunks with old and new line numbers, unified or split.

`hunks(old, new)` groups `difflib.SequenceMatcher`'s opcodes with three lines of
context (as `diff -u` does) and turns each group into
- `unified` rows: one per line, `-` lines before `+` lines, each with the line
  numbers it has on the old and the new side (None where it has none), and
- `split` rows: old and new side by side; a replaced block pairs its lines in
  order, the shorter side padded with empty cells.

`Matcher` is `difflib.SequenceMatcher` with patience anchoring: difflib alone is
quadratic in the repeats of a line (a 10,000-entry config repeats `mode: xfail`
thousands of times: 38 s for one diff), so the matching blocks are found by
1. matching the common head and tail of the two ranges;
2. anchoring on the lines that occur exactly once on each side, the longest run of
   them in the same order on both sides (patience sorting), and
3. repeating inside each gap between anchors; a gap without such lines is left to
   difflib, which is then small.
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from collections.abc import Sequence
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


def _anchors(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Pairs (i, j) of lines unique in `a` and in `b`, equal, in order on both sides:
    the longest such chain (patience sorting over b's positions in a's order)."""
    in_a, in_b = Counter(a), Counter(b)
    where = {line: j for j, line in enumerate(b) if in_b[line] == 1}
    pairs = [(i, where[line]) for i, line in enumerate(a) if in_a[line] == 1 and line in where]
    tops: list[int] = []  # per pile, the smallest b position ending a chain of that length
    links: list[int | None] = []  # per pair, the previous pair of its chain
    ends: list[int] = []  # per pile, the pair on its top
    for index, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        links.append(ends[pile - 1] if pile else None)
        if pile == len(tops):
            tops.append(j)
            ends.append(index)
        else:
            tops[pile], ends[pile] = j, index
    chain, at = [], ends[-1] if ends else None
    while at is not None:
        chain.append(pairs[at])
        at = links[at]
    return chain[::-1]


class Matcher(difflib.SequenceMatcher[str]):
    """SequenceMatcher whose matching blocks are anchored on unique lines (see above)."""

    # difflib's own attributes, undeclared in its stubs.
    a: Sequence[str]
    b: Sequence[str]
    matching_blocks: list[difflib.Match] | None

    def set_seq2(self, b: Sequence[str]) -> None:
        # Without difflib's index of b's lines (0.35 s for 30,000 lines): only the
        # gaps left to difflib need one, and they build their own.
        self.b, self.matching_blocks, self.opcodes, self.fullbcount = b, None, None, None

    def get_matching_blocks(self) -> list[difflib.Match]:
        if self.matching_blocks is None:
            found: list[tuple[int, int, int]] = []
            self._match(0, len(self.a), 0, len(self.b), found)
            merged: list[tuple[int, int, int]] = []
            for i, j, k in sorted(found):
                if (
                    merged
                    and merged[-1][0] + merged[-1][2] == i
                    and merged[-1][1] + merged[-1][2] == j
                ):
                    merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + k)
                else:
                    merged.append((i, j, k))
            merged.append((len(self.a), len(self.b), 0))
            self.matching_blocks = [difflib.Match(*block) for block in merged]
        return self.matching_blocks

    def _match(
        self, alo: int, ahi: int, blo: int, bhi: int, out: list[tuple[int, int, int]]
    ) -> None:
        a, b = self.a, self.b
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        if head:
            out.append((alo, blo, head))
            alo, blo = alo + head, blo + head
        tail = 0
        while alo < ahi - tail and blo < bhi - tail and a[ahi - tail - 1] == b[bhi - tail - 1]:
            tail += 1
        if tail:
            out.append((ahi - tail, bhi - tail, tail))
            ahi, bhi = ahi - tail, bhi - tail
        if alo == ahi or blo == bhi:
            return
        anchors = _anchors(a[alo:ahi], b[blo:bhi])
        if not anchors:
            inner = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            out += [(alo + i, blo + j, k) for i, j, k in inner.get_matching_blocks() if k]
            return
        i0, j0 = alo, blo
        for i, j in anchors:
            if i0 < alo + i or j0 < blo + j:
                self._match(i0, alo + i, j0, blo + j, out)
            out.append((alo + i, blo + j, 1))
            i0, j0 = alo + i + 1, blo + j + 1
        self._match(i0, ahi, j0, bhi, out)


def _range(start: int, count: int) -> str:
    """A hunk header's range as diff -u writes it (1-based; an empty range names the line before)."""
    if count == 1:
        return str(start + 1)
    return f"{start + 1 if count else start},{count}"


def hunks(old: str, new: str, context: int = CONTEXT) -> list[Hunk]:
    """The diff of two texts as hunks with both line numbers; [] when they are equal."""
    a, b = old.splitlines(), new.splitlines()
    matcher = Matcher(None, a, b, autojunk=False)
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
