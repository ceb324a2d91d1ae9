"""Hooks into torch's device-type test machinery (``common_device_type``), per generic test.

How: before any test file is imported, the backend's module is imported (so
``PrivateUse1TestBase`` exists), ``PrivateUse1TestBase.setUpClass()`` runs once
(so class names stay ``...PRIVATEUSEONE``), and two functions are wrapped:
- ``PrivateUse1TestBase.instantiate_test``: for each generic test, ask the rules
  (``matching.py``); a ``skip`` test is not generated at all (its variants are
  only counted); otherwise a copy of the test gets filtered ``@dtypes`` lists and
  a filtered parametrization (ops, modules, OpInfo dtypes, extra dtypes, per-dtype
  tolerances; included ops from op_db, custom modules built from the config), then
  the original instantiation runs. What a generated test is (op, dtype, module)
  stays where torch puts it, in the defaults (``param_kwargs``) of the function on
  the device class;
- ``instantiate_device_type_tests``: a class that upstream instantiates only for
  other devices (``only_for``/``except_for``) is reported, unless the config
  bypasses device restrictions for one of its tests: then privateuse1 joins its
  ``only_for`` (or leaves its ``except_for``) and the class is instantiated.
This is the portable path; it does not depend on torch 2.13's
``set_test_configs`` hooks.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
import sys
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .idlist import ShardFilter
from .marking import PLACEHOLDER_VARIANTS
from .matching import Rules, VariantFilter
from .names import GENERIC, dtype_name, flat, op_names, opinfo

ONLY_FOR_ENV = "PYTORCH_TESTING_DEVICE_ONLY_FOR"


@dataclass
class CollectionStats:
    """Counts of what the hooks did, in total and per test file."""

    generated: int = 0
    skipped_generic: int = 0
    skipped_variants: int = 0
    filtered_variants: int = 0
    not_instantiated: list[dict[str, Any]] = field(default_factory=list)
    per_file: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, path: str, **counts: int) -> None:
        for key, value in counts.items():
            setattr(self, key, getattr(self, key) + value)
        self.per_file[path].update(counts)

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "per_file"}
        data["per_file"] = {path: dict(counts) for path, counts in self.per_file.items()}
        return data


def prepare_device(device_module: str) -> str:
    """Import the backend's module before torch.testing; return the backend name."""
    os.environ.setdefault(ONLY_FOR_ENV, "privateuse1")
    importlib.import_module(device_module)
    import torch

    name = torch._C._get_privateuse1_backend_name()
    backend = getattr(torch, name, None)
    if backend is None or not backend.is_available():
        raise RuntimeError(
            f"importing {device_module!r} did not register an available PrivateUse1 backend "
            f"(torch.{name} is missing or not available)"
        )
    return name


