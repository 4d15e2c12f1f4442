"""cat and stacking, flip, roll, repeat, tril/triu, sorting and selection, against NumPy."""

from __future__ import annotations

import re
from functools import reduce
from math import prod

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.ops import registry
from tests.support import (ALL_DTYPES, FLOAT_DTYPES, LAYOUTS, assert_close, random_array, shapes, tensor_and_array,
                           to_numpy)

SEEDS = st.integers(0, 2 ** 16)


def make(shape, dtype, layout="contiguous", seed=0):
    return tensor_and_array(random_array(shape, dtype, np.random.default_rng(seed)), layout)


def assert_fresh(result, *inputs):
    """Kernels return new memory, never a view of an input."""
    for t in inputs:
        assert not np.shares_memory(result._array(), t._array())


def assert_same(result, expected, dtype):
    assert result.dtype is dtype
    assert_close(result, np.asarray(expected).astype(dtype.np))


# cat and its stacking relatives ------------------------------------------------------------

@pytest.mark.parametrize("op", ["cat", "concat", "concatenate"])
@given(shapes(1, 3, 0, 3), st.data(), st.lists(st.sampled_from(ALL_DTYPES), min_size=1, max_size=4), SEEDS)
def test_cat_promotes_and_joins_like_numpy(op, base, data, dtypes, seed):
    dim = data.draw(st.integers(-len(base), len(base) - 1))
    pairs = []
    for i, d in enumerate(dtypes):
        shape = list(base)
        shape[dim] = data.draw(st.integers(0, 3))
        pairs.append(make(tuple(shape), d, data.draw(st.sampled_from(LAYOUTS)), seed + i))
    dtype = reduce(jt.promote_types, dtypes)
    result = getattr(jt, op)([t for t, _ in pairs], dim)
    assert_same(result, np.concatenate([a.astype(dtype.np) for _, a in pairs], axis=dim), dtype)
    assert_fresh(result, *(t for t, _ in pairs))


def test_cat_skips_legacy_empty_vectors_but_promotes_with_them():
    x = jt.ones(2, 2)
    result = jt.cat([jt.empty(0, dtype=jt.float64), x, jt.empty(0)], dim=1)
    assert result.dtype is jt.float64 and result.shape == (2, 2)
    assert jt.cat([jt.empty(0), jt.empty(0)], 5).shape == (0,)


def test_cat_out_and_tuple_input():
    out = jt.empty(0, dtype=jt.int64)
    assert jt.cat((jt.ones(1, 2, dtype=jt.int64), jt.zeros(1, 2, dtype=jt.int64)), out=out) is out
    assert out.tolist() == [[1, 1], [0, 0]]


@given(shapes(0, 3, 0, 3), st.integers(1, 3), st.data(), st.sampled_from(ALL_DTYPES), SEEDS)
def test_stack_matches_numpy(shape, count, data, dtype, seed):
    dim = data.draw(st.integers(-len(shape) - 1, len(shape)))
    pairs = [make(shape, dtype, data.draw(st.sampled_from(LAYOUTS)), seed + i) for i in range(count)]
    result = jt.stack([t for t, _ in pairs], dim=dim)
    assert_same(result, np.stack([a for _, a in pairs], axis=dim), dtype)


def test_stack_promotes():
    result = jt.stack([jt.ones(2), jt.ones(2, dtype=jt.int64)], 1)
    assert result.dtype is jt.float32 and result.shape == (2, 2)


STACKERS = {"hstack": np.hstack, "vstack": np.vstack, "row_stack": np.vstack, "dstack": np.dstack,
            "column_stack": np.column_stack}


@pytest.mark.parametrize("op", STACKERS)
@given(shapes(0, 3, 0, 3), st.integers(1, 3), st.sampled_from(LAYOUTS), SEEDS)
def test_stackers_match_numpy(op, shape, count, layout, seed):
    pairs = [make(shape, jt.float32, layout, seed + i) for i in range(count)]
    result = getattr(jt, op)([t for t, _ in pairs])
    assert_same(result, STACKERS[op]([a for _, a in pairs]), jt.float32)


