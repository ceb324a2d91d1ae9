"""PrivateUse1 kernels of the reference device, registered through ``torch.library``.

Three kinds, chosen per operator overload:
- memory kernels (empty, copy, resize, set_) written here;
- metadata kernels (view, as_strided, ...): the CPU kernel only builds a new
  TensorImpl over the same storage, so it is re-dispatched as is and the result
  stays a device tensor sharing the device storage;
- compute kernels: arguments become CPU aliases, the CPU kernel runs, results
  are handed back as device tensors (in-place results are the device inputs
  themselves; new results take ownership of the CPU buffer, no copy).
An operator without a kernel here raises PyTorch's own NotImplementedError.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from . import native
from .backend import BACKEND_NAME, as_cpu, new_empty, new_empty_strided, to_device
from .faults import EVERY_OP, FaultTable, trigger

CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
DISPATCH_KEY = "PrivateUse1"
DELEGATE_KEY = "PrivateUse2"  # where the C++ kernels find the Python ones (native.py)
NATIVE_MEMORY_KERNELS = frozenset({"empty.memory_format", "empty_strided", "_copy_from"})
FAULTS = FaultTable()

# Operators whose CPU kernel only rewrites metadata over the input's storage.
METADATA_OPS = frozenset(
    {
        "view",
        "as_strided",
        "_reshape_alias",
        "unfold",
        "view_as_real",
        "view_as_complex",
        "is_set_to",
        "set_",
    }
)
# Operators allowed to mix device tensors with non-scalar CPU tensors.
CROSS_DEVICE_OPS = frozenset({"index", "index_put_", "_index_put_impl_", "equal"})

_library: torch.library.Library | None = None


def _is_device(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == BACKEND_NAME


def _cpu_args(value: Any, aliases: dict[int, torch.Tensor]) -> Any:
    """Replace device tensors by CPU aliases (remembering them), devices by the CPU."""
    if isinstance(value, torch.Tensor):
        if value.device.type != BACKEND_NAME:
            return value
        alias = as_cpu(value)
        aliases[id(alias)] = value
        return alias
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu_args(item, aliases) for item in value)
    if isinstance(value, torch.device) and value.type == BACKEND_NAME:
        return torch.device("cpu")
    return value


def _device_results(value: Any, aliases: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        if id(value) in aliases:
            return aliases[id(value)]
        if value.device.type != "cpu":
            return value
        base = _aliased_input(value, aliases)
        if base is not None:
            return _device_view(base, value)
        return to_device(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_device_results(item, aliases) for item in value)
    return value


def _aliased_input(result: torch.Tensor, aliases: dict[int, torch.Tensor]) -> torch.Tensor | None:
    pointer = result.untyped_storage().data_ptr()
    if pointer == 0:
        return None
    for device_tensor in aliases.values():
        if device_tensor.untyped_storage().data_ptr() == pointer:
            return device_tensor
    return None


def _device_view(base: torch.Tensor, cpu_view: torch.Tensor) -> torch.Tensor:
    """A device view of ``base``'s storage with the geometry of a CPU view of it."""
    if base.dtype != cpu_view.dtype:
        raise NotImplementedError("reference device: dtype-changing view through a compute kernel")
    return torch.ops.aten.as_strided.default.redispatch(
        CPU_KEYS, base, cpu_view.size(), cpu_view.stride(), cpu_view.storage_offset()
    )


def _check_same_device(op_name: str, values: Iterable[Any]) -> None:
    if op_name.split(".")[0] in CROSS_DEVICE_OPS:
        return
    for value in values:
        if isinstance(value, (list, tuple)):
            _check_same_device(op_name, value)
        elif isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() > 0:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {BACKEND_NAME}:0 and cpu! (in aten::{op_name})"
            )


def _tensor_dtypes(values: Iterable[Any]) -> set[str]:
    dtypes: set[str] = set()
    for value in values:
        if isinstance(value, torch.Tensor):
            dtypes.add(str(value.dtype).removeprefix("torch."))
        elif isinstance(value, (list, tuple)):
            dtypes |= _tensor_dtypes(value)
    return dtypes


