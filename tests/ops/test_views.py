"""View ops: values against NumPy, shared storage and version counter, writes
through views, torch's strides and offsets, when reshape copies, clone, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from tests.support import LAYOUTS, random_array, tensor_and_array


# (name, min ndim, jitorch view, NumPy equivalent): each view is checked on every
# layout against NumPy, for shared storage, and for writes reaching the base.
def _np_unfold(a, dim, size, step):
    w = np.lib.stride_tricks.sliding_window_view(a, size, axis=dim)
    return w[(slice(None),) * dim + (slice(None, None, step),)]


VIEWS = [
    # adding size-1 dims is a view in every layout (test_reshape_copies_exactly_when_torch_does covers the rest)
    ("view", 0, lambda x: x.view(*x.shape, 1), lambda a: a[..., None]),
    ("reshape", 0, lambda x: x.reshape(1, *x.shape), lambda a: a[None]),
    ("flatten", 1, lambda x: x.unsqueeze(-1).flatten(-2), lambda a: a),
    ("permute", 0, lambda x: x.permute(*range(x.ndim - 1, -1, -1)), lambda a: a.transpose()),
    ("transpose", 1, lambda x: x.transpose(0, -1), lambda a: np.swapaxes(a, 0, -1)),
    ("swapaxes", 1, lambda x: x.swapaxes(-1, 0), lambda a: np.swapaxes(a, 0, -1)),
    ("swapdims", 1, lambda x: jt.swapdims(x, 0, -1), lambda a: np.swapaxes(a, 0, -1)),
    ("t", 0, lambda x: x.t() if x.ndim <= 2 else x, lambda a: a.T if a.ndim <= 2 else a),
    ("movedim", 1, lambda x: x.movedim(0, -1), lambda a: np.moveaxis(a, 0, -1)),
    ("moveaxis", 1, lambda x: jt.moveaxis(x, -1, 0), lambda a: np.moveaxis(a, -1, 0)),
    ("squeeze", 0, lambda x: x.squeeze(), lambda a: a.squeeze()),
    ("squeeze_dims", 2, lambda x: x.squeeze((0, -1)),
     lambda a: a.squeeze(tuple(sorted({d % a.ndim for d in (0, -1) if a.shape[d] == 1})))),
    ("unsqueeze", 0, lambda x: x.unsqueeze(-1), lambda a: a[..., None]),
    ("unsqueeze0", 0, lambda x: jt.unsqueeze(x, 0), lambda a: a[None]),
    ("expand", 0, lambda x: x.unsqueeze(0).expand(2, *x.shape), lambda a: np.broadcast_to(a, (2,) + a.shape)),
    ("broadcast_to", 0, lambda x: jt.broadcast_to(x, (3,) + tuple(x.shape)),
     lambda a: np.broadcast_to(a, (3,) + a.shape)),
    ("narrow", 1, lambda x: x.narrow(0, x.shape[0] // 2, (x.shape[0] + 1) // 2),
     lambda a: a[a.shape[0] // 2:]),
    ("select", 1, lambda x: x.select(-1, -1) if x.shape[-1] else x, lambda a: a[..., -1] if a.shape[-1] else a),
    ("unbind", 1, lambda x: x.unbind(0)[-1] if x.shape[0] else x, lambda a: a[-1] if a.shape[0] else a),
    ("split", 1, lambda x: x.split(2, 0)[-1], lambda a: np.split(a, range(2, a.shape[0], 2))[-1] if a.shape[0] else a),
    ("split_sizes", 1, lambda x: x.split([1, x.shape[0] - 1])[1] if x.shape[0] else x,
     lambda a: a[1:] if a.shape[0] else a),
    ("chunk", 1, lambda x: x.chunk(2, -1)[0], lambda a: a[..., :-(-a.shape[-1] // 2)] if a.shape[-1] else a),
    ("diagonal", 2, lambda x: x.diagonal(0, 0, -1), lambda a: np.diagonal(a, 0, 0, -1)),
    ("diagonal_offset", 2, lambda x: x.diagonal(-1, 1, 0), lambda a: np.diagonal(a, -1, 1, 0)),
    ("unfold", 1, lambda x: x.unfold(0, min(2, x.shape[0]), 2), lambda a: _np_unfold(a, 0, min(2, a.shape[0]), 2)),
    ("slice_getitem", 1, lambda x: x[1::2], lambda a: a[1::2]),
    ("basic_getitem", 1, lambda x: x[None, ..., ::2], lambda a: a[None, ..., ::2]),
    ("unflatten", 1, lambda x: x.unflatten(0, (1, x.shape[0], 1)),
     lambda a: a.reshape((1, a.shape[0], 1) + a.shape[1:])),
]


@st.composite
def _case(draw):
    name, min_dims, view, np_view = draw(st.sampled_from(VIEWS))
    shape = draw(st.lists(st.integers(0, 4), min_size=min_dims, max_size=4).map(tuple))
    layout = draw(st.sampled_from(LAYOUTS))
    dtype = draw(st.sampled_from([jt.float32, jt.int64, jt.bool, jt.bfloat16]))
    return name, view, np_view, shape, layout, dtype


@given(_case())
def test_views_share_storage_and_match_numpy(case):
    name, view, np_view, shape, layout, dtype = case
    x, expected_base = tensor_and_array(random_array(shape, dtype, np.random.default_rng(0)), layout)
    version = x._version
    r = view(x)
    np.testing.assert_array_equal(r.numpy(), np_view(expected_base), strict=True)
    assert r.dtype is x.dtype
    assert r.untyped_storage() is x.untyped_storage()
    assert r._version == x._version == version
    # Write distinct values through the view; NumPy says where each lands in the base.
    positions = np_view(np.arange(expected_base.size).reshape(expected_base.shape))
    if np.unique(positions).size != positions.size or x.stride().count(0):
        return  # several view (or base) elements share memory: the written value is ambiguous
    values = (np.arange(r.numel()) + 100).reshape(r.shape).astype(dtype.np)
    r[...] = jt.tensor(values)
    base = expected_base.copy().reshape(-1)
    base[positions.reshape(-1)] = values.reshape(-1)
    np.testing.assert_array_equal(x.numpy(), base.reshape(expected_base.shape))
    assert x._version == r._version == version + 1


# Shape, strides, offset and contiguity of views, as torch computes them.
VIEW_GEOMETRY = [
    ((2, 3, 4), "x.view(6, 4)", (6, 4), (4, 1), 0, True),
    ((2, 3, 4), "x.permute(2, 0, 1)", (4, 2, 3), (1, 12, 4), 0, False),
    ((2, 3, 4), "x.transpose(0, 2)", (4, 3, 2), (1, 4, 12), 0, False),
    ((2, 3, 4), "x.swapaxes(1, 2)", (2, 4, 3), (12, 1, 4), 0, False),
    ((2, 3, 4), "x.swapdims(-1, 0)", (4, 3, 2), (1, 4, 12), 0, False),
    ((3, 4), "x.t()", (4, 3), (1, 4), 0, False),
    ((4,), "x.t()", (4,), (1,), 0, True),
    ((), "x.t()", (), (), 0, True),
    ((2, 3, 4), "x.movedim(0, -1)", (3, 4, 2), (4, 1, 12), 0, False),
    ((2, 3, 4), "x.moveaxis((0, 1), (2, 0))", (3, 4, 2), (4, 1, 12), 0, False),
    ((2, 1, 3, 1), "x.squeeze()", (2, 3), (3, 1), 0, True),
    ((2, 1, 3, 1), "x.squeeze(1)", (2, 3, 1), (3, 1, 1), 0, True),
    ((2, 1, 3, 1), "x.squeeze((1, 3))", (2, 3), (3, 1), 0, True),
    ((2, 1, 3, 1), "x.squeeze(0)", (2, 1, 3, 1), (3, 3, 1, 1), 0, True),
    ((2, 3), "x.unsqueeze(0)", (1, 2, 3), (6, 3, 1), 0, True),
    ((2, 3), "x.unsqueeze(1)", (2, 1, 3), (3, 3, 1), 0, True),
    ((2, 3), "x.unsqueeze(-1)", (2, 3, 1), (3, 1, 1), 0, True),
    ((2, 3), "x.t().unsqueeze(1)", (3, 1, 2), (1, 6, 3), 0, False),
    ((3,), "x.expand(2, 3)", (2, 3), (0, 1), 0, False),
    ((3, 1), "x.expand(-1, 4)", (3, 4), (1, 0), 0, False),
    ((3, 1), "x.expand(2, 3, 4)", (2, 3, 4), (0, 1, 0), 0, False),
    ((), "x.expand(2, 2)", (2, 2), (0, 0), 0, False),
    ((3,), "x.broadcast_to((2, 3))", (2, 3), (0, 1), 0, False),
    ((3, 4), "x.narrow(1, 1, 2)", (3, 2), (4, 1), 1, False),
    ((3, 4), "x.narrow(0, -2, 2)", (2, 4), (4, 1), 4, True),
    ((3, 4), "x.select(1, 2)", (3,), (4,), 2, False),
    ((3, 4), "x.select(0, -1)", (4,), (1,), 8, True),
    ((3, 4), "x.diagonal()", (3,), (5,), 0, False),
    ((3, 4), "x.diagonal(1)", (3,), (5,), 1, False),
    ((3, 4), "x.diagonal(-1)", (2,), (5,), 4, False),
    ((2, 3, 4), "x.diagonal(0, 0, 2)", (3, 2), (4, 13), 0, False),
    ((2, 3, 4), "x.diagonal(1, -1, 1)", (2, 2), (12, 5), 4, False),
    ((3, 4), "x.diagonal(7)", (0,), (5,), 0, True),
    ((10,), "x.as_strided((3, 3), (1, 1))", (3, 3), (1, 1), 0, False),
    ((10,), "x.as_strided((2, 2), (3, 1), 2)", (2, 2), (3, 1), 2, False),
    ((3, 4), "x[1:].as_strided((2,), (1,))", (2,), (1,), 4, True),
    ((7,), "x.unfold(0, 3, 2)", (3, 3), (2, 1), 0, False),
    ((2, 5), "x.unfold(1, 2, 1)", (2, 4, 2), (5, 1, 1), 0, False),
    ((2, 5), "x.t().unfold(1, 2, 1)", (5, 1, 2), (1, 5, 5), 0, False),
    ((), "x.unfold(0, 1, 1)", (1,), (1,), 0, True),
    ((2, 6), "x.unflatten(1, (3, 2))", (2, 3, 2), (6, 2, 1), 0, True),
    ((2, 6), "x.unflatten(-1, (-1, 2))", (2, 3, 2), (6, 2, 1), 0, True),
    ((6, 2), "x.t().unflatten(1, (2, 3))", (2, 2, 3), (1, 6, 2), 0, False),
    ((2, 3, 4), "x.flatten()", (24,), (1,), 0, True),
    ((2, 3, 4), "x.flatten(1)", (2, 12), (12, 1), 0, True),
    ((2, 3, 4), "x.flatten(0, 1)", (6, 4), (4, 1), 0, True),
    ((2, 3), "x.t().flatten(1)", (3, 2), (1, 3), 0, False),
    ((2, 3, 4), "x.reshape(4, 6)", (4, 6), (6, 1), 0, True),
    ((2, 3, 4), "x.reshape(-1)", (24,), (1,), 0, True),
    ((2, 3), "x.t().reshape(3, 2)", (3, 2), (1, 3), 0, False),
    ((2, 3), "x.t().reshape(3, 1, 2)", (3, 1, 2), (1, 6, 3), 0, False),
    ((6,), "x[::2].reshape(3, 1)", (3, 1), (2, 2), 0, False),
    ((3,), "x.expand(4, 3).reshape(4, 3, 1)", (4, 3, 1), (0, 1, 1), 0, False),
    ((2, 3), "x.view_as(x.t())", (3, 2), (2, 1), 0, True),
    ((2, 3), "x.expand_as(x.unsqueeze(0).expand(2, 2, 3))", (2, 2, 3), (0, 3, 1), 0, False),
    ((6,), "x.split(4)[1]", (2,), (1,), 4, True),
    ((2, 6), "x.split([1, 5], 1)[1]", (2, 5), (6, 1), 1, False),
    ((2, 6), "x.chunk(4, 1)[2]", (2, 2), (6, 1), 4, False),
    ((2, 3), "x.unbind(1)[2]", (2,), (3,), 2, False),
    ((2, 3), "x.split_with_sizes([2, 1], 1)[1]", (2, 1), (3, 1), 2, False),
    ((4, 5), "x[1:3, ::2]", (2, 3), (5, 2), 5, False),
    ((4, 5), "x[-3:, 1]", (3,), (5,), 6, False),
    ((4, 5), "x[None, 2:, None, ::3]", (1, 2, 1, 2), (20, 5, 5, 3), 10, False),
    ((4, 5), "x[..., 1::2]", (4, 2), (5, 2), 1, False),
    ((4, 5), "x[...]", (4, 5), (5, 1), 0, True),
    ((), "x[None]", (1,), (1,), 0, True),
    ((2, 3, 4), "x[1, ..., 2]", (3,), (4,), 14, False),
    ((4, 5), "x[10:]", (0, 5), (5, 1), 20, True),
    ((4, 5), "x[3:1]", (0, 5), (5, 1), 15, True),
    ((4, 5), "x[:, -10:2]", (4, 2), (5, 1), 0, False),
]


def _arange(shape):
    return jt.tensor(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))


@pytest.mark.parametrize("shape,expr,size,stride,offset,contiguous", VIEW_GEOMETRY)
def test_view_geometry_follows_torch(shape, expr, size, stride, offset, contiguous):
    x = _arange(shape)
    r = eval(expr)
    assert (tuple(r.shape), r.stride(), r.storage_offset(), r.is_contiguous()) == (size, stride, offset, contiguous)
    assert r.untyped_storage() is x.untyped_storage()
    assert r.data_ptr() == x.data_ptr() + offset * x.element_size()


# Whether reshape returns a view (True) or a copy, as torch decides.
RESHAPE_IS_VIEW = [
    ((2, 3), "x.t()", (6,), False),
    ((2, 3), "x.t()", (3, 2), True),
    ((2, 3), "x.t()", (3, 1, 2), True),
    ((6,), "x[::2]", (3, 1), True),
    ((6,), "x[::2]", (1, 3), True),
    ((3,), "x.expand(4, 3)", (12,), False),
    ((3,), "x.expand(4, 3)", (4, 3, 1), True),
    ((2, 3, 4), "x.permute(1, 0, 2)", (3, 8), False),
    ((2, 3, 4), "x.permute(1, 0, 2)", (6, 4), False),
    ((2, 3, 4), "x", (4, 6), True),
    ((4, 4), "x[:, :2]", (8,), False),
    ((4, 4), "x[:2]", (8,), True),
    ((1,), "x", (), True),
]


@pytest.mark.parametrize("shape,expr,new_shape,is_view", RESHAPE_IS_VIEW)
def test_reshape_copies_exactly_when_torch_does(shape, expr, new_shape, is_view):
    x = _arange(shape)
    src = eval(expr)
    for r in (src.reshape(new_shape), jt.reshape(src, new_shape), src.flatten() if len(new_shape) == 1 else None):
        if r is None:
            continue
        np.testing.assert_array_equal(r.numpy(), src.numpy().reshape(r.shape))
        assert (r.untyped_storage() is x.untyped_storage()) is is_view
        if not is_view:
            assert r.is_contiguous()


# Strides of clone(): a dense layout is kept, other layouts keep their dims' order.
CLONE_STRIDES = [
    ((2, 3), "x.t()", (1, 3)),
    ((2, 3), "x[:, ::2]", (2, 1)),
    ((3,), "x.expand(2, 3)", (3, 1)),
    ((3, 1, 4), "x.permute(2, 1, 0)", (1, 4, 4)),
    ((2, 3, 4), "x.permute(1, 0, 2)[:, :, :1]", (1, 3, 1)),
    ((4, 1), "x.expand(4, 3).t()", (4, 1)),
    ((3, 2), "x[::2]", (2, 1)),
    ((2, 3, 4), "x.transpose(0, 2)[::2]", (1, 2, 6)),
    ((2, 3), "x", (3, 1)),
    ((), "x", ()),
]


@pytest.mark.parametrize("shape,expr,stride", CLONE_STRIDES)
def test_clone_keeps_layout_like_torch(shape, expr, stride):
    x = _arange(shape)
    src = eval(expr)
    c = src.clone()
    assert c.stride() == stride and c.untyped_storage() is not x.untyped_storage()
    np.testing.assert_array_equal(c.numpy(), src.numpy())
    contiguous = src.clone(memory_format=jt.contiguous_format)
    assert contiguous.is_contiguous()
    np.testing.assert_array_equal(contiguous.numpy(), src.numpy())


@given(st.sampled_from(LAYOUTS), st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple))
def test_contiguous_returns_self_or_a_contiguous_copy(layout, shape):
    x, expected = tensor_and_array(random_array(shape, jt.float32, np.random.default_rng(1)), layout)
    c = x.contiguous()
    np.testing.assert_array_equal(c.numpy(), expected)
    assert c.is_contiguous()
    assert (c is x) == x.is_contiguous()
    c2 = x.clone()
    c2[...] = 7.0
    np.testing.assert_array_equal(x.numpy(), expected)


INPLACE_VIEWS = [
    ("t_", (2, 3), lambda x: x.t_(), lambda a: a.T),
    ("transpose_", (2, 3, 4), lambda x: x.transpose_(0, 2), lambda a: np.swapaxes(a, 0, 2)),
    ("swapaxes_", (2, 3), lambda x: x.swapaxes_(0, 1), lambda a: a.T),
    ("squeeze_", (1, 3, 1), lambda x: x.squeeze_(), lambda a: a.squeeze()),
    ("squeeze_dim", (1, 3, 1), lambda x: x.squeeze_(-1), lambda a: a[..., 0]),
    ("unsqueeze_", (2, 3), lambda x: x.unsqueeze_(1), lambda a: a[:, None]),
    ("as_strided_", (2, 3), lambda x: x.as_strided_((3, 2), (1, 3)), lambda a: a.T),
]


@pytest.mark.parametrize("name,shape,fn,np_fn", INPLACE_VIEWS, ids=[c[0] for c in INPLACE_VIEWS])
def test_inplace_views_retarget_the_tensor(name, shape, fn, np_fn):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x = jt.tensor(a)
    storage = x.untyped_storage()
    assert fn(x) is x
    np.testing.assert_array_equal(x.numpy(), np_fn(a))
    assert x.untyped_storage() is storage and x._version == 0


def test_views_of_views_share_one_base():
    x = _arange((4, 6))
    v = x.t()[1:].unsqueeze(0).narrow(2, 1, 2).diagonal(0, 1, 2)
    assert v._base is x
    v[...] = -1.0
    assert (x.numpy() == -1).sum() == 2


def test_split_chunk_unbind_cover_the_tensor():
    x = _arange((7, 2))
    assert [p.shape[0] for p in x.split(3)] == [3, 3, 1]
    assert [p.shape[0] for p in x.chunk(3)] == [3, 3, 1]
    assert [p.shape[0] for p in x.chunk(4)] == [2, 2, 2, 1]
    assert [p.shape[0] for p in jt.zeros(0).chunk(3)] == [0, 0, 0]
    assert len(jt.zeros(0).split(0)) == 1
    assert all(isinstance(p, tuple) for p in (x.split(2), x.chunk(2), x.unbind()))
    np.testing.assert_array_equal(np.stack([p.numpy() for p in x.unbind(1)], 1), x.numpy())
    assert [p.shape for p in jt.split(x, [2, 5])] == [(2, 2), (5, 2)]


def test_flatten_of_one_dim_is_self_and_0d_becomes_1d():
    x = _arange((2, 3))
    assert x.flatten(1, 1) is x
    assert jt.tensor(3.0).flatten().shape == (1,)


ERRORS = [
    (lambda: _arange((2, 3, 4)).t(), RuntimeError, r"t\(\) expects a tensor with <= 2 dimensions, but self is 3D"),
    (lambda: _arange((3,)).expand(2, 4), RuntimeError,
     r"The expanded size of the tensor \(4\) must match the existing size \(3\) at non-singleton dimension 1\.  "
     r"Target sizes: \[2, 4\]\.  Tensor sizes: \[3\]"),
    (lambda: _arange((2, 3)).expand(3), RuntimeError,
     r"expand\(jitorch\.FloatTensor\{\[2, 3\]\}, size=\[3\]\): the number of sizes provided \(1\) must be greater "
     r"or equal to the number of dimensions in the tensor \(2\)"),
    (lambda: _arange((3,)).expand(-1, 3), RuntimeError,
     r"The expanded size of the tensor \(-1\) isn't allowed in a leading, non-existing dimension 0"),
    (lambda: _arange((2, 3)).view(4), RuntimeError, r"shape '\[4\]' is invalid for input of size 6"),
    (lambda: _arange((2, 3)).reshape(-1, -1), RuntimeError, "only one dimension can be inferred"),
    (lambda: _arange((2, 3)).t().view(6), RuntimeError,
     r"view size is not compatible .* Use \.reshape\(\.\.\.\) instead"),
    (lambda: _arange((3,)).select(0, 5), IndexError,
     r"select\(\): index 5 out of range for tensor of size \[3\] at dimension 0"),
    (lambda: _arange((3,)).select(0, -4), IndexError, r"select\(\): index -4 out of range"),
    (lambda: jt.tensor(1.0).select(0, 0), IndexError, r"select\(\) cannot be applied to a 0-dim tensor\."),
    (lambda: _arange((3,)).narrow(0, 4, 1), IndexError,
     r"start out of range \(expected to be in range of \[-3, 3\], but got 4\)"),
    (lambda: _arange((3,)).narrow(0, 2, 2), RuntimeError,
     r"start \(2\) \+ length \(2\) exceeds dimension size \(3\)\."),
    (lambda: _arange((3,)).narrow(0, 1, -1), RuntimeError, r"narrow\(\): length must be non-negative\."),
    (lambda: jt.tensor(1.0).narrow(0, 0, 1), RuntimeError, r"narrow\(\) cannot be applied to a 0-dim tensor\."),
    (lambda: _arange((3,)).split(0), RuntimeError,
     "split_size can only be 0 if dimension size is 0, but got dimension size of 3"),
    (lambda: _arange((3,)).split(-1), RuntimeError, "split expects split_size be non-negative, but got split_size=-1"),
    (lambda: _arange((3,)).split([1, 1]), RuntimeError,
     r"split_with_sizes expects split_sizes to sum exactly to 3 \(input tensor's size at dimension 0\), but got "
     r"split_sizes=\[1, 1\]"),
    (lambda: _arange((3,)).split([1, -1, 3]), RuntimeError, "only non-negative entries"),
    (lambda: _arange((3,)).chunk(0), RuntimeError, "chunk expects `chunks` to be greater than 0, got: 0"),
    (lambda: jt.tensor(1.0).chunk(1), RuntimeError, "chunk expects at least a 1-dimensional tensor"),
    (lambda: jt.tensor(1.0).unbind(), IndexError, "Dimension specified as 0 but tensor has no dimensions"),
    (lambda: _arange((2, 3)).diagonal(0, 0, 0), RuntimeError, "diagonal dimensions cannot be identical 0, 0"),
    (lambda: _arange((3,)).diagonal(), IndexError, r"Dimension out of range \(expected to be in range of \[-1, 0\], "
                                                   r"but got 1\)"),
    (lambda: _arange((3,)).as_strided((10,), (1,)), RuntimeError,
     r"setStorage: sizes \[10\], strides \[1\], storage offset 0, and itemsize 4 requiring a storage size of 40 are "
     r"out of bounds for storage of size 12"),
    (lambda: _arange((3,)).as_strided((2,), (1, 2)), RuntimeError, "mismatch in length of strides and shape"),
    (lambda: _arange((3,)).as_strided((2,), (-1,)), RuntimeError,
     r"as_strided: Negative strides are not supported at the moment, got strides: \[-1\]"),
    (lambda: _arange((3,)).as_strided((2,), (1,), -1), RuntimeError, "Tensor: invalid storage offset -1"),
    (lambda: _arange((3,)).unfold(0, 4, 1), RuntimeError, "maximum size for tensor at dimension 0 is 3 but size is 4"),
    (lambda: _arange((3,)).unfold(0, 2, 0), RuntimeError, "step is 0 but must be > 0"),
    (lambda: _arange((3,)).unfold(0, -1, 1), RuntimeError, "size is -1 but must be >= 0"),
    (lambda: _arange((2, 3, 4)).movedim((0, 1), (0,)), RuntimeError,
     r"movedim: Invalid source or destination dims: source \(\[0, 1\] dims\) should contain the same number of dims "
     r"as destination \(\[0\] dims\)"),
    (lambda: _arange((2, 3, 4)).movedim((0, 0), (1, 2)), RuntimeError,
     r"movedim: repeated dim in `source` \(\[0, 0\]\)"),
    (lambda: _arange((2, 3, 4)).movedim((0, 1), (1, 1)), RuntimeError,
     r"movedim: repeated dim in `destination` \(\[1, 1\]\)"),
    (lambda: _arange((2, 3)).unflatten(0, (2, 2)), RuntimeError,
     r"unflatten: Provided sizes \[2, 2\] don't multiply up to the size of dim 0 \(2\) in the input tensor"),
    (lambda: _arange((2, 3)).unflatten(1, ()), RuntimeError, "unflatten: sizes must be non-empty"),
    (lambda: _arange((2, 3)).flatten(1, 0), RuntimeError,
     "flatten\\(\\) has invalid args: start_dim cannot come after end_dim"),
    (lambda: _arange((1, 3)).squeeze((0, 0)), RuntimeError, "dim 0 appears multiple times in the list of dims"),
    (lambda: _arange((3,)).unsqueeze(2), IndexError,
     r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"),
    (lambda: _arange((2, 3)).permute(0), RuntimeError, r"number of dimensions in the tensor input does not match"),
    (lambda: _arange((2, 3)).t().contiguous(memory_format=jt.preserve_format), RuntimeError,
     "preserve memory format is unsupported by the contiguous operator"),
    (lambda: _arange((2, 3)).clone(memory_format="C"), TypeError, "argument 'memory_format' must be"),
    (lambda: jt.ops.registry.call(jt.ops.registry.OPS["slice"], (_arange((3,)), 0, None, None, 0)), ValueError,
     "step must be greater than zero"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS)
def test_errors_match_torch(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_slice_op_clamps_like_python_slices():
    x = _arange((5,))
    slice_op = jt.ops.registry.OPS["slice"]
    for start, end, step in [(None, None, 1), (-10, 10, 2), (4, 1, 1), (-2, None, 3), (7, None, 1), (1, -1, 2)]:
        r = jt.ops.registry.call(slice_op, (x, 0, start, end, step))
        np.testing.assert_array_equal(r.numpy(), x.numpy()[start:end:step])
        assert r.untyped_storage() is x.untyped_storage()


def test_broadcast_tensors_and_shapes():
    a, b = jt.arange(3.0).reshape(3, 1), jt.zeros(4)
    x, y = jt.broadcast_tensors(a, b)
    assert x.shape == y.shape == (3, 4) and x._stride == (1, 0) and x.untyped_storage() is a.untyped_storage()
    np.testing.assert_array_equal(x.numpy(), np.broadcast_to(a.numpy(), (3, 4)))
    assert jt.broadcast_shapes((2, 1), (3,), 3) == jt.Size([2, 3])
    with pytest.raises(RuntimeError, match=r"size of tensor a \(2\) must match the size of tensor b \(3\)"):
        jt.broadcast_tensors(jt.ones(2), jt.ones(3))


def test_movedim_of_a_0d_tensor_is_the_tensor():
    """Found by the fuzzer: movedim(-1, -1) of a 0-d tensor raised IndexError (torch wraps the dims of a
    0-d tensor as if it had one)."""
    x = jt.tensor(True)
    for src, dst in ((-1, -1), (0, 0), ([0], [-1])):
        got = x.movedim(src, dst)
        assert got.shape == torch.tensor(True).movedim(src, dst).shape == ()
        assert got.untyped_storage() is x.untyped_storage()
    with pytest.raises(IndexError):
        x.movedim(1, 0)


def test_compact_window_places_a_view_in_its_base_laid_out_contiguously():
    from jitorch.ops.views import compact_window
    base = jt.arange(15.0)
    base.as_strided_((2, 3), (6, 2), 1)  # elements at 1, 3, 5, 7, 9, 11 of the storage
    assert compact_window(base, base.t()) == ((1, 3), 0)
    assert compact_window(base, base[1, 1:]) == ((1,), 4)
    assert compact_window(base, base.diagonal()) == ((4,), 0)
    assert compact_window(base, base[:, :0]) == ((0, 0), 0)
    for outside in (base.as_strided((2,), (1,), 1), base.as_strided((1,), (1,), 0)):
        assert compact_window(base, outside) is None  # memory that is no element of the base
    assert compact_window(base, base.as_strided((2,), (4,), 5)) == ((2,), 2)  # (0, 2) then (1, 1)
    column_major = jt.arange(6.0)
    column_major.as_strided_((2, 3), (1, 2))
    assert compact_window(column_major, column_major.as_strided((2,), (1,), 1)) is None  # (1, 0) then (0, 1)
    overlapping = jt.arange(6.0)
    overlapping.as_strided_((2, 3), (1, 1))
    assert compact_window(overlapping, overlapping[0]) is None


@pytest.mark.parametrize("dtype, src_dtype", [("float32", "float64"), ("int32", "float64"), ("bfloat16", "float32"),
                                             ("float64", "int64"), ("bool", "float32")])
def test_as_strided_scatter_casts_src_of_another_dtype_like_torch(dtype, src_dtype):
    """as_strided_scatter raised "expected src and self to have the same dtype" where torch casts ``src`` to
    ``self``'s dtype (fuzz seed 2201267), eager and compiled."""
    base = np.arange(-3.0, 3.0).reshape(2, 3)
    src = np.array([1.123456789, -1.75, 0.5])
    want = torch.as_strided_scatter(torch.tensor(base).to(getattr(torch, dtype)),
                                    torch.tensor(src).to(getattr(torch, src_dtype)), (3,), (2,), 0)
    x, s = jt.tensor(base).to(getattr(jt, dtype)), jt.tensor(src).to(getattr(jt, src_dtype))
    for fn in (jt.as_strided_scatter, jt.compile(lambda a, b, *rest: jt.as_strided_scatter(a, b, *rest))):
        got = fn(x, s, (3,), (2,), 0)
        assert got.dtype is getattr(jt, dtype)
        assert torch.equal(torch.tensor(got.float().numpy()), want.float())


