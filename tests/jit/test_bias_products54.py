"""Session 54: a linear layer's bias folded into its matrix product in a compiled call
(`executor.fold_biases_into_products`): the bias written into the result first and the product added with beta 1
(`gemm_words.biased_product`, `runtime.blas_calls.adding_words`), where the bias add was a kernel of its own."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit import gemm_words
from jitorch.jit.executor import EagerStep, KernelStep
from jitorch.runtime import blas_calls, threads


def executable(fn, *args):
    return jt.compile(fn).lower(*args).executable


def biased(ex):
    """The compiled call's products whose bias was folded in, as (step, node)."""
    return [(s, n) for s in ex.steps if isinstance(s, EagerStep) for n in s.biases]


def add_kernels(ex):
    return [s for s in ex.steps if isinstance(s, KernelStep) and [n.op.name for n in s.nodes] == ["add"]]


def linear_then_product(x, w, b, z):
    # (the add feeds a product: it fuses with nothing, a kernel of its own where not folded)
    return (x @ w.t() + b) @ z


def operands(dtype, k, seed=0):
    g = jt.Generator().manual_seed(seed)
    return [jt.randn(*shape, generator=g, dtype=dtype) for shape in ((3, 40, k), (48, k), (48,), (48, 24))]


def to_torch(*ts):
    return [torch.from_numpy(t.numpy().copy()) for t in ts]


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_linear_bias_is_folded_into_its_product(dtype):
    """The add kernel is gone; the product's step writes the sum into its arena buffer with its gemm call made with
    beta 1; the values are eager's bits (the inner dim at `blas_calls.ADDS_EXACT_MAX_K`, where BLAS sums it in one block) and
    torch's to float tolerance, call after call."""
    k = blas_calls.ADDS_EXACT_MAX_K[np.dtype(dtype.np)]
    args = operands(dtype, k)
    ex = executable(linear_then_product, *args)
    ((step, node),) = biased(ex)
    assert not add_kernels(ex)
    bias, out = step.biases[node]
    assert bias is not None and out in step.into_arena and node.outputs[0] not in ex.plan.slots
    assert [n.op.name for s in ex.steps if isinstance(s, EagerStep) for n in s.nodes].count("matmul") == 2
    compiled = jt.compile(linear_then_product)
    eager = linear_then_product(*args).numpy()
    gemm_words._WORDS.clear()
    for _ in range(2):  # (the second call reuses the arena and the kept words)
        np.testing.assert_array_equal(compiled(*args).numpy(), eager)
    # (one gemm call with beta 1: the key's last two are whether the words add, then the parts)
    assert [len(words) for key, words in gemm_words._WORDS.items() if key[-2]] == [1]
    expected = linear_then_product(*to_torch(*args)).numpy()
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == jt.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(eager, expected, **tol)


