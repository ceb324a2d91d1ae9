"""The reference device's C++ kernels (``native.cpp``): built once per machine, then loaded.

A Python kernel costs each operator call about 140 µs of interpreter work; the same
kernel in C++ costs about 10 (``bench/refdev_speed.py`` measures both). The C++ file
is compiled with the machine's C++ compiler against the installed torch into
``CRCR_REFDEV_BUILD_DIR`` (default ``~/.cache/crcr-refdev``), once per source, torch
and Python; concurrent processes wait for one build. Without a compiler, or with
``CRCR_REFDEV_NATIVE=0``, the device keeps its Python kernels (``kernels.py``) and
says so once on stderr: both kinds behave the same, fault profiles included.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import torch

ENV_NATIVE = "CRCR_REFDEV_NATIVE"
ENV_BUILD_DIR = "CRCR_REFDEV_BUILD_DIR"
SOURCE = Path(__file__).with_name("native.cpp")
MODULE = "crcr_refdev_native"


def load() -> ModuleType | None:
    """The compiled kernels, building them first where needed; None when they cannot be."""
    if os.environ.get(ENV_NATIVE, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    try:
        return _import(_built())
    except (OSError, ImportError, subprocess.SubprocessError) as error:
        sys.stderr.write(
            f"crcr reference device: Python kernels (the C++ ones could not be built: {error})\n"
        )
        return None


def _built() -> Path:
    source = SOURCE.read_bytes()
    key = hashlib.sha256(
        source + torch.__version__.encode() + sys.version.encode() + _compiler().encode()
    ).hexdigest()[:16]
    folder = Path(os.environ.get(ENV_BUILD_DIR) or Path.home() / ".cache" / "crcr-refdev")
    target = folder / key / f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build; the others wait and load it
        if not target.exists():
            _compile(target)
    return target


def _compiler() -> str:
    return os.environ.get("CXX") or "c++"


def _compile(target: Path) -> None:
    from torch.utils import cpp_extension

    torch_lib = Path(torch.__file__).parent / "lib"
    partial = target.with_suffix(".partial")
    command = [
        *shlex.split(_compiler()),
        "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-DTORCH_EXTENSION_NAME={MODULE}",
        *(f"-I{path}" for path in cpp_extension.include_paths()),
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}",
        "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python",
        "-o", str(partial),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise OSError(f"{command[0]} exited {done.returncode}: {lines[-1] if lines else ''}")
    partial.rename(target)


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