def _deviate(value: Any, amount: float) -> None:
    if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
        value.add_(amount)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _deviate(item, amount)


def compute_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    packet = op._schema.name.removeprefix("aten::")
    name = f"{packet}.{op._overloadname}" if op._overloadname != "default" else packet
    out_names = [argument.name for argument in op._schema.arguments if argument.is_out]

    def kernel(*args: Any, **kwargs: Any) -> Any:
        fault = FAULTS.find(packet, name, _tensor_dtypes([*args, *kwargs.values()]))
        if fault is not None and fault.kind != "deviation":
            trigger(fault, f"aten::{name}")
        aliases: dict[int, torch.Tensor] = {}
        cpu_args = _cpu_args(args, aliases)
        cpu_kwargs = {key: _cpu_args(value, aliases) for key, value in kwargs.items()}
        if aliases:
            _check_same_device(name, [*args, *kwargs.values()])
        try:
            result = op(*cpu_args, **cpu_kwargs)
        except RuntimeError as error:
            if "not resizable" not in str(error) or not out_names:
                raise
            return _resizing_out_call(op, out_names, args, kwargs)
        if fault is not None:
            _deviate(result, fault.amount)
        poisoned = FAULTS.poison()
        if poisoned is not None:
            _deviate(result, poisoned.amount)
        return _device_results(result, aliases)

    return kernel