class DeviceTypeHooks:
    """Installs the wrappers and applies the rules while test files are imported."""

    def __init__(self, rules: Rules, shard: ShardFilter | None = None, placeholders: bool = False):
        self.rules = rules
        self.shard = shard
        # A ``skip`` test is never generated; with ``placeholders`` one test under its
        # generic name stands for its variants, so the run reports it as skipped.
        self.placeholders = placeholders
        self.stats = CollectionStats()
        self._path = ""

    def install(self) -> None:
        from torch.testing._internal import common_device_type as cdt
        from torch.testing._internal import common_utils

        base = cdt.PrivateUse1TestBase
        backend = _backend_name()
        if base not in cdt.device_type_test_bases:
            # torch.testing was imported before the backend existed: add the base now.
            cdt.device_type_test_bases.append(base)
        for module in (common_utils, cdt):
            if backend not in module.NATIVE_DEVICES:
                module.NATIVE_DEVICES = (*module.NATIVE_DEVICES, backend)
        base.setUpClass()  # fixes device_type (and so class names) before any test file
        original = cdt.DeviceTypeTestBase.instantiate_test.__func__
        if getattr(base.instantiate_test, "_crcr_hook", False):
            return
        hooks = self

        def instantiate_test(cls: type, name: str, test: Any, *, generic_cls: Any = None) -> None:
            hooks.instantiate(original, cls, name, test, generic_cls)

        instantiate_test._crcr_hook = True  # type: ignore[attr-defined]
        base.instantiate_test = classmethod(instantiate_test)
        cdt.instantiate_device_type_tests = self._wrap_instantiate_all(
            cdt.instantiate_device_type_tests
        )

    def _wrap_instantiate_all(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def instantiate_device_type_tests(
            generic_test_class: type, scope: Any, *args: Any, **kwargs: Any
        ) -> Any:
            names = ("except_for", "only_for", "include_lazy", "allow_mps", "allow_xpu")
            options = dict(zip(names, args, strict=False)) | kwargs
            if not _for_privateuse1(options):
                lifted = self._lifted(generic_test_class, options)
                if lifted is not None and _for_privateuse1(lifted):
                    return original(generic_test_class, scope, **lifted)
                self._not_instantiated(generic_test_class, options)
            return original(generic_test_class, scope, *args, **kwargs)

        return instantiate_device_type_tests

    def _lifted(self, generic_cls: type, options: dict[str, Any]) -> dict[str, Any] | None:
        """Upstream's options with privateuse1 allowed, when the config bypasses device
        restrictions for a test of the class; None when it does not."""
        path = _source_file(generic_cls)
        file_rules = self.rules.for_file(path) if path else None
        tests = [name for name in vars(generic_cls) if name.startswith("test")]
        if file_rules is None or not file_rules.bypasses_restrictions(generic_cls.__name__, tests):
            return None
        lifted = dict(options)
        if options.get("only_for"):
            lifted["only_for"] = [*_listed(options["only_for"]), "privateuse1"]
        if options.get("except_for"):
            ours = ("privateuse1", _backend_name())
            lifted["except_for"] = [d for d in _listed(options["except_for"]) if d not in ours]
        return lifted

    def _not_instantiated(self, generic_cls: type, options: dict[str, Any]) -> None:
        path = _source_file(generic_cls)
        if path and self.rules.lists_file(path):
            self.stats.not_instantiated.append(
                {
                    "file": path,
                    "class": generic_cls.__name__,
                    "only_for": _plain(options.get("only_for")),
                    "except_for": _plain(options.get("except_for")),
                    "tests": sorted(n for n in vars(generic_cls) if n.startswith("test")),
                }
            )

    # -- per generic test -------------------------------------------------------

    def instantiate(
        self, original: Callable[..., Any], cls: Any, name: str, test: Any, generic_cls: Any
    ) -> None:
        path = _source_file(generic_cls)
        file_rules = self.rules.for_file(path) if path else None
        if path is None or file_rules is None:
            return  # a test file the config does not list: nothing is generated
        decision = file_rules.decide(generic_cls.__name__, name)
        # A functools.wraps method (Spyre's ParameterizedTestMeta) carries its base
        # function's __name__, which torch's wrappers copy: the name is the attribute.
        base = getattr(test, "__name__", name)
        if base != name:
            file_rules.note_base_name(generic_cls.__name__, base, name)
        if self.shard is not None and not self.shard.wants_generic(path, cls.__name__, name):
            return
        if decision.mode == "skip":
            variants = _count_variants(cls, test, generic_cls)
            self.stats.add(path, skipped_generic=1, skipped_variants=variants)
            if self.placeholders:
                setattr(cls, name, _named(_placeholder(test, variants), name, base))
            return
        self._path = path
        prepared = self._prepare(cls, test, decision.filters)
        # What each generated test is (op, dtype, module) stays in its own defaults
        # (torch's param_kwargs); the plugin reads it there at collection.
        generated = _instantiate_named(original, cls, name, prepared, generic_cls, base)
        self.stats.add(path, generated=generated)

    def _prepare(self, cls: Any, test: Any, filters: VariantFilter) -> Any:
        if filters.trivial and not filters.has_precision:
            return test
        prepared = _clone(test)
        dtypes = cls._get_dtypes(test)
        if dtypes is not None:
            kept = [d for d in dtypes if all(filters.dtype_allowed(dtype_name(x)) for x in flat(d))]
            if all(not isinstance(d, (list, tuple)) for d in dtypes):
                kept += [d for d in _torch_dtypes(filters.extra_dtypes) if d not in kept]
            prepared.dtypes = {**test.dtypes, cls.device_type: kept, "privateuse1": kept}
            inner = getattr(test, "parametrize_fn", None)
            per_dtype = _count_inner(inner, test, cls)
            removed = len(dtypes) - len([d for d in kept if d in dtypes])
            self.stats.add(self._path, filtered_variants=removed * per_dtype)
            if filters.has_precision:
                prepared.tolerance_overrides = _tolerances(test, kept, filters, ())
        if hasattr(test, "parametrize_fn") and not filters.trivial:
            prepared.parametrize_fn = self._filtered(
                _rebuild(test.parametrize_fn, filters), filters
            )
        return prepared

    def _filtered(
        self, parametrize_fn: Callable[..., Any], filters: VariantFilter
    ) -> Callable[..., Any]:
        stats, path = self.stats, self._path

        def filtered(test: Any, generic_cls: Any, device_cls: Any) -> Iterator[Any]:
            for variant, suffix, params, decorators in parametrize_fn(
                test, generic_cls, device_cls
            ):
                if not _variant_allowed(params, filters):
                    stats.add(path, filtered_variants=1)
                    continue
                if filters.has_precision:
                    variant = _with_tolerances(variant, params, filters)
                yield variant, suffix, params, decorators

        return filtered


def _backend_name() -> str:
    import torch

    return torch._C._get_privateuse1_backend_name()


def _source_file(cls: Any) -> str | None:
    module = sys.modules.get(getattr(cls, "__module__", ""), None)
    path = getattr(module, "__file__", None)
    return os.path.realpath(path) if path else None


def _for_privateuse1(options: dict[str, Any]) -> bool:
    """Whether ``instantiate_device_type_tests`` with these options instantiates for us."""
    from torch.testing._internal import common_device_type as cdt

    bases = cdt.get_desired_device_type_test_bases(**options)
    return any(issubclass(base, cdt.PrivateUse1TestBase) for base in bases)


def _listed(devices: str | Iterable[str]) -> list[str]:
    return [devices] if isinstance(devices, str) else list(devices)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return list(value)


def _torch_dtypes(names: list[str]) -> list[Any]:
    import torch

    return [getattr(torch, name) for name in names if hasattr(torch, name)]


def _clone(fn: Any) -> Any:
    """A copy of a test function whose attributes can change without touching the original."""
    if isinstance(fn, types.FunctionType):
        clone = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        clone.__dict__.update(fn.__dict__)
        clone.__kwdefaults__ = fn.__kwdefaults__
        clone.__qualname__ = fn.__qualname__
        clone.__module__ = fn.__module__
        clone.__doc__ = fn.__doc__
        return clone

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def _tolerances(
    test: Any, dtypes: list[Any], filters: VariantFilter, op_names: tuple[str, ...]
) -> dict[Any, Any]:
    from torch.testing._internal.common_device_type import tol

    overrides = dict(getattr(test, "tolerance_overrides", {}))
    for dtype in dtypes:
        if isinstance(dtype, (list, tuple)):
            continue
        precision = filters.tolerance(dtype_name(dtype), op_names)
        if precision is not None:
            current = overrides.get(dtype)
            atol = (
                precision.atol if precision.atol is not None else (current.atol if current else 0.0)
            )
            rtol = (
                precision.rtol if precision.rtol is not None else (current.rtol if current else 0.0)
            )
            overrides[dtype] = tol(atol=atol, rtol=rtol)
    return overrides


def _with_tolerances(variant: Any, params: dict[str, Any], filters: VariantFilter) -> Any:
    op = opinfo(params)
    names = op_names(op) if op is not None else ()
    dtypes = [d for d in flat(params.get("dtype", params.get("dtypes"))) if d is not None]
    overrides = _tolerances(variant, dtypes, filters, names)
    if overrides == getattr(variant, "tolerance_overrides", {}):
        return variant
    variant = _clone(variant)
    variant.tolerance_overrides = overrides
    return variant


def _variant_allowed(params: dict[str, Any], filters: VariantFilter) -> bool:
    op = opinfo(params)
    names = op_names(op) if op is not None else ()
    if op is not None and not filters.op_allowed(names):
        return False
    module = params.get("module_info")
    if module is not None and not filters.module_allowed(module.name):
        return False
    # A custom module's dtypes are those its inputs are written in: the config chose them.
    own = getattr(module, "crcr_dtypes", ())
    for dtype in flat(params.get("dtype", params.get("dtypes"))):
        name = dtype_name(dtype) if dtype is not None else None
        if name is None or (name in own and name not in filters.exclude_dtypes):
            continue
        if not filters.dtype_allowed(name, names):
            return False
    return True


def _is_plain_parametrize(fn: Any) -> bool:
    from torch.testing._internal.common_utils import parametrize

    return isinstance(getattr(fn, "__self__", None), parametrize)


def _rebuild(parametrize_fn: Any, filters: VariantFilter) -> Any:
    """Rebuild a (possibly composed) parametrization with filtered op / module lists."""
    from torch.testing._internal.common_device_type import ops
    from torch.testing._internal.common_modules import modules
    from torch.testing._internal.common_utils import compose_parametrize_fns

    owner = getattr(parametrize_fn, "__self__", None)
    if isinstance(owner, ops):
        clone = copy.copy(owner)
        clone.op_list = _filtered_ops(owner, filters)
        return clone._parametrize_test if clone.op_list else _nothing
    if isinstance(owner, modules):
        from .inputs import module_info

        clone = copy.copy(owner)
        # Custom modules join the list; one named like a listed module takes its place.
        custom = {spec.short: module_info(spec) for spec in filters.custom_modules}
        clone.module_info_list = [
            m
            for m in owner.module_info_list
            if filters.module_allowed(m.name) and m.name not in custom
        ] + list(custom.values())
        return clone._parametrize_test
    defaults = getattr(parametrize_fn, "__defaults__", None)
    if (
        getattr(parametrize_fn, "__name__", "") == "composite_fn"
        and defaults
        and len(defaults) == 2
    ):
        return compose_parametrize_fns(
            _rebuild(defaults[0], filters), _rebuild(defaults[1], filters)
        )
    return parametrize_fn


def _nothing(test: Any, generic_cls: Any, device_cls: Any) -> Iterator[Any]:
    return iter(())


def _filtered_ops(owner: Any, filters: VariantFilter) -> list[Any]:
    """Allowed ops of an ``@ops`` list, plus ``edits.ops.include`` ops it lacks (from op_db)."""
    from torch.testing._internal.common_device_type import OpDTypes

    kept = [op for op in owner.op_list if filters.op_allowed(op_names(op))]
    present = {n for op in owner.op_list for n in op_names(op)}
    missing = {name for name in filters.include_ops if name not in present}
    if missing:
        from torch.testing._internal.common_methods_invocations import op_db

        kept += [op for op in op_db if not missing.isdisjoint(op_names(op))]
    if owner.opinfo_dtypes == OpDTypes.supported and filters.extra_dtypes:
        kept = [_with_extra_dtypes(op, filters.extra_dtypes) for op in kept]
    return kept


def _with_extra_dtypes(op: Any, extra: list[str]) -> Any:
    """An OpInfo copy that also declares the included dtypes for this backend."""
    backend = _backend_name()
    declared = set(op.supported_dtypes(backend))
    wanted = declared | set(_torch_dtypes(extra))
    if wanted == declared:
        return op
    clone = copy.copy(op)
    clone.dtypesIf = {**op.dtypesIf, backend: wanted}
    return clone


def _placeholder(test: Any, variants: int) -> Any:
    """A test that stands for a skipped generic test (the plugin marks it skipped)."""

    @functools.wraps(test)  # its name and source line are the generic test's
    def placeholder(self: Any) -> None:
        raise AssertionError("crcr: a config-skipped test must not run")

    setattr(placeholder, PLACEHOLDER_VARIANTS, variants)
    return placeholder


def name_generated_tests() -> None:
    """Without the plugin (the CPU capture): tag generated device tests with their generic
    attribute name where their ``__name__`` differs, as the plugin does: tests set on a
    class from one function (test_binary_ufuncs.py's, all named "test") stay apart."""
    from torch.testing._internal import common_device_type as cdt

    base_cls = cdt.DeviceTypeTestBase
    original = base_cls.instantiate_test.__func__
    if getattr(original, "_crcr_names", False):
        return

    def instantiate_test(cls: type, name: str, test: Any, *, generic_cls: Any = None) -> None:
        _instantiate_named(original, cls, name, test, generic_cls, getattr(test, "__name__", name))

    instantiate_test._crcr_names = True  # type: ignore[attr-defined]
    base_cls.instantiate_test = classmethod(instantiate_test)


def _instantiate_named(
    original: Callable[..., Any], cls: Any, name: str, test: Any, generic_cls: Any, base: str
) -> int:
    """torch's instantiation of one generic test; what it generated is tagged with the
    generic name when the test's ``__name__`` (``base``) differs. Returns how many."""
    before = set(vars(cls)) if base != name else None
    count = len(vars(cls))
    original(cls, name, test, generic_cls=generic_cls)
    for attribute in set(vars(cls)) - before if before is not None else ():
        _named(vars(cls)[attribute], name, base)
    return len(vars(cls)) - count


def _named(fn: Any, name: str, base: str) -> Any:
    """Tag a generated test with its generic attribute name when its __name__ differs."""
    if base != name:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(fn, GENERIC, name)
    return fn


def _count_variants(cls: Any, test: Any, generic_cls: Any) -> int:
    """How many tests upstream would generate for this device (without generating them)."""
    parametrize_fn = getattr(test, "parametrize_fn", None)
    try:
        inner = sum(1 for _ in parametrize_fn(test, generic_cls, cls)) if parametrize_fn else 1
    except Exception:  # counting must never break collection
        inner = 1
    dtypes = cls._get_dtypes(test)
    return inner * (len(dtypes) if dtypes is not None else 1)


def _count_inner(parametrize_fn: Any, test: Any, cls: Any) -> int:
    """Variants a plain ``@parametrize`` adds per dtype (1 when there is none)."""
    if not _is_plain_parametrize(parametrize_fn):
        return 1
    try:
        return sum(1 for _ in parametrize_fn(test, None, cls))
    except Exception:  # counting must never break collection
        return 1
