"""The operator capture's way through repeated gradient checks (`crcr_reuse.opcapture`).

Module tests check a module's total derivative with gradcheck / gradgradcheck, then
each parameter's partial derivative: the same function on the same tensors, fewer of
them requiring grad. Those repeats are most of such a test's op calls, and under the
capture's Python dispatch mode each call costs ~10 us on top of a ~4 us CPU kernel
(test_modules' LSTM gradcheck: 2.9 million calls). A repeat's autograd graph is a part
of the first check's, so these parts of it call no op the first did not, and run with
the capture paused:
- the finite differences (the same forward, on perturbed values),
- the analytical vector-Jacobian products, the grad-output and undefined-grad checks
  (backward over a subgraph), the vectors and their comparison;
- the batched-grad checks' two plain backward passes;
their vmap over the backward stays captured: which inputs are batched changes the
batching rules' ops (an LSTM's partial check calls `bmm`, its total check does not).

A first check's finite differences are captured once per kind of nudge and run paused
for the rest: each nudge (one element in slow mode, one input in fast mode, torch's
tests' default) evaluates the function under test twice on the same tensors nudged in
place, calling the same ops as any other nudge of the same layout and dtype. A check
of a module with many parameters or elements spends most of its op calls there.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Parts of torch.autograd.gradcheck a repeat runs paused (names missing from a
# torch version are passed over).
SUBGRAPH_PARTS = (
    "_get_numerical_vJu",
    "_get_numerical_jacobian",
    "_get_analytical_vJu_backward_mode",
    "_check_analytical_jacobian_attributes",
    "_test_backward_mul_by_grad_output",
    "_test_undefined_backward_mode",
    "_check_analytical_numerical_equal",
    "_make_vectors",
    "_test_batched_grad",
    "_test_batched_grad_forward_ad",
)
# vmap as those parts call it: captured again inside a repeat (see above).
BATCHING = ("vmap", "_vmap")
# A check's finite differences (slow and fast mode), and one nudge within them.
DIFFERENCES = ("_get_numerical_jacobian", "_get_numerical_vJu")
NUDGE = "_compute_numerical_gradient"


@dataclass(frozen=True)
class GradCheck:
    """One call of gradcheck / gradgradcheck: what it checks, on which tensors.

    The tensors are held (not only compared by id) so that none is freed and its id
    reused while the test runs."""

    check: Any
    func: Any
    inputs: tuple[Any, ...]
    layouts: tuple[Any, ...]
    requiring_grad: frozenset[int]
    options: tuple[Any, ...]

    @classmethod
    def of(cls, check: Any, func: Any, inputs: Any, args: Any, kwargs: Any) -> GradCheck:
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        while hasattr(func, "checked"):  # the capture's wrapper marking it under test
            func = func.checked
        return cls(
            check,
            func,
            inputs,
            tuple(_layout(value) for value in inputs),
            frozenset(i for i, value in enumerate(inputs) if getattr(value, "requires_grad", 0)),
            (*args, *(part for item in sorted(kwargs.items()) for part in item)),
        )

    def repeats(self, done: GradCheck) -> bool:
        """Same check of the same function on the same tensors, and no input requiring
        grad that did not in `done`: its autograd graph is a part of `done`'s."""
        return (
            self.check is done.check
            and self.func is done.func
            and len(self.inputs) == len(done.inputs)
            and all(a is b for a, b in zip(self.inputs, done.inputs, strict=True))
            and self.layouts == done.layouts
            and self.requiring_grad <= done.requiring_grad
            and _same(self.options, done.options)
        )


