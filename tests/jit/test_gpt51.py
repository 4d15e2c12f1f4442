"""A value that a kernel writes for a reader across a product is a leaf of later recomputed cones
(`recompute.WRITTEN_LEAVES`, issue 19). A transformer's residual stream is one: each block's sum reads the last one
across the block's products, so its cone ran back through every block and the recompute pass refused it, and with it
every cone that reads it: the layer norm's ``x - mean`` and ``xhat``, which the backward reads, were two more
whole-size outputs of the forward's kernel (a GPT-4x128 step's layer norm forward wrote 4 whole-size values where it
now writes 2, the residual sum and the normalised output). The backward computes them again from the sum and the
row statistics: the same ops on the same operands, so the same values; a row sum whose prologue now computes what it
read from memory may become a streamed run of the reduction kernel, which sums in another fixed order (the GPT
steps' float32 results kept their bits; these float64 rows of 32 did not, within rounding). Checked here against the
pass without the leaves, eager and torch, float32 and float64, forward and gradients (also under
``JITORCH_CPU=x86-64-v2``)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.ir.passes import recompute
from jitorch.jit import plan_cache
from jitorch.jit.executor import KernelStep
from tests.codegen.test_multired48 import data, tol

COLS = 32


@contextlib.contextmanager
def written_leaves(on):
    """The recompute pass with (``on``) or without written values as leaves; the plan cache unused."""
    saved = recompute.WRITTEN_LEAVES, plan_cache.MIN_NODES
    recompute.WRITTEN_LEAVES, plan_cache.MIN_NODES = on, float("inf")
    try:
        yield
    finally:
        recompute.WRITTEN_LEAVES, plan_cache.MIN_NODES = saved


def blocks_step(x, w1, w2, g1, b1, g2, b2, c):
    """Two pre-norm residual blocks (a product between each block's layer norm and its sum), then a backward."""
    h = x
    for w, g, b in ((w1, g1, b1), (w2, g2, b2)):
        h = h + (F.layer_norm(h, (COLS,), g, b) @ w).tanh()
    (h * c).sin().sum().backward()
    return h, x.grad, w1.grad, w2.grad, g1.grad, b1.grad, g2.grad, b2.grad


def compiled(fn, *args):
    """(per kernel that takes a row mean, a layer norm's forward, how many whole-size values it writes; the
    results of a call), from one compiled function."""
    whole = args[0].numel()
    f = jt.compile(fn)
    steps = f.lower(*args).executable.steps
    counts = [sum(int(np.prod(v.type.shape)) == whole for v in st.outputs)
              for st in steps if type(st) is KernelStep and "mean" in st.kernel.source.ops]
    for a in args:
        a.grad = None
    out = f(*args)
    return counts, [t.numpy().copy() for t in out]


def inputs(dtype):
    return data((16, COLS), (COLS, COLS), (COLS, COLS), (COLS,), (COLS,), (COLS,), (COLS,), (16, COLS), seed=5,
                dtype=dtype, grad=range(7))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_layer_norm_forward_writes_no_centred_or_normalised_values_for_the_backward(dtype):
    args = inputs(dtype)
    with written_leaves(True):
        now, got = compiled(blocks_step, *args)
    with written_leaves(False):
        before, apart = compiled(blocks_step, *args)
    # the second block's layer norm reads the first block's sum, which is written for the second sum anyway
    assert len(now) == len(before) == 2
    assert now[1] == 2 and before[1] >= 3, (now, before)
    assert sum(now) < sum(before)
    for a, b in zip(got, apart):  # (a row sum whose prologue no longer reads memory may be a streamed run)
        np.testing.assert_allclose(a, b, **tol(dtype))
    eager = blocks_step(*[t.detach().requires_grad_(t.requires_grad) for t in args])
    leaves = [torch.tensor(t.detach().numpy(), requires_grad=t.requires_grad) for t in args]
    th = leaves[0]
    for w, g, b in ((leaves[1], leaves[3], leaves[4]), (leaves[2], leaves[5], leaves[6])):
        th = th + (torch.nn.functional.layer_norm(th, (COLS,), g, b) @ w).tanh()
    (th * leaves[7]).sin().sum().backward()
    oracle = [th] + [t.grad for t in leaves[:7]]
    loose = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)
    for a, e, o in zip(got, eager, oracle):
        np.testing.assert_allclose(a, e.detach().numpy(), **tol(dtype))
        np.testing.assert_allclose(a, o.detach().numpy(), **loose)

