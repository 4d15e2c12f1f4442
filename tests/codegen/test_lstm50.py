"""The recurrences' per-step product kernels end in a panel one vector wide where the columns left fit in one
(`codegen.recurrence.panel_widths`): an LSTM's backward step of hidden size 200 (20 x 800 @ 800 x 200 float32)
computed seven whole panels of 32 columns, 24 of them padding. Every element stays the same chain of FMAs over k,
so a narrow last panel gives the bits a whole one gives; values against NumPy and torch."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import recurrence
from jitorch.ops import recurrences

torch = pytest.importorskip("torch")
AVX512 = recurrence.product_kernel("float32", 2, 2) is not None  # (the layers use the kernels only there)


@pytest.mark.parametrize("n,panel,widths", [
    (200, 32, [32] * 6 + [16]),   # float32: 6 panels and 8 columns, in one vector
    (800, 32, [32] * 25),         # whole panels only
    (210, 32, [32] * 7),          # 18 columns left: more than a vector, a whole panel
    (6, 32, [16]),                # fewer columns than a vector
    (200, 16, [16] * 12 + [8]),   # float64: vectors of 8
])
def test_panel_widths(n, panel, widths):
    assert recurrence.panel_widths(n, panel) == widths


def _run(kernel, a, packed, rows):
    out = np.full((rows + 1, kernel.ld), 7.0, a.dtype)  # (one row more: must stay untouched)
    table = kernel.table({"a": recurrences._address(a), "w": recurrences._address(packed),
                          "out": recurrences._address(out)})
    kernel.run(kernel.rows(table)[0], rows)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k,n", [(800, 200), (7, 40), (3, 6)])
def test_a_narrow_last_panel_gives_the_bits_of_a_whole_one(dtype, k, n, rng):
    """The product of ``n`` columns (its last panel one vector wide) against the same weight padded with zero
    columns to whole panels (a kernel of whole panels only): the same bits in the n columns, zeros in the
    padding, nothing written past ``ld``; and NumPy's float64 product to float tolerance."""
    narrow = recurrence._products(dtype, k, n)
    assert narrow.widths[-1] == narrow.panel // 2 and narrow.ld < -(-n // narrow.panel) * narrow.panel
    whole_n = -(-n // narrow.panel) * narrow.panel
    whole = recurrence._products(dtype, k, whole_n)
    assert all(w == whole.panel for w in whole.widths)
    w = rng.normal(size=(n, k)).astype(dtype).T  # (a transposed view, as W_hh^T: packing reads any strides)
    padded = np.zeros((k, whole_n), dtype)
    padded[:, :n] = w
    for rows in (1, 4, 5, 7, 20, 23):
        a = rng.normal(size=(rows, k)).astype(dtype)
        got = _run(narrow, a, narrow.pack(w), rows)
        reference = _run(whole, a, whole.pack(padded), rows)
        assert np.array_equal(got[:rows, :n], reference[:rows, :n])
        assert (got[:rows, n:] == 0).all() and (got[rows:] == 7).all()
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == "float64" else dict(rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(got[:rows, :n], a.astype(np.float64) @ w.astype(np.float64), **tol)


@pytest.mark.skipif(not AVX512, reason="the layers run the product kernels only on AVX-512 machines (JITORCH_CPU)")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lstm_whose_backward_product_ends_in_a_narrow_panel_matches_torch(dtype, compiled, monkeypatch):
    """Hidden size 40: the backward step's product (k 160, n 40) ends in a panel of one vector (float32: 32 + 16
    columns; float64: 16 + 16 + 8), which the backward cell reads at that row stride; 7 rows (a register block and
    a short one). Forward output, final states and every gradient against torch."""
    hidden = 40
    ran = []
    build = recurrence.ProductKernel.run

    def run(self, row, batch):
        ran.append(self.ld)
        build(self, row, batch)
    monkeypatch.setattr(recurrence.ProductKernel, "run", run)
    monkeypatch.setattr(recurrences.threads, "run_row_program", lambda *a: False)  # (each call through `run`)
    t = torch.nn.LSTM(6, hidden, 2, dtype=getattr(torch, dtype))
    m = jt.nn.LSTM(6, hidden, 2, dtype=getattr(jt, dtype))
    for name, p in t.named_parameters():
        getattr(m, name).data.copy_(jt.tensor(p.detach().numpy()))
    x = np.random.default_rng(50).normal(size=(5, 7, 6)).astype(dtype)

    def grads(lib, module, fn):
        xs = lib.tensor(x, requires_grad=True)
        loss = fn(xs)
        loss.backward()
        return [loss.detach().numpy()] + [v.grad.detach().numpy().copy() for v in (xs, *module.parameters())]

    def loss_of(module):
        def loss(xs):
            out, (h, c) = module(xs)
            return (out * out).sum() + (h * c).sum()
        return loss
    got = grads(jt, m, jt.compile(loss_of(m)) if compiled else loss_of(m))
    expected = grads(torch, t, loss_of(t))
    width = 16 if dtype == "float32" else 8
    assert sum(recurrence.panel_widths(hidden, 2 * width)) in ran  # (the backward's product ran)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == "float64" else dict(rtol=2e-5, atol=2e-5)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, **tol)
