"""Test areas: the functional area and planning group of a test, from its file path.

Pure logic over plain data (no Django, no torch), shared by the duration estimates
(`runs.durations`, whose fallback is the median of a test's group) and the shard
planner (`runs.sharding`, which keeps each group on shards of its own).

1. normalise the file path to PyTorch's `test-times.json` key (relative to `test/`,
   without `.py`);
2. a file in a sub-folder of `test/` takes the folder's area (a few folders map to
   another area); a top-level file takes the area of its name prefix (ops, nn,
   inductor, distributed, …), else "eager";
3. the planning group is the area qualified by the test's config labels (`nn[serial]`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class TestItem:
    """One test to plan: its id, the file it lives in and its config labels."""

    __test__ = False  # not a pytest test class

    test_id: str
    file: str
    labels: tuple[str, ...] = ()


# Sub-folders of PyTorch's test/ that belong to another area than their own name.
_FOLDER_AREAS = {"cpython": "dynamo", "higher_order_ops": "dynamo", "torch_np": "numpy"}
# Top-level test files by name prefix; anything else at the top level is "eager".
_FILE_AREAS = {
    "ops": ("test_ops",),
    "nn": ("test_nn", "test_modules", "test_native_mha", "test_transformers"),
    "autograd": ("test_autograd", "test_functional_autograd"),
    "jit": ("test_jit", "test_tensorexpr"),
    "inductor": ("test_inductor", "test_compile"),
    "dynamo": ("test_dynamo", "test_dynamic_shapes"),
    "distributed": ("test_distributed", "test_multiprocessing"),
    "linalg": ("test_linalg", "test_matmul"),
    "optim": ("test_optim", "test_functional_optim"),
    "cuda": ("test_cuda",),
    "fx": ("test_fx",),
    "sparse": ("test_sparse",),
    "quantization": ("test_quantization",),
    "mps": ("test_mps",),
}


@functools.cache
def file_key(path: str) -> str:
    """Normalise a test file path to PyTorch's `test-times.json` key.

    `test/inductor/test_torchinductor.py`, `/src/pytorch/test/test_ops.py` and
    `inductor/test_torchinductor` all become keys relative to `test/`, without `.py`.
    """
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    if "test" in parts:
        parts = parts[parts.index("test") + 1 :]
    key = "/".join(parts)
    return key.removesuffix(".py")


@functools.cache
def area_for(path: str) -> str:
    """The functional area of a test file (ops, eager, inductor, nn, distributed, …)."""
    key = file_key(path)
    if "/" in key:
        folder = key.split("/", 1)[0]
        return _FOLDER_AREAS.get(folder, folder)
    for area, prefixes in _FILE_AREAS.items():
        if key.startswith(prefixes):
            return area
    return "eager"


def group_for(item: TestItem) -> str:
    """The planning group: the area, qualified by config labels (`nn[serial]`)."""
    return _group(item.file, item.labels)


@functools.cache
def _group(path: str, labels: tuple[str, ...]) -> str:
    area = area_for(path)
    if not labels:
        return area
    return f"{area}[{','.join(sorted(set(labels)))}]"