def _resizing_out_call(
    op: torch._ops.OpOverload, out_names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run an out= kernel whose outputs must grow: compute into CPU outputs, then copy back.

    The CPU outputs start with the device outputs' geometry, so the CPU kernel
    warns about resizing exactly when it would on any other device.
    """
    device_outs = {name: kwargs[name] for name in out_names}
    cpu_outs = {
        name: torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype)
        for name, tensor in _flat_outs(device_outs)
    }
    aliases: dict[int, torch.Tensor] = {}
    cpu_args = _cpu_args(args, aliases)
    cpu_kwargs = {k: v for k, v in kwargs.items() if k not in device_outs}
    cpu_kwargs = {k: _cpu_args(v, aliases) for k, v in cpu_kwargs.items()}
    for name, value in device_outs.items():
        cpu_kwargs[name] = _regroup(value, cpu_outs, name)
    op(*cpu_args, **cpu_kwargs)
    for name, tensor in _flat_outs(device_outs):
        cpu_out = cpu_outs[name]
        if tensor.size() != cpu_out.size():
            tensor.resize_(cpu_out.size())
        as_cpu(tensor).copy_(cpu_out)
    outs = [value for value in device_outs.values()]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _flat_outs(outs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    flat = []
    for name, value in outs.items():
        if isinstance(value, torch.Tensor):
            flat.append((name, value))
        else:
            flat.extend((f"{name}.{i}", tensor) for i, tensor in enumerate(value))
    return flat


def _regroup(value: Any, cpu_outs: dict[str, torch.Tensor], name: str) -> Any:
    if isinstance(value, torch.Tensor):
        return cpu_outs[name]
    return [cpu_outs[f"{name}.{i}"] for i in range(len(value))]


def metadata_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(CPU_KEYS, *args, **kwargs)

    return kernel


def _empty(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None, memory_format: Any = None) -> torch.Tensor:  # fmt: skip
    return new_empty(size, dtype, memory_format)


def _empty_strided(size: Any, stride: Any, dtype: Any = None, layout: Any = None,
                   device: Any = None, pin_memory: Any = None) -> torch.Tensor:  # fmt: skip
    return new_empty_strided(size, stride, dtype)


def _cpu_view(tensor: torch.Tensor) -> torch.Tensor:
    return as_cpu(tensor) if _is_device(tensor) else tensor


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    _cpu_view(dst).copy_(_cpu_view(src))
    return dst


def _copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    dst.resize_(src.size())
    return _copy_from(src, dst)


def _resize(self: torch.Tensor, size: Any, memory_format: Any = None) -> torch.Tensor:
    resize = torch.ops.aten.resize_.default
    needed = (self.storage_offset() + math.prod(size)) * self.element_size()
    storage = self.untyped_storage()
    if needed > storage.nbytes():
        # Device storage is not resizable in place: move to a bigger one.
        bigger = to_device(torch.zeros(needed, dtype=torch.uint8)).untyped_storage()
        old = storage.nbytes()
        if old:
            _byte_view(bigger)[:old].copy_(_byte_view(storage))
        torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
            CPU_KEYS, self, bigger, self.storage_offset(), self.size(), self.stride()
        )
    return resize.redispatch(CPU_KEYS, self, size, memory_format=memory_format)


def _byte_view(storage: torch.UntypedStorage) -> torch.Tensor:
    holder = torch.empty(0, dtype=torch.uint8, device=BACKEND_NAME)
    torch.ops.aten.set_.source_Storage.redispatch(CPU_KEYS, holder, storage)
    return as_cpu(holder)


def _set_empty(self: torch.Tensor) -> torch.Tensor:
    fresh = new_empty([0], self.dtype).untyped_storage()
    return torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        CPU_KEYS, self, fresh, 0, [0], [1]
    )


MEMORY_KERNELS: dict[str, Callable[..., Any]] = {
    "empty.memory_format": _empty,
    "empty_strided": _empty_strided,
    "_copy_from": _copy_from,
    "_copy_from_and_resize": _copy_from_and_resize,
    "resize_": _resize,
    "set_": _set_empty,
}


def _overloads(packet_name: str) -> Iterable[torch._ops.OpOverload]:
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None:
        return []
    return [getattr(packet, overload) for overload in packet.overloads()]


def _needs_kernel(op: torch._ops.OpOverload) -> bool:
    """True when the overload runs on the CPU only through a backend-specific kernel."""
    name = op.name()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        composite = has(name, "CompositeExplicitAutograd") or has(name, "CompositeImplicitAutograd")
        return has(name, "CPU") and not composite
    except RuntimeError:  # a TorchScript-only overload, unknown to the dispatcher
        return False


def register_kernels(op_names: Iterable[str]) -> list[str]:
    """Register kernels for every overload of the named operators; return what was registered.

    With the C++ kernels (``native.py``) the compute, metadata and hot memory kernels
    are C++; each compute operator's Python kernel is registered too, under the
    PrivateUse2 key, for the calls the C++ kernel hands over (a fault profile's
    operators, a poisoned device, out= outputs that must grow)."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    fast = native.load()
    registered = []
    if fast is not None:
        fast.configure(sorted(CROSS_DEVICE_OPS), _delegate_faults(fast))
        fast.register_memory()
    for name, kernel in MEMORY_KERNELS.items():
        if fast is None or name not in NATIVE_MEMORY_KERNELS:
            _library.impl(name, kernel, DISPATCH_KEY)
        registered.append(name)
    for name in ("_copy_from", "_copy_from_and_resize"):
        # Our copy reads conjugate/negative views itself; resolving them first would
        # clone, which copies, which lands here again.
        for key in ("Conjugate", "Negative"):
            _library.impl(name, torch.library.fallthrough_kernel, key)
    for packet in op_names:
        for op in _overloads(packet):
            overload = op._overloadname
            qualified = packet if overload == "default" else f"{packet}.{overload}"
            if qualified in MEMORY_KERNELS or not _needs_kernel(op):
                continue
            if fast is None:
                kernel = metadata_kernel(op) if packet in METADATA_OPS else compute_kernel(op)
                _library.impl(op, kernel, DISPATCH_KEY)
            elif packet in METADATA_OPS:
                fast.register_metadata(qualified)
            else:
                fast.register_compute(qualified)
                _library.impl(op, compute_kernel(op), DELEGATE_KEY)
            registered.append(qualified)
    return registered


def _delegate_faults(fast: Any) -> Callable[[], None]:
    """Called once, by the first C++ kernel call: the operators a fault profile names go
    to the Python kernels (all of them when the device may be poisoned)."""

    def prepare() -> None:
        faults = FAULTS.load()
        fast.set_delegated(sorted(set(faults) - {EVERY_OP}), EVERY_OP in faults)

    return prepare
