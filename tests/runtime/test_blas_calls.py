"""Products' parts run as native BLAS gemm calls on the team (`runtime.blas_calls`): the call NumPy's matmul makes
for each layout, the products it leaves to Python parts, and bits equal to NumPy's matmul."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.ops import linalg
from jitorch.runtime import blas_calls, blas_library, threads
from tests.blas_reference import chosen_matmul

pytestmark = pytest.mark.skipif(blas_library.gemm_function(np.dtype(np.float32), False) is None
                                or threads.gemm_entry() is None,
                                reason="NumPy's BLAS is not the OpenBLAS of its wheel, or no native team")


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 2)
    monkeypatch.setitem(threads._settings, "split_products", True)


def _matrix(rng, shape, dtype, columns):
    """A ``shape`` matrix laid out in rows, or in columns (a transposed view) where ``columns``."""
    x = rng.standard_normal(shape[::-1] if columns else shape).astype(dtype)
    return x.T if columns else x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_columns, b_columns", [(False, False), (True, False), (False, True), (True, True)])
def test_the_gemm_call_is_numpys_and_has_its_bits(two_threads, dtype, a_columns, b_columns):
    rng = np.random.default_rng(0)
    a, b = _matrix(rng, (96, 40), dtype, a_columns), _matrix(rng, (40, 72), dtype, b_columns)
    out = np.empty((96, 72), dtype)
    words = blas_calls.gemm_call(a, b, out)
    expected_trans = (blas_calls.TRANS if a_columns else blas_calls.NO_TRANS,
                      blas_calls.TRANS if b_columns else blas_calls.NO_TRANS)
    assert words[1] == int(dtype == np.float64) and tuple(words[2:4]) == expected_trans
    assert words[4:7] == [96, 72, 40]
    assert words[8] == (96 if a_columns else 40) and words[10] == (40 if b_columns else 72) and words[12] == 72
    gemms = blas_calls.counters["gemm calls"]
    halves = [(a[:48], b, out[:48]), (a[48:], b, out[48:])]
    assert blas_calls.run_gemm_calls(halves)
    assert blas_calls.counters["gemm calls"] == gemms + 2
    assert out.tobytes() == chosen_matmul(a, b).tobytes()


@pytest.mark.parametrize("case", ["vector", "own transpose", "strided", "overlap", "dtypes", "integers",
                                  "result in columns"])
def test_products_numpy_computes_otherwise_are_not_gemm_calls(case):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 48)).astype(np.float32)
    out = np.empty((64, 48), np.float32)
    if case == "vector":  # (NumPy calls gemv)
        b, out = b[:, :1], out[:, :1]
    elif case == "own transpose":  # (NumPy calls syrk)
        b, out = a.T, np.empty((64, 64), np.float32)
    elif case == "strided":  # (no unit stride: NumPy's own loop)
        a = np.repeat(a, 2, axis=1)[:, ::2]
    elif case == "overlap":  # (NumPy copies the operand first)
        buffer = np.zeros((64, 48 + 32), np.float32)
        a, out = buffer[:, :32], buffer[:, 16:64]
    elif case == "dtypes":
        b = b.astype(np.float64)
    elif case == "integers":
        a, b, out = a.astype(np.int64), b.astype(np.int64), out.astype(np.int64)
    else:
        out = np.empty((48, 64), np.float32).T
    assert blas_calls.gemm_call(a, b, out) is None
    assert not blas_calls.run_gemm_calls([(a, b, out)])


def test_one_thread_makes_no_gemm_calls(monkeypatch):
    """At one thread a product runs whole as before (NumPy's matmul on the calling thread), whatever its size."""
    monkeypatch.setitem(threads._settings, "threads", 1)
    monkeypatch.setitem(threads._settings, "split_products", True)
    monkeypatch.setattr(blas_calls, "run_gemm_calls", lambda products: pytest.fail("a gemm call at one thread"))
    a, b = jt.randn(768, 128), jt.randn(128, 512)
    assert linalg.array_product(a.numpy(), b.numpy()).tobytes() == chosen_matmul(a.numpy(), b.numpy()).tobytes()


def test_a_split_product_of_a_batch_of_rows_is_one_gemm_call_per_part(two_threads):
    """A batch of matrices times one matrix is one product of rows (`linalg.array_product`), split in row parts: each
    part one gemm call on the team (under MKL its fixed parts, `linalg.mkl_parts`, in one fork)."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((6, 128, 128)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32)
    calls = lambda: blas_calls.counters["gemm calls"] + blas_calls.counters["part calls"]  # noqa: E731
    forks, gemms = blas_calls.counters["gemm forks"], calls()
    got = linalg.array_product(a, b)
    parts = linalg.mkl_parts(768, 512, 768 * 128 * 512) if blas_calls.runs_mkl(a.reshape(768, 128), b) else 2
    assert (blas_calls.counters["gemm forks"], calls()) == (forks + 1, gemms + parts)
    assert got.tobytes() == chosen_matmul(a, b).tobytes()


def test_a_batch_of_one_matrix_is_that_matrix_gemm_call(two_threads):
    """A convolution's products are batches of one matrix (``(1, m, k) @ (1, k, n)``): NumPy's matmul loops once,
    one gemm call, and so does the team."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1, 16, 300)).astype(np.float32)
    # (in columns: unit stride down the sum, as a convolution's weight gradient reads its windows)
    b = rng.standard_normal((1, 72, 300)).astype(np.float32).transpose(0, 2, 1)
    out = np.empty((1, 16, 72), np.float32)
    words = blas_calls.gemm_call(a, b, out)
    assert words[2:7] == [blas_calls.NO_TRANS, blas_calls.TRANS, 16, 72, 300]
    assert blas_calls.run_gemm_calls([(a, b, out)])
    assert out.tobytes() == chosen_matmul(a, b).tobytes()
    assert blas_calls.gemm_call(np.stack([a[0], a[0]]), np.stack([b[0], b[0]]), np.empty((2, 16, 72), np.float32)) is None
