"""A view made without grad mode (in ``no_grad`` or ``inference_mode``) of a base that requires no grad, made to
require grad itself, is a leaf of its own, as torch's."""

import pytest

import torch

import jitorch


@pytest.mark.parametrize("region", ["no_grad", "inference_mode"])
def test_view_made_to_require_grad_in_a_region_accumulates_its_gradient_seed_5601338(region):
    """Found triaging fuzz seed 5601338 (``T.hamming_window(1, device=D, requires_grad=True)`` in inference mode):
    a periodic window of three elements is a view (of the four-element symmetric one), and any op on it outside the
    region raised "A view was created in inference mode and its base ... has been modified inplace" though nothing
    was written; torch's is a leaf whose gradient accumulates."""
    grads = []
    for T in (torch, jitorch):
        with getattr(T, region)():
            window = T.hamming_window(3, requires_grad=True)
            base = T.ones(4)
            part = base[:3]
            part.requires_grad_()
        assert window.is_leaf and part.is_leaf and not base.requires_grad
        loss = (window * T.tensor([1.0, 2.0, 3.0])).sum() + (part * 3).sum()
        assert loss.grad_fn is not None
        loss.backward()
        grads.append((window.grad.tolist(), part.grad.tolist()))
    assert grads[1] == grads[0] == ([1.0, 2.0, 3.0], [3.0, 3.0, 3.0])


def test_view_in_no_grad_of_a_base_requiring_grad_still_refuses_backward_after_a_write():
    """The rule it keeps: a view made in ``no_grad`` of a base that requires grad, whose memory was written since,
    may not be used in a graph (torch's error)."""
    leaf = jitorch.ones(4, requires_grad=True)
    base = leaf.clone()
    with jitorch.no_grad():
        part = base[:3]
    base.mul_(2)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        (part * 2).sum().backward()
