"""Custom modules of a config: the input-spec language, and the inputs and ModuleInfo built from it.

An ``edits.modules.include`` item with a ``module_path`` (Torch Spyre's custom module
entries) names a module class by import path and says how to call it:
``constructor_inputs`` (one invocation) and ``forward_inputs`` (one or a list; the
legacy ``sample_inputs_func`` is one). An invocation is ``{args: [...], kwargs: {...}}``;
each argument is one of ``{tensor: SPEC}``, ``{tensor_list: [SPEC, ...]}``,
``{value: DATA}`` (plain data; the string ``<config:pkg.mod.Class>`` is an instance of
``Class()``) or ``{py: "(1, slice(None, 2))"}`` (a Python literal); a kwarg may also be
bare data, read as Spyre reads kwargs (a dtype name is that dtype, ``device`` other
than ``cpu`` is the test's device, a Python literal is its value).

Building (``module_inputs``), at run time, for one generated test:
1. each invocation draws its tensors, in order, from a generator seeded by the
   module's name and the invocation's place, so every run builds the same inputs;
2. a tensor is made on the host, then moved to the test's device (``device: cpu``
   keeps it on the host); ``stride``/``storage_offset`` view a backing storage there;
   ``rand``/``randn`` in an integer dtype draw whole numbers, as Spyre's make_tensor
   does ([0, 1) and [-9, 10));
3. one ``ModuleInput`` per forward invocation, each with its own constructor input.
The module runs in the dtypes of its forward inputs (``ModuleInputs.dtypes``).
The module class is imported when a test first uses it: a path that does not import
on this machine fails those tests with a message naming it, and nothing else.
Nothing here imports torch at import time (the loader reads the model).
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from .schema import ModuleSpec

INITS = ("rand", "randn", "randint", "zeros", "ones", "full", "arange", "eye", "xavier")
FLOATING = ("float16", "bfloat16", "float32", "float64")
COMPLEX = ("complex32", "complex64", "complex128")
INTEGRAL = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")
TENSOR_DTYPES = FLOATING + COMPLEX + INTEGRAL
HOST_DEVICES = ("cpu", "meta")
CONFIG_REF = re.compile(r"<config:([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)>")
# What a ``py:`` literal may name (a subset of Python: no attribute, no call but slice()).
PY_NAMES = {"None": None, "Ellipsis": Ellipsis, "inf": math.inf, "nan": math.nan}


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str  # canonical, one of TENSOR_DTYPES
    init: str = "rand"
    on_host: bool = False  # `device: cpu`; any other device is the test's
    low: float = 0
    high: float | None = None
    fill_value: float | None = None
    stride: tuple[int, ...] | None = None
    storage_offset: int = 0


@dataclass(frozen=True)
class Value:
    """One argument. ``kind``: ``tensor`` (data: a TensorSpec), ``tensor_list`` (a
    tuple of them), ``value`` (plain data as written), ``py`` (a literal's text) or
    ``kwarg`` (bare kwarg data: Spyre's string rules apply)."""

    kind: str
    data: Any

    def tensors(self) -> tuple[TensorSpec, ...]:
        if self.kind == "tensor":
            return (self.data,)
        return tuple(self.data) if self.kind == "tensor_list" else ()


@dataclass(frozen=True)
class Invocation:
    args: tuple[Value, ...] = ()
    kwargs: tuple[tuple[str, Value], ...] = ()

    def tensors(self) -> tuple[TensorSpec, ...]:
        values = self.args + tuple(value for _, value in self.kwargs)
        return tuple(spec for value in values for spec in value.tensors())


@dataclass(frozen=True)
class ModuleInputs:
    module_path: str
    constructor: Invocation = Invocation()
    forward: tuple[Invocation, ...] = (Invocation(),)
    # The item's own keys as written (module_path, constructor_inputs, ...), for `merge`.
    document: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The module's dtypes: per forward invocation, that of its first floating or
        complex tensor (args, then kwargs); float32 when there is none."""
        found = []
        for invocation in self.forward:
            numeric = [s.dtype for s in invocation.tensors() if s.dtype in FLOATING + COMPLEX]
            found += numeric[:1]
        return tuple(dict.fromkeys(found)) or ("float32",)


def literal(text: str) -> Any:
    """The value of a ``py:`` literal; ValueError when it is more than a literal."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        raise ValueError(f"not Python: {error.msg}") from None
    return _literal(tree.body)


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_literal(item) for item in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in PY_NAMES:
        return PY_NAMES[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "slice"
        and not node.keywords
        and len(node.args) <= 3
    ):
        return slice(*(_literal(arg) for arg in node.args))
    raise ValueError(f"'{ast.unparse(node)}' is not a literal (numbers, strings, tuples, "
                     "lists, None, Ellipsis, inf, nan, slice(...))")  # fmt: skip


def kwarg_dtype(text: str) -> str | None:
    """A bare kwarg string that names a dtype ("float16", "torch.half"): its canonical name."""
    bare = text.removeprefix("torch.")
    bare = "float16" if bare == "half" else bare
    return bare if bare in TENSOR_DTYPES else None


# -- building (run time: torch is there) ---------------------------------------------


class CustomModuleError(ImportError):
    """A custom module's class or config reference does not import on this machine."""


def resolve(path: str, spec: ModuleSpec, what: str) -> Any:
    """The object at a dotted import path ("pkg.mod.Class")."""
    module_name, _, attribute = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise CustomModuleError(
            f"crcr config: {what} '{path}' of custom module '{spec.name}' ({spec.pos}) does "
            f"not import here: {type(error).__name__}: {error}"
        ) from error


def build_invocation(
    spec: ModuleSpec, invocation: Invocation, place: str, device: Any, requires_grad: bool
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments of one invocation; ``place`` seeds its tensors."""
    import torch

    generator = torch.Generator().manual_seed(zlib.crc32(f"{spec.name}/{place}".encode()))
    build = functools.partial(_build, spec, device, generator, requires_grad)
    return [build(value) for value in invocation.args], {
        key: build(value, key) for key, value in invocation.kwargs
    }


def _build(
    spec: ModuleSpec, device: Any, generator: Any, grad: bool, value: Value, key: str = ""
) -> Any:
    if value.kind == "tensor":
        return build_tensor(value.data, device, generator, grad)
    if value.kind == "tensor_list":
        return [build_tensor(item, device, generator, grad) for item in value.data]
    if value.kind == "py":
        return literal(value.data)
    data = copy.deepcopy(value.data)  # a test may change what it is given
    if not isinstance(data, str):
        return data
    reference = CONFIG_REF.fullmatch(data)
    if reference:
        return resolve(reference.group(1), spec, "config reference")()
    return _kwarg_string(key, data, device) if value.kind == "kwarg" else data


def _kwarg_string(key: str, text: str, device: Any) -> Any:
    import torch

    dtype = kwarg_dtype(text)
    if dtype is not None:
        return getattr(torch, dtype)
    if key == "device":
        return text if text in HOST_DEVICES else device
    try:
        return literal(text)
    except ValueError:
        return text


def build_tensor(spec: TensorSpec, device: Any, generator: Any, requires_grad: bool) -> Any:
    """One tensor as the spec says, on the device (the host for ``device: cpu``)."""
    import torch

    target = "cpu" if spec.on_host else device
    if spec.stride is None and not spec.storage_offset:
        tensor = _filled(spec, spec.shape, generator).to(target)
    else:
        stride = spec.stride or torch.empty(spec.shape).stride()
        extent = sum((size - 1) * step for size, step in zip(spec.shape, stride, strict=True))
        needed = spec.storage_offset + (extent + 1 if all(spec.shape) else 0)
        if spec.init in ("arange", "eye", "xavier"):  # not element-wise: fill the view
            backing = torch.zeros(needed, dtype=getattr(torch, spec.dtype))
            view = backing.as_strided(spec.shape, stride, spec.storage_offset)
            view.copy_(_filled(spec, spec.shape, generator))
        else:
            backing = _filled(spec, (needed,), generator)
        # The view is taken on the device, so its strides and offset are the spec's there.
        tensor = backing.to(target).as_strided(spec.shape, stride, spec.storage_offset)
    if requires_grad and spec.dtype in FLOATING + COMPLEX:
        tensor = tensor.detach().requires_grad_()
    return tensor


def _filled(spec: TensorSpec, shape: tuple[int, ...], generator: Any) -> Any:
    import torch

    dtype = getattr(torch, spec.dtype)
    if spec.init in ("rand", "randn") and spec.dtype in INTEGRAL:
        # As Spyre's make_tensor draws whole numbers: randn in [-9, 10), rand in [0, 1).
        low, high = (
            (-9 if spec.dtype.startswith("int") else 0, 10) if spec.init == "randn" else (0, 1)
        )
        high = 2 if spec.dtype == "bool" else high
        return torch.randint(low, high, shape, generator=generator).to(dtype)
    if spec.init == "rand":
        return torch.rand(shape, dtype=dtype, generator=generator)
    if spec.init == "randn":
        return torch.randn(shape, dtype=dtype, generator=generator)
    if spec.init == "randint":
        high = int(spec.high or 0)
        return torch.randint(int(spec.low), high, shape, dtype=dtype, generator=generator)
    if spec.init == "full":
        return torch.full(shape, spec.fill_value, dtype=dtype)
    if spec.init == "arange":
        return torch.arange(shape[0], dtype=dtype)
    if spec.init == "eye":
        return torch.eye(shape[0], dtype=dtype)
    if spec.init == "xavier":
        return torch.nn.init.xavier_uniform_(torch.empty(shape, dtype=dtype), generator=generator)
    return (torch.ones if spec.init == "ones" else torch.zeros)(shape, dtype=dtype)


def module_inputs(
    spec: ModuleSpec,
    module_info: Any,
    device: Any,
    dtype: Any,
    requires_grad: bool,
    training: bool,
    **kwargs: Any,
) -> list[Any]:
    """torch's ``module_inputs_func`` for a custom module: one ModuleInput per forward
    invocation. The inputs keep the dtypes the config wrote (``dtype`` is one of them)."""
    from torch.testing._internal.common_modules import FunctionInput, ModuleInput

    assert spec.inputs is not None
    found = []
    for index, forward in enumerate(spec.inputs.forward):
        args, kw = build_invocation(spec, spec.inputs.constructor, "constructor", device, False)
        constructor = FunctionInput(*args, **kw)
        args, kw = build_invocation(spec, forward, f"forward{index}", device, requires_grad)
        found.append(ModuleInput(constructor, FunctionInput(*args, **kw), desc=f"forward{index}"))
    return found


def module_info(spec: ModuleSpec) -> Any:
    """The ModuleInfo of a custom module (one per spec: the same object every time)."""
    info = _infos.get(id(spec))
    if info is None or info.spec is not spec:
        info = _infos[id(spec)] = _info_class()(spec)
    return info


_infos: dict[int, Any] = {}


@functools.cache
def _info_class() -> type:
    import torch
    from torch.nn.modules.lazy import LazyModuleMixin
    from torch.testing._internal.common_modules import ModuleInfo

    class ConfigModuleInfo(ModuleInfo):
        """A module the config names by import path, imported when a test first uses it."""

        def __init__(self, spec: ModuleSpec):
            assert spec.inputs is not None
            self.spec = spec
            self.inputs: ModuleInputs = spec.inputs
            # What crcr reports and marks: the name as written; the dtypes of its inputs.
            self.crcr_name = spec.name
            self.crcr_dtypes = spec.inputs.dtypes
            dtypes = tuple(getattr(torch, name) for name in spec.inputs.dtypes)
            inputs_func = functools.partial(module_inputs, spec)
            super().__init__(torch.nn.Module, module_inputs_func=inputs_func, dtypes=dtypes)

        # ModuleInfo.__init__ assigns both from its placeholder class; they are computed
        # from the real class instead, which is imported only when a test asks for it.
        module_cls = property(lambda self: self._module_class(), lambda self, value: None)
        is_lazy = property(
            lambda self: issubclass(self.module_cls, LazyModuleMixin), lambda self, value: None
        )

        @property
        def name(self) -> str:
            return self.spec.short

        def _module_class(self) -> Any:
            path = self.inputs.module_path
            found = resolve(path, self.spec, "module_path")
            if not isinstance(found, type):
                raise CustomModuleError(
                    f"crcr config: module_path '{path}' of custom module '{self.spec.name}' "
                    f"({self.spec.pos}) is not a class"
                )
            return found

    return ConfigModuleInfo
