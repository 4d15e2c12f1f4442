"""Reduction kernels with more than one kind of output (issue 19): a pointwise sibling over the reduction's
input written inside its loop, and a row epilogue computed in a second pass over each row. Each is checked
against the kernels fusion made before (`fusion.REDUCTION_SIBLINGS` off, `fusion.ROW_EPILOGUE_MAX` 0: the same
summation order, so the same bits), against eager and torch, at one and two threads, on the emulated GPU, and
its PTX through ptxas."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.backends.cuda import emulator
from jitorch.ir.passes import fusion
from jitorch.jit.executor import KernelStep
from tests.cuda.test_ptx import assert_assembles, cuda_kernels, emulated_outputs
from tests.support import load_script


@contextlib.contextmanager
def fused_as_before():
    """Fusion without siblings in reduction groups and without row epilogues."""
    saved = fusion.REDUCTION_SIBLINGS, fusion.ROW_EPILOGUE_MAX
    fusion.REDUCTION_SIBLINGS, fusion.ROW_EPILOGUE_MAX = False, 0
    try:
        yield
    finally:
        fusion.REDUCTION_SIBLINGS, fusion.ROW_EPILOGUE_MAX = saved


def kernel_steps(fn, *args):
    return [st for st in jt.compile(fn).lower(*args).executable.steps if type(st) is KernelStep]


def run(fn, *args):
    out = jt.compile(fn)(*args)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def bits_as_before(fn, *args):
    """``fn`` compiled now and as before give the same bits; returns now's results."""
    now = run(fn, *args)
    with fused_as_before():
        before = run(fn, *args)
    for a, b in zip(now, before):
        np.testing.assert_array_equal(a, b)
    return now


def shapes(steps):
    """Each step's output shapes, sorted."""
    return [sorted(tuple(v.type.shape) for v in st.outputs) for st in steps]


def bias_and_sibling(x, w):
    """A column sum (a bias gradient's form: the input's inner dim kept) of a product, and a value over the same
    elements that the sum does not read."""
    d = x * w
    return d.sum(0), d, (x + 1) * 3


def rows_and_sibling(x, w):
    d = x * w
    return d.sum(-1), (x - 1) * w


def log_softmax_backward(g, out):
    return g - out.exp() * g.sum(-1, keepdim=True)


def softmax_backward(g, y):
    s = (g * y).sum(-1, keepdim=True) * 0.5
    return y * (g - s), s


def data(*shapes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [jt.tensor(rng.standard_normal(s).astype(dtype)) for s in shapes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_column_sum_writes_its_sibling_in_one_kernel_with_the_same_bits(dtype):
    x, w = data((300, 64), (64,), dtype=dtype)
    (step,) = kernel_steps(bias_and_sibling, x, w)
    assert step.kernel.source.kind == "reduction" and shapes([step]) == [[(64,), (300, 64), (300, 64)]]
    with fused_as_before():
        assert sorted(st.kernel.source.kind for st in kernel_steps(bias_and_sibling, x, w)) == ["pointwise",
                                                                                              "reduction"]
    total, d, other = bits_as_before(bias_and_sibling, x, w)
    want = bias_and_sibling(x, w)
    np.testing.assert_array_equal(d, want[1].numpy())
    np.testing.assert_array_equal(other, want[2].numpy())
    xt, wt = torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy())
    np.testing.assert_allclose(total, (xt * wt).sum(0).numpy(), rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)


def test_the_column_sum_with_a_sibling_is_vectorised_along_the_rows():
    x, w = data((300, 64), (64,))
    (kernel,) = jt.compile(bias_and_sibling).lower(x, w).kernels
    assert re.search(r"<(4|8|16) x float>", kernel.llvm_ir)
    # the sum's accumulators as vectors: a vector add of the products, not one lane at a time
    assert re.search(r"fadd[^\n]*<(4|8|16) x float>", kernel.llvm_ir)


def test_a_row_sum_writes_its_sibling_in_one_kernel_with_the_same_bits():
    x, w = data((40, 3000), (3000,), seed=1)
    (step,) = kernel_steps(rows_and_sibling, x, w)
    assert shapes([step]) == [[(40,), (40, 3000)]]
    total, other = bits_as_before(rows_and_sibling, x, w)
    np.testing.assert_array_equal(other, rows_and_sibling(x, w)[1].numpy())
    np.testing.assert_allclose(total, (x * w).numpy().astype(np.float64).sum(-1), rtol=1e-5, atol=1e-3)


def test_a_row_epilogue_reads_the_row_again_in_the_same_kernel_with_the_same_bits():
    g, z = data((70, 1000), (70, 1000), seed=2)
    out = z.log_softmax(-1)
    (step,) = kernel_steps(log_softmax_backward, g, out)
    assert step.kernel.source.kind == "reduction" and shapes([step]) == [[(70, 1000)]]
    assert step.kernel.source.ops == ["exp", "sum", "mul", "sub"]
    with fused_as_before():
        assert [st.kernel.source.kind for st in kernel_steps(log_softmax_backward, g, out)] == ["reduction",
                                                                                               "pointwise"]
    (got,) = bits_as_before(log_softmax_backward, g, out)
    zt = torch.from_numpy(z.numpy()).requires_grad_()
    (want,) = torch.autograd.grad(zt.log_softmax(-1), zt, torch.from_numpy(g.numpy()))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, log_softmax_backward(g, out).numpy(), rtol=1e-5, atol=1e-4)


