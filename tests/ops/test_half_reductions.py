"""Half-type reductions whose rounding torch's CPU kernels define: prod rounds every product in its own
order, mean into a half type reads the input in float32, nanmean rounds the sum first, scatter_reduce's mean
divides a rounded sum by a rounded count. Bit for bit against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt

HALVES = ["float16", "bfloat16"]


def _both(values, dtype):
    a = np.asarray(values, np.float32)
    return torch.from_numpy(a).to(getattr(torch, dtype)), jt.tensor(a).to(getattr(jt, dtype))


def _bits_equal(t, j):
    a, b = t.float().numpy(), j.float().numpy()
    assert a.shape == b.shape
    np.testing.assert_array_equal(a, b)


VIEWS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.transpose(0, -1),
    "sliced_rows": lambda t: t[..., :t.shape[-1] - 1],
    "every_other": lambda t: t[::2],
}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("shape", [(3, 200), (200, 3), (4, 5, 70), (2, 64, 3), (9, 13), (1, 300)])
@pytest.mark.parametrize("view", VIEWS)
def test_half_prod_rounds_every_product_in_torchs_order(dtype, shape, view):
    """torch rounds each product to the half type: 64 lanes over contiguous runs of 64 or more, element
    by element otherwise (`ops.half_products`). Rounding once in float32 (the old kernel) differs here."""
    rng = np.random.default_rng(sum(shape))
    t, j = _both(rng.uniform(0.97, 1.03, shape), dtype)
    t, j = VIEWS[view](t), VIEWS[view](j)
    _bits_equal(t.prod(), j.prod())
    for d in range(t.dim()):
        for keep in (False, True):
            _bits_equal(t.prod(d, keepdim=keep), j.prod(d, keepdim=keep))


@pytest.mark.parametrize("dtype", HALVES)
def test_half_prod_by_dtype_and_out_and_specials_as_torch(dtype):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.97, 1.03, (3, 130)).astype(np.float32)
    tx, jx = torch.from_numpy(x), jt.tensor(x)
    _bits_equal(tx.prod(1, dtype=getattr(torch, dtype)), jx.prod(1, dtype=getattr(jt, dtype)))
    to, jo = torch.empty(3, dtype=getattr(torch, dtype)), jt.empty(3, dtype=getattr(jt, dtype))
    torch.prod(tx, 1, out=to)
    jt.prod(jx, 1, out=jo)
    _bits_equal(to, jo)
    special = np.array([[0.0, -1.0, 2.0] * 30, [np.inf, 0.5, 1.0] * 30, [np.nan, 1.0, 1.0] * 30, [300.0, 300.0, 1] * 30])
    t, j = _both(special, dtype)
    _bits_equal(t.prod(1), j.prod(1))
    t, j = _both(np.zeros((0, 5)), dtype)
    _bits_equal(t.prod(0), j.prod(0))
    _bits_equal(t.prod(1), j.prod(1))


@pytest.mark.parametrize("dtype", HALVES)
def test_half_prod_compiled_on_cpu_is_eagers_step_not_a_once_rounded_kernel(dtype):
    rng = np.random.default_rng(4)
    t, j = _both(rng.uniform(0.97, 1.03, (3, 200)), dtype)
    def fn(a):
        return (a * 1).prod(1)
    _bits_equal(fn(t), jt.compile(fn)(j))
    ops = {op for kernel in jt.compile(fn).lower(j).kernels for op in kernel.ops}
    assert "prod" not in ops  # the product is an eager step, not a kernel rounding once
    float_ops = {op for kernel in jt.compile(fn).lower(j.float()).kernels for op in kernel.ops}
    assert "prod" in float_ops  # (float32 still lowers)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("source", ["float32", "float64", "same"])
def test_mean_and_nanmean_into_a_half_type_round_as_torch(dtype, source):
    """mean into a half type (dtype= or out=) reads the input in float32, not rounded to the half type
    first; nanmean rounds its sum to the half type before dividing."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (40, 7))
    x[0, 1] = np.nan
    src = dtype if source == "same" else source
    tx, jx = torch.tensor(x).to(getattr(torch, src)), jt.tensor(x).to(getattr(jt, src))
    for name in ("mean", "nanmean"):
        _bits_equal(getattr(tx, name)(1, dtype=getattr(torch, dtype)), getattr(jx, name)(1, dtype=getattr(jt, dtype)))
        to, jo = torch.empty(40, dtype=getattr(torch, dtype)), jt.empty(40, dtype=getattr(jt, dtype))
        getattr(torch, name)(tx, 1, out=to)
        getattr(jt, name)(jx, 1, out=jo)
        _bits_equal(to, jo)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("include_self", [True, False])
def test_half_scatter_reduce_mean_divides_the_rounded_sum_by_the_rounded_count(dtype, include_self):
    rng = np.random.default_rng(6)
    x = rng.uniform(-10, 10, (1, 40)).astype(np.float32)
    idx = rng.integers(0, 4, (1, 40))
    tb, jb = _both(np.full((1, 4), 2.5), dtype)
    tx, jx = _both(x, dtype)
    _bits_equal(tb.scatter_reduce(1, torch.from_numpy(idx), tx, "mean", include_self=include_self),
                jb.scatter_reduce(1, jt.tensor(idx), jx, "mean", include_self=include_self))
    # a count the half type cannot hold: torch rounds 3001 to 3000
    n = 3000
    t = torch.zeros(1, dtype=getattr(torch, dtype)).scatter_reduce(0, torch.zeros(n, dtype=torch.long),
                                                                    torch.ones(n, dtype=getattr(torch, dtype)), "mean")
    j = jt.zeros(1, dtype=getattr(jt, dtype)).scatter_reduce(0, jt.zeros(n, dtype=jt.int64),
                                                              jt.ones(n, dtype=getattr(jt, dtype)), "mean")
    _bits_equal(t, j)
