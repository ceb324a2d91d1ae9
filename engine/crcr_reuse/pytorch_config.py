"""What crcr's config and PyTorch's own accelerator test config (torch ≥ 2.13) share.

PyTorch's config is one call, ``PrivateUse1TestBase.set_test_configs(op_allowlist=…,
op_overrides=…, test_exclusions=…)``, made before the test files are imported
(torch's ``common_device_type``; its docs: "Reusing Built-in Test Cases", and
OpenReg's ``torch_openreg/tests/test_testing.py``). At instantiation torch
1. drops a generic test named in ``test_exclusions[generic class]`` (a list of
   method names, or ``"*"``: the whole class) for that device;
2. keeps, in every ``@ops`` list, only the OpInfos whose ``full_name`` is in
   ``op_allowlist`` (an emptied list makes the file fail: "An empty op_list");
3. appends each ``op_overrides[full_name]`` ``DecorateInfo`` to that OpInfo's
   decorators: it decorates the variants whose generic class, generic test and dtype
   match (``unittest.skip`` / ``unittest.expectedFailure``, precision overrides...).
Devices, ``@dtypes``-only tests, ``@modules`` lists and markers are not part of it.
``pytorch_export.py`` writes such a call from a crcr config, ``pytorch_import.py``
reads one back; both name, per kind with a count, what the other side cannot say.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from .schema import DTYPES

SET_TEST_CONFIGS = "set_test_configs"
ARGUMENTS = ("op_allowlist", "op_overrides", "test_exclusions")
SHOWN_ITEMS = 6  # items named per kind in a report line; the count says the rest


@dataclass
class Gaps:
    """What one side cannot express, grouped by kind: kind -> items (test ids, names)."""

    kinds: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, item: str) -> None:
        items = self.kinds.setdefault(kind, [])
        if item not in items:
            items.append(item)

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def lines(self) -> list[str]:
        """One line per kind: ``kind (count): first items…``."""
        shown = []
        for kind, items in self.kinds.items():
            named = ", ".join(items[:SHOWN_ITEMS]) + (", …" if len(items) > SHOWN_ITEMS else "")
            shown.append(f"{kind} ({len(items)}): {named}")
        return shown


@dataclass(frozen=True)
class ScannedTest:
    """A generic test of a file, as the source shows it (no import)."""

    cls: str | None
    name: str
    device_class: bool  # its class is given to instantiate_device_type_tests
    decorators: frozenset[str]  # "ops", "dtypes", "modules" among its decorators

    @property
    def has_ops(self) -> bool:
        return self.device_class and "ops" in self.decorators

    def shown(self, path: str) -> str:
        return f"{path}::{self.cls}::{self.name}" if self.cls else f"{path}::{self.name}"


@cache
def scan_tests(path: str) -> tuple[ScannedTest, ...]:
    """Generic tests of top-level classes and functions, with what torch instantiates."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    device_classes = {
        node.args[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and callee(node.func) == "instantiate_device_type_tests"
        and node.args
        and isinstance(node.args[0], ast.Name)
    }
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    child.name.startswith("test")
                ):
                    kinds = _decorator_kinds(child.decorator_list)
                    found.append(
                        ScannedTest(node.name, child.name, node.name in device_classes, kinds)
                    )
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            node.name.startswith("test")
        ):
            found.append(ScannedTest(None, node.name, False, frozenset()))
    return tuple(found)


def callee(node: ast.expr) -> str:
    """The last name of a called expression: ``ops`` for ``ops(...)`` or ``cdt.ops(...)``."""
    if isinstance(node, ast.Call):
        return callee(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _decorator_kinds(decorators: Iterable[ast.expr]) -> frozenset[str]:
    kinds = set()
    for decorator in decorators:
        name = callee(decorator)
        if name == "ops":
            kinds.add("ops")
        elif name == "modules":
            kinds.add("modules")
        elif name.startswith("dtypes"):
            kinds.add("dtypes")
    return frozenset(kinds)


@dataclass(frozen=True)
class OpName:
    name: str  # OpInfo.name ("div")
    full_name: str  # OpInfo.full_name ("div.floor_rounding"), what torch's config keys on

    @property
    def names(self) -> tuple[str, str]:
        """What crcr's op rules match: the name or the full name."""
        return (self.name, self.full_name)


@cache
def op_names() -> tuple[OpName, ...]:
    """Every OpInfo of torch's op_db (imports it: ~9 s, once a process)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return tuple(dict.fromkeys(OpName(op.name, op.full_name) for op in op_db))


@cache
def torch_dtypes() -> tuple[str, ...]:
    """crcr's canonical dtype names that this torch has (what ``DecorateInfo`` accepts)."""
    import torch

    return tuple(sorted(d for d in DTYPES if isinstance(getattr(torch, d, None), torch.dtype)))