def test_adding_words_make_beta_one_calls():
    """`blas_calls.adding_words` sets the call's beta-one flag: ``out += a @ b`` onto what ``out`` holds, the
    plain words still overwriting it."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((30, 20), np.float32), rng.standard_normal((12, 20), np.float32).T
    out = np.full((30, 12), 2.5, np.float32)
    words = [blas_calls.call_words(a, b, out)]
    (added,) = blas_calls.adding_words(words, np.dtype(np.float32))
    assert added[1] == words[0][1] | threads.GEMM_ADDS and not words[0][1] & threads.GEMM_ADDS
    blas_calls.run_words([added])
    np.testing.assert_array_equal(out, (a @ b) + np.float32(2.5))
    blas_calls.run_words(words)
    np.testing.assert_array_equal(out, a @ b)
    # another library's call (MKL's: not OpenBLAS's function, whose blocking the bound describes) is not made to add
    other = (type(words[0]))(*words[0])
    other[0] += 16
    assert blas_calls.adding_words([other], np.dtype(np.float32)) is None


def test_long_inner_dim_keeps_its_add_kernel():
    """Past `blas_calls.ADDS_EXACT_MAX_K` (BLAS would round the bias into a partial sum: other bits than eager's) the add
    stays a kernel of its own."""
    args = operands(jt.float32, blas_calls.ADDS_EXACT_MAX_K[np.dtype(np.float32)] + 1)
    ex = executable(linear_then_product, *args)
    assert not biased(ex) and len(add_kernels(ex)) == 1
    np.testing.assert_array_equal(jt.compile(linear_then_product)(*args).numpy(), linear_then_product(*args).numpy())


def test_add_that_fuses_or_leaves_is_not_folded():
    """An add that fuses with its consumer (GELU) stays in that kernel; a sum the call returns is not folded
    (it leaves in new memory of eager's layout)."""
    x, w, b, _ = operands(jt.float32, 64)
    gelu = executable(lambda x, w, b: jt.nn.functional.gelu(x @ w.t() + b), x, w, b)
    returned = executable(lambda x, w, b: x @ w.t() + b, x, w, b)
    assert not biased(gelu) and not biased(returned)


def test_folded_bias_in_a_training_step_matches_torch():
    """A compiled step through a linear layer whose bias add is folded: its loss and gradients (the bias's from
    the sum's gradient) are eager's bits and torch's values."""
    def step(x, w, b, z):
        w, b = w.detach().requires_grad_(), b.detach().requires_grad_()
        loss = linear_then_product(x, w, b, z).square().mean()
        loss.backward()
        return loss.detach(), w.grad, b.grad

    args = operands(jt.float32, 64, seed=3)
    ex = executable(step, *args)
    assert len(biased(ex)) == 1 and not add_kernels(ex)
    got = [t.numpy() for t in jt.compile(step)(*args)]
    eager = [t.numpy() for t in step(*args)]
    for g, e in zip(got, eager, strict=True):
        np.testing.assert_array_equal(g, e)
    tx, tw, tb, tz = to_torch(*args)
    tw.requires_grad_(), tb.requires_grad_()
    loss = linear_then_product(tx, tw, tb, tz).square().mean()
    loss.backward()
    for g, e in zip(got, (loss, tw.grad, tb.grad), strict=True):
        np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_folded_bias_split_product_at_thread_counts(nthreads):
    """A product large enough to split in parts on the team: each part's call adds onto the bias; the same bits
    at one and two threads."""
    g = jt.Generator().manual_seed(5)
    x, w, b, z = (jt.randn(*s, generator=g) for s in ((12, 64, 128), (384, 128), (384,), (384, 8)))
    old = jt.get_num_threads()
    try:
        jt.set_num_threads(nthreads)
        ex = executable(linear_then_product, x, w, b, z)
        assert len(biased(ex)) == 1
        gemm_words._WORDS.clear()
        got = jt.compile(linear_then_product)(x, w, b, z).numpy()
        # (the kept words' key ends with whether they add, then the parts)
        (added,) = [words for key, words in gemm_words._WORDS.items() if key[-2]]
        assert len(added) == nthreads and all(words[1] & threads.GEMM_ADDS for words in added)
    finally:
        jt.set_num_threads(old)
    np.testing.assert_array_equal(got, linear_then_product(x, w, b, z).numpy())


def test_folded_bias_where_the_product_makes_other_calls(monkeypatch):
    """Where `array_product` makes other calls than gemm words (a generated kernel's, MKL's parts: here every
    product, `linalg.whole_gemm` patched to take none), the folded step computes the product into the sum's buffer
    and adds the bias after: eager's bits still."""
    from jitorch.ops import linalg
    monkeypatch.setattr(linalg, "whole_gemm", lambda a, b, out: None)
    args = operands(jt.float32, 96, seed=7)
    assert len(biased(executable(linear_then_product, *args))) == 1
    try:  # (the words kept while patched go after: they would send later products the slow way)
        gemm_words._WORDS.clear()
        gemm_words._LAYOUTS.clear()
        got = jt.compile(linear_then_product)(*args).numpy()
        assert [words for key, words in gemm_words._WORDS.items() if key[-2]] == [False]
    finally:
        gemm_words._WORDS.clear()
        gemm_words._LAYOUTS.clear()
    np.testing.assert_array_equal(got, linear_then_product(*args).numpy())
