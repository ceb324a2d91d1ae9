"""When the operator capture may run part of a gradient check paused: a backward pass only
when it repeats a captured one on the same graph with vectors laid out the same way; a call
of the checked function only when it repeats one on the same, unchanged tensors."""

from __future__ import annotations

import inspect

import torch
from crcr_reuse.repeated_checks import Backward, Forward
from torch._vmap_internals import _vmap

SIGNATURE = inspect.signature(torch.autograd.grad)


def call(*args, **kwargs) -> Backward:
    bound = SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    return Backward.of(bound)


def test_a_backward_pass_repeats_another_only_on_the_same_graph_and_vector_layouts():
    x = torch.randn(3, 2, dtype=torch.double, requires_grad=True)
    w = torch.randn(2, dtype=torch.double, requires_grad=True)
    out = (x * w).t()  # laid out transposed: a fresh vector like it is not contiguous
    first = call(out, [x, w], torch.randn(2, 3, dtype=torch.double), retain_graph=True)

    # Other values, the same layout, positional or keyword, buffers kept or not: a repeat.
    assert call(out, (x, w), torch.randn(2, 3, dtype=torch.double)).repeats(first)
    assert call(out, [x, w], grad_outputs=[torch.ones(2, 3, dtype=torch.double)]).repeats(first)

    # Anything that can change which backward ops run is not.
    assert not call(out, [x, w], torch.randn_like(out)).repeats(first)  # strides
    assert not call(out, [x, w], torch.randn(2, 3)).repeats(first)  # dtype
    assert not call(out, [x], torch.randn(2, 3, dtype=torch.double)).repeats(first)
    assert not call((x * w).t(), [x, w], torch.randn(2, 3, dtype=torch.double)).repeats(first)
    vector = torch.randn(2, 3, dtype=torch.double)
    assert not call(out, [x, w], vector, create_graph=True).repeats(first)
    assert not call(out, [x, w], vector, allow_unused=True).repeats(first)

    # A vector torch's own vmap batches (gradcheck's batched-grad check) has the same
    # shape, strides and dtype, but other dispatch keys: never a repeat of a plain one.
    batched: list[Backward] = []

    def inside(v: torch.Tensor) -> torch.Tensor:
        batched.append(call(out, [x, w], v))
        return v

    _vmap(inside)(torch.randn(2, 2, 3, dtype=torch.double))
    plain = call(out, [x, w], torch.randn(2, 3, dtype=torch.double))
    assert batched[0].vectors[0][0] == plain.vectors[0][0]
    assert not batched[0].repeats(plain)


def test_a_call_repeats_another_only_on_the_same_unchanged_tensors_in_the_same_grad_mode():
    x = torch.randn(3, dtype=torch.double, requires_grad=True)
    w = torch.randn(3, dtype=torch.double)
    first = Forward.of((x, w, 2), {})
    assert first is not None
    assert Forward.of((x, w, 2), {}).repeats(first)

    assert not Forward.of((w, x, 2), {}).repeats(first)
    assert not Forward.of((x, w.clone(), 2), {}).repeats(first)
    assert not Forward.of((x, w, 3), {}).repeats(first)
    with torch.no_grad():
        assert not Forward.of((x, w, 2), {}).repeats(first)
        w.add_(1)  # changed in place (as gradcheck's finite differences do): a new version
    assert not Forward.of((x, w, 2), {}).repeats(first)
    before = Forward.of((x, w, 2), {})
    w.requires_grad_(True)  # no new version, but another graph
    assert not Forward.of((x, w, 2), {}).repeats(before)

    # Keywords or a mutable argument: never compared.
    assert Forward.of((x,), {"scale": 2}) is None
    assert Forward.of((x, [w]), {}) is None
