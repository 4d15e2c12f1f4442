"""Several reductions over one input in one kernel (issue 19): a layer norm's backward sums ``g * w`` and
``g * w * xhat`` over each row and ``g`` and ``g * xhat`` over each column; RMSNorm's forward and backward
average ``x * x`` and ``g * w * x`` over each row. Fusion puts reductions over one input space and the same
dims in one group (`fusion.same_reduction`); the kernel computes columns in one loop (an accumulator array each) and rows in one
loop each over the row, each reduction's loop the one it has alone: every result has the bits the separate
kernels gave (`fusion.SHARED_REDUCTIONS` off), which the tests check bit for bit, at one and two threads, here
and for the x86-64-v2 baseline (``JITORCH_CPU=x86-64-v2``, which `.ci/variants` runs this file under); then
against eager and torch, float32 and float64; on the emulated GPU; and the PTX through ptxas."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.backends.cuda import emulator
from jitorch.codegen.errors import CompileError
from jitorch.codegen.kernel import build_reduction
from jitorch.codegen.nvptx.target import NVPTX
from jitorch.ir.passes import fusion
from jitorch.ir.passes.fusion import Group
from jitorch.jit import plan_cache, trace
from jitorch.jit.executor import KernelStep
from tests.cuda.test_ptx import assert_assembles, cuda_kernels, emulated_outputs
from tests.ir.test_multired48 import layer_norm_backward


@contextlib.contextmanager
def shared(on):
    """Fusion with (``on``) or without reductions sharing a kernel; the plan cache unused (a plan stored for a
    graph fused with them would be adopted without)."""
    saved = fusion.SHARED_REDUCTIONS, plan_cache.MIN_NODES
    fusion.SHARED_REDUCTIONS, plan_cache.MIN_NODES = on, float("inf")
    try:
        yield
    finally:
        fusion.SHARED_REDUCTIONS, plan_cache.MIN_NODES = saved


def kernel_ops(fn, *args):
    """Each kernel step's ops, in order."""
    return [st.kernel.source.ops for st in jt.compile(fn).lower(*args).executable.steps if type(st) is KernelStep]


def run(fn, *args):
    for a in args:
        a.grad = None
    out = jt.compile(fn)(*args)
    return [t.numpy().copy() for t in (out if isinstance(out, tuple) else (out,))]


def bits_as_alone(fn, *args):
    """``fn`` compiled with shared reductions and without give the same bits; returns the results with."""
    now = run(fn, *args)
    with shared(False):
        alone = run(fn, *args)
    assert len(now) == len(alone)
    for a, b in zip(now, alone):
        np.testing.assert_array_equal(a, b)
    return now


def data(*shapes, seed=0, dtype=np.float32, grad=()):
    rng = np.random.default_rng(seed)
    out = [jt.tensor(rng.standard_normal(s).astype(dtype)) for s in shapes]
    for i in grad:
        out[i].requires_grad_()
    return out


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def column_pair(g, xhat):
    return (g * xhat).sum(0), g.sum(0)


def row_pair(g, y):
    return g.sum(-1), (g * y).sum(-1)


def extremes_and_means(x):
    """Reductions of four kinds over each row: streamed sums, a vectorised max and min with their NaN check."""
    return x.sum(-1), x.amax(-1), (x * x).mean(-1), x.amin(-1)


def layer_norm_step(x, w, b):
    y = jt.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    (y * y.sin()).sum().backward()
    return x.grad, w.grad, b.grad


