"""A compiled call's products as kept gemm calls (jit/gemm_words.py, session 50): the same bits as
``array_product`` for the layouts a training step's linear layers make (rows times a transposed weight, a
transposed activation times a gradient, a batch of rows), float32 and float64, small and splittable, at one and
two threads; words kept for one set of buffers compute whatever values those buffers hold next; products that
``array_product`` does not make as one gemm call (split on the team, an operand overlapping the result) run as
before; and a compiled linear-layer training step takes the kept calls with torch's values."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit import gemm_words
from jitorch.ops.linalg import SPLIT_MIN_WORK, array_product
from jitorch.runtime import blas_calls, blas_library, threads

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _at_threads(n):
    before = jt.get_num_threads()
    jt.set_num_threads(n)
    yield
    jt.set_num_threads(before)


@pytest.fixture
def one_thread():
    yield from _at_threads(1)


@pytest.fixture
def two_threads():
    yield from _at_threads(2)


def _layouts(dtype, m, k, n, rng):
    """(a, b) pairs as a linear layer's forward and backward products lie: x @ W.T, g @ W, x.T @ g, and a batch of
    rows (3-D x) times W.T."""
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    g = rng.standard_normal((m, n)).astype(dtype)
    return [(x, w.T), (g, w), (x.T, g), (x.reshape(2, m // 2, k), w.T)]


def _words_calls(fn):
    before = blas_calls.counters["words calls"]
    fn()
    return blas_calls.counters["words calls"] - before


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [(96, 64, 80), (256, 128, 160)])
def test_kept_gemm_words_give_array_products_bits_at_one_thread(one_thread, dtype, size):
    rng = np.random.default_rng(0)
    for a, b in _layouts(dtype, *size, rng):
        shape = a.shape[:-1] + b.shape[-1:]
        expected, out = np.empty(shape, dtype), np.empty(shape, dtype)
        array_product(a, b, expected)
        assert _words_calls(lambda: gemm_words.product(a, b, out)) == 1
        assert out.tobytes() == expected.tobytes()
        out[...] = 0
        assert _words_calls(lambda: gemm_words.product(a, b, out)) == 1  # (the kept words, once more)
        assert out.tobytes() == expected.tobytes()


def test_kept_words_compute_the_values_their_buffers_hold_next(one_thread):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((128, 96)).astype(np.float32), rng.standard_normal((96, 80)).astype(np.float32)
    out, expected = np.empty((128, 80), np.float32), np.empty((128, 80), np.float32)
    gemm_words.product(a, b, out)
    a[...] = rng.standard_normal(a.shape)
    b[...] = rng.standard_normal(b.shape)
    assert _words_calls(lambda: gemm_words.product(a, b, out)) == 1
    array_product(a, b, expected)
    assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_product_that_splits_at_two_threads_keeps_its_parts_calls_with_the_same_bits(two_threads, dtype):
    rng = np.random.default_rng(2)
    for m, n in ((256, 160), (160, 256)):  # (by rows, by columns)
        k = 128
        assert m * k * n >= SPLIT_MIN_WORK and threads.product_parts() == 2
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype).T
        out, split = np.empty((m, n), dtype), np.empty((m, n), dtype)
        forks = threads.counters["forks"]
        array_product(a, b, split)
        assert threads.counters["forks"] == forks + 1
        assert _words_calls(lambda: gemm_words.product(a, b, out)) == 2  # (its two parts at once on the team)
        assert threads.counters["forks"] == forks + 2
        assert out.tobytes() == split.tobytes()
        jt.set_num_threads(1)
        out[...] = 0
        assert _words_calls(lambda: gemm_words.product(a, b, out)) == 1  # (the same buffers, one part: one call)
        assert out.tobytes() == split.tobytes()
        jt.set_num_threads(2)


def test_a_result_over_an_operand_is_no_kept_call(one_thread):
    rng = np.random.default_rng(3)
    buf = rng.standard_normal((64, 128)).astype(np.float32)
    a, b = buf[:, :64], rng.standard_normal((64, 64)).astype(np.float32)
    expected = np.empty((64, 64), np.float32)
    array_product(a.copy(), b, expected)
    assert _words_calls(lambda: gemm_words.product(a, b, buf[:, :64])) == 0  # (the result is a: NumPy copies)
    assert buf[:, :64].tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_linear_step_takes_kept_calls_with_torchs_values(one_thread, dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((12, 64, 128)).astype(dtype)
    w1, w2 = (rng.standard_normal(s).astype(dtype) * 0.1 for s in ((256, 128), (128, 256)))

    def step(lib, x, w1, w2):
        h = lib.nn.functional.gelu(x @ w1.T)
        loss = ((h @ w2.T) ** 2).mean()
        loss.backward()
        return loss

    tw = [torch.from_numpy(w.copy()).requires_grad_() for w in (w1, w2)]
    tl = step(torch, torch.from_numpy(x), *tw)
    jw = [jt.from_numpy(w.copy()).requires_grad_() for w in (w1, w2)]
    compiled = jt.compile(lambda x, a, b: step(jt, x, a, b))
    compiled(jt.from_numpy(x), *jw)  # (the first call traces)
    for w in jw:
        w.grad = None
    losses = []
    calls = _words_calls(lambda: losses.append(compiled(jt.from_numpy(x), *jw)))
    jl = losses[0]
    assert calls == 5  # forward 2; backward: the hidden layer's gradient and both weights' (x's is not needed)
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jl.item(), tl.item(), **tol)
    for j, t in zip(jw, tw):
        np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), **tol)


_UNDER_LIBRARY = """
    import numpy as np, jitorch as jt
    from jitorch.jit import gemm_words
    from jitorch.ops.linalg import array_product
    from jitorch.runtime import blas_calls
    jt.set_num_threads(1)
    rng = np.random.default_rng(6)
    kept = 0
    for dtype in (np.float32, np.float64):
        # (MKL's at or above `SPLIT_MIN_WORK` multiply-adds: 768x128x384, 256x512x128; below it: 128x96x200)
        for m, k, n in ((768, 128, 384), (128, 96, 200), (256, 512, 128)):
            a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype).T
            out, expected = np.empty((m, n), dtype), np.empty((m, n), dtype)
            array_product(a, b, expected)
            before = blas_calls.counters["words calls"]
            gemm_words.product(a, b, out)
            kept += blas_calls.counters["words calls"] - before
            assert out.tobytes() == expected.tobytes(), (dtype, m, k, n)
    print(kept)
"""


@pytest.mark.parametrize("library", [pytest.param("mkl", marks=pytest.mark.skipif(
    next(blas_library._mkl_candidates(), None) is None, reason="no mkl wheel installed")), "openblas"])
def test_kept_calls_are_the_chosen_librarys_bits(library):
    env = {k: v for k, v in os.environ.items() if k != blas_library.ENV}
    env[blas_library.ENV] = library
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_UNDER_LIBRARY)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    # MKL's products of `SPLIT_MIN_WORK` or more run in fixed parts (`linalg.mkl_parts`): no one call to keep
    assert int(done.stdout.split()[-1]) == (2 if library == "mkl" else 6)
