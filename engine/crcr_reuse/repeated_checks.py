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

Within any check, a backward pass that repeats one already captured runs paused: the
same outputs and inputs (the same tensors), grad outputs of the same layouts and the
same options but `retain_graph`. It runs the same graph's backward on vectors that differ
only in their values: the reentrancy check's second pass, and the batched-grad check's
two plain passes after the analytical ones (a fifth of an LSTM check's op calls). Passes
inside vmap (batched vectors) are always captured. So does a call of the checked
function that repeats a captured one: the same tensors, none changed since (their
version counters), the same grad mode (the undefined-grad check evaluates it once per
output, after the finite differences).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
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
# `torch.autograd.grad`'s tensor arguments; the others are its options.
BACKWARD_TENSORS = ("outputs", "inputs", "grad_outputs")
# Arguments a repeated call may hold besides tensors (compared by identity and value).
IMMUTABLE = (type(None), bool, int, float, complex, str)


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
            and _the_same_objects(self.inputs, done.inputs)
            and self.layouts == done.layouts
            and self.requiring_grad <= done.requiring_grad
            and _same(self.options, done.options)
        )


@dataclass(frozen=True)
class Backward:
    """One `torch.autograd.grad` call: what it differentiates, by what, with which vectors
    (their layouts and dispatch keys: torch's own vmap batches them with no functorch
    level) and options. The tensors are held, as in `GradCheck`."""

    outputs: tuple[Any, ...]
    inputs: tuple[Any, ...]
    vectors: tuple[Any, ...]
    options: tuple[Any, ...]

    @classmethod
    def of(cls, bound: inspect.BoundArguments) -> Backward:
        values = dict(bound.arguments)
        outputs, inputs, vectors = (_tupled(values.pop(name, None)) for name in BACKWARD_TENSORS)
        values.pop("retain_graph", None)  # keeps or frees buffers; calls the same ops
        return cls(
            outputs,
            inputs,
            tuple(None if v is None else (_layout(v), _dispatch_keys(v)) for v in vectors),
            tuple(sorted(values.items())),
        )

    def repeats(self, done: Backward) -> bool:
        return (
            _the_same_objects(self.outputs, done.outputs)
            and _the_same_objects(self.inputs, done.inputs)
            and self.vectors == done.vectors
            and self.options == done.options
        )


@dataclass(frozen=True)
class Forward:
    """One call of a checked function: its arguments (held) and their state."""

    args: tuple[Any, ...]
    state: tuple[Any, ...]

    @classmethod
    def of(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Forward | None:
        """None when a call cannot be compared: keywords, or a mutable non-tensor argument."""
        import torch

        if kwargs or not all(isinstance(a, (torch.Tensor, *IMMUTABLE)) for a in args):
            return None
        return cls(args, (torch.is_grad_enabled(), *(_state(a) for a in args)))

    def repeats(self, done: Forward) -> bool:
        return _the_same_objects(self.args, done.args) and self.state == done.state


@dataclass
class Captured:
    """What a running check has captured: its backward passes and its function's calls."""

    backwards: list[Backward] = field(default_factory=list)
    forwards: list[Forward] = field(default_factory=list)


def install(current: Callable[[], Any]) -> None:
    """Wrap gradcheck, gradgradcheck, their subgraph parts and their vmap.

    `current()` is the capture's recorder during a test (else None), a dispatch mode
    that keeps `checks` (those run under capture) and `repeating` (> 0 in a repeat)."""
    module = sys.modules["torch.autograd.gradcheck"]
    import torch.autograd
    from torch._C._functorch import maybe_current_level as _maybe_current_level
    from torch.utils._python_dispatch import (
        _disable_current_modes,
        _get_current_dispatch_mode_stack,
    )

    def recording() -> Any:
        recorder = current()
        active = recorder is not None and recorder in _get_current_dispatch_mode_stack()
        return recorder if active else None

    running: list[Captured] = []  # per check running (the innermost last)

    def paused_if_repeated(call: Any, done: list[Any], fn: Any, args: Any, kwargs: Any) -> Any:
        """Run `fn` paused when `call` repeats one in `done`; else keep it there and run."""
        if any(call.repeats(earlier) for earlier in done):
            with _disable_current_modes():
                return fn(*args, **kwargs)
        done.append(call)
        return fn(*args, **kwargs)

    def once(check: Any) -> Any:
        @functools.wraps(check)
        def wrapper(func: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            recorder = recording()
            if recorder is None:
                return check(func, inputs, *args, **kwargs)
            call = GradCheck.of(check, func, inputs, args, kwargs)
            repeat = any(call.repeats(done) for done in recorder.checks)
            if not repeat:
                recorder.checks.append(call)
            recorder.repeating += repeat
            captured = Captured()
            running.append(captured)
            try:
                return check(evaluated_once(func, captured), inputs, *args, **kwargs)
            finally:
                running.pop()
                recorder.repeating -= repeat

        return wrapper

    def evaluated_once(func: Any, captured: Captured) -> Any:
        if not callable(func):
            return func  # torch's own error

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call = Forward.of(args, kwargs) if recording() is not None else None
            if call is None:
                return func(*args, **kwargs)
            return paused_if_repeated(call, captured.forwards, func, args, kwargs)

        wrapper.checked = func  # type: ignore[attr-defined]  # repeats see through it
        return wrapper

    def backward_once(grad: Any) -> Any:
        signature = inspect.signature(grad)

        @functools.wraps(grad)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not running or recording() is None or _maybe_current_level() is not None:
                return grad(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return grad(*args, **kwargs)  # torch's own error
            bound.apply_defaults()
            return paused_if_repeated(Backward.of(bound), running[-1].backwards, grad, args, kwargs)

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
    torch.autograd.grad = backward_once(torch.autograd.grad)
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


def _state(value: Any) -> Any:
    """What a repeat must find unchanged in an argument: a tensor's version counter and
    whether it requires grad (a tensor without a counter never repeats)."""
    if not hasattr(value, "_version"):
        return value
    try:
        return (value._version, value.requires_grad)
    except RuntimeError:  # inference tensors keep no version counter
        return object()


def _tupled(value: Any) -> tuple[Any, ...]:
    if isinstance(value, dict):
        return tuple(value.values())
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _layout(value: Any) -> Any:
    """A tensor's shape, strides, dtype and layout (what a kernel's choice may hang on)."""
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        return None
    try:
        strides = tuple(value.stride())
    except RuntimeError:  # sparse layouts have none
        strides = ()
    return (tuple(value.shape), strides, value.dtype, value.layout)


def _dispatch_keys(value: Any) -> str:
    import torch

    return str(torch._C._dispatch_keys(value)) if isinstance(value, torch.Tensor) else ""


def _kind(value: Any) -> Any:
    """What a nudge's ops may hang on: the tensor's layout and dtype (not its values)."""
    return (value.layout, value.dtype) if hasattr(value, "layout") else type(value)


def _the_same_objects(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


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