@pytest.mark.parametrize("op, shapes_", [
    ("hstack", [(2, 1), (2, 3)]), ("hstack", [(2,), (3,), ()]), ("vstack", [(3,), (2, 3)]),
    ("dstack", [(2, 3), (2, 3, 2)]), ("column_stack", [(3,), (3, 2)]), ("column_stack", [(), ()]),
])
def test_stackers_of_mixed_ranks(op, shapes_):
    pairs = [make(s, jt.int64, seed=i) for i, s in enumerate(shapes_)]
    assert_same(getattr(jt, op)([t for t, _ in pairs]), STACKERS[op]([a for _, a in pairs]), jt.int64)


# flip, roll, repeat, tile, repeat_interleave, tril, triu -----------------------------------

@given(shapes(0, 4, 0, 3), st.data(), st.sampled_from(ALL_DTYPES), st.sampled_from(LAYOUTS), SEEDS)
def test_flip_matches_numpy(shape, data, dtype, layout, seed):
    dims = data.draw(st.lists(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1), unique_by=lambda d: d % max(
        len(shape), 1), max_size=len(shape)))
    t, a = make(shape, dtype, layout, seed)
    result = jt.flip(t, dims)
    assert_same(result, np.flip(a, axis=tuple(dims)) if a.ndim else a, dtype)
    assert_fresh(result, t)
    if a.ndim >= 1:
        assert_same(t.flipud(), np.flipud(a), dtype)
    if a.ndim >= 2:
        assert_same(jt.fliplr(t), np.fliplr(a), dtype)


@given(shapes(0, 3, 0, 4), st.data(), st.sampled_from(LAYOUTS), SEEDS)
def test_roll_matches_numpy(shape, data, layout, seed):
    t, a = make(shape, jt.int64, layout, seed)
    if a.ndim and data.draw(st.booleans()):
        dims = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=3))
        shifts = data.draw(st.lists(st.integers(-7, 7), min_size=len(dims), max_size=len(dims)))
        result, expected = jt.roll(t, shifts, dims), np.roll(a, shifts, axis=dims)
    else:
        shift = data.draw(st.integers(-7, 7))
        result, expected = t.roll(shift), np.roll(a, shift)
    assert_same(result, expected, jt.int64)
    assert_fresh(result, t)


@given(shapes(0, 3, 0, 3), st.data(), st.sampled_from(ALL_DTYPES), st.sampled_from(LAYOUTS), SEEDS)
def test_repeat_and_tile_match_numpy(shape, data, dtype, layout, seed):
    t, a = make(shape, dtype, layout, seed)
    reps = data.draw(st.lists(st.integers(0, 3), min_size=len(shape), max_size=len(shape) + 2))
    padded = a.reshape((1,) * (len(reps) - a.ndim) + a.shape)
    result = t.repeat(*reps) if reps else t.repeat(())
    assert_same(result, np.tile(padded, reps), dtype)
    assert_fresh(result, t)
    tile_reps = data.draw(st.lists(st.integers(0, 3), max_size=len(shape) + 1))
    assert_same(jt.tile(t, tile_reps), np.tile(a, tile_reps), dtype)


@given(shapes(0, 3, 0, 3), st.integers(0, 3), st.data(), st.sampled_from(LAYOUTS), SEEDS)
def test_repeat_interleave_matches_numpy(shape, repeats, data, layout, seed):
    t, a = make(shape, jt.float32, layout, seed)
    dim = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)) if shape else None
    assert_same(jt.repeat_interleave(t, repeats, dim), np.repeat(a, repeats, axis=dim), jt.float32)


