"""Excerpts of long text (failure messages, traces) that never end in half a word.

A cut falls at the last whitespace before the limit (the first after it, when the end is
kept) and is marked with an ellipsis, so "… using PyTorch on mobile …" never reads
"…using PyTo…". Only a text with no whitespace in reach (one long path or id) is cut
where the limit falls. Limits count characters, or UTF-8 bytes (`encoded`) where a
protocol sets them in bytes.

Standard library only: the relay's bridge (`runs.relay.protocol`) runs on a bare runner.
"""

import re

ELLIPSIS = "…"
_SPACE = re.compile(r"\s")


def _size(text: str, encoded: bool) -> int:
    return len(text.encode()) if encoded else len(text)


def _head(text: str, room: int, encoded: bool) -> str:
    return text.encode()[:room].decode(errors="ignore") if encoded else text[:room]


def _tail(text: str, room: int, encoded: bool) -> str:
    if encoded:
        data = text.encode()
        return data[len(data) - room :].decode(errors="ignore")
    return text[len(text) - room :]


def clip(text: str, limit: int, *, encoded: bool = False) -> str:
    """`text` in at most `limit` characters (bytes when `encoded`), keeping its start."""
    if _size(text, encoded) <= limit:
        return text
    kept = _head(text, max(0, limit - _size(ELLIPSIS, encoded)), encoded)
    if not text[len(kept)].isspace():  # the cut falls inside a word: back to its start
        spaces = [match.start() for match in _SPACE.finditer(kept)]
        if spaces:
            kept = kept[: spaces[-1]]
    return kept.rstrip() + ELLIPSIS


def clip_start(text: str, limit: int, *, encoded: bool = False) -> str:
    """`text` in at most `limit` characters (bytes when `encoded`), keeping its end: a
    traceback ends with its error."""
    if _size(text, encoded) <= limit:
        return text
    kept = _tail(text, max(0, limit - _size(ELLIPSIS, encoded)), encoded)
    if not text[len(text) - len(kept) - 1].isspace():  # inside a word: on to its end
        space = _SPACE.search(kept)
        if space:
            kept = kept[space.start() :]
    return ELLIPSIS + kept.lstrip()
