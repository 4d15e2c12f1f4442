"""A fused LSTM/GRU layer's forward packs W_hh^T for its per-step product kernel where it lies (a transposed view
of W_hh, no contiguous copy first), and its NumPy products (no product kernel) still read a contiguous W_hh^T:
values and gradients against torch (float32, float64), compiled equal to eager bit for bit, and gradcheck."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import recurrence
from jitorch.ops import recurrences

torch = pytest.importorskip("torch")
SEQ, BATCH, INPUT, HIDDEN = 5, 6, 4, 8
AVX512 = recurrence.product_kernel("float32", 2, 2) is not None


def _twins(mode, dtype):
    jt.manual_seed(52)
    m = getattr(jt.nn, mode)(INPUT, HIDDEN, 2).to(getattr(jt, dtype))
    t = getattr(torch.nn, mode)(INPUT, HIDDEN, 2, dtype=getattr(torch, dtype))
    t.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in m.state_dict().items()})
    return m, t


def _run(lib, m, x, compiled=False):
    """(output, gradients of the input and the parameters) of a weighted sum of the output."""
    weight = lib.tensor(np.linspace(-1, 1, SEQ * BATCH * HIDDEN).reshape(SEQ, BATCH, HIDDEN).astype(x.dtype))
    x = lib.tensor(x, requires_grad=True)

    def loss(x):
        out = m(x)[0]
        return (out * weight).sum(), out
    value, out = (jt.compile(loss) if compiled else loss)(x)
    value.backward()
    got = [out.detach().numpy().copy(), x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in m.parameters()]
    for p in m.parameters():
        p.grad = None
    return got


@pytest.fixture
def packed_from(monkeypatch):
    """[(k, n, whether the weight was C-contiguous)] of every `ProductKernel.pack` while the test runs."""
    seen = []
    pack = recurrence.ProductKernel.pack

    def recording(self, w):
        seen.append((self.k, self.n, w.flags.c_contiguous))
        return pack(self, w)
    monkeypatch.setattr(recurrence.ProductKernel, "pack", recording)
    return seen


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_forward_packs_w_hh_transposed_where_it_lies_and_matches_torch(mode, dtype, packed_from):
    m, t = _twins(mode, dtype)
    x = np.random.default_rng(52).normal(size=(SEQ, BATCH, INPUT)).astype(dtype)
    eager, compiled = _run(jt, m, x), _run(jt, m, x, compiled=True)
    expected = _run(torch, t, x)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == "float64" else dict(rtol=2e-5, atol=2e-6)
    for e, c, ref in zip(eager, compiled, expected, strict=True):
        np.testing.assert_array_equal(c, e)
        np.testing.assert_allclose(e, ref, **tol)
    if AVX512:  # forward: W_hh^T (hidden, gates * hidden) as a transposed view; backward: W_hh itself
        gates = HIDDEN * (4 if mode == "LSTM" else 3)
        assert (HIDDEN, gates, False) in packed_from and (gates, HIDDEN, True) in packed_from
        assert all(not contiguous for k, n, contiguous in packed_from if (k, n) == (HIDDEN, gates))


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_numpy_products_without_a_product_kernel_match_torch(mode, monkeypatch):
    """No product kernel (a machine without AVX-512): the steps' NumPy products read W_hh^T made contiguous."""
    monkeypatch.setattr(recurrences, "PRODUCT_KERNEL", None)
    operands = []
    matmul = recurrences._matmul

    def recording(a, b, out=None):
        operands.append(b.flags.c_contiguous)
        return matmul(a, b, out)
    monkeypatch.setattr(recurrences, "_matmul", recording)
    m, t = _twins(mode, "float64")
    x = np.random.default_rng(53).normal(size=(SEQ, BATCH, INPUT))
    for g, e in zip(_run(jt, m, x), _run(torch, t, x), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    assert operands and all(operands)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_fused_layer_gradcheck(mode):
    jt.manual_seed(54)
    m = getattr(jt.nn, mode)(3, 4, 1).double()
    x = jt.randn(3, 2, 3, dtype=jt.float64, requires_grad=True)
    h = jt.randn(1, 2, 4, dtype=jt.float64, requires_grad=True)
    states = (h, jt.randn(1, 2, 4, dtype=jt.float64, requires_grad=True)) if mode == "LSTM" else (h,)

    def f(x, *states):
        return m(x, states if mode == "LSTM" else states[0])[0]
    assert jt.autograd.gradcheck(f, (x, *states))
