"""What a backend supports: operators and dtypes, from its config and from its device.

The config's `global.supported_ops` / `supported_dtypes` are the declared
capabilities. When the config declares no operator list, the device itself is
asked: a subprocess imports the backend's module and lists the aten operators
that have a PrivateUse1 kernel (`python -m selection.capabilities MODULE`).
Either way, overloads with a device-independent kernel (CompositeExplicitAutograd and
its NonFunctional twin: clone, _to_copy, view_copy, …, and in other namespaces the `prims::`
that `torch._refs` call) count as supported: they run on any backend that has
the primitives they are written in. Overloads that never reach a backend's dispatch
key as themselves (`off_device`) are no reason to skip a test either: those that
decompose above it (CompositeImplicitAutograd: promote_types, isclose, …) and those
with neither a tensor nor a device among their arguments. The operator capture runs
on the CPU and sees them; the device never does.

The reference device reads its operator set from `CRCR_REFDEV_OPS`, so when the
pipeline runs tests it hands the device exactly these capabilities (`device_variables`).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from django.conf import settings

PROBE_TIMEOUT = 300
# Part of a stored probe's key: a probe stored in an older shape is taken again.
PROBE_FORMAT = 4
# Kernels written once for every backend: the device's key receives the overload and runs
# it in the primitives it has (clone, _to_copy, view_copy, new_empty_strided, …).
COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


@dataclass(frozen=True)
class Capabilities:
    ops: frozenset[str]  # operator packets: "add", "lgamma"
    dtypes: frozenset[str] | None  # None: every dtype
    composite: frozenset[str] = frozenset()  # overloads any backend runs: "clone.default"
    op_dtypes: dict[str, frozenset[str]] = field(default_factory=dict)
    declared_ops: bool = True  # False: the list came from probing the device
    device_ops: frozenset[str] = frozenset()  # what the device has kernels for (probed)
    off_device: frozenset[str] = frozenset()  # overloads the device's key never receives

    def supports_op(self, op: str) -> bool:
        """`op` is an overload as the index stores it ("add.Tensor")."""
        if op in self.composite or op in self.off_device:
            return True
        return op.split(".", 1)[0] in self.ops

    def supports_dtype(self, dtype: str) -> bool:
        if self.dtypes is None:
            return True
        return all(part in self.dtypes for part in dtype.split(",") if part)

    def with_op(self, packet: str) -> Capabilities:
        return replace(self, ops=self.ops | {packet}, device_ops=self.device_ops | {packet})

    def summary(self) -> dict[str, Any]:
        return {
            "ops": len(self.ops),
            "dtypes": sorted(self.dtypes) if self.dtypes is not None else "all",
            "declared_ops": self.declared_ops,
        }


def ops_text(ops: list[str]) -> str:
    """Operators as a person reads them: "aten::lgamma.default, prims::exp.default and 3 more"."""
    shown = ", ".join(op if "::" in op else f"aten::{op}" for op in ops[:4])
    return shown + (f" and {len(ops) - 4} more" if len(ops) > 4 else "")


def declared(config_text: str) -> tuple[list[str] | None, list[str] | None, dict[str, list[str]]]:
    """(op names, dtype names, per-op dtypes) from a config's global section; None if absent."""
    from crcr_reuse.yaml_limits import safe_load  # here: the device probe runs this module

    data = safe_load(config_text, "the config") or {}
    section = (data.get("test_suite_config") or {}).get("global") or {}
    ops = section.get("supported_ops")
    dtypes = section.get("supported_dtypes")
    op_names = None if ops is None else [_name(item) for item in ops]
    dtype_names = None if dtypes is None else [_name(item) for item in dtypes]
    per_op = {
        _name(item): [_name(d) for d in item.get("dtypes") or []]
        for item in ops or []
        if isinstance(item, dict) and item.get("dtypes")
    }
    return op_names, dtype_names, per_op


def _name(item: Any) -> str:
    return str(item["name"] if isinstance(item, dict) else item).removeprefix("torch.")


def for_backend(config_text: str, device_module: str) -> Capabilities:
    """The capabilities a backend declares, completed by probing its device where needed."""
    ops, dtypes, per_op = declared(config_text)
    probe = probe_device(device_module)
    return Capabilities(
        ops=frozenset(ops if ops is not None else probe["ops"]),
        dtypes=frozenset(dtypes) if dtypes is not None else None,
        composite=frozenset(probe["composite"]),
        op_dtypes={op: frozenset(ds) for op, ds in per_op.items()},
        declared_ops=ops is not None,
        device_ops=frozenset(probe["ops"]),
        off_device=frozenset(probe["off_device"]),
    )


