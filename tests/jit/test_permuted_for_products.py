"""A value a pointwise kernel writes and a permute-and-reshape then hands to a product (a convolution's
gradient made ``[C, H * W * N]``) is written by that kernel in the permuted order
(`executor.permuted_for_products`): the reshape is a tensor header, not a copy kernel; values bit for bit."""

from __future__ import annotations

import numpy as np
import torch

import jitorch as jt
from jitorch.jit import executor
from jitorch.jit.executor import KernelStep


def _grad_product(g, y, w):
    """A transposed convolution's backward's shape of work (DCGAN's generator): a pointwise gradient in
    ``[N, C, H, W]``, permuted to ``[C, H, W, N]`` and reshaped to rows per channel for a product; the
    gradient's mask is also returned (a second output of the kernel, compact)."""
    mask = y > 0
    d = (g * mask).mul(0.5)
    rows = d.permute(1, 2, 3, 0).reshape(d.shape[1], -1)
    return rows @ w, mask


def _steps(fn, *args):
    ex = jt.compile(fn).lower(*args).executable
    return ex, [(step.kernel.source.kind, list(step.kernel.source.ops)) for step in ex.steps
                if isinstance(step, KernelStep)]


def test_a_permuted_reshape_before_a_product_is_written_in_its_order(monkeypatch):
    gen = jt.Generator().manual_seed(0)
    g, y = jt.randn(6, 4, 5, 3, generator=gen), jt.randn(6, 4, 5, 3, generator=gen)
    w = jt.randn(5 * 3 * 6, 7, generator=gen)
    ex, kernels = _steps(_grad_product, g, y, w)
    assert [ops for _, ops in kernels] == [["gt", "mul", "mul"]]  # no copy kernel before the product
    (d,) = [v for v in ex.layouts if v.node is not None and v.node.op.name == "mul" and v.type.shape == (6, 4, 5, 3)]
    assert ex.layouts[d] == (1, 90, 18, 6)  # [C, H, W, N] dense
    out, mask = ex.run([g, y, w])
    with monkeypatch.context() as m:
        m.setattr(executor, "permuted_for_products", lambda graph, groups, wanted: {})
        before, kernels_before = _steps(_grad_product, g, y, w)
    assert [ops for _, ops in kernels_before] == [["gt", "mul", "mul"], ["permute", "view"]]
    out0, mask0 = before.run([g, y, w])
    assert np.array_equal(out.numpy(), out0.numpy()) and np.array_equal(mask.numpy(), mask0.numpy())
    assert mask.is_contiguous()
    tg, ty, tw = (torch.from_numpy(t.numpy()) for t in (g, y, w))
    td = tg * (ty > 0) * 0.5
    np.testing.assert_allclose(out.numpy(), (td.permute(1, 2, 3, 0).reshape(4, -1) @ tw).numpy(), rtol=1e-5, atol=1e-5)


def test_a_returned_value_keeps_eager_layout():
    """A value the call returns keeps its compact layout (eager's): the permuted copy stays."""
    gen = jt.Generator().manual_seed(1)
    g, y, w = jt.randn(2, 3, 4, 4, generator=gen), jt.randn(2, 3, 4, 4, generator=gen), jt.randn(32, 5, generator=gen)

    def returned(g, y, w):
        d = g * (y > 0)
        return d.permute(1, 2, 3, 0).reshape(3, -1) @ w, d
    ex, kernels = _steps(returned, g, y, w)
    _, d = ex.run([g, y, w])
    assert d.is_contiguous() and ["permute", "view"] in [ops for _, ops in kernels]


def test_a_gradient_a_reduction_kernel_also_sums_keeps_its_copy():
    """Written in another order, the reduction kernel's loops (and its sum's rounding) would change: the value
    stays compact and the copy before the product stays."""
    gen = jt.Generator().manual_seed(2)
    g, y, w = jt.randn(6, 4, 5, 3, generator=gen), jt.randn(6, 4, 5, 3, generator=gen), jt.randn(90, 7, generator=gen)

    def summed(g, y, w):
        d = g * (y > 0)
        return d.permute(1, 2, 3, 0).reshape(4, -1) @ w, d.sum((0, 2, 3))
    ex, kernels = _steps(summed, g, y, w)
    assert kernels == [("reduction", ["gt", "mul", "sum"]), ("pointwise", ["permute", "view"])]
    assert not any(v.node is not None and v.node.op.name == "mul" for v in ex.layouts)
