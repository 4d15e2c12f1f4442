"""``loss.backward()``'s implicit gradient (`gradients._ones_like`, session 54): a fresh one-element array for a
plain CPU float loss, the ``ones_like`` op wherever something watches or changes dispatch (a trace, a profile, an
integer or CUDA output), and the same gradients either way."""

import numpy as np
import torch

import jitorch as jt
from jitorch.autograd import gradients
from jitorch.ops import registry


class _Counting:
    """``registry.FUNCTIONS["ones_like"]`` wrapped to count its calls."""

    def __init__(self, monkeypatch):
        self.calls = 0
        inner = registry.FUNCTIONS["ones_like"]

        def counted(*args, **kwargs):
            self.calls += 1
            return inner(*args, **kwargs)
        monkeypatch.setitem(registry.FUNCTIONS, "ones_like", counted)


def test_an_eager_scalar_loss_gets_its_ones_without_the_op(monkeypatch):
    ones = _Counting(monkeypatch)
    for dtype in (jt.float32, jt.float64):
        x = jt.randn(3, 4, dtype=dtype, requires_grad=True)
        (x * x).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), 2 * x.detach().numpy())
        g = gradients._ones_like((x * 1).sum())
        assert g.dtype is dtype and g.shape == () and not g.requires_grad and g.item() == 1.0
        assert gradients._ones_like(x.sum().reshape(1, 1)).shape == (1, 1)
    assert ones.calls == 0


def test_a_profiled_backward_still_shows_ones_like(monkeypatch):
    """torch's profile of a backward lists aten::ones_like: the profiler's hook sees the op."""
    ones = _Counting(monkeypatch)
    x = jt.randn(5, requires_grad=True)
    loss = x.sum()
    with jt.profiler.profile():
        loss.backward()
    assert ones.calls == 1


def test_a_compiled_backward_traces_the_op(monkeypatch):
    ones = _Counting(monkeypatch)

    @jt.compile
    def step(w):
        loss = (w * w).sum()
        loss.backward()
        return loss

    w = jt.randn(4, requires_grad=True)
    step(w)
    assert ones.calls >= 1
    reference = torch.tensor(w.detach().numpy(), requires_grad=True)
    (reference * reference).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), reference.grad.numpy(), rtol=1e-6)


def test_other_dtypes_take_the_op(monkeypatch):
    ones = _Counting(monkeypatch)
    x = jt.randn(3, dtype=jt.float16, requires_grad=True)
    x.sum().backward()
    assert ones.calls == 1 and x.grad.dtype is jt.float16
