"""The eager shortcut of float sums and means over dims given as Python ints: NumPy's values,
torch's shapes and errors, and the backward node when the input requires grad."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.ops import reductions, registry
from tests.support import general_path, random_array, tensor_and_array

REFS = {"sum": np.sum, "mean": np.mean, "nansum": np.nansum}


@st.composite
def reduction_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    nd = len(shape)
    if nd == 0:
        dim = None
    else:
        dims = draw(st.lists(st.integers(-nd, nd - 1), max_size=nd, unique_by=lambda d: d % nd))
        dim = draw(st.sampled_from([None, tuple(dims), list(dims)] + ([dims[0]] if dims else [])))
    return shape, dim, draw(st.booleans())


@given(case=reduction_case(), name=st.sampled_from(sorted(REFS)), dtype=st.sampled_from([jt.float32, jt.float64]),
       layout=st.sampled_from(["contiguous", "transposed", "strided", "offset"]), seed=st.integers(0, 2**16))
def test_float_reductions_match_numpy(case, name, dtype, layout, seed):
    shape, dim, keepdim = case
    x, expected = tensor_and_array(random_array(shape, dtype, np.random.default_rng(seed)), layout)
    got = getattr(x, name)(dim, keepdim=keepdim)
    axis = None if dim is None or (not isinstance(dim, int) and not dim) else (
        tuple(d % len(shape) for d in dim) if not isinstance(dim, int) else dim)
    want = np.asarray(REFS[name](expected.astype(np.float64), axis=axis, keepdims=keepdim))
    assert got.dtype is dtype and tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_dim_out_of_range_raises():
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        jt.ones(2, 3).sum(2)


def test_a_repeated_dim_raises():
    with pytest.raises(RuntimeError, match="dim 1 appears multiple times in the list of dims"):
        jt.ones(2, 3).mean((1, -1))


def test_an_integer_sum_still_accumulates_as_int64():
    assert jt.tensor([1, 2], dtype=jt.int32).sum(0).dtype is jt.int64


def test_a_reduction_of_a_tensor_requiring_grad_records_its_node():
    x = jt.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x.sum(0)
    assert y.grad_fn.name() == "SumBackward0"
    (y * jt.tensor([1.0, 10.0])).sum().backward()
    assert x.grad.tolist() == [[1.0, 10.0], [1.0, 10.0]]
    with jt.no_grad():
        assert x.mean(-1).grad_fn is None


def _log_softmax_ref(a, axis):
    shifted = a - a.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), data=st.data(),
       dtype=st.sampled_from([jt.float32, jt.float64]), log=st.booleans(), seed=st.integers(0, 2**16))
def test_softmax_along_a_dim_matches_numpy(shape, data, dtype, log, seed):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = random_array(shape, dtype, np.random.default_rng(seed))
    got = getattr(jt.tensor(a), "log_softmax" if log else "softmax")(dim)
    want = _log_softmax_ref(a.astype(np.float64), dim)
    assert got.dtype is dtype and tuple(got.shape) == shape
    np.testing.assert_allclose(got.numpy(), want if log else np.exp(want), rtol=1e-5, atol=1e-6)


def test_softmax_of_a_0d_tensor():
    assert jt.tensor(2.0).log_softmax(0).item() == 0.0 and jt.tensor(2.0).softmax(-1).item() == 1.0


def test_softmax_along_a_dim_out_of_range_raises():
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-1, 0\], but got 1\)"):
        jt.ones(2).softmax(1)


def test_log_softmax_of_a_tensor_requiring_grad_records_its_node():
    x = jt.tensor([[1.0, 2.0, 3.0]], dtype=jt.float64, requires_grad=True)
    y = x.log_softmax(-1)
    assert y.grad_fn.name() == "LogSoftmaxBackward0"
    y[0, 0].backward()
    p = np.exp(_log_softmax_ref(np.array([[1.0, 2.0, 3.0]]), -1))
    np.testing.assert_allclose(x.grad.numpy(), np.array([[1.0, 0.0, 0.0]]) - p)


def _softmax_by_wrappers(a, axis, log):
    """softmax and log_softmax as written with NumPy's np.max/np.sum wrappers (their reductions' bits)."""
    shifted = a - np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    if log:
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple), data=st.data(),
       dtype=st.sampled_from([jt.float32, jt.float64]), log=st.booleans(), seed=st.integers(0, 2**16))
def test_softmax_and_mean_give_the_bits_of_numpys_wrappers(shape, data, dtype, log, seed):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = random_array(shape, dtype, np.random.default_rng(seed), low=-30, high=30)
    got = getattr(jt.tensor(a), "log_softmax" if log else "softmax")(dim).numpy()
    np.testing.assert_array_equal(got, _softmax_by_wrappers(a, dim % len(shape), log))
    if a.size:
        mean = jt.tensor(a).mean(dim).numpy()
        total = np.sum(a, axis=dim % len(shape))
        np.testing.assert_array_equal(mean, total / total.dtype.type(a.shape[dim]))  # (torch's count in the dtype)


def test_mean_divides_by_the_count_rounded_to_its_dtype_as_torch():
    """torch divides a float32 sum by its count as a float32: 2**24 + 3 threes average to 2.9999998. jitorch's
    mean divided a sum of one element (a NumPy scalar) by the Python count, which NumPy 1.26 does in float64
    (3.0 there, torch's under NumPy 2); a sum over some dims (an array) was divided in float32 under both."""
    torch = pytest.importorskip("torch")
    n = 2**24 + 3
    for keepdim in (False, True):
        got = jt.tensor(3.0).expand(n).mean(0, keepdim=keepdim)
        want = torch.tensor(3.0).expand(n).mean(0, keepdim=keepdim)
        assert got.dtype is jt.float32 and got.tolist() == want.tolist() != ([3.0] if keepdim else 3.0)


def test_a_reduction_over_one_int_dim_gives_the_general_paths_result_and_errors():
    x = jt.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    for dim in (0, 1, -1, -2):
        got = x.sum(dim)
        with general_path():
            want = x.sum(dim)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for dim in (2, -3):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\]"):
            x.sum(dim)
    with pytest.raises(IndexError, match=r"Dimension out of range"):
        jt.tensor(1.0).sum(1)