def known_for_backend(config_text: str, device_module: str) -> Capabilities | None:
    """The capabilities as far as they are known without probing (for the web pages).

    The config's declared lists, completed by a probe already stored on disk; None
    when the config declares no operators and the device has not been probed yet."""
    ops, dtypes, per_op = declared(config_text)
    shaping = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("CRCR_REFDEV")))
    cache = Path(settings.MEDIA_ROOT) / "probes" / f"{_probe_key(device_module, shaping)}.json"
    probe: dict[str, list[str]] = json.loads(cache.read_text()) if cache.exists() else {}
    if ops is None and not probe:
        return None
    return Capabilities(
        ops=frozenset(ops if ops is not None else probe["ops"]),
        dtypes=frozenset(dtypes) if dtypes is not None else None,
        composite=frozenset(probe.get("composite", ())),
        op_dtypes={op: frozenset(ds) for op, ds in per_op.items()},
        declared_ops=ops is not None,
        device_ops=frozenset(probe.get("ops", ())),
        off_device=frozenset(probe.get("off_device", ())),
    )


def probe_device(device_module: str) -> dict[str, list[str]]:
    """Ask the device (in a subprocess: torch is imported there) which operators it runs.

    Remembered in the process and on disk (under the storage root), keyed by the
    module's file, the installed torch and the environment that shapes the device:
    a new backend build or torch wheel is probed again."""
    shaping = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("CRCR_REFDEV")))
    return _probe_cached(device_module, shaping)


@functools.lru_cache(maxsize=16)
def _probe_cached(device_module: str, shaping: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    cache = Path(settings.MEDIA_ROOT) / "probes" / f"{_probe_key(device_module, shaping)}.json"
    if cache.exists():
        cached: dict[str, list[str]] = json.loads(cache.read_text())
        return cached
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(settings.BASE_DIR), env.get("PYTHONPATH", "")])
    completed = subprocess.run(
        [sys.executable, "-m", "selection.capabilities", device_module],
        capture_output=True,
        text=True,
        env=env,
        timeout=PROBE_TIMEOUT,
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"probing {device_module} failed (exit {completed.returncode}):\n"
            + completed.stderr[-2000:]
        )
    result: dict[str, list[str]] = json.loads(completed.stdout.strip().splitlines()[-1])
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".tmp")
    partial.write_text(json.dumps(result))
    partial.replace(cache)
    return result


def _probe_key(device_module: str, shaping: tuple[tuple[str, str], ...]) -> str:
    import hashlib
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec(device_module.split(".")[0])
    origin = Path(spec.origin) if spec and spec.origin else None
    stamp = ""
    if origin is not None:
        folder = origin.parent
        stamp = str(max((p.stat().st_mtime_ns for p in folder.rglob("*.py")), default=0))
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "?"
    text = json.dumps([PROBE_FORMAT, device_module, str(origin), stamp, torch_version, shaping])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def device_variables(capabilities: Capabilities, workdir: Path) -> dict[str, str]:
    """Environment that gives the reference device the probed operators plus any enabled one
    (other devices ignore it). Nothing when the device is to run as it is."""
    if not capabilities.device_ops:
        return {}
    path = workdir / "device-ops.txt"
    path.write_text("".join(f"{op}\n" for op in sorted(capabilities.device_ops)))
    return {"CRCR_REFDEV_OPS": str(path)}


def _probe(device_module: str) -> dict[str, list[str]]:
    import importlib

    importlib.import_module(device_module)
    import torch

    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    ops: set[str] = set()
    composite: set[str] = set()
    off_device = _deviceless_overloads(torch)
    for name in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = name.partition("::")
        # Keyed as the operator index names them: aten's bare, others with their namespace
        # (prims::exp.default: torch._refs call prims, written once for every backend).
        prefix = "" if namespace == "aten" else f"{namespace}::"
        overload = prefix + (rest if "." in rest else f"{rest}.default")
        own = has_kernel(name, "PrivateUse1")
        if own:
            ops.add(prefix + rest.split(".", 1)[0])
        # A structured op's NonFunctional kernel calls its out= kernel: only a composite
        # when no backend has a kernel of its own (view_copy, not lgamma).
        if has_kernel(name, COMPOSITE_KEYS[0]) or (
            has_kernel(name, COMPOSITE_KEYS[1]) and not has_kernel(name, "CPU")
        ):
            composite.add(overload)
        if has_kernel(name, "CompositeImplicitAutograd") and not own:
            off_device.add(overload)
    return {"ops": sorted(ops), "composite": sorted(composite), "off_device": sorted(off_device)}


def _deviceless_overloads(torch: Any) -> set[str]:
    """aten overloads with no tensor and no device argument: dispatched on no device at all."""
    found = set()
    for schema in torch._C._jit_get_all_schemas():
        namespace, _, name = schema.name.partition("::")
        types = [str(argument.type) for argument in schema.arguments]
        if namespace == "aten" and not any("Tensor" in t or "Device" in t for t in types):
            found.add(f"{name}.{schema.overload_name or 'default'}")
    return found


if __name__ == "__main__":
    print(json.dumps(_probe(sys.argv[1])))
