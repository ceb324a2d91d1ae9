"""Read one upstream test file without importing it: classes, generic tests, decorators.

Pure Python (`ast`, no torch, no Django). For each test method of a test class:
its decorators (class decorators included), device restrictions, the OpInfos,
modules and dtypes its decorators name (statically: literal names where the
source has them, otherwise the expression), its docstring, a one-line summary,
and a content hash over its normalised source and everything it parametrizes
over (module-level names its decorators and body use, transitively, and the
`torch/testing/_internal` modules they come from when the tree has them).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from crcr_reuse import schema

# Decorator names that decide where a test may run, as the device-type machinery reads them.
RESTRICTIONS = {
    "onlyCUDA": "cuda only",
    "onlyCPU": "cpu only",
    "onlyMPS": "mps only",
    "onlyXPU": "xpu only",
    "onlyHPU": "hpu only",
    "onlyOn": "only on the named devices",
    "onlyNativeDeviceTypes": "native device types only",
    "onlyNativeDeviceTypesAnd": "native device types and the named ones",
    "onlyCUDAAndPRIVATEUSE1": "cuda and privateuse1 only",
    "onlyPRIVATEUSE1": "privateuse1 only",
    "skipPRIVATEUSE1": "skipped on privateuse1",
    "skipPRIVATEUSE1If": "skipped on privateuse1 under a condition",
    "expectedFailurePRIVATEUSE1": "expected to fail on privateuse1",
    "deviceCountAtLeast": "needs several devices",
    "largeTensorTest": "needs a large amount of device memory",
    "skipMeta": "skipped on meta",
    "skipLazy": "skipped on lazy",
    "skipIfTorchDynamo": "skipped under dynamo",
    "skip": "always skipped",
    "skipIf": "skipped under a condition",
    "skipCUDAIf": "skipped on cuda under a condition",
    "skipCPUIf": "skipped on cpu under a condition",
}
# Restrictions under which the test never runs on a privateuse1 device.
EXCLUDES_PRIVATEUSE1 = {
    "onlyCUDA",
    "onlyCPU",
    "onlyMPS",
    "onlyXPU",
    "onlyHPU",
    "skipPRIVATEUSE1",
    "skip",
}

DTYPE_SETS = {
    "floating_types": ["float32", "float64"],
    "integral_types": ["uint8", "int8", "int16", "int32", "int64"],
    "complex_types": ["complex64", "complex128"],
    "all_types": ["float32", "float64", "uint8", "int8", "int16", "int32", "int64"],
    "floating_and_complex_types": ["float32", "float64", "complex64", "complex128"],
    "all_types_and_complex": [
        "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "complex64", "complex128",
    ],
}  # fmt: skip
# torch's dtype aliases, as the config schema reads them, and `torch.bool` itself.
DTYPE_ALIASES = {**schema.DTYPE_ALIASES, "bool": "bool"}
INSTANTIATORS = {"instantiate_device_type_tests", "instantiate_parametrized_tests"}


@dataclass
class ParsedTest:
    class_name: str
    test_name: str
    line: int
    decorators: list[str]
    device_restrictions: list[str]
    ops: list[str]
    modules: list[str]
    dtypes: list[str]
    docstring: str
    summary: str
    content_hash: str
    device_generic: bool
    parametrize: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.class_name, self.test_name)


@dataclass
class ParsedFile:
    path: str
    content_hash: str
    summary: str
    tests: list[ParsedTest]
    error: str = ""
    about: str = ""  # the header comment or docstring: the summary's first words

    def renamed(self, path: str) -> ParsedFile:
        """The same text's facts under another path (a renamed copy): only the summary
        can depend on the path, when the file says nothing about itself."""
        if self.error:
            return replace(self, path=path, summary=f"{path}: could not be parsed")
        return replace(self, path=path, summary=file_summary(path, self.about, self.tests))


def file_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_file(path: str, data: bytes, tree_root: Path | None = None) -> ParsedFile:
    """Everything the inventory keeps about one file (a syntax error is kept, not raised)."""
    digest = file_hash(data)
    text = data.decode("utf-8", errors="replace")
    try:
        module = ast.parse(text)
    except SyntaxError as error:
        return ParsedFile(path, digest, f"{path}: could not be parsed", [], f"{error}")
    reader = _Reader(path, text, module, tree_root)
    tests = reader.tests()
    about = ast.get_docstring(module) or _header_comment(text)
    return ParsedFile(path, digest, file_summary(path, about, tests), tests, about=about)


class _Reader:
    def __init__(self, path: str, text: str, module: ast.Module, tree_root: Path | None):
        self.path, self.text, self.module, self.tree_root = path, text, module, tree_root
        self.lines = text.splitlines()
        self.definitions: dict[str, ast.stmt] = {}
        self.imports: dict[str, str] = {}
        for node in module.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.definitions[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            self.definitions[name.id] = node
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = node.module
        self.instantiated = self._instantiations()
        self._external: dict[str, str] = {}
        self._unparsed: dict[str, str] = {}
        self._closure: dict[str, frozenset[str]] = {}

    # -- classes and tests ----------------------------------------------------

    def _instantiations(self) -> dict[str, dict[str, str]]:
        """Class name -> how it is instantiated (device-generic or not, only_for...)."""
        found: dict[str, dict[str, str]] = {}
        for node in ast.walk(self.module):
            if (
                isinstance(node, ast.Call)
                and _call_name(node.func) in INSTANTIATORS
                and node.args
                and isinstance(node.args[0], ast.Name)
            ):
                options = {
                    kw.arg: self._src(kw.value) for kw in node.keywords if kw.arg is not None
                }
                options["kind"] = _call_name(node.func)
                found[node.args[0].id] = options
        for node in self.module.body:
            if isinstance(node, ast.ClassDef):
                for decorator in node.decorator_list:
                    if _call_name(decorator) == "instantiate_parametrized_tests":
                        found[node.name] = {"kind": "instantiate_parametrized_tests"}
        return found

    def tests(self) -> list[ParsedTest]:
        out: list[ParsedTest] = []
        for node in self.module.body:
            if not isinstance(node, ast.ClassDef) or not self._is_test_class(node):
                continue
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    item.name.startswith("test")
                ):
                    out.append(self._test(node, item))
        return out

    def _is_test_class(self, node: ast.ClassDef) -> bool:
        if node.name in self.instantiated:
            return True
        bases = [_call_name(base) for base in node.bases]
        return node.name.startswith("Test") and any(
            b.endswith(("TestCase", "TestBase")) or b in self.definitions for b in bases
        )

    def _test(self, cls: ast.ClassDef, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ParsedTest:
        instantiation = self.instantiated.get(cls.name, {})
        generic = instantiation.get("kind") == "instantiate_device_type_tests"
        decorators = [self._src(d) for d in cls.decorator_list + fn.decorator_list]
        decorators = [d for d in decorators if not d.startswith("instantiate_parametrized_tests")]
        restrictions = [
            _restriction(d)
            for d in cls.decorator_list + fn.decorator_list
            if _call_name(d) in RESTRICTIONS
        ]
        for option in ("only_for", "except_for"):
            if option in instantiation:
                restrictions.append(f"{option}={_plain(instantiation[option])}")
        ops, modules, dtypes, parametrize = self._spans(fn)
        docstring = ast.get_docstring(fn) or ""
        return ParsedTest(
            class_name=cls.name,
            test_name=fn.name,
            line=fn.lineno,
            decorators=decorators,
            device_restrictions=restrictions,
            ops=ops,
            modules=modules,
            dtypes=dtypes,
            docstring=docstring,
            summary=summarize(cls.name, fn.name, docstring, ops, modules, dtypes),
            content_hash=self._hash(cls, fn, instantiation),
            device_generic=generic,
            parametrize=parametrize,
        )

    # -- what a test spans ------------------------------------------------------

    def _spans(
        self, fn: ast.FunctionDef | ast.AsyncFunctionDef
    ) -> tuple[list[str], list[str], list[str], dict[str, str]]:
        ops: list[str] = []
        modules: list[str] = []
        dtypes: list[str] = []
        parametrize: dict[str, str] = {}
        for decorator in fn.decorator_list:
            name = _call_name(decorator)
            if not isinstance(decorator, ast.Call):
                continue
            if name == "ops" and decorator.args:
                ops += self._names_in(decorator.args[0])
                for kw in decorator.keywords:
                    if kw.arg in ("allowed_dtypes", "dtypes"):
                        dtypes += self._dtypes_in(kw.value)
            elif name == "modules" and decorator.args:
                modules += self._names_in(decorator.args[0], module_names=True)
                for kw in decorator.keywords:
                    if kw.arg == "allowed_dtypes":
                        dtypes += self._dtypes_in(kw.value)
            elif name == "dtypes":
                for arg in decorator.args:
                    dtypes += self._dtypes_in(arg)
            elif name == "parametrize" and decorator.args:
                key = self._src(decorator.args[0]).strip("'\"")
                parametrize[key] = self._src(decorator.args[1]) if len(decorator.args) > 1 else ""
        return _unique(ops), _unique(modules), _unique(dtypes), parametrize

    def _names_in(self, node: ast.expr, module_names: bool = False) -> list[str]:
        """Literal op/module names an `@ops(...)`/`@modules(...)` argument selects, if visible."""
        resolved = self._resolve(node)
        strings = [
            n.value
            for part in resolved
            for n in ast.walk(part)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and _looks_like_name(n.value)
        ]
        if module_names:
            strings += [
                self._src(n).removeprefix("torch.")
                for part in resolved
                for n in ast.walk(part)
                if isinstance(n, ast.Attribute) and self._src(n).startswith(("torch.nn.", "nn."))
            ]
        return strings or [self._src(node)]

    def _resolve(self, node: ast.expr) -> list[ast.AST]:
        """The expression plus the module-level definitions it names, transitively."""
        seen: set[str] = set()
        parts: list[ast.AST] = [node]
        queue: list[ast.AST] = [node]
        while queue:
            current = queue.pop()
            for child in ast.walk(current):
                if isinstance(child, ast.Name) and child.id not in seen:
                    seen.add(child.id)
                    definition = self.definitions.get(child.id)
                    if isinstance(definition, (ast.Assign, ast.AnnAssign)):
                        parts.append(definition)
                        queue.append(definition)
        return parts

    def _dtypes_in(self, node: ast.expr) -> list[str]:
        if isinstance(node, ast.Starred):
            node = node.value
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [d for element in node.elts for d in self._dtypes_in(element)]
        if isinstance(node, ast.Attribute) and _call_name(node.value) == "torch":
            return [DTYPE_ALIASES.get(node.attr, node.attr)]
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            base = name.removesuffix("_and")
            if base in DTYPE_SETS:
                extra = [d for arg in node.args for d in self._dtypes_in(arg)]
                return DTYPE_SETS[base] + extra if name.endswith("_and") else DTYPE_SETS[base]
        if isinstance(node, ast.Name) and isinstance(self.definitions.get(node.id), ast.Assign):
            definition = self.definitions[node.id]
            assert isinstance(definition, ast.Assign)
            return self._dtypes_in(definition.value)
        return []

    # -- content hash -------------------------------------------------------------

    def _hash(
        self, cls: ast.ClassDef, fn: ast.FunctionDef | ast.AsyncFunctionDef, how: dict[str, str]
    ) -> str:
        """The test's source (normalised: comments and formatting do not count), its class
        decorators and set-up, and every module-level definition it reaches."""
        digest = hashlib.sha256()
        digest.update(ast.unparse(fn).encode())
        for decorator in cls.decorator_list:
            digest.update(ast.unparse(decorator).encode())
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name in (
                "setUp",
                "tearDown",
                "setUpClass",
            ):
                digest.update(ast.unparse(item).encode())
        digest.update(repr(sorted(how.items())).encode())
        reached: set[str] = set()
        for name in _names(fn):
            reached |= self._reach(name)
        for name in sorted(reached):
            if name in self.definitions:
                digest.update(f"\0{name}\0{self._unparse(name)}".encode())
            elif name in self.imports:
                digest.update(f"\0{name}\0{self._external_hash(self.imports[name])}".encode())
        return digest.hexdigest()

    def _unparse(self, name: str) -> str:
        if name not in self._unparsed:
            self._unparsed[name] = ast.unparse(self.definitions[name])
        return self._unparsed[name]

    def _reach(self, name: str) -> frozenset[str]:
        """A name and every module-level name its definition uses, transitively (memoised)."""
        if name in self._closure:
            return self._closure[name]
        self._closure[name] = frozenset({name})  # cycles end here
        definition = self.definitions.get(name)
        reached = {name}
        if definition is not None and not isinstance(definition, ast.ClassDef):
            for used in _names(definition):
                if used != name:
                    reached |= self._reach(used)
        self._closure[name] = frozenset(reached)
        return self._closure[name]

    def _external_hash(self, module: str) -> str:
        """Hash of a torch.testing._internal module inside the tree (a checkout has them)."""
        if self.tree_root is None or not module.startswith("torch.testing._internal"):
            return module
        if module not in self._external:
            path = self.tree_root / (module.replace(".", "/") + ".py")
            self._external[module] = file_hash(path.read_bytes()) if path.is_file() else module
        return self._external[module]

    # -- text -----------------------------------------------------------------------

    def _src(self, node: ast.AST) -> str:
        """The node's source as written (ast.get_source_segment re-splits the file each call)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is None or end is None:
            return ast.unparse(node)
        lines = self.lines[start - 1 : end]
        first_col, end_col = getattr(node, "col_offset", 0), getattr(node, "end_col_offset", None)
        if len(lines) == 1:
            return lines[0].encode()[first_col:end_col].decode(errors="replace")
        head = lines[0].encode()[first_col:].decode(errors="replace")
        tail = lines[-1].encode()[:end_col].decode(errors="replace")
        return "\n".join([head, *lines[1:-1], tail])


