"""A static look at test files (no import, no torch): generic classes and tests, test ids.

Used by the command line (``explain``, ``list``) where importing PyTorch's
test machinery would cost seconds per file. Tests that files generate at import
time (``setattr`` loops) are invisible here; ``list --collect`` counts those.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

DEVICE_SUFFIX = re.compile(r"(PRIVATEUSE1|PRIVATEUSEONE|CPU|CUDA|META|MPS|XPU|XLA|LAZY|HPU)$")
DEVICE_NAMES = ("privateuseone", "privateuse1", "cpu", "cuda", "meta", "mps", "xpu", "lazy")


@dataclass(frozen=True)
class GenericTest:
    cls: str | None
    name: str
    line: int


@cache
def scan_file(path: str) -> tuple[GenericTest, ...]:
    """Generic tests of a file: test methods of top-level classes, top-level test functions."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), filename=path)
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found += [
                GenericTest(node.name, child.name, child.lineno)
                for child in node.body
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                and child.name.startswith("test")
            ]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
            "test"
        ):
            found.append(GenericTest(None, node.name, node.lineno))
    return tuple(found)


@dataclass(frozen=True)
class TestId:
    """A test id resolved to its generic test (and what the variant suffix says)."""

    __test__ = False  # not a pytest test class

    path: str
    cls: str | None
    name: str
    variant: str = ""  # the generated suffix, e.g. "add_privateuseone_float32"

    def __str__(self) -> str:
        return f"{self.path}::{self.cls}::{self.name}" if self.cls else f"{self.path}::{self.name}"

    def parts(self) -> tuple[str | None, list[str]]:
        """(op part, dtype names) of the variant suffix."""
        words = self.variant.split("_") if self.variant else []
        for device in DEVICE_NAMES:
            if device in words:
                index = words.index(device)
                op = "_".join(words[:index]) or None
                return op, words[index + 1 :]
        return (self.variant or None), []


def resolve_test_id(text: str, base: str | None = None) -> TestId:
    """Parse ``path::Class::test`` (generic or generated) into a generic TestId."""
    parts = text.split("::")
    if len(parts) not in (2, 3):
        raise ValueError(f"a test id is path::Class::test or path::test, not {text!r}")
    path = parts[0] if os.path.isabs(parts[0]) else os.path.join(base or os.getcwd(), parts[0])
    path = os.path.realpath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no such test file: {parts[0]}")
    cls = DEVICE_SUFFIX.sub("", parts[1]) if len(parts) == 3 else None
    name = parts[-1]
    generic, variant = generic_name(name, [t.name for t in scan_file(path) if t.cls == cls])
    return TestId(path, cls, generic, variant)


def generic_name(name: str, candidates: Iterable[str]) -> tuple[str, str]:
    """(generic test, variant suffix) of a generated test's name, given the generic tests it
    may come from: the name itself when it is one, else the longest that is a prefix of it
    before a ``_`` (``test_cumprod_hangs_privateuseone_float32`` → ``test_cumprod_hangs``,
    ``privateuseone_float32``), else the name as it is."""
    known = set(candidates)
    if name in known:
        return name, ""
    prefixes = [c for c in known if name.startswith(c + "_")]
    if not prefixes:
        return name, ""
    generic = max(prefixes, key=len)
    return generic, name[len(generic) + 1 :]


def name_prefixes(name: str) -> list[str]:
    """Every generic test name a generated name can come from (its ``_``-cut prefixes and
    itself), to ask an index of generic tests for them at once."""
    words = name.split("_")
    return ["_".join(words[:n]) for n in range(1, len(words) + 1)]