@pytest.mark.parametrize("op", ["tril", "triu"])
@given(shapes(2, 4, 0, 4), st.integers(-5, 5), st.sampled_from(ALL_DTYPES), st.sampled_from(LAYOUTS), SEEDS)
def test_triangles_match_numpy(op, shape, diagonal, dtype, layout, seed):
    t, a = make(shape, dtype, layout, seed)
    expected = getattr(np, op)(a, diagonal)
    result = getattr(jt, op)(t, diagonal)
    assert_same(result, expected, dtype)
    assert_fresh(result, t)
    inplace = jt.tensor(a, dtype=dtype)
    assert getattr(inplace, op + "_")(diagonal=diagonal) is inplace
    assert_same(inplace, expected, dtype)
    out = jt.empty(0, dtype=dtype)
    assert getattr(jt, op)(t, diagonal, out=out) is out
    assert_same(out, expected, dtype)


# sorting and selection -------------------------------------------------------------------------

def sort_values(shape, dtype, seed):
    """Values with many ties, and NaN, -0.0 and 0.0 among floats."""
    rng = np.random.default_rng(seed)
    if dtype is jt.bool:
        return rng.random(shape) < 0.5
    a = rng.integers(0 if dtype is jt.uint8 else -3, 4, size=shape).astype(np.float64)
    if dtype.is_floating_point:
        a[rng.random(shape) < 0.15] = np.nan
        a[a == 0] = np.where(rng.random(a[a == 0].shape) < 0.5, -0.0, 0.0)
    return a.astype(dtype.np)


def reference_order(a, dim, descending):
    """Stable sorting indices along ``dim`` by Python's stable sort, NaN as the largest value."""
    if a.ndim == 0:
        return np.zeros((), np.int64)
    moved = np.moveaxis(a.astype(np.float64), dim, -1)
    rows = moved.reshape(prod(moved.shape[:-1]), moved.shape[-1])
    order = np.array([sorted(range(len(row)), key=lambda i, r=row: (np.isnan(r[i]), np.nan_to_num(r[i])),
                             reverse=descending) for row in rows], dtype=np.int64)
    return np.moveaxis(order.reshape(moved.shape), -1, dim)


def take(a, indices, dim):
    return a if a.ndim == 0 else np.take_along_axis(a, indices, dim)


def assert_values(result, expected):
    """Values compared exactly, NaN included, through float64."""
    np.testing.assert_array_equal(to_numpy(result).astype(np.float64), expected.astype(np.float64))


@st.composite
def sort_inputs(draw, dtypes=ALL_DTYPES):
    shape = draw(shapes(0, 3, 0, 5))
    dtype = draw(st.sampled_from(dtypes))
    dim = draw(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1))
    t, a = tensor_and_array(sort_values(shape, dtype, draw(SEEDS)), draw(st.sampled_from(LAYOUTS)))
    return t, a, dim


@given(sort_inputs(), st.booleans())
def test_sort_is_stable_with_nan_largest(inputs, descending):
    t, a, dim = inputs
    order = reference_order(a, dim, descending)
    values, indices = jt.sort(t, dim, descending, stable=True)
    assert values.dtype is t.dtype and indices.dtype is jt.int64
    np.testing.assert_array_equal(to_numpy(indices), order)
    assert_values(values, take(a, order, dim))
    np.testing.assert_array_equal(to_numpy(jt.argsort(t, dim=dim, descending=descending, stable=True)), order)
    assert_fresh(values, t)


@given(sort_inputs(dtypes=[d for d in ALL_DTYPES if d is not jt.bool]), st.booleans(), st.data())
def test_topk_selects_like_a_sort(inputs, largest, data):
    t, a, dim = inputs
    n = a.shape[dim] if a.ndim else 1
    k = data.draw(st.integers(0, n))
    values, indices = t.topk(k, dim, largest)
    order = reference_order(a, dim, largest)
    expected = take(a, order, dim)
    expected = np.take(expected, range(k), axis=dim) if a.ndim else expected
    assert_values(values, expected)
    assert_values(values, take(a, to_numpy(indices), dim))  # ties may pick any index


