"""Row reductions of which one reads another's result in one kernel (issue 19): a layer norm's forward, its
residual add, mean, variance (the sum of ``(x - mean)**2``) and normalising pass, was two kernels (the add and the
mean, then the variance and the row pass), now one, whose variance loop reads the mean from a register
(`fusion.DEPENDENT_ROW_REDUCTIONS`, `kernel.build_reduction`). Each reduction keeps the loop it had in its own
kernel where it writes the same values there (a value the separate kernels passed through memory and the one
kernel does not write lets the loop that wrote it become a streamed run, which sums in another order:
tests/jit/test_cmodel45.py), so these results have the bits of the separate kernels, which the tests check bit
for bit (here and for the x86-64-v2 baseline: ``JITORCH_CPU=x86-64-v2``, which `.ci/variants` runs this file
under); then against eager and torch, float32 and float64, forward and gradients; on the emulated GPU; and the
PTX through ptxas."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.backends.cuda import emulator
from jitorch.ir.passes import fusion
from jitorch.jit import plan_cache
from tests.codegen.test_multired48 import data, kernel_ops, run, tol
from tests.cuda.test_ptx import assert_assembles, cuda_kernels, emulated_outputs


@contextlib.contextmanager
def dependent(on):
    """Fusion with (``on``) or without groups of dependent row reductions; the plan cache unused (a plan stored
    for a graph fused with them would be adopted without)."""
    saved = fusion.DEPENDENT_ROW_REDUCTIONS, plan_cache.MIN_NODES
    fusion.DEPENDENT_ROW_REDUCTIONS, plan_cache.MIN_NODES = on, float("inf")
    try:
        yield
    finally:
        fusion.DEPENDENT_ROW_REDUCTIONS, plan_cache.MIN_NODES = saved


def bits_as_apart(fn, *args):
    """``fn`` compiled with groups of dependent row reductions and without give the same bits; returns the
    results with."""
    now = run(fn, *args)
    with dependent(False):
        apart = run(fn, *args)
    assert len(now) == len(apart)
    for a, b in zip(now, apart):
        np.testing.assert_array_equal(a, b)
    return now


def residual_layer_norm(x, r, w, b):
    """GPT's block: the residual stream ``x + r`` (written: the next block adds to it) and its layer norm."""
    h = x + r
    return h, F.layer_norm(h, (h.shape[-1],), w, b)


def three_moments(x):
    """Three row reductions each reading the one before: mean, variance, then the third standardised moment."""
    d = x - x.mean(-1, keepdim=True)
    var = (d * d).mean(-1, keepdim=True)
    z = d * (var + 1e-6).rsqrt()
    return var, (z * z * z).mean(-1, keepdim=True), z


def log_sum_exp(x):
    """A row max, then the sum of ``exp(x - max)`` reading it (a vectorised max, then a streamed sum)."""
    m = x.amax(-1, keepdim=True)
    return m + (x - m).exp().sum(-1, keepdim=True).log()


def column_moments(x):
    """A mean and variance over the columns (dim 0): not row reductions, so two kernels still."""
    d = x - x.mean(0, keepdim=True)
    return (d * d).mean(0, keepdim=True)


def torch_of(*tensors):
    return [torch.from_numpy(t.detach().numpy().copy()) for t in tensors]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cols", [128, 384, 3000], ids=["128", "384", "streamed-3000"])
def test_a_layer_norm_with_its_residual_add_is_one_kernel_with_the_two_kernels_bits(dtype, cols):
    x, r, w, b = data((40, cols), (40, cols), (cols,), (cols,), dtype=dtype)
    (ops,) = kernel_ops(residual_layer_norm, x, r, w, b)
    assert ops.count("mean") == 1 and ops.count("sum") == 1 and "rsqrt" in ops and ops[0] == "add"
    with dependent(False):
        apart = kernel_ops(residual_layer_norm, x, r, w, b)
    assert [k.count("mean") + k.count("sum") for k in apart] == [1, 1]
    h, y = bits_as_apart(residual_layer_norm, x, r, w, b)
    eh, ey = residual_layer_norm(x, r, w, b)
    np.testing.assert_array_equal(h, eh.numpy())
    np.testing.assert_allclose(y, ey.numpy(), **tol(dtype))
    tx, tr, tw, tb = torch_of(x, r, w, b)
    np.testing.assert_allclose(y, torch.nn.functional.layer_norm(tx + tr, (cols,), tw, tb).numpy(), **tol(dtype))