# values whose softmax rows of one element test the shortcut's bits: NaN (both signs), infinities, zeros of
# both signs, the largest and the smallest (subnormal) magnitudes
_EDGES = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 3e38, -3e38, 1e-45, -1e-45]


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [jt.float16, jt.float32, jt.float64])
def test_softmax_of_rows_of_one_element_gives_the_reductions_bits(dtype, log):
    """Rows of one element skip NumPy's max and sum (`reductions._one_wide`): bit for bit the reductions'
    result, through the shortcut and the general path, NaN and infinities included; torch's values."""
    torch = pytest.importorskip("torch")
    name = "log_softmax" if log else "softmax"
    with np.errstate(all="ignore"):
        a = np.array(_EDGES, np.float64).astype(dtype.np).reshape(len(_EDGES), 1)
        want = _softmax_by_wrappers(a.astype(np.float32) if dtype is jt.float16 else a, 1, log).astype(dtype.np)
    x = jt.tensor(a)
    assert reductions._one_wide(a, 1) and not reductions._one_wide(a.T, 1)
    assert dtype is jt.float16 or registry.OPS[name].fast((x, -1, None)) is not None  # (the shortcut serves it)
    with general_path():
        general = getattr(x, name)(-1).numpy()
    for got in (getattr(x, name)(-1).numpy(), general, getattr(jt, name)(x[:3], 1).numpy()):
        np.testing.assert_array_equal(got.view(np.uint8), want[:len(got)].view(np.uint8))
    t = getattr(torch, name)(torch.from_numpy(a), -1).numpy()
    np.testing.assert_array_equal(want, t)  # (NaN where torch's is NaN; its NaN's sign may differ)


def test_softmax_of_rows_of_one_element_not_contiguous_and_requiring_grad():
    """A transposed column takes the reductions (its rows are not C-contiguous); a tensor that requires grad
    records its node and gets torch's gradient."""
    torch = pytest.importorskip("torch")
    a = np.array([[0.5, -1.0, 2.0]], np.float32)
    x = jt.tensor(a).t()
    np.testing.assert_array_equal(x.softmax(-1).numpy(), np.ones((3, 1), np.float32))
    w = jt.tensor(a.T.copy(), requires_grad=True)
    tw = torch.tensor(a.T.copy(), requires_grad=True)
    for lib, v in ((jt, w), (torch, tw)):
        (lib.log_softmax(v, 1) * 2 + lib.softmax(v, 1)).sum().backward()
    assert w.grad_fn is None and w.softmax(1).grad_fn.name() == "SoftmaxBackward0"
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