def test_as_strided_scatter_gradient_of_a_src_of_another_dtype_has_its_dtype():
    """(torch's gradient of ``self`` is wrong, docs/differences-from-torch.md: these are the true ones.)"""
    x, src = jt.zeros(2, 2, requires_grad=True), jt.ones(2, dtype=jt.float64, requires_grad=True)
    jt.as_strided_scatter(x, src, (2,), (3,), 0).mul(jt.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert src.grad.dtype is jt.float64 and src.grad.tolist() == [1.0, 4.0]
    assert x.grad.tolist() == [[0.0, 2.0], [3.0, 0.0]]


# view(dtype): the same memory read as another dtype ------------------------------------------------

@pytest.mark.parametrize("make, dtype", [
    ("torch.arange(6.).reshape(2, 3)", "int32"), ("torch.arange(6.).reshape(2, 3)", "uint8"),
    ("torch.arange(6.).reshape(2, 3)", "float16"), ("torch.arange(6.).reshape(2, 3)[:, 1:]", "int16"),
    ("torch.arange(8, dtype=torch.uint8).reshape(2, 4)", "float32"), ("torch.tensor([1.5, -2.])", "bfloat16"),
    ("torch.tensor([True, False])", "uint8"), ("torch.tensor(1.)", "int32"), ("torch.ones(0, dtype=torch.uint8)", "float32"),
])
def test_view_dtype_reinterprets_bits_as_torch(make, dtype):
    expected = eval(make, {"torch": torch}).view(getattr(torch, dtype))
    x = eval(make, {"torch": jt})
    got = x.view(getattr(jt, dtype))
    assert got.dtype is getattr(jt, dtype)
    assert (got.shape, got.stride(), got.storage_offset()) == (expected.shape, expected.stride(),
                                                               expected.storage_offset())
    np.testing.assert_array_equal(got.float().numpy(), expected.float().numpy())
    assert got.data_ptr() == x.data_ptr() and got.untyped_storage() is x.untyped_storage()


def test_view_dtype_shares_memory_and_version_counter_but_is_no_autograd_view():
    x = jt.zeros(4)
    v = x.view(jt.int32)
    v[1] = 1065353216  # the bits of 1.0f
    assert x.tolist() == [0.0, 1.0, 0.0, 0.0] and x._version == v._version == 1
    x.add_(1)
    assert v._version == 2 and v[0].item() == 1065353216
    assert v._base is None
    assert not jt.ones(2, requires_grad=True).view(jt.float32).requires_grad  # as torch: not differentiable


@pytest.mark.parametrize("make, dtype", [
    ("torch.arange(6.).reshape(2, 3)", "float64"), ("torch.arange(6.).reshape(2, 3)[:, :2]", "float64"),
    ("torch.arange(6.).reshape(2, 3)[:, 1:]", "float64"), ("torch.arange(6.).reshape(2, 3).t()", "uint8"),
    ("torch.tensor(1.)", "uint8"), ("torch.arange(8, dtype=torch.uint8)[1:5]", "float32"),
])
def test_view_dtype_errors_are_torchs(make, dtype):
    with pytest.raises(RuntimeError) as expected:
        eval(make, {"torch": torch}).view(getattr(torch, dtype))
    with pytest.raises(RuntimeError) as got:
        eval(make, {"torch": jt}).view(getattr(jt, dtype))
    assert str(got.value) == str(expected.value)


def test_a_remembered_contiguous_view_geometry_serves_only_contiguous_tensors_of_that_shape():
    # the geometry of x.view(shape) is remembered per (x's shape, shape) for contiguous x: a transposed or
    # offset tensor of the same shape gets its own geometry (or torch's error), never the remembered one
    x = jt.arange(12.0).view(3, 4)
    assert x.view(4, 3).stride() == (3, 1) and x.view(4, 3).stride() == (3, 1)
    assert x[1:].reshape(8).storage_offset() == 4 and x[1:].reshape(8).tolist() == list(range(4, 12))
    t = jt.arange(12.0).view(4, 3).t()  # (3, 4) too, strides (1, 3)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.view(4, 3)
    assert t.reshape(4, 3).tolist() == torch.arange(12.0).view(4, 3).t().reshape(4, 3).tolist()


def _geometry_or_error(T, make):
    """(shape, strides, storage offset, whether a view, values) of ``make(T)``, or the error's type and message."""
    try:
        t = make(T)
    except (RuntimeError, TypeError) as e:
        return type(e).__name__, str(e).replace("torch", "jitorch").replace("Long", "")
    return tuple(t.shape), t.stride(), t.storage_offset(), t._base is not None, t.tolist()


@pytest.mark.parametrize("shape, size", [((1, 1), (3, 1)), ((2, 1, 3), (2, 4, 3)), ((2, 3), (2, 3)), ((1, 3), (0, 3)),
                                         ((2, 1), (2, -1)), ((2, 3), (4, 3)), ((0, 1), (0, 5)),
                                         ((2, 1), (1, 2, 5))])
def test_expand_shortcut_gives_torchs_geometry_and_errors(shape, size):
    # same-rank sizes take `views._expand`'s loop-free branch; the rest its general loop
    def make(T):
        return T.arange(float(np.prod(shape))).reshape(shape).expand(*size)
    assert _geometry_or_error(jt, make) == _geometry_or_error(torch, make)


@pytest.mark.parametrize("shape, dims", [((2, 3, 4), (0, -1)), ((2, 3, 4), (1, 2)), ((2, 3, 4), (0, 1)), ((0, 3), (0, -1)),
                                         ((5,), (0, -1)), ((), (0, -1)), ((2, 3), (1, 0))])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_flatten_shortcut_gives_torchs_geometry(shape, dims, layout):
    def make(T):
        x = T.arange(float(np.prod(shape))).reshape(shape)
        if layout == "transposed" and x.dim() > 1:
            x = x.transpose(0, 1).contiguous().transpose(0, 1)
        elif layout == "sliced" and x.dim() > 1 and x.shape[-1] > 1:
            x = T.arange(float(np.prod(shape) * 2)).reshape(*shape[:-1], 2 * shape[-1])[..., ::2]
        return x.flatten(*dims)
    got, want = _geometry_or_error(jt, make), _geometry_or_error(torch, make)
    # (a copy: jitorch's is a view of its copy where torch's is the copy itself; documented)
    assert got[:3] + got[4:] == want[:3] + want[4:] if len(want) == 5 and not want[3] else got == want


def test_view_of_plain_ints_takes_the_first_overload_and_keeps_its_errors():
    x = jt.arange(6.0)
    assert x.view(2, 3).stride() == (3, 1) and x.view((3, 2)).shape == (3, 2) and x.view(-1, 2).shape == (3, 2)
    assert x.view(jt.int32).dtype is jt.int32 and x.view(size=(6,)).shape == (6,)
    with pytest.raises(RuntimeError, match=r"shape '\[4\]' is invalid for input of size 6"):
        x.view(4)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.view(2, 3).t().view(6)
    with pytest.raises(TypeError, match="received an invalid combination of arguments"):
        x.view(2.0)


@pytest.mark.parametrize("grad", ["no history", "history", "no_grad"])
@pytest.mark.parametrize("op", ["reshape", "flatten", "reshape_as"])
def test_reshape_that_copies_gives_the_copy_itself_as_torch(op, grad):
    """``reshape``/``flatten`` of a tensor whose strides allow no view return torch's ``_unsafe_view`` of a copy: no
    view (``_base`` None); jitorch's was a view of the copy. An in-place write into it changes neither ``x`` nor
    anything else, and the gradient through the write is torch's."""
    calls = {"reshape": lambda t: t.reshape(12), "flatten": lambda t: t.flatten(),
             "reshape_as": lambda t: t.reshape_as(t.new_zeros(2, 6))}
    found = []
    for T in (torch, jt):
        x = T.arange(12.0).view(3, 4).requires_grad_(grad != "no history")
        if grad == "no_grad":
            with T.no_grad():
                r = calls[op](x.t())
        else:
            r = calls[op](x.t())
        if grad == "history":
            r.mul_(2)
            r.sum().backward()
        else:
            r.mul_(2)
        found.append((r._base is None, r.requires_grad, r.is_leaf, r._version, r.tolist(), x.tolist(),
                      None if x.grad is None else x.grad.tolist()))
    assert found[1] == found[0]
    assert found[0][0]


@pytest.mark.parametrize("shape,size", [((3, 4), (-2, 2)), ((1,), (-2,)), ((3,), (-2, 3)), ((2, 1), (-2, 3)),
                                        ((2, 1), (2, -5)), ((3,), (-1, 3)), ((3,), (0, -2)), ((2,), (5, -1, 2)),
                                        ((), (-2,)), ((1, 1), (-2, -3))])
def test_expand_with_negative_sizes_raises_torchs_error(shape, size):
    """Sizes below -1: torch's checks run from the last dim (its first error is the last dim's), a size below -1
    passes them and its numel check refuses it; jitorch's message named the first dim's size as invalid."""
    found = []
    for T in (torch, jt):
        with pytest.raises(RuntimeError) as info:
            T.zeros(shape).expand(*size)
        found.append(str(info.value))
    assert found[1] == found[0]


def test_reshape_and_permute_refuse_with_torchs_messages():
    """Found comparing with torch (stop 35): an inferred size over no elements (``zeros(0, 3).view(0, -1)``) is
    torch's "can be any value and is ambiguous", not "is invalid for input of size 0"; permute's repeated dim is
    "duplicate dims are not allowed" (a reduction's stays "appears multiple times")."""
    def errors(T):
        out = []
        for fn in (lambda: T.zeros(0, 3).view(0, -1), lambda: T.zeros(0, 3).reshape(-1, 0),
                   lambda: T.zeros(2, 0).reshape(3, -1), lambda: T.ones(6).view(0, -1), lambda: T.ones(6).view(4, -1),
                   lambda: T.ones(2, 3, 4).permute(0, 0, 1), lambda: T.ones(2, 3, 4).permute(0, -3, 1),
                   lambda: T.ones(2, 3).sum((0, 0))):
            try:
                out.append(tuple(fn().shape))
            except RuntimeError as e:
                out.append(str(e))
        return out
    want = errors(torch)
    assert errors(jt) == want
    assert "ambiguous" in want[0] and want[2] == (3, 0) and want[5] == "permute(): duplicate dims are not allowed."


def test_narrow_copy_from_a_negative_start_passes_the_gradient_of_the_elements_taken():
    """Fuzz seed 7500944: torch 2.13 gives zeros for ``narrow_copy(-1, -1, 1)`` (its backward slices the
    empty ``[-1, 0)``); jitorch's gradient is the one torch gives for the same elements from a start of 4."""
    x = jt.arange(15.0).reshape(3, 5).requires_grad_()
    x.narrow_copy(-1, -1, 1).mul(jt.tensor([[1.0], [2.0], [3.0]])).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0, 3.0]]