def file_summary(path: str, about: str, tests: list[ParsedTest]) -> str:
    """One line: what the file's header comment or docstring says, and its classes."""
    classes: dict[str, int] = {}
    for test in tests:
        classes[test.class_name] = classes.get(test.class_name, 0) + 1
    listing = ", ".join(f"{name} ({count} tests)" for name, count in classes.items())
    first = about.strip().splitlines()[0] if about.strip() else humanize(Path(path).stem)
    return _clip(f"{first} Classes: {listing or 'none'}.", 300)


def summarize(
    cls: str, test: str, docstring: str, ops: list[str], modules: list[str], dtypes: list[str]
) -> str:
    """A one-line description of a generic test, for people and for embeddings."""
    head = docstring.strip().splitlines()[0] if docstring.strip() else humanize(test)
    extra = []
    if ops:
        extra.append("ops " + ", ".join(ops[:6]) + ("…" if len(ops) > 6 else ""))
    if modules:
        extra.append("modules " + ", ".join(modules[:4]))
    if dtypes:
        extra.append("dtypes " + ", ".join(dtypes[:6]) + ("…" if len(dtypes) > 6 else ""))
    tail = f" ({'; '.join(extra)})" if extra else ""
    return _clip(f"{humanize(cls)}: {head}{tail}", 240)


def humanize(name: str) -> str:
    """test_add_matches_cpu -> "add matches cpu"; TestTensorBasics -> "tensor basics"."""
    name = re.sub(r"^(test_?|Test)", "", name)
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("_", " ")
    return name.strip().lower()


def _header_comment(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        body = line.lstrip("#").strip()
        if body and not body.startswith(
            ("Owner(s)", "mypy:", "-*-", "!", "ruff:", "noqa", "flake8")
        ):
            lines.append(body)
    return " ".join(lines)


def _names(node: ast.AST) -> set[str]:
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _restriction(node: ast.AST) -> str:
    """A restricting decorator's name; `deviceCountAtLeast=N` with its device count."""
    name = _call_name(node)
    if name == "deviceCountAtLeast" and isinstance(node, ast.Call) and node.args:
        count = node.args[0]
        if isinstance(count, ast.Constant) and isinstance(count.value, int):
            return f"{name}={count.value}"
    return name


def _looks_like_name(text: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][\w.]*", text)) and len(text) < 80


def _plain(text: str) -> str:
    return text.strip("'\"()[] ").replace("'", "").replace('"', "")


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
