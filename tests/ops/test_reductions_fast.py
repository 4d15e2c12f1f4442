"""The eager shortcut of float sums and means over dims given as Python ints: NumPy's values,
torch's shapes and errors, and the backward node when the input requires grad."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.ops import reductions, registry
from jitorch.runtime import summation
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


# float32/float64 bit patterns a sum must keep as the general path does: signed zeros, infinities of both signs,
# quiet and signalling NaNs of both signs with payloads, subnormals, the largest finite values
_SPECIAL_BITS = {np.float32: [0x80000000, 0x00000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFC12345, 0x7F800001,
                              0xFF812345, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000],
                 np.float64: [0x8000000000000000, 0, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000001,
                              0xFFF8000000012345, 0x7FF0000000000001, 0x0000000000000001, 0x7FEFFFFFFFFFFFFF,
                              0xFFEFFFFFFFFFFFFF, 0x3FF0000000000000]}


def _special(dtype, size, rng):
    bits = np.array(_SPECIAL_BITS[dtype], np.uint32 if dtype is np.float32 else np.uint64)
    return bits[rng.integers(0, len(bits), size)].view(dtype)


def _full_sum_inputs(dtype):
    """(label, tensor): every shape class and layout the full sum takes, of special values and of normal ones."""
    rng = np.random.default_rng(11)
    for shape in [(), (1,), (1, 1), (3,), (2, 3), (0,), (4, 0), (8192,), (8193,), (3, 3000)]:
        size = int(np.prod(shape))
        yield f"normal {shape}", jt.from_numpy(rng.standard_normal(size).astype(dtype).reshape(shape))
        for k in range(4 if size < 100 else 1):
            yield f"special {shape} {k}", jt.from_numpy(_special(dtype, size, rng).reshape(shape))
    for bits in _SPECIAL_BITS[dtype]:  # (each alone: a sum of one element is 0 + it)
        yield f"one {bits:x}", jt.from_numpy(np.array([bits], _special(dtype, 0, rng).view(f"u{dtype(0).itemsize}").dtype)
                                             .view(dtype))
    for k in range(3):
        base = jt.from_numpy(np.where(rng.random((6, 8)) < 0.3, _special(dtype, 48, rng).reshape(6, 8),
                                      rng.standard_normal((6, 8)).astype(dtype)))
        yield f"transposed {k}", base.T
        yield f"strided {k}", base[::2, 1::3]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_full_sum_is_reduced_into_a_0d_array_with_the_general_paths_bits(dtype):
    """``x.sum()`` of a float tensor reduces straight into a 0-d array (``np.add.reduce`` with a 0-d ``out``), not
    a NumPy scalar made an array after: the general path's bits for every shape and layout, special values included
    (signed zeros, NaN payloads, signalling NaNs, overflow), above `summation.BLOCK` elements too, and torch's."""
    torch = pytest.importorskip("torch")
    for label, x in _full_sum_inputs(dtype):
        got = x.sum()
        with general_path():
            want = x.sum()
        assert got.shape == () and got.stride() == () and got.is_contiguous() and got.dtype == want.dtype
        assert got.numpy().tobytes() == want.numpy().tobytes(), label
        if x.numel() <= summation.BLOCK:  # (beyond it `add_reduce` sums in blocks, under every NumPy alike)
            assert got.numpy().tobytes() == np.asarray(np.add.reduce(x.numpy(), None)).tobytes(), label
        t = torch.from_numpy(x.numpy().copy()).sum().numpy()
        if np.isnan(t):  # (NaN payloads are each library's own)
            assert np.isnan(got.item()), label
        elif x.numel() <= 8:  # (beyond, torch adds in another order: within rounding)
            assert got.numpy().tobytes() == t.tobytes(), label
        else:
            np.testing.assert_allclose(got.numpy(), t, rtol=8 * np.finfo(dtype).eps, err_msg=label)
    assert np.float32(3).item() == jt.tensor([1.0, 2.0]).sum().item()


def test_a_full_sum_of_a_tensor_requiring_grad_records_its_node_and_other_sums_take_their_paths():
    x = jt.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    s = x.sum()
    assert s.grad_fn is not None and s.item() == 10.0
    s.backward()
    assert x.grad.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    y = jt.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert y.sum(keepdim=True).shape == (1, 1) and y.sum((0, 1)).shape == () and y.sum(0).tolist() == [4.0, 6.0]
    assert y.sum([]).item() == 10.0 and y.sum(dtype=jt.float64).dtype == jt.float64