def rms_norm_backward(g, x, w):
    """An RMSNorm's forward mean of squares and its backward's input and weight gradients, written out: two row
    means over the same rows, then a column sum reading the first's result."""
    r = (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt()
    gw = g * w
    return gw * r - x * (r * r * r) * (gw * x).mean(-1, keepdim=True), (g * x * r).sum(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape", [(64, 48), (96, 3000)], ids=["short-rows", "streamed-rows"])
def test_a_layer_norm_backwards_row_sums_and_column_sums_take_a_kernel_each(dtype, shape):
    g, x, w = data(shape, shape, shape[-1:], dtype=dtype)
    ops = kernel_ops(layer_norm_backward, g, x, w)
    # the mean, the variance and the row pair (each reading the one before: `fusion.DEPENDENT_ROW_REDUCTIONS`)
    # with dx in its row pass, the column pair (xhat computed again there)
    assert [k.count("sum") + k.count("mean") for k in ops] == [4, 2]
    with shared(False):
        assert len(kernel_ops(layer_norm_backward, g, x, w)) == 6
    dx, dw, db = bits_as_alone(layer_norm_backward, g, x, w)
    want = layer_norm_backward(g, x, w)
    for got, eager in zip((dx, dw, db), want):
        np.testing.assert_allclose(got, eager.numpy(), **tol(dtype))
    tx = torch.from_numpy(x.numpy()).requires_grad_()
    tw = torch.from_numpy(w.numpy()).requires_grad_()
    tb = torch.zeros(shape[-1], dtype=tw.dtype, requires_grad=True)
    torch.nn.functional.layer_norm(tx, shape[-1:], tw, tb, eps=1e-5).backward(torch.from_numpy(g.numpy()))
    for got, oracle in zip((dx, dw, db), (tx.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(got, oracle.numpy(), rtol=1e-4 if dtype == np.float32 else 1e-11,
                                   atol=1e-4 if dtype == np.float32 else 1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_a_compiled_layer_norm_step_has_its_two_pairs_of_sums_in_two_kernels(dtype):
    x, w, b = data((96, 768), (768,), (768,), seed=1, dtype=dtype, grad=(0, 1, 2))
    ops = kernel_ops(layer_norm_step, x, w, b)
    with shared(False):
        before = kernel_ops(layer_norm_step, x, w, b)
    # (and the forward's mean and variance, one kernel: `fusion.DEPENDENT_ROW_REDUCTIONS`)
    assert len(ops) == len(before) - 3
    assert [k.count("sum") for k in ops if k.count("sum") == 2] == [2, 2]  # the column pair, the row pair
    got = bits_as_alone(layer_norm_step, x, w, b)
    want = layer_norm_step(*(t.detach().requires_grad_() for t in (x, w, b)))
    tx, tw, tb = (torch.from_numpy(t.detach().numpy()).requires_grad_() for t in (x, w, b))
    y = torch.nn.functional.layer_norm(tx, (768,), tw, tb)
    (y * y.sin()).sum().backward()
    for a, eager, oracle in zip(got, want, (tx.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(a, eager.numpy(), **tol(dtype))
        np.testing.assert_allclose(a, oracle.numpy(), rtol=1e-4 if dtype == np.float32 else 1e-11,
                                   atol=1e-4 if dtype == np.float32 else 1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_an_rms_norms_two_row_means_share_a_kernel(dtype):
    g, x, w = data((50, 2000), (50, 2000), (2000,), seed=2, dtype=dtype)
    ops = kernel_ops(rms_norm_backward, g, x, w)
    with shared(False):
        before = kernel_ops(rms_norm_backward, g, x, w)
    assert (len(ops), len(before)) == (2, 3)
    assert ops[0].count("mean") == 2 and ops[1].count("sum") == 1
    got = bits_as_alone(rms_norm_backward, g, x, w)
    tx, tw = (torch.from_numpy(a.numpy()).requires_grad_() for a in (x, w))
    r = (tx * tx).mean(-1, keepdim=True).add(1e-6).rsqrt()
    (tx * r * tw * torch.from_numpy(g.numpy())).sum().backward()
    for a, eager, oracle in zip(got, rms_norm_backward(g, x, w), (tx.grad, tw.grad)):
        np.testing.assert_allclose(a, eager.numpy(), **tol(dtype))
        np.testing.assert_allclose(a, oracle.numpy(), rtol=1e-4 if dtype == np.float32 else 1e-11,
                                   atol=1e-4 if dtype == np.float32 else 1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_two_column_sums_share_one_vectorised_loop_with_their_bits(dtype):
    g, xhat = data((300, 64), (300, 64), seed=3, dtype=dtype)
    (kernel,) = jt.compile(column_pair).lower(g, xhat).kernels
    assert kernel.ops == ["mul", "sum", "sum"]
    lanes = "float" if dtype == np.float32 else "double"
    assert re.search(rf"fadd[^\n]*<(2|4|8|16) x {lanes}>", kernel.llvm_ir)  # (across kept elements)
    got = bits_as_alone(column_pair, g, xhat)
    for a, want in zip(got, ((g.numpy() * xhat.numpy()).sum(0), g.numpy().sum(0))):
        np.testing.assert_allclose(a, want, **tol(dtype))


@pytest.mark.parametrize("cols", [100, 2000], ids=["short-rows", "streamed-rows"])
def test_sums_means_maxima_and_minima_of_one_row_share_a_kernel_with_their_bits(cols):
    (x,) = data((30, cols), seed=4)
    values = x.numpy()
    values[3, 7] = np.nan
    values[5, :] = -np.inf
    values[6, 11] = np.inf
    x = jt.tensor(values)
    (ops,) = kernel_ops(extremes_and_means, x)
    assert sorted(ops) == ["amax", "amin", "mean", "mul", "sum"]
    got = bits_as_alone(extremes_and_means, x)
    tx = torch.from_numpy(values)
    for a, want in zip(got, (tx.sum(-1), tx.amax(-1), (tx * tx).mean(-1), tx.amin(-1))):
        np.testing.assert_allclose(a, want.numpy(), rtol=1e-5, atol=1e-3)


def test_a_row_epilogue_reads_both_row_results():
    """``g * w - a - xhat * b``: the row pass reads the results of both sums of its row."""
    g, y = data((40, 500), (40, 500), seed=5)

    def fn(g, y):
        a, b = g.sum(-1, keepdim=True), (g * y).sum(-1, keepdim=True)
        return g - a * 0.5 - y * b
    (ops,) = kernel_ops(fn, g, y)
    assert ops.count("sum") == 2
    with shared(False):
        assert len(kernel_ops(fn, g, y)) == 2
    (got,) = bits_as_alone(fn, g, y)
    np.testing.assert_allclose(got, fn(g, y).numpy(), rtol=1e-5, atol=1e-4)


def test_two_threads_give_one_threads_bits(monkeypatch):
    g, x, w = data((300, 768), (300, 768), (768,), seed=6)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
        results.append(run(layer_norm_backward, g, x, w) + run(extremes_and_means, x))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


CASES = [(column_pair, ((300, 64), (300, 64))), (row_pair, ((40, 300), (40, 300))),
         (layer_norm_backward, ((64, 48), (64, 48), (48,))), (extremes_and_means, ((30, 100),)),
         (rms_norm_backward, ((20, 200), (20, 200), (200,)))]


@pytest.mark.cpu_independent
@pytest.mark.parametrize("fn, sizes", CASES, ids=[c[0].__name__ for c in CASES])
def test_the_nvptx_kernels_take_shared_reductions_and_assemble(fn, sizes):
    kernels = cuda_kernels(fn, *data(*sizes))
    with shared(False):
        alone = cuda_kernels(fn, *data(*sizes))
    assert len(kernels) < len(alone)
    assert_assembles(kernels)


@pytest.mark.skipif(not emulator.available(), reason="the kernel emulator needs Linux on x86-64 or AArch64")
@pytest.mark.parametrize("fn, sizes", CASES, ids=[c[0].__name__ for c in CASES])
def test_the_emulated_gpu_agrees_with_the_cpu(fn, sizes):
    args = data(*sizes, seed=7)
    cpu = run(fn, *args)
    gpu, _ = emulated_outputs(fn, args)
    for a, b in zip(gpu, cpu):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_a_row_pass_written_into_the_input_both_sums_read():
    """``x.sub_(...)`` of both row sums: the row pass's result goes back into ``x`` after both loops read it."""
    def fn(x):
        x.sub_(x.sum(-1, keepdim=True) * 0.1 + (x * x).sum(-1, keepdim=True) * 0.01)
        return x
    (a,) = data((30, 1500), seed=8)
    (ops,) = kernel_ops(fn, a.clone())
    assert ops.count("sum") == 2
    got = jt.compile(fn)(a.clone()).numpy()
    np.testing.assert_allclose(got, fn(a.clone()).numpy(), rtol=1e-5, atol=1e-4)
    with shared(False):
        np.testing.assert_array_equal(got, jt.compile(fn)(a.clone()).numpy())


@pytest.mark.parametrize("fn", [lambda x: (x.sum(-1), x.sum(0)),
                                lambda x: (x.sum(-1, keepdim=True), (x - x.sum(-1, keepdim=True)).sum(-1))],
                         ids=["other-dims", "dependent"])
def test_the_builder_refuses_reductions_that_cannot_share_a_loop(fn):
    """A group fusion would not make (a stale plan's, say) is refused with a CompileError, for the CPU and the GPU,
    before any code is emitted."""
    graph = trace(fn, jt.randn(6, 5))
    nodes = list(graph.nodes)
    inputs = list(graph.inputs)
    group = Group("reduction", nodes, inputs, list(graph.output_values()), (6, 5))
    for target in (None, NVPTX):
        with pytest.raises(CompileError, match="cannot share a loop|depend on each other"):
            build_reduction(group, "k", target)
