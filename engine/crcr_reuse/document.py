"""A config as plain data: the YAML document `python -m crcr_reuse merge` prints.

Every key the loader reads comes back, descriptions included, so the printed config
loads back equal (`tests/engine/test_descriptions.py`).
"""

from __future__ import annotations

import os
from typing import Any

from .schema import Config, DtypeSpec, OpSpec


def config_document(config: Config) -> dict[str, Any]:
    """A merged config as plain data (the YAML ``merge`` prints)."""
    files = []
    for entry in config.files:
        # A relative path meant "next to its config"; merged, it is shown absolute.
        path = entry.path if "${" in entry.path or os.path.isabs(entry.path) else entry.pattern
        item: dict[str, Any] = {"path": path, "unlisted_test_mode": entry.unlisted_test_mode}
        if entry.bypass_pos is not None:
            item["bypass_device_restrictions"] = entry.bypass_device_restrictions
        if entry.labels != config.labels:  # a merge keeps each config's own
            item["labels"] = list(entry.labels)
        if entry.tests:
            item["tests"] = [_test_document(test) for test in entry.tests]
        files.append(_described(item, entry))
    document: dict[str, Any] = {"labels": list(config.labels), "files": files}
    section = {
        "supported_dtypes": _list(config.global_.supported_dtypes, _dtype_document),
        "supported_ops": _list(config.global_.supported_ops, _op_document),
        "supported_modules": _list(config.global_.supported_modules, _module_document),
    }
    section = {key: value for key, value in section.items() if value is not None}
    if section:
        document["global"] = section
    return document


def _list(items: Any, convert: Any) -> Any:
    return None if items is None else [convert(item) for item in items]


def _described(item: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The item with its ``description`` after its first key (its name or path), when it
    has one: the loader keeps them all."""
    if spec.description is None:
        return item
    first, *rest = item.items()
    return dict([first, ("description", spec.description.text), *rest])


def _module_document(module: Any) -> Any:
    """A global module: its name as written, or a mapping when it carries a description."""
    return module.name if module.description is None else _described({"name": module.name}, module)


def _dtype_document(dtype: DtypeSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"name": dtype.name}
    if dtype.precision:
        item["precision"] = {k: v for k, v in vars(dtype.precision).items() if v is not None}
    if dtype.force_xfail:
        item["force_xfail"] = True
    return _described(item, dtype)


def _op_document(op: OpSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"name": op.name}
    if op.dtypes is not None:
        item["dtypes"] = [_dtype_document(d) for d in op.dtypes]
    if op.force_xfail:
        item["force_xfail"] = True
    if op.tags:
        item["tags"] = list(op.tags)
    return _described(item, op)


def _test_document(test: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"names": [name.text for name in test.names], "mode": test.mode}
    if test.tags:
        item["tags"] = list(test.tags)
    if test.bypass_device_restrictions is not None:
        item["bypass_device_restrictions"] = test.bypass_device_restrictions
    if test.labels:
        item["labels"] = list(test.labels)
    if test.no_grad:
        item["no_grad"] = True
    edits = {}
    for kind in ("dtypes", "ops", "modules"):
        selection = getattr(test.edits, kind)
        convert: Any = {
            "dtypes": _dtype_document,
            "ops": _op_document,
            "modules": lambda m: _described({"name": m.name}, m) | _module_inputs(m),
        }[kind]
        part = {
            k: [convert(x) for x in getattr(selection, k)]
            for k in ("include", "exclude")
            if getattr(selection, k)
        }
        if part:
            edits[kind] = part
    if test.edits.cpu_move:
        described = dict(test.edits.cpu_move_descriptions)
        edits["functions"] = {
            "cpu_move": [
                {"name": name}
                | ({"description": described[name].text} if name in described else {})
                for name in test.edits.cpu_move
            ]
        }
    if edits:
        item["edits"] = edits
    return _described(item, test)


def _module_inputs(module: Any) -> dict[str, Any]:
    return module.inputs.document if module.inputs else {}