@given(sort_inputs(dtypes=[d for d in ALL_DTYPES if d is not jt.bool]), st.booleans(), st.data())
def test_kthvalue_selects_like_a_sort(inputs, keepdim, data):
    t, a, dim = inputs
    n = a.shape[dim] if a.ndim else 1
    if n == 0:
        return
    k = data.draw(st.integers(1, n))
    values, indices = jt.kthvalue(t, k, dim, keepdim)
    sorted_a = take(a, reference_order(a, dim, False), dim)
    expected = np.take(sorted_a, [k - 1], axis=dim) if a.ndim else sorted_a
    index = to_numpy(indices)
    if a.ndim and not keepdim:
        expected, index = expected.squeeze(dim), np.expand_dims(index, dim)
    assert_values(values, expected)
    gathered = take(a, index, dim)
    assert_values(values, gathered if keepdim or not a.ndim else gathered.squeeze(dim))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sort_nan_placement(dtype):
    t = jt.tensor([3.0, float("nan"), 1.0, -0.0, 0.0], dtype=dtype)
    ascending = t.sort()
    assert ascending.indices.tolist() == [3, 4, 2, 0, 1]
    descending = t.sort(descending=True, stable=True)
    assert descending.indices.tolist() == [1, 0, 2, 3, 4]


def test_sort_out_and_namedtuple():
    values, indices = jt.empty(0), jt.empty(0, dtype=jt.int64)
    result = jt.sort(jt.tensor([2.0, 1.0]), out=(values, indices))
    assert result.values is values and result.indices is indices
    assert values.tolist() == [1.0, 2.0] and indices.tolist() == [1, 0]


# errors and meta rules ---------------------------------------------------------------------------

def _t(*shape, dtype=jt.float32):
    return jt.ones(shape, dtype=dtype)


