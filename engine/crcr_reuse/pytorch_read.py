"""Reading a ``set_test_configs(...)`` call from Python source, statically (``ast``).

The source is never executed: a value must be a literal (strings, numbers, lists,
tuples, sets, dicts), a module-level name bound to one, ``torch.<dtype>``, or a call
kept as its name and arguments (``DecorateInfo(...)``, ``unittest.skip(...)``).
Anything else (a comprehension, a loop-built list, a call's result used as data) is
a ``ReadError`` naming the file and line, and the importer writes nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from .pytorch_config import ARGUMENTS, SET_TEST_CONFIGS, callee
from .schema import canonical_dtype


class ReadError(Exception):
    """The source cannot be read as a PyTorch test config (``file:line: problem``)."""


@dataclass(frozen=True)
class Dtype:
    name: str  # canonical ("float32")


@dataclass(frozen=True)
class Ref:
    """A name that is not data: ``unittest.expectedFailure``, ``skip``."""

    name: str
    line: int


@dataclass
class CallValue:
    """A call kept as written: its last name, evaluated arguments, line."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    line: int


@dataclass
class ReadConfig:
    """The arguments of the call that counts (the last), and the bypass switches."""

    path: str
    line: int
    arguments: dict[str, Any]
    calls: int  # how many set_test_configs calls the file makes
    # (line, set on a test base such as PrivateUse1TestBase: every class) per
    # ``bypass_device_restrictions = True``
    bypass: list[tuple[int, bool]] = field(default_factory=list)


def read_source(path: str, text: str) -> ReadConfig:
    """The last ``set_test_configs`` call of ``text``; ReadError when there is none or a
    value is not static."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as error:
        raise ReadError(f"{path}:{error.lineno or 1}: not Python: {error.msg}") from error
    calls = sorted(
        (
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == SET_TEST_CONFIGS
        ),
        key=lambda node: node.lineno,
    )
    if not calls:
        raise ReadError(f"{path}:1: no {SET_TEST_CONFIGS}(...) call")
    call = calls[-1]
    if call.args:
        raise ReadError(f"{path}:{call.lineno}: {SET_TEST_CONFIGS} takes keyword arguments only")
    reader = _Evaluator(path, _constants(tree))
    arguments = {}
    for keyword in call.keywords:
        if keyword.arg not in ARGUMENTS:
            shown = keyword.arg or "**"
            raise ReadError(
                f"{path}:{keyword.value.lineno}: unknown argument {shown!r} of "
                f"{SET_TEST_CONFIGS} (known: {', '.join(ARGUMENTS)})"
            )
        arguments[keyword.arg] = reader.value(keyword.value)
    return ReadConfig(path, call.lineno, arguments, len(calls), _bypass(tree))


def _constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level ``NAME = value`` bindings (the last one wins, as at run time)."""
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                found[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            found[node.target.id] = node.value
    return found


def _bypass(tree: ast.Module) -> list[tuple[int, bool]]:
    """Where ``bypass_device_restrictions = True`` is set (on a base, a class or ``self``)."""
    found = []
    for node in ast.walk(tree):
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if (
                isinstance(value, ast.Constant)
                and value.value is True
                and callee(target) == "bypass_device_restrictions"
            ):
                owner = target.value if isinstance(target, ast.Attribute) else None
                found.append((node.lineno, callee(owner).endswith("TestBase") if owner else False))
    return found


class _Evaluator:
    def __init__(self, path: str, constants: dict[str, ast.expr]):
        self.path = path
        self.constants = constants
        self.resolving: set[str] = set()

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return [self.value(item) for item in node.elts]
        if isinstance(node, ast.Dict):
            return self._dict(node)
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Attribute):
            dtype = canonical_dtype(node.attr)
            if isinstance(node.value, ast.Name) and node.value.id == "torch" and dtype:
                return Dtype(dtype)
            return Ref(node.attr, node.lineno)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise ReadError(
            f"{self.path}:{node.lineno}: cannot read {ast.unparse(node)[:80]!r} without running "
            "it (use literals, module-level names bound to literals, DecorateInfo(...))"
        )

    def _dict(self, node: ast.Dict) -> dict[Any, Any]:
        result = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise ReadError(f"{self.path}:{node.lineno}: '**' in a dict cannot be read")
            result[self.value(key)] = self.value(value)
        return result

    def _name(self, node: ast.Name) -> Any:
        if node.id in self.constants and node.id not in self.resolving:
            self.resolving.add(node.id)
            try:
                return self.value(self.constants[node.id])
            finally:
                self.resolving.discard(node.id)
        return Ref(node.id, node.lineno)

    def _call(self, node: ast.Call) -> CallValue:
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise ReadError(f"{self.path}:{node.lineno}: '*' arguments cannot be read")
        kwargs = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ReadError(f"{self.path}:{node.lineno}: '**' arguments cannot be read")
            kwargs[keyword.arg] = self.value(keyword.value)
        return CallValue(
            callee(node.func), [self.value(arg) for arg in node.args], kwargs, node.lineno
        )
