"""The reference device: a pure-Python ``privateuse1`` backend whose kernels run on the CPU.

Importing this module registers the backend (name ``privateuseone``). Which aten
operators have kernels: ``default_ops.txt`` next to this file, or the file named
by ``CRCR_REFDEV_OPS``; ``CRCR_REFDEV_DISABLE`` (comma-separated) removes some.
Faults: see ``faults.py`` (``CRCR_REFDEV_FAULTS``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .backend import BACKEND_NAME, as_cpu, register_backend, to_device
from .kernels import FAULTS, register_kernels

ENV_OPS = "CRCR_REFDEV_OPS"
ENV_DISABLE = "CRCR_REFDEV_DISABLE"
DEFAULT_OPS_FILE = Path(__file__).with_name("default_ops.txt")

__all__ = ["BACKEND_NAME", "FAULTS", "as_cpu", "operator_names", "registered", "to_device"]


def operator_names() -> list[str]:
    """The operator packets this process gives kernels to."""
    path = Path(os.environ.get(ENV_OPS) or DEFAULT_OPS_FILE)
    names = [
        line.split("#", 1)[0].strip().removeprefix("aten::")
        for line in path.read_text().splitlines()
    ]
    disabled = {name.strip() for name in os.environ.get(ENV_DISABLE, "").split(",")}
    return [name for name in names if name and name not in disabled]


register_backend()
registered = register_kernels(operator_names())
