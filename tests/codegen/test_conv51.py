"""A convolution's weight-gradient product reading its windows where they lie (codegen/gemm.py's
`window_sum_kernel`): the same bits as the long-sum kernel on the copied windows (each element's lanes and chunks
of the sum as `_Dots` orders them), over window geometries, dtypes, thread counts, result layouts and targets
(the x86-64-v2 run builds and checks it there too), and the layouts it refuses."""

import numpy as np
import pytest

from jitorch.codegen import gemm
from jitorch.ops import linalg
from tests.codegen.test_conv50 import GEOMETRIES, _dims, _windows


def _bits(a):
    return a.view(f"u{a.itemsize}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("parts", [1, 2])
def test_windows_read_in_place_give_the_bits_of_the_copied_windows_long_sum(dtype, geometry, parts):
    xshape, kernel, stride, padding, dilation = geometry
    arr, view, size, steps = _windows(xshape, kernel, stride, padding, dilation, dtype)
    rows, cols = _dims(size, steps)
    n, k = int(np.prod([s for s, _ in rows])), int(np.prod([s for s, _ in cols]))
    m = 6  # (a whole block of rows and a partial one)
    a = np.random.default_rng(1).standard_normal((m, k)).astype(dtype)
    copied = np.ascontiguousarray(view).reshape(n, k)
    for c_strides in ((n, 1), (1, m)):  # (the result in rows; transposed, as a transposed weight's gradient lies)
        windowed = gemm.window_sum_kernel(dtype, m, k, n, k, rows, cols, c_strides)
        plain = gemm.long_sum_kernel(dtype, m, k, n, k, k, c_strides)
        assert windowed is not None and plain is not None
        shape = (m, n) if c_strides[1] == 1 else (n, m)
        got, want = np.full(shape, np.nan, dtype), np.full(shape, np.nan, dtype)
        windowed.run(a, arr, got if c_strides[1] == 1 else got.T, parts)
        plain.run(a, copied, want if c_strides[1] == 1 else want.T, 1)
        assert np.array_equal(_bits(got), _bits(want))
        exact = a.astype(np.float64) @ copied.T.astype(np.float64)
        tol = 1e-4 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got if c_strides[1] == 1 else got.T, exact, rtol=tol, atol=tol * np.abs(exact).max())


def test_a_run_that_whole_vectors_do_not_divide_and_mismatched_sizes_are_refused():
    # (batch 50, stride 2: runs of 50 elements, which 16-lane vectors cross)
    _, _, size, steps = _windows((50, 3, 16, 16), (4, 4), 2, 1, 1, "float32")
    rows, cols = _dims(size, steps)
    n, k = int(np.prod([s for s, _ in rows])), int(np.prod([s for s, _ in cols]))
    assert gemm.window_sum_kernel("float32", 8, k, n, k, rows, cols, (n, 1)) is None
    _, _, size, steps = _windows((16, 3, 16, 16), (4, 4), 2, 1, 1, "float32")  # (runs of 16: one vector)
    rows, cols = _dims(size, steps)
    n, k = int(np.prod([s for s, _ in rows])), int(np.prod([s for s, _ in cols]))
    assert gemm.window_sum_kernel("float32", 8, k, n, k, rows, cols, (n, 1)) is not None
    assert gemm.window_sum_kernel("float32", 8, k, n + 1, k, rows, cols, (n + 1, 1)) is None
    assert gemm.window_sum_kernel("float32", 8, k + 16, n, k + 16, rows, cols, (n, 1)) is None
    assert gemm.window_sum_kernel("float32", 8, k, n, k, rows, cols[:-1] + ((cols[-1][0], 2),), (n, 1)) is None


@pytest.mark.skipif(not gemm.for_products(), reason="ops.linalg hands products to these kernels on AVX-512 only")
def test_window_sum_product_takes_the_long_sum_rule_and_refuses_other_operands():
    arr, view, size, steps = _windows((64, 8, 26, 26), (3, 3), 1, 0, 1, "float32")
    copied = np.ascontiguousarray(view).reshape(72, -1)
    g = np.random.default_rng(2).standard_normal((16, copied.shape[1])).astype(np.float32)
    before = gemm.counters["windows"]
    got = linalg.window_sum_product(g, arr, size, steps)
    assert gemm.counters["windows"] == before + 1
    assert np.array_equal(_bits(got[0]), _bits(linalg.array_product(g, copied.T)))
    assert linalg.window_sum_product(g[:, ::2], arr, size, steps) is None  # (a's rows not of unit stride)
    assert linalg.window_sum_product(g[:, :-16], arr, size, steps) is None  # (a sum of another length)
    assert linalg.window_sum_product(g.astype(np.float64), arr, size, steps) is None
    wide = np.random.default_rng(3).standard_normal((200, copied.shape[1])).astype(np.float32)
    assert linalg.window_sum_product(wide, arr, size, steps) is None  # (200 rows: not the long-sum rule's)
    out = np.empty((16, 72), np.float32)
    assert linalg.window_sum_product(g, arr, size, steps, out=out[:, :71]) is None  # (a result of another shape)
    assert linalg.window_sum_product(g, arr, size, steps, out=out) is out
    assert np.array_equal(_bits(out), _bits(got[0]))
