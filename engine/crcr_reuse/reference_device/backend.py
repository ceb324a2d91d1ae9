"""The reference device's PrivateUse1 plumbing: backend name, hooks, device module, memory.

Device memory is CPU memory. A device tensor is a real PrivateUse1 tensor whose
storage owns a CPU buffer; it is made by exporting a CPU tensor through DLPack
with the device type rewritten to ``kDLExtDev`` (which PyTorch maps to
PrivateUse1), so the buffer lives exactly as long as the device storage. Kernels
look at device memory through non-owning CPU aliases (``as_cpu``).
"""

from __future__ import annotations

import contextlib
import ctypes
import types
from collections.abc import Iterator
from typing import Any

import torch

BACKEND_NAME = "privateuseone"
_KDL_EXT_DEV = 12  # DLPack's "extension device": PyTorch maps it to PrivateUse1.
_CPU = torch.device("cpu")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensorHead(ctypes.Structure):
    # The first two fields of DLTensor (which starts DLManagedTensor); enough to
    # rewrite the device of an exported capsule in place.
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def to_device(cpu: torch.Tensor) -> torch.Tensor:
    """Move ownership of a CPU tensor's buffer into a new device tensor (no copy)."""
    capsule = torch.utils.dlpack.to_dlpack(cpu.detach())
    head = _DLTensorHead.from_address(_capsule_pointer(capsule, b"dltensor"))
    head.device.device_type = _KDL_EXT_DEV
    head.device.device_id = 0
    return torch._C._from_dlpack(capsule)


def as_cpu(device_tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing a device tensor's memory, valid while the device tensor lives."""
    storage = device_tensor.untyped_storage()
    cpu_storage = torch._C._construct_storage_from_data_pointer(
        storage.data_ptr(), _CPU, storage.nbytes()
    )
    alias = torch.empty(0, dtype=device_tensor.dtype)
    alias.set_(
        cpu_storage, device_tensor.storage_offset(), device_tensor.size(), device_tensor.stride()
    )
    if device_tensor.is_conj():
        alias = alias.conj()
    if device_tensor.is_neg():
        alias = alias._neg_view()
    return alias


def new_empty(size: Any, dtype: torch.dtype | None, memory_format: Any = None) -> torch.Tensor:
    cpu = torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format)
    return to_device(cpu)


def new_empty_strided(size: Any, stride: Any, dtype: torch.dtype | None) -> torch.Tensor:
    return to_device(torch.empty_strided(size, stride, dtype=dtype))


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


def _device_module() -> types.ModuleType:
    """The ``torch.privateuseone`` module: one always-available device, CPU random state."""
    module = types.ModuleType(f"torch.{BACKEND_NAME}")
    module.__dict__.update(
        is_available=lambda: True,
        is_initialized=lambda: True,
        _lazy_init=lambda: None,
        _is_in_bad_fork=lambda: False,
        device_count=lambda: 1,
        current_device=lambda: 0,
        set_device=lambda device: None,
        synchronize=lambda device=None: None,
        # Kernels run on the CPU, so the CPU generator is the device's generator.
        # (torch.manual_seed calls these too: seed the generator, not torch.manual_seed.)
        manual_seed=lambda seed: torch.default_generator.manual_seed(int(seed)),
        manual_seed_all=lambda seed: torch.default_generator.manual_seed(int(seed)),
        seed=lambda: torch.default_generator.seed(),
        seed_all=lambda: torch.default_generator.seed(),
        initial_seed=lambda: torch.default_generator.initial_seed(),
        get_rng_state=lambda device="privateuseone": torch.get_rng_state(),
        set_rng_state=lambda state, device="privateuseone": torch.set_rng_state(state),
        device=_device_context,
    )
    return module


@contextlib.contextmanager
def _device_context(device: Any) -> Iterator[None]:
    yield


_registered = False


def register_backend() -> None:
    """Register the backend name, hooks, device guard and device module (idempotent)."""
    global _registered
    if _registered:
        return
    if torch._C._get_privateuse1_backend_name() != BACKEND_NAME:
        raise RuntimeError(
            "the PrivateUse1 backend is already named "
            f"{torch._C._get_privateuse1_backend_name()!r}; one process holds one backend"
        )
    # Explicit even for the default name: torch.testing reads it at import time.
    torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    torch._register_device_module(BACKEND_NAME, _device_module())
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    _registered = True
