"""A shard's list of test ids (``--reuse-ids``): what to generate and what to keep.

Lines are pytest node ids (``path::Class::test``), taken whole: an id may hold
spaces, brackets, ``#`` and any unicode (torch names a parametrized test after its
values). A line whose first character is ``#`` is a comment. Paths
may be absolute or relative to the rootdir or the current directory. Class names
are compared without caring whether the backend suffix reads ``PRIVATEUSE1`` or
``PRIVATEUSEONE`` (torch's generated names flip between the two).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

_DEVICE_SUFFIX = re.compile(r"(PRIVATEUSE1|PRIVATEUSEONE)$")


def normalize_class(name: str) -> str:
    return _DEVICE_SUFFIX.sub("PRIVATEUSE1", name)


class ShardFilter:
    def __init__(self, ids: Iterable[str], bases: Iterable[str | os.PathLike[str]]):
        self.ids: list[str] = []
        self._wanted: dict[tuple[str, str], set[str]] = {}
        self.unresolved: list[str] = []
        roots = [Path(base) for base in bases]
        for raw in ids:
            # Only the line's end goes: a space or `#` inside an id is part of it.
            line = raw.rstrip("\r\n").lstrip()
            if line.strip() and not line.startswith("#"):
                self._add(line, roots)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], bases: Iterable[str | os.PathLike[str]]
    ) -> ShardFilter:
        return cls(Path(path).read_text().splitlines(), bases)

    def _add(self, node_id: str, roots: list[Path]) -> None:
        self.ids.append(node_id)
        parts = node_id.split("::")
        path = _resolve(parts[0], roots)
        if path is None:
            self.unresolved.append(node_id)
            return
        cls = normalize_class(parts[1]) if len(parts) == 3 else ""
        self._wanted.setdefault((path, cls), set()).add(parts[-1])

    @property
    def files(self) -> list[str]:
        return sorted({path for path, _ in self._wanted})

    def wants_generic(self, path: str, device_class: str, generic_test: str) -> bool:
        """Could any wanted id be a variant of this generic test? (prefix match, cheap)."""
        names = self._wanted.get((path, normalize_class(device_class)), ())
        return any(name == generic_test or name.startswith(generic_test + "_") for name in names)

    def wants(self, path: str, cls: str | None, name: str) -> bool:
        return name in self._wanted.get((path, normalize_class(cls) if cls else ""), ())

    def found(self, seen: set[tuple[str, str, str]]) -> list[str]:
        """Ids of the list that no collected test matched."""
        missing = []
        for (path, cls), names in self._wanted.items():
            missing += [
                f"{path}::{cls}::{n}" if cls else f"{path}::{n}"
                for n in names
                if (path, cls, n) not in seen
            ]
        return sorted(missing) + self.unresolved


def _resolve(text: str, roots: list[Path]) -> str | None:
    candidate = Path(text)
    options = [candidate] if candidate.is_absolute() else [root / candidate for root in roots]
    for option in options:
        if option.is_file():
            return os.path.realpath(option)
    return None