def test_a_row_epilogue_after_an_epilogue_over_the_output():
    g, y = data((8, 3, 50), (8, 3, 50), seed=3)
    (step,) = kernel_steps(softmax_backward, g, y)
    assert shapes([step]) == [[(8, 3, 1), (8, 3, 50)]]
    grad, s = bits_as_before(softmax_backward, g, y)
    want_grad, want_s = softmax_backward(g, y)
    np.testing.assert_allclose(s, want_s.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, want_grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", ["log_softmax", "softmax"])
def test_softmax_backward_steps_take_one_kernel_less(fn):
    """A compiled training step's softmax and log_softmax backward: the row sum and the gradient in one kernel,
    with the two kernels' bits, equal to eager."""
    def step(z, t):
        (getattr(z, fn)(-1) * t).sum().backward()
        return z.grad
    z, t = data((70, 1000), (70, 1000), seed=4)
    z.requires_grad_()
    kinds = [st.kernel.source.kind for st in kernel_steps(step, z, t)]
    assert kinds == ["softmax", "reduction"]
    with fused_as_before():
        assert [st.kernel.source.kind for st in kernel_steps(step, z, t)] == ["softmax", "reduction", "pointwise"]
    got = jt.compile(step)(z, t).numpy().copy()
    z.grad = None
    with fused_as_before():
        np.testing.assert_array_equal(got, jt.compile(step)(z, t).numpy())  # (the row sum's order is unchanged)
    z.grad = None
    np.testing.assert_allclose(got, step(z, t).numpy(), rtol=1e-5, atol=1e-6)


def test_two_threads_give_one_threads_bits(monkeypatch):
    g, z = data((300, 1000), (300, 1000), seed=5)
    x, w = data((300, 64), (64,), seed=6)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
        results.append(run(log_softmax_backward, g, z) + run(bias_and_sibling, x, w))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


CASES = [(bias_and_sibling, ((300, 64), (64,))), (rows_and_sibling, ((40, 300), (300,))),
         (log_softmax_backward, ((7, 1000), (7, 1000))), (softmax_backward, ((8, 3, 50), (8, 3, 50)))]


@pytest.mark.parametrize("fn, sizes", CASES, ids=[c[0].__name__ for c in CASES])
def test_the_nvptx_kernels_take_the_new_forms_and_assemble(fn, sizes):
    kernels = cuda_kernels(fn, *data(*sizes))
    assert len(kernels) == 1
    assert_assembles(kernels)


@pytest.mark.skipif(not emulator.available(), reason="the kernel emulator needs Linux on x86-64 or AArch64")
@pytest.mark.parametrize("fn, sizes", CASES, ids=[c[0].__name__ for c in CASES])
def test_the_emulated_gpu_agrees_with_the_cpu(fn, sizes):
    args = data(*sizes, seed=7)
    cpu = run(fn, *args)
    gpu, launched = emulated_outputs(fn, args)
    assert launched == 1
    for a, b in zip(gpu, cpu):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_a_layer_norms_normalising_pass_is_its_variances_row_epilogue(monkeypatch):
    """The variance's kernel writes ``x - mean`` (its prologue's value) and, in the row pass, the result: the
    separate normalising kernel is gone, the bits are the two kernels'. (Without the mean in that kernel too,
    session 50's `fusion.DEPENDENT_ROW_REDUCTIONS`: tests/codegen/test_gptln50.py.)"""
    monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)

    def fn(x, w, b):
        return jt.nn.functional.layer_norm(x, (128,), w, b)
    x, w, b = data((12, 64, 128), (128,), (128,), seed=8)
    now = kernel_steps(fn, x, w, b)
    with fused_as_before():
        before = kernel_steps(fn, x, w, b)
    assert len(now) == len(before) - 1 and [st.kernel.source.kind for st in now].count("pointwise") == 0
    (got,) = bits_as_before(fn, x, w, b)
    want = torch.nn.functional.layer_norm(*(torch.from_numpy(t.numpy()) for t in (x,)), (128,),
                                          torch.from_numpy(w.numpy()), torch.from_numpy(b.numpy()))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def test_a_row_epilogue_written_into_its_input_reads_the_row_before_the_write():
    """``x.sub_(x.sum(-1, keepdim=True))``: the row pass's result goes back into ``x``, which the sum reads."""
    def fn(x):
        x.sub_(x.sum(-1, keepdim=True) * 0.1)
        return x
    (a,) = data((30, 500), seed=9)
    got = jt.compile(fn)(a.clone()).numpy()
    np.testing.assert_allclose(got, fn(a.clone()).numpy(), rtol=1e-5, atol=1e-5)


def test_the_benchmark_counts_fewer_kernels_and_bytes_in_a_gpt_step():
    """benchmarks/multiout.py at --quick sizes: gpt-1x32's step, built with and without the two forms in one
    process (the plan cache out of the way), has its layer norms' normalising kernels folded into their
    variances' kernels."""
    bench = load_script(Path(__file__).parents[2] / "benchmarks" / "multiout.py", "multiout_benchmark")
    calls = bench.built("gpt-1x32", 1, quick=True)
    (with_kinds, with_bytes), (without_kinds, without_bytes) = (bench.kernel_counts(calls[k])
                                                                for k in ("with", "without"))
    # (one per layer norm, the block's two and the last: its mean and variance share a kernel too, which needs a
    # row epilogue's limit: session 50's `fusion.DEPENDENT_ROW_REDUCTIONS`)
    assert without_kinds["reduction"] - with_kinds["reduction"] == 3
    assert without_kinds["pointwise"] - with_kinds["pointwise"] == 3
    assert with_bytes < without_bytes
    assert fusion.REDUCTION_SIBLINGS and fusion.ROW_EPILOGUE_MAX  # (put back)
