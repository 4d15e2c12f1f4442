"""nll_loss (and cross_entropy through it) refuses a class weight that requires grad in grad mode, as torch: its
weight has no derivative there (jitorch differentiated it, found by helper 196's fuzzing of the loss patterns)."""

import pytest
import torch

import jitorch as jt
from tests.support import raises_as_torch

CASES = [("nll_loss", {}), ("cross_entropy", {}), ("cross_entropy", {"label_smoothing": 0.1}),
         ("cross_entropy", {"reduction": "sum"})]


@pytest.mark.parametrize("name, kwargs", CASES)
@pytest.mark.parametrize("input_requires_grad", [True, False])
def test_a_class_weight_that_requires_grad_raises_torchs_error(name, kwargs, input_requires_grad):
    x = torch.randn(3, 4).log_softmax(1).numpy()

    def call(lib):
        target, weight = lib.tensor([0, 1, 3]), lib.rand(4).requires_grad_()
        return getattr(lib.nn.functional, name)(lib.tensor(x).requires_grad_(input_requires_grad), target,
                                                weight=weight, **kwargs)
    raises_as_torch(call)


def test_under_no_grad_a_weight_that_requires_grad_is_read_as_torch():
    x, t, w = torch.randn(3, 4), torch.tensor([0, 1, 3]), torch.rand(4, requires_grad=True)
    with torch.no_grad():
        want = torch.nn.functional.nll_loss(x.log_softmax(1), t, weight=w)
    with jt.no_grad():
        got = jt.nn.functional.nll_loss(jt.tensor(x.numpy()).log_softmax(1), jt.tensor(t.numpy()),
                                        weight=jt.tensor(w.detach().numpy()).requires_grad_())
    assert abs(got.item() - want.item()) <= 1e-6 * abs(want.item())


def test_a_weight_without_grad_still_weighs_the_loss_under_grad():
    x = jt.randn(3, 4, requires_grad=True)
    t, w = jt.tensor([0, 1, 3]), jt.rand(4)
    jt.nn.functional.nll_loss(x.log_softmax(1), t, weight=w).backward()
    assert x.grad is not None and x.grad.abs().sum().item() > 0
