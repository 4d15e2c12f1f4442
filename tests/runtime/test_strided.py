"""The strided index maths against NumPy's own layout rules."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jitorch.runtime.strided import (
    broadcast_shapes, contiguous_strides, infer_size, is_contiguous, is_non_overlapping_and_dense, view_strides,
    wrap_dim, wrap_dims,
)
from tests.support import shapes


@given(shapes(max_dims=5))
def test_contiguous_strides_match_numpy(shape):
    arr = np.empty(shape, dtype=np.int8)
    assert contiguous_strides(shape) == arr.strides or 0 in shape
    assert is_contiguous(shape, contiguous_strides(shape))


@given(shapes(max_dims=4), shapes(max_dims=4))
def test_broadcast_shapes_match_numpy(a, b):
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(RuntimeError, match="must match the size of tensor b"):
            broadcast_shapes(a, b)
    else:
        assert broadcast_shapes(a, b) == expected


def test_broadcast_error_names_sizes_and_dim():
    with pytest.raises(RuntimeError, match=r"tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 1"):
        broadcast_shapes((2, 3), (4,))


@st.composite
def permuted_views(draw):
    """A (shape, strides) made by permuting and slicing a contiguous block."""
    shape = draw(shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    strides = contiguous_strides(shape)
    order = draw(st.permutations(range(len(shape))))
    return tuple(shape[i] for i in order), tuple(strides[i] for i in order)


@given(permuted_views(), st.data())
def test_view_strides_agree_with_numpy_reshape_without_copy(view, data):
    shape, strides = view
    n = int(np.prod(shape))
    base = np.arange(n, dtype=np.int64)
    arr = np.lib.stride_tricks.as_strided(base, shape, tuple(8 * s for s in strides))
    new_shape = data.draw(st.sampled_from(_factorisations(n)))
    got = view_strides(shape, strides, new_shape)
    reshaped = arr.reshape(new_shape)
    numpy_views = np.shares_memory(reshaped, base)
    if got is None:
        # torch's rule is NumPy's: no view exists, so NumPy copied (or the shape needs one)
        assert not numpy_views or reshaped.size <= 1
    else:
        viewed = np.lib.stride_tricks.as_strided(base, new_shape, tuple(8 * s for s in got))
        np.testing.assert_array_equal(viewed, reshaped)


def _factorisations(n):
    out = [(n,), (1, n), (n, 1)]
    for a in range(2, n):
        if n % a == 0:
            out.append((a, n // a))
            for b in range(2, n // a):
                if (n // a) % b == 0:
                    out.append((a, b, n // a // b))
    return out


def test_infer_size():
    assert infer_size((2, -1), 6) == (2, 3)
    assert infer_size((-1,), 0) == (0,)
    with pytest.raises(RuntimeError, match=r"shape '\[2, 5\]' is invalid for input of size 6"):
        infer_size((2, 5), 6)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        infer_size((-1, -1), 6)


def test_wrap_dim_errors_like_torch():
    assert wrap_dim(-1, 3) == 2
    assert wrap_dim(0, 0) == 0 and wrap_dim(-1, 0) == 0
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        wrap_dim(2, 2)
    with pytest.raises(RuntimeError, match="dim 1 appears multiple times in the list of dims"):
        wrap_dims((1, -1), 2)


def test_dense_layouts():
    assert is_non_overlapping_and_dense((2, 3), (1, 2))
    assert not is_non_overlapping_and_dense((2, 3), (0, 1))
    assert not is_contiguous((2, 3), (1, 2))