def install(current: Callable[[], Any]) -> None:
    """Wrap gradcheck, gradgradcheck, their subgraph parts and their vmap.

    `current()` is the capture's recorder during a test (else None), a dispatch mode
    that keeps `checks` (those run under capture) and `repeating` (> 0 in a repeat)."""
    module = sys.modules["torch.autograd.gradcheck"]
    import torch.autograd
    from torch.utils._python_dispatch import (
        _disable_current_modes,
        _get_current_dispatch_mode_stack,
    )

    def recording() -> Any:
        recorder = current()
        active = recorder is not None and recorder in _get_current_dispatch_mode_stack()
        return recorder if active else None

    def once(check: Any) -> Any:
        @functools.wraps(check)
        def wrapper(func: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            recorder = recording()
            if recorder is None:
                return check(func, inputs, *args, **kwargs)
            call = GradCheck.of(check, func, inputs, args, kwargs)
            if not any(call.repeats(done) for done in recorder.checks):
                recorder.checks.append(call)
                return check(func, inputs, *args, **kwargs)
            recorder.repeating += 1
            try:
                return check(func, inputs, *args, **kwargs)
            finally:
                recorder.repeating -= 1

        return wrapper

    def in_repeat_paused(part: Any) -> Any:
        @functools.wraps(part)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            recorder = recording()
            if recorder is None or not recorder.repeating:
                return part(*args, **kwargs)
            with _disable_current_modes():
                return part(*args, **kwargs)

        return wrapper

    nudged: list[set[Any]] = []  # per check's finite differences: the nudges captured

    def differences(part: Any) -> Any:
        @functools.wraps(part)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nudged.append(set())
            try:
                return part(*args, **kwargs)
            finally:
                nudged.pop()

        return wrapper

    def nudge(part: Any) -> Any:
        @functools.wraps(part)
        def wrapper(fn: Any, entry: Any, v: Any, *args: Any, **kwargs: Any) -> Any:
            kind = (_kind(entry), _kind(v))
            if recording() is None or not nudged or kind not in nudged[-1]:
                if nudged:
                    nudged[-1].add(kind)
                return part(fn, entry, v, *args, **kwargs)
            with _disable_current_modes():
                return part(fn, entry, v, *args, **kwargs)

        return wrapper

    def captured_in_repeat(transform: Any) -> Any:
        @functools.wraps(transform)
        def wrapper(fn: Any, *args: Any, **kwargs: Any) -> Any:
            batched = transform(fn, *args, **kwargs)

            def call(*inputs: Any, **options: Any) -> Any:
                recorder = current()
                if recorder is None or not recorder.repeating or recording() is not None:
                    return batched(*inputs, **options)
                with recorder:  # back on the mode stack, over the pause
                    return batched(*inputs, **options)

            return call

        return wrapper

    # gradgradcheck calls the module's own `gradcheck`, and the checks call the parts
    # through the module's globals: each is wrapped there; the public two in
    # torch.autograd too, which common_utils' and tests' own imports go through.
    for name in ("gradcheck", "gradgradcheck"):
        wrapped = once(getattr(module, name))
        setattr(module, name, wrapped)
        setattr(torch.autograd, name, wrapped)
    for name in SUBGRAPH_PARTS:
        if hasattr(module, name):
            setattr(module, name, in_repeat_paused(getattr(module, name)))
    for name in DIFFERENCES:
        if hasattr(module, name):
            setattr(module, name, differences(getattr(module, name)))
    if hasattr(module, NUDGE):
        setattr(module, NUDGE, nudge(getattr(module, NUDGE)))
    for name in BATCHING:
        if hasattr(module, name):
            setattr(module, name, captured_in_repeat(getattr(module, name)))


def _layout(value: Any) -> Any:
    """A tensor's shape, strides, dtype and layout (what a kernel's choice may hang on)."""
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        return None
    try:
        strides = tuple(value.stride())
    except RuntimeError:  # sparse layouts have none
        strides = ()
    return (tuple(value.shape), strides, value.dtype, value.layout)


def _kind(value: Any) -> Any:
    """What a nudge's ops may hang on: the tensor's layout and dtype (not its values)."""
    return (value.layout, value.dtype) if hasattr(value, "layout") else type(value)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Options equal item by item: tensors by identity, other values by ==."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is y:
            continue
        try:
            if _layout(x) is not None or _layout(y) is not None or bool(x != y):
                return False
        except Exception:  # a value that cannot compare: not the same
            return False
    return True