def layer_norm_step(x, r, w, b, c):
    h, y = residual_layer_norm(x, r, w, b)
    (y * c).sin().sum().backward()
    return h, y, x.grad, r.grad, w.grad, b.grad


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_a_compiled_residual_layer_norm_steps_gradients_match_eager_and_torch(dtype):
    x, r, w, b, c = data((64, 128), (64, 128), (128,), (128,), (64, 128), seed=1, dtype=dtype, grad=(0, 1, 2, 3))
    ops = kernel_ops(layer_norm_step, x, r, w, b, c)
    with dependent(False):
        apart = kernel_ops(layer_norm_step, x, r, w, b, c)
    assert len(ops) < len(apart)
    assert any(k.count("mean") == 1 and k.count("sum") == 1 and "add" in k for k in ops)  # the forward's kernel
    got = bits_as_apart(layer_norm_step, x, r, w, b, c)
    leaves = [t.detach().requires_grad_() for t in (x, r, w, b)]
    want = layer_norm_step(*leaves, c)
    tx, tr, tw, tb, tc = torch_of(x, r, w, b, c)
    for t in (tx, tr, tw, tb):
        t.requires_grad_()
    th = tx + tr
    ty = torch.nn.functional.layer_norm(th, (128,), tw, tb)
    (ty * tc).sin().sum().backward()
    loose = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)
    for a, eager, oracle in zip(got, want, (th, ty, tx.grad, tr.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(a, eager.detach().numpy(), **tol(dtype))
        np.testing.assert_allclose(a, oracle.detach().numpy(), **loose)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_three_row_reductions_each_reading_the_last_take_one_kernel(dtype):
    (x,) = data((30, 500), seed=2, dtype=dtype)
    (ops,) = kernel_ops(three_moments, x)
    assert ops.count("mean") == 3
    with dependent(False):
        assert len(kernel_ops(three_moments, x)) == 3
    var, skew, z = bits_as_apart(three_moments, x)
    tx = torch.from_numpy(x.numpy()).double()
    d = tx - tx.mean(-1, keepdim=True)
    tv = (d * d).mean(-1, keepdim=True)
    tz = d * (tv + 1e-6).rsqrt()
    for a, want in zip((var, skew, z), (tv, (tz ** 3).mean(-1, keepdim=True), tz)):
        np.testing.assert_allclose(a, want.numpy(), rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-5)


@pytest.mark.parametrize("cols", [100, 3000], ids=["short-rows", "streamed-rows"])
def test_a_log_sum_exp_reads_its_row_max_in_one_kernel(cols):
    (x,) = data((30, cols), seed=3)
    values = x.numpy() * 30
    values[4, :] = -np.inf
    values[5, 9] = np.nan
    values[6, 2] = np.inf
    x = jt.tensor(values)
    (ops,) = kernel_ops(log_sum_exp, x)
    assert ops.count("amax") == 1 and ops.count("sum") == 1
    (got,) = bits_as_apart(log_sum_exp, x)
    np.testing.assert_array_equal(got, log_sum_exp(x).numpy())
    tx = torch.from_numpy(values)  # (torch.logsumexp gives -inf for a row of -inf; the composition NaN)
    tm = tx.amax(-1, keepdim=True)
    np.testing.assert_allclose(got, (tm + (tx - tm).exp().sum(-1, keepdim=True).log()).numpy(), rtol=1e-5, atol=1e-5)


def test_dependent_column_reductions_stay_two_kernels():
    """A reduction over dim 0 keeps the input's innermost dim: its kernel reduces columns side by side in one
    loop, where one cannot read another's result."""
    (x,) = data((300, 64), seed=4)
    assert len(kernel_ops(column_moments, x)) == 2
    (got,) = run(column_moments, x)
    np.testing.assert_allclose(got, np.var(x.numpy().astype(np.float64), 0, keepdims=True), rtol=1e-5)


def test_rows_past_the_row_epilogue_limit_keep_a_kernel_per_reduction(monkeypatch):
    """A row that need not stay in cache between passes: no row pass, and no reduction reading another's."""
    monkeypatch.setattr(fusion, "ROW_EPILOGUE_MAX", 64)
    x, r, w, b = data((20, 128), (20, 128), (128,), (128,), seed=5)
    with dependent(True):
        ops = kernel_ops(residual_layer_norm, x, r, w, b)
    assert [k.count("mean") + k.count("sum") for k in ops] == [1, 1, 0]
    h, y = run(residual_layer_norm, x, r, w, b)
    np.testing.assert_allclose(y, residual_layer_norm(x, r, w, b)[1].numpy(), rtol=2e-5, atol=2e-5)


def test_two_threads_give_one_threads_bits(monkeypatch):
    x, r, w, b = data((300, 384), (300, 384), (384,), (384,), seed=6)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
        results.append(run(residual_layer_norm, x, r, w, b) + run(three_moments, x))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


CASES = [(residual_layer_norm, ((20, 200), (20, 200), (200,), (200,))), (three_moments, ((20, 300),)),
         (log_sum_exp, ((20, 300),))]


@pytest.mark.cpu_independent
@pytest.mark.parametrize("fn, sizes", CASES, ids=[c[0].__name__ for c in CASES])
def test_the_nvptx_kernels_take_dependent_row_reductions_and_assemble(fn, sizes):
    kernels = cuda_kernels(fn, *data(*sizes))
    with dependent(False):
        apart = cuda_kernels(fn, *data(*sizes))
    assert len(kernels) < len(apart)
    assert_assembles(kernels)


@pytest.mark.skipif(not emulator.available(), reason="the kernel emulator needs Linux on x86-64 or AArch64")
@pytest.mark.parametrize("fn, sizes", CASES, ids=[c[0].__name__ for c in CASES])
def test_the_emulated_gpu_agrees_with_the_cpu(fn, sizes):
    args = data(*sizes, seed=7)
    cpu = run(fn, *args)
    gpu, _ = emulated_outputs(fn, args)
    for a, b in zip(gpu, cpu):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_a_row_reduction_of_another_ones_result_over_rows_of_one_element():
    """Over rows of one element a reduction's output has its input's shape, so one may reduce another's result
    directly (``y.sum(-1, keepdim=True)``, no op between): the later loop reads the earlier result too."""
    def fn(x):
        y = x.sum(-1, keepdim=True)
        return (y * 2).sum(-1, keepdim=True), y.sum(-1, keepdim=True) + 1
    (x,) = data((7, 1), seed=8)
    (ops,) = kernel_ops(fn, x)
    assert ops.count("sum") == 3
    for a, want in zip(bits_as_apart(fn, x), fn(x)):
        np.testing.assert_array_equal(a, want.numpy())
