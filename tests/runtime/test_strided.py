"""The strided index maths against NumPy's own layout rules."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
import torch

from jitorch.runtime.strided import (
    broadcast_shapes, contiguous_strides, infer_size, is_contiguous, is_non_overlapping_and_dense,
    memory_order_strides, view_strides, wrap_dim, wrap_dims,
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


@st.composite
def strided_operands(draw):
    """1 to 3 tensors over one broadcast shape, each permuted, stepped, expanded or with dims of size 1."""
    import torch
    shape = draw(shapes(min_dims=2, max_dims=4, min_side=1, max_side=4))
    operands = []
    for _ in range(draw(st.integers(1, 3))):
        order = draw(st.permutations(range(len(shape))))
        t = torch.zeros([2 * shape[d] for d in order]).permute(*np.argsort(order).tolist())
        t = t[tuple(slice(None, None, 2) if draw(st.booleans()) else slice(0, shape[d]) for d in range(len(shape)))]
        t = t[tuple(slice(0, 1) if draw(st.integers(0, 4)) == 0 else slice(None) for _ in shape)]
        if draw(st.booleans()):
            t = t.expand(*shape)
        operands.append(t[(0,) * draw(st.integers(0, len(shape) - 1))])
    return operands


@given(strided_operands())
def test_memory_order_strides_are_torch_tensoriterators_for_a_pointwise_result(operands):
    """torch's pointwise results follow the memory order of their operands (the first operand that orders
    two dims decides, broadcast dims order nothing); NumPy's order "K" lets C order win conflicts."""
    import torch
    result = operands[0].neg() if len(operands) == 1 else operands[0] + operands[1] if len(operands) == 2 else \
        torch.addcmul(*operands)
    got = memory_order_strides(tuple(result.shape), [(tuple(t.shape), t.stride()) for t in operands])
    assert [s for n, s in zip(result.shape, got) if n != 1] == [s for n, s in zip(result.shape, result.stride())
                                                                 if n != 1]


@pytest.mark.parametrize("shape,strides", [((0, 3), (0, 0)), ((3, 0), (5, 7)), ((2, 0, 3), (0, 0, 0)), ((0,), (3,))])
def test_empty_geometries_are_contiguous_whatever_their_strides(shape, strides):
    """torch counts every empty tensor contiguous; the scan from the last dim called ``np.zeros((0, 3))``'s
    wrapping (strides (0, 0)) non-contiguous at its stride-0 inner dim before reaching the empty one."""
    assert is_contiguous(shape, strides) is torch.empty_strided(shape, strides).is_contiguous() is True
