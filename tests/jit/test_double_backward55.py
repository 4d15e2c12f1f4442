"""A compiled call's gradients under ``create_graph`` whose backward graph reads nothing that requires grad: a second
``autograd.grad`` asked for the input's gradient must still raise torch.compile's double-backward error (trust55)."""

import numpy as np
import pytest
import torch

import jitorch as jt


def _loss(T, x):
    return (x.exp().sum(1) ** 2).sum()


@pytest.mark.parametrize("wrt", ["grad", "backward"])
def test_double_backward_through_a_split_call_reading_only_saved_results_raises_not_drops_the_term(wrt):
    # (the backward graph reads the saved exp(x) and the cotangent, none requiring grad: the raising node hung on a
    # leaf of its own, which autograd.grad(penalty + (x * x).sum(), x) never ran, so the gradient was 2x alone, the
    # penalty's second-order term silently dropped)
    x0 = np.array([[0.5, -1.2, 2.0], [1.5, 0.3, -0.7]], dtype=np.float32)
    compiled = jt.compile(lambda x: _loss(jt, x))
    x = jt.tensor(x0, requires_grad=True)
    (g,) = jt.autograd.grad(compiled(x), x, create_graph=True)
    (entry,) = compiled.cache.values()
    assert entry.split is not None and g.requires_grad
    xt = torch.tensor(x0, requires_grad=True)
    (tg,) = torch.autograd.grad(_loss(torch, xt), xt)
    np.testing.assert_allclose(g.detach().numpy(), tg.numpy(), rtol=1e-5)
    penalty = (g * g).sum() + (x * x).sum()
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        if wrt == "grad":
            jt.autograd.grad(penalty, x)
        else:
            penalty.backward()
