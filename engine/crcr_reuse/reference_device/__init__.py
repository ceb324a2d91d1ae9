"""The reference device: a pure-Python ``privateuse1`` backend whose kernels run on the CPU.

Importing this module registers the backend (name ``privateuseone``). Which aten
operators have kernels: ``default_ops.txt`` next to this file, or the file named
by ``CRCR_REFDEV_OPS``; ``CRCR_REFDEV_DISABLE`` (comma-separated) removes some.
Faults: see ``faults.py`` (``CRCR_REFDEV_FAULTS``). Its health probe, for the reuse
plugin's ``--reuse-health-probe``: ``python:crcr_reuse.reference_device:probe``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .backend import BACKEND_NAME, as_cpu, register_backend, to_device
from .kernels import FAULTS, register_kernels

ENV_OPS = "CRCR_REFDEV_OPS"
ENV_DISABLE = "CRCR_REFDEV_DISABLE"
DEFAULT_OPS_FILE = Path(__file__).with_name("default_ops.txt")

__all__ = [
    "BACKEND_NAME", "FAULTS", "as_cpu", "operator_names", "probe", "registered", "to_device",
]  # fmt: skip


def operator_names() -> list[str]:
    """The operator packets this process gives kernels to."""
    path = Path(os.environ.get(ENV_OPS) or DEFAULT_OPS_FILE)
    names = [
        line.split("#", 1)[0].strip().removeprefix("aten::")
        for line in path.read_text().splitlines()
    ]
    disabled = {name.strip() for name in os.environ.get(ENV_DISABLE, "").split(",")}
    return [name for name in names if name and name not in disabled]


def probe() -> str | None:
    """The device's health probe: a sum it must get right (None when it does)."""
    import torch

    total = torch.ones(4, device=BACKEND_NAME).sum().item()
    return None if total == 4.0 else f"torch.ones(4).sum() on the device gave {total}, not 4.0"


register_backend()
registered = register_kernels(operator_names())