SHAPE_ERRORS = [
    (lambda: jt.cat([_t(2, 2), _t(3, 3)], 1), RuntimeError,
     "Sizes of tensors must match except in dimension 1. Expected size 2 but got size 3 for tensor number 1 in the "
     "list."),
    (lambda: jt.cat([]), ValueError, "torch.cat(): expected a non-empty list of Tensors"),
    (lambda: jt.cat([_t(2, 2)], 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda: jt.cat([_t(2, 2), _t(2, 2, 1)]), RuntimeError, "Tensors must have same number of dimensions: got 2 and 3"),
    (lambda: jt.cat([_t(2), _t()]), RuntimeError, "zero-dimensional tensor (at position 1) cannot be concatenated"),
    (lambda: jt.cat(_t(2, 2)), TypeError, "cat(): argument 'tensors'"),
    (lambda: jt.stack([_t(2), _t(3)]), RuntimeError,
     "stack expects each tensor to be equal size, but got [2] at entry 0 and [3] at entry 1"),
    (lambda: jt.stack([]), RuntimeError, "stack expects a non-empty TensorList"),
    (lambda: jt.stack([_t(2)], 2), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda: jt.hstack([]), RuntimeError, "hstack expects a non-empty TensorList"),
    (lambda: jt.flip(_t(2, 3), (0, 0)), RuntimeError, "dim 0 appears multiple times in the list of dims"),
    (lambda: jt.flip(_t(2, 3), [2]), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda: jt.fliplr(_t(3)), RuntimeError, "Input must be >= 2-d."),
    (lambda: jt.flipud(_t()), RuntimeError, "Input must be >= 1-d."),
    (lambda: jt.roll(_t(2, 3), (1, 2), 0), RuntimeError, "shifts and dimensions must align. shifts: 2, dims:1"),
    (lambda: jt.roll(_t(2, 3), (1, 2)), RuntimeError, "shifts and dimensions must align. shifts: 2, dims:0"),
    (lambda: jt.roll(_t(2, 3), ()), RuntimeError, "`shifts` required"),
    (lambda: jt.roll(_t(), 1, 0), IndexError, "Dimension specified as 0 but tensor has no dimensions"),
    (lambda: _t(2, 3).repeat(2), RuntimeError,
     "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"),
    (lambda: _t(2, 3).repeat(-1, 2), RuntimeError, "Trying to create tensor with negative dimension -2: [-2, 6]"),
    (lambda: jt.repeat_interleave(_t(2, 3), -1, 0), RuntimeError, "Repeats must be non-negative"),
    (lambda: jt.tril(_t(3)), RuntimeError, "tril: input tensor must have at least 2 dimensions"),
    (lambda: jt.triu(_t()), RuntimeError, "triu: input tensor must have at least 2 dimensions"),
    (lambda: jt.sort(_t(), 1), IndexError, "Dimension out of range (expected to be in range of [-1, 0], but got 1)"),
    (lambda: jt.topk(_t(3), 4), RuntimeError, "selected index k out of range"),
    (lambda: jt.topk(_t(3), -1), RuntimeError, "selected index k out of range"),
    (lambda: jt.topk(_t(3, dtype=jt.bool), 1), RuntimeError, "topk does not support bool dtypes on CPU"),
    (lambda: jt.kthvalue(_t(3), 4), RuntimeError, "kthvalue(): selected number k out of range for dimension 0"),
    (lambda: jt.kthvalue(_t(3, 0), 1, 1), IndexError, "kthvalue(): Expected reduction dim 1 to have non-zero size."),
    (lambda: jt.kthvalue(_t(3, dtype=jt.bool), 1), NotImplementedError, "\"kthvalue_cpu\" not implemented for 'Bool'"),
]


@pytest.mark.parametrize("call, exc, message", SHAPE_ERRORS)
def test_shape_op_errors(call, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        call()


META_CALLS = [
    lambda t: jt.cat([t, t], 1), lambda t: jt.stack([t, t], -1), lambda t: jt.hstack([t, t]),
    lambda t: jt.dstack([t, t]), lambda t: jt.column_stack([t, t]), lambda t: t.flip([0]), lambda t: t.roll(1, 1),
    lambda t: t.repeat(2, 1, 3), lambda t: t.tile((2,)), lambda t: t.repeat_interleave(2, 1), lambda t: t.tril(1),
    lambda t: t.sort(0).indices, lambda t: t.topk(2).values, lambda t: t.kthvalue(1, 0).values,
    lambda t: t.argsort(),
]


@pytest.mark.parametrize("call", META_CALLS)
def test_meta_rules_need_no_data(call):
    expected = call(jt.ones(2, 3))
    result = call(jt.empty(2, 3, device="meta"))
    assert result.device.type == "meta"
    assert result.shape == expected.shape and result.dtype is expected.dtype


@given(st.lists(st.integers(-3, 3), max_size=12), st.booleans(), st.booleans())
def test_unique_matches_numpy(values, inverse, counts):
    x = jt.tensor(values, dtype=jt.int64)
    got = jt.unique(x, return_inverse=inverse, return_counts=counts)
    exp_values, exp_inverse, exp_counts = np.unique(np.array(values, dtype=np.int64), return_inverse=True,
                                                    return_counts=True)
    expected = (exp_values,) + (exp_inverse,) * inverse + (exp_counts,) * counts
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g.numpy(), e)
        assert g.dtype is jt.int64


def test_unique_along_a_dim_and_on_meta():
    m = jt.tensor([[1, 2], [1, 2], [3, 4]])
    assert m.unique(dim=0).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(NotImplementedError, match="depends on the data"):
        jt.unique(jt.ones(3, device="meta"))


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64, jt.float16, jt.bfloat16])
def test_unique_keeps_each_nan_and_sorts_the_half_types(dtype):
    # torch: every NaN is a value of its own, after the numbers; NumPy would merge them, and cannot sort
    # ml_dtypes' bfloat16 by value
    x = jt.tensor([1, float("nan"), -3, 2, float("nan"), 0, 1], dtype=dtype)
    values, inverse, counts = x.unique(return_inverse=True, return_counts=True)
    assert values.dtype is dtype and str(values.tolist()) == "[-3.0, 0.0, 1.0, 2.0, nan, nan]"
    assert inverse.tolist() == [2, 4, 0, 3, 5, 1, 2] and counts.tolist() == [1, 1, 2, 1, 1, 1]


# repeat_interleave with a tensor of repeats -----------------------------------------------------

