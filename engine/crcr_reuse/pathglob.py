"""The files a config's ``path`` (a path or a glob, tokens expanded) names: on disk, or among
a given list of files (crcr's pages read configs over an inventory, with no tree on disk)."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Collection


def files_matching(pattern: str, tree: Collection[str] | None = None) -> list[str]:
    """The files (real paths) matching an absolute path or glob, sorted: on disk, or among
    ``tree`` (absolute paths) when given."""
    if tree is not None:
        found = glob_regex(pattern)
        return sorted(path for path in tree if found.fullmatch(path))
    return sorted(
        os.path.realpath(match)
        for match in glob.glob(pattern, recursive=True)
        if os.path.isfile(match)
    )


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as ``glob.glob(recursive=True)`` reads it, as a regex over paths: ``*`` and
    ``?`` stay inside one folder, ``**`` spans folders, ``[...]`` is a set."""
    out, index = [], 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        elif pattern[index] == "[" and (end := pattern.find("]", index + 2)) != -1:
            body = pattern[index + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            index = end + 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out))
