"""Capture the runtime environment of the machine running a shard.

Reads versions from package metadata rather than importing torch, so a worker
process stays light; only the pytest subprocess imports torch.
"""

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

# Environment variables that change how PyTorch's tests behave.
RELEVANT_ENV_VARS = (
    "CI",
    "PYTORCH_TESTING_DEVICE_ONLY_FOR",
    "PYTORCH_TESTING_DEVICE_EXCEPT_FOR",
    "TORCH_TEST_DEVICES",
    "PYTORCH_TEST_WITH_SLOW",
    "PYTORCH_TEST_SKIP_FAST",
    "PYTORCH_TEST_WITH_DYNAMO",
    "PYTORCH_TEST_WITH_INDUCTOR",
    "TORCH_LOGS",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "CRCR_DEVICE_MODULE",
    "CRCR_REFDEV_FAULTS",
)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _output(command: list[str], timeout: float) -> str:
    """A command's output; a failure is recorded as such rather than stopping the shard."""
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        return f"# {command[0]} failed: {error}\n"
    return completed.stdout


def _cuda_driver() -> str:
    if shutil.which("nvidia-smi") is None:
        return ""
    query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    return _output(query, 30).strip()[:100]


def _pip_freeze() -> str:
    return _output([sys.executable, "-m", "pip", "freeze", "--all"], 120)


def capture(backend_distribution: str = "") -> dict[str, Any]:
    """Everything about this host that can change a test's outcome."""
    return {
        "hostname": socket.gethostname(),
        "python_version": platform.python_version(),
        "torch_version": _version("torch"),
        "backend_version": _version(backend_distribution) if backend_distribution else "",
        "cuda": _cuda_driver(),
        "os": platform.platform(),
        "cpu_arch": platform.machine(),
        "env_vars": {name: os.environ[name] for name in RELEVANT_ENV_VARS if name in os.environ},
        "pip_freeze": _pip_freeze(),
    }
