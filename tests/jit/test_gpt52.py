"""gemm_words keeps a product's gemm calls per layout: operands of a kept layout at new addresses (an eager step's
fresh result, a gradient leaving the call) make the kept calls moved to them, with NumPy's matmul's bits; where the
result overlaps an operand, or a and b are one matrix (syrk), the calls are derived for those addresses."""

import numpy as np
import pytest

from jitorch.jit import gemm_words
from jitorch.ops import linalg
from jitorch.runtime import blas_calls


@pytest.fixture
def derivations(monkeypatch):
    """The products whose calls `gemm_calls` derived (the kept words cleared first)."""
    monkeypatch.setattr(gemm_words, "_WORDS", {})
    monkeypatch.setattr(gemm_words, "_LAYOUTS", {})
    made = []
    monkeypatch.setattr(gemm_words, "gemm_calls",
                        lambda a, b, out: made.append(a.shape) or linalg.gemm_calls(a, b, out))
    return made


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_product_at_new_addresses_makes_the_kept_calls_moved_with_numpys_bits(derivations, dtype):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 24)).astype(dtype)
    alive = []  # (every array kept: each product's at addresses of its own)
    for i in range(4):  # (each a fresh result and operand at new addresses; one a transposed view, as a gradient's)
        x = rng.standard_normal((3, 50, 40)).astype(dtype)[:, :, :]
        out = np.empty((3, 50, 24), dtype)
        gemm_words.product(x, w, out)
        np.testing.assert_array_equal(out, np.matmul(x, w))
        xt = rng.standard_normal((150, 40)).astype(dtype).T
        g = np.empty((40, 24), dtype)
        gemm_words.product(xt, out.reshape(150, 24), g)
        np.testing.assert_array_equal(g, np.matmul(xt, out.reshape(150, 24)))
        alive += [x, out, xt, g]
    assert len(gemm_words._WORDS) == 8
    assert len(derivations) == 2  # (once per layout)
    assert blas_calls.counters["words calls"] > 0


def test_a_result_overlapping_an_operand_at_new_addresses_is_derived_there_and_matches_numpy(derivations):
    rng = np.random.default_rng(1)
    memory = rng.standard_normal(4096).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    a, out = memory[:256].reshape(16, 16), memory[1024:1280].reshape(16, 16)
    gemm_words.product(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a, b))
    a, out = memory[2048:2304].reshape(16, 16), memory[2048 + 16:2304 + 16].reshape(16, 16)  # out overlaps a
    expected = np.matmul(a.copy(), b)
    gemm_words.product(a, b, out)
    np.testing.assert_array_equal(out, expected)
    assert len(derivations) == 2


def test_a_matrix_times_its_own_transpose_is_derived_apart_from_a_copys_layout(derivations):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = x.copy()
    out = np.empty((64, 64), np.float32)
    gemm_words.product(x, y.T, out)
    np.testing.assert_array_equal(out, np.matmul(x, y.T))
    gemm_words.product(x, x.T, out)  # (NumPy's syrk: its own rounding)
    np.testing.assert_array_equal(out, np.matmul(x, x.T))
    assert len(derivations) == 2


def test_a_whole_products_kept_call_at_new_addresses_has_numpys_bits_and_syrk_has_none(derivations):
    """`interop`'s products run whole beside another from `whole_words`: made once per layout, moved after."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 48)).astype(np.float32)
    alive = []
    for _ in range(3):
        x = rng.standard_normal((96, 32)).astype(np.float32)
        out = np.empty((96, 48), np.float32)
        blas_calls.run_words([gemm_words.whole_words(x, w, out)])
        np.testing.assert_array_equal(out, np.matmul(x, w))
        alive += [x, out]
    assert derivations == []  # (a whole call's words come from `whole_gemm`, not the split rules)
    assert len(gemm_words._LAYOUTS) == 1 and len(gemm_words._WORDS) == 3
    x = rng.standard_normal((64, 32)).astype(np.float32)
    assert gemm_words.whole_words(x, x.T, np.empty((64, 64), np.float32)) is None
