"""A convolution's forward product reading its windows where they lie (codegen/gemm.py's `window_kernel`): the
same bits as the columns kernel on the copied windows (each element the sum over k in order of once-rounded
products), over window geometries, dtypes, thread counts and targets (the x86-64-v2 run builds and checks it
there too), and the layouts it refuses."""

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen import gemm


def _windows(xshape, kernel, stride, padding, dilation, dtype, seed=0):
    """(the batch-innermost input array, its windows' view, size, element steps) of a convolution's im2col
    operand, as `nn.functional._conv` lays them out."""
    g = jt.Generator().manual_seed(seed)
    x = jt.randn(*xshape, generator=g, dtype=getattr(jt, dtype))
    nd = len(kernel)
    xt = F._batch_last(x, [(padding, padding)] * nd)
    out = [(p - dilation * (k - 1) - 1) // stride + 1 for p, k in zip(xt.shape[1:-1], kernel)]
    size, steps = F._grouped_windows(tuple(xt.shape), 1, kernel, (stride,) * nd, (dilation,) * nd, out)
    arr = xt.numpy()
    view = np.lib.stride_tricks.as_strided(arr, size[1:], [s * arr.itemsize for s in steps[1:]])
    return arr, view, size, steps


def _dims(size, steps):
    """`window_kernel`'s (rows, cols) of a windows' geometry, the innermost runs of columns merged."""
    nd = (len(size) - 3) // 2
    rows = tuple(zip(size[1:2 + nd], steps[1:2 + nd]))
    cols = list(zip(size[2 + nd:], steps[2 + nd:]))
    while len(cols) > 1 and cols[-2][1] == cols[-1][0]:
        cols[-2:] = [(cols[-2][0] * cols[-1][0], 1)]
    return rows, tuple(cols)


# (input shape, kernel, stride, padding, dilation): cnn's conv2 (a run of whole output rows), dcgan's
# discriminator input layer (stride 2: runs of one batch), a dilated one, a 1-d and a 3-d one
GEOMETRIES = [((64, 8, 26, 26), (3, 3), 1, 0, 1), ((64, 3, 32, 32), (4, 4), 2, 1, 1),
              ((32, 4, 12, 12), (3, 3), 1, 1, 2), ((64, 5, 40), (5,), 1, 2, 1), ((64, 2, 6, 6, 6), (2, 2, 2), 2, 0, 1)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("parts", [1, 2])
def test_windows_read_in_place_give_the_bits_of_the_copied_windows_product(dtype, geometry, parts):
    xshape, kernel, stride, padding, dilation = geometry
    arr, view, size, steps = _windows(xshape, kernel, stride, padding, dilation, dtype)
    rows, cols = _dims(size, steps)
    k, n = int(np.prod([s for s, _ in rows])), int(np.prod([s for s, _ in cols]))
    m = 6 if dtype == "float32" else 7  # (a whole register block; a partial one)
    a = np.random.default_rng(1).standard_normal((m, k)).astype(dtype)
    windowed = gemm.window_kernel(dtype, m, k, n, (k, 1), rows, cols, n)
    copied = gemm.skinny_kernel(dtype, m, k, n, (k, 1), n, n)
    assert windowed is not None and copied is not None
    got, want = np.full((m, n), np.nan, dtype), np.full((m, n), np.nan, dtype)
    windowed.run(a, arr, got, parts)
    copied.run(a, np.ascontiguousarray(view).reshape(k, n), want, 1)
    assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_a_run_the_tiles_do_not_divide_and_mismatched_sizes_are_refused():
    # (batch 50, stride 2: runs of 50 elements, which 64-column tiles cross)
    _, _, size, steps = _windows((50, 3, 16, 16), (4, 4), 2, 1, 1, "float32")
    rows, cols = _dims(size, steps)
    k, n = int(np.prod([s for s, _ in rows])), int(np.prod([s for s, _ in cols]))
    assert gemm.window_kernel("float32", 8, k, n, (k, 1), rows, cols, n) is None
    _, _, size, steps = _windows((64, 3, 16, 16), (4, 4), 2, 1, 1, "float32")
    rows, cols = _dims(size, steps)
    k, n = int(np.prod([s for s, _ in rows])), int(np.prod([s for s, _ in cols]))
    assert gemm.window_kernel("float32", 8, k, n, (k, 1), rows, cols, n) is not None
    assert gemm.window_kernel("float32", 8, k + 1, n, (k + 1, 1), rows, cols, n) is None
    assert gemm.window_kernel("float32", 8, k, n, (k, 1), rows, cols[:-1] + ((cols[-1][0], 2),), n) is None