def test_views_of_strided_tensors_remembered_per_layout_give_torchs_geometry_and_errors():
    """A view of a tensor of another layout than the contiguous one is remembered per (shape, strides, new
    shape) (`views._STRIDED_VIEWS`): a second call gives the first's geometry at its own offset, and the same
    shapes over other strides get their own geometry, or torch's error."""
    torch = pytest.importorskip("torch")
    from jitorch.ops import views
    views._STRIDED_VIEWS.clear()
    a = np.arange(2 * 5 * 12, dtype=np.float32).reshape(2, 5, 12)
    x, t = jt.tensor(a), torch.from_numpy(a)
    for _ in range(2):  # (the second round from what the first remembered)
        for lo in (0, 4, 8):  # (a GPT's q, k and v: slices of one product's rows, each at its offset)
            got, want = x[:, :, lo:lo + 4].view(2, 5, 2, -1), t[:, :, lo:lo + 4].view(2, 5, 2, -1)
            assert (got.shape, got.stride(), got.storage_offset()) == (tuple(want.shape), want.stride(),
                                                                       want.storage_offset())
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert ((2, 5, 4), (60, 12, 1), (2, 5, 2, -1)) in views._STRIDED_VIEWS
    # the same shapes over other strides: their own geometry, or the error
    y, u = x.transpose(0, 1)[:, :, :4], t.transpose(0, 1)[:, :, :4]
    got, want = y.reshape(5, 2, 2, 2), u.reshape(5, 2, 2, 2)
    assert got.stride() == want.stride()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.transpose(1, 2)[:, :4].view(2, -1)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.transpose(1, 2)[:, :4].view(2, -1)