@pytest.mark.parametrize("expr", [
    "torch.repeat_interleave(torch.tensor([1, 2, 0]))", "torch.repeat_interleave(torch.tensor([1, 2], dtype=torch.int32))",
    "torch.repeat_interleave(torch.tensor([], dtype=torch.long))", "torch.repeat_interleave(torch.tensor([1, 2]), output_size=3)",
    "x.repeat_interleave(torch.tensor([1, 2]), dim=0)", "x.repeat_interleave(torch.tensor([2]), dim=1)",
    "x.repeat_interleave(torch.tensor(2), dim=-1)", "x.repeat_interleave(torch.tensor([1, 2, 0, 1, 1, 1]))",
    "torch.repeat_interleave(x, torch.tensor([0, 3]), 0)", "torch.tensor(5.).repeat_interleave(torch.tensor([3]))",
])
def test_repeat_interleave_by_tensor_matches_torch(expr):
    expected = eval(expr, {"torch": torch, "x": torch.arange(6.).reshape(2, 3)})
    got = eval(expr, {"torch": jt, "x": jt.arange(6.).reshape(2, 3)})
    assert str(got.dtype).split(".")[1] == str(expected.dtype).split(".")[1]
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize("expr, error", [
    ("torch.repeat_interleave(torch.tensor([1., 2]))", NotImplementedError),
    ("torch.repeat_interleave(torch.tensor([[1, 2]]))", RuntimeError),
    ("torch.repeat_interleave(torch.tensor([1, -2]))", RuntimeError),
    ("x.repeat_interleave(torch.tensor([1, 2, 3]), dim=0)", RuntimeError),
    ("x.repeat_interleave(torch.tensor([[1, 2]]), dim=0)", RuntimeError),
    ("x.repeat_interleave(torch.tensor([1, 2]), dim=0, output_size=4)", RuntimeError),
    ("x.repeat_interleave(2, 0, output_size=5)", RuntimeError),
    ("torch.tensor(5.).repeat_interleave(torch.tensor([3]), dim=0)", IndexError),
])
def test_repeat_interleave_by_tensor_errors_are_torchs(expr, error):
    with pytest.raises(error) as expected:
        eval(expr, {"torch": torch, "x": torch.arange(6.).reshape(2, 3)})
    with pytest.raises(error) as got:
        eval(expr, {"torch": jt, "x": jt.arange(6.).reshape(2, 3)})
    assert str(got.value) == str(expected.value)


def test_repeat_interleave_by_tensor_differentiates_through_its_rows():
    x = jt.arange(6.).reshape(2, 3).requires_grad_()
    x.repeat_interleave(jt.tensor([1, 2]), dim=0).sum().backward()
    assert x.grad.tolist() == [[1.0] * 3, [2.0] * 3]


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_cat_fast_path_matches_torch_and_the_general_path(dim):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    pieces = [base[:, :3], base[:, 3:].T.copy().T, base[:, ::2][:, :3]]  # a view, a column-major copy, strided
    jts = [jt.from_numpy(p) for p in pieces]
    got = jt.cat(jts, dim)
    assert registry.OPS["cat"].fast((jts, dim)) is not None  # the fast path served this call
    expected = torch.cat([torch.from_numpy(p) for p in pieces], dim)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert got.is_contiguous() and got.stride() == expected.stride()
    general = registry.call(registry.OPS["cat"], (jts, dim))
    np.testing.assert_array_equal(general.numpy(), got.numpy())


def test_cat_fast_path_leaves_mixed_dtypes_bad_sizes_and_grad_to_the_general_path():
    x, y = jt.ones(2, 3), jt.zeros(1, 3)
    fast = registry.OPS["cat"].fast
    assert fast(([x, y.int()], 0)) is None and jt.cat([x, y.int()]).dtype is jt.float32
    assert fast(([x, y], 1)) is None
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 1"):
        jt.cat([x, y], 1)
    with pytest.raises(IndexError):
        jt.cat([x, y], 2)
    w = jt.ones(1, 3, requires_grad=True)
    assert fast(([x, w], 0)) is None and jt.cat([x, w]).grad_fn is not None
    with jt.no_grad():
        assert fast(([x, w], 0)) is not None
