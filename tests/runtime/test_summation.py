"""Float sums in jitorch's order (`runtime.summation`): a sum over more than 8192 elements whose innermost dim
is reduced differed in its last bits between NumPy 1.26 (which hands its pairwise sum 8192 elements at a time
and adds those sums in order) and NumPy 2.4 (longer runs); jitorch adds 8192-element blocks in order under
both. These tests run under both (CI's minimum-versions run covers tests/runtime)."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime.summation import BLOCK, add_reduce


def _blocks_in_order(a, axes):
    """The definition, element by element: each output's reduced elements in C order, NumPy's sum of each
    block of BLOCK of them (a pairwise sum of at most BLOCK elements: the same under every NumPy), the
    blocks' sums added one after the other."""
    kept = [d for d in range(a.ndim) if d not in axes]
    runs = np.transpose(a, kept + list(axes)).reshape([a.shape[d] for d in kept] + [-1])
    out = np.empty(runs.shape[:-1], a.dtype)
    for point in np.ndindex(out.shape):
        run = np.ascontiguousarray(runs[point])
        total = np.add.reduce(run[:BLOCK])
        for start in range(BLOCK, run.size, BLOCK):
            total = total + np.add.reduce(run[start:start + BLOCK])
        out[point] = total
    return out


LAYOUTS = {  # (array, reduced axes)
    "one dim": (lambda r: r.standard_normal(3 * BLOCK + 5).astype(np.float32), (0,)),
    "rows": (lambda r: r.standard_normal((3, BLOCK + 1)).astype(np.float32), (1,)),
    "every dim": (lambda r: r.standard_normal((40, 300)).astype(np.float32), (0, 1)),
    "transposed": (lambda r: r.standard_normal((2, 2 * BLOCK + 7)).T, (0,)),
    "two of three": (lambda r: r.standard_normal((90, 2, 100)).astype(np.float32), (0, 2)),
    "reversed": (lambda r: r.standard_normal(BLOCK + 100).astype(np.float32)[::-1], (0,)),
    "complex": (lambda r: (r.standard_normal((2, BLOCK + 3)) + 1j).astype(np.complex64), (1,)),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_sums_longer_than_numpy_1x_buffer_add_8192_element_blocks_in_order(layout):
    make, axes = LAYOUTS[layout]
    a = make(np.random.default_rng(1))
    got = add_reduce(a, axes)
    np.testing.assert_array_equal(got, _blocks_in_order(a, axes))
    kept = add_reduce(a, axes, keepdims=True)
    assert kept.shape == np.add.reduce(a, axis=axes, keepdims=True).shape
    np.testing.assert_array_equal(kept.reshape(np.shape(got)), got)


def test_sums_numpy_versions_agree_on_are_numpys():
    """Up to a block, and along a dim that is not the innermost (slices added one after the other), NumPy's
    own reduction is version independent: `add_reduce` leaves it to NumPy."""
    r = np.random.default_rng(2)
    for a, axis in ((r.standard_normal((5, BLOCK)).astype(np.float32), 1),
                    (r.standard_normal((3 * BLOCK, 4)).astype(np.float32), 0),
                    (r.standard_normal((100, 30)).astype(np.float32), None),
                    (r.integers(0, 9, 3 * BLOCK), None)):
        got, want = add_reduce(a, axis), np.add.reduce(a, axis=axis)
        assert type(got) is type(want)
        np.testing.assert_array_equal(got, want)


def test_eager_sums_means_norms_and_softmax_take_the_blocks_order():
    a = np.random.default_rng(3).standard_normal((2, BLOCK + 2000)).astype(np.float32)
    x = jt.tensor(a)
    total = add_reduce(a, (1,), True)
    np.testing.assert_array_equal(x.sum(1).numpy(), total[:, 0])
    np.testing.assert_array_equal(x.sum().numpy(), add_reduce(a))
    np.testing.assert_array_equal(x.mean(1).numpy(), total[:, 0] / np.float32(a.shape[1]))
    np.testing.assert_array_equal(x.nansum(1).numpy(), total[:, 0])
    np.testing.assert_array_equal(x.norm(1, dim=1).numpy(), add_reduce(np.abs(a), (1,)))
    row = a[:1]  # (below `reductions.ROW_KERNEL_MIN`: larger softmaxes run the row kernels)
    e = np.exp(row - row.max(1, keepdims=True))
    np.testing.assert_array_equal(jt.tensor(row).softmax(1).numpy(), e / add_reduce(e, (1,), True))
