"""(Log-)softmax along a dim of size 1 (`reductions._softmax_one_wide`, `_log_softmax_one_wide`): fewer NumPy calls
than the general formulas with each row's max and sum the element itself, bit for bit, on every class of value
(NaN payloads of both signs, quiet and signalling, infinities, zeros, subnormals); the eager shortcut's results
are the general path's, torch's values and autograd."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.ops import reductions, registry
from tests.support import general_path

BITS = {np.float32: (np.uint32, 23), np.float64: (np.uint64, 52)}


def _every_kind_of_value(dtype, n=20000, seed=0):
    """Random bit patterns, as many NaNs with random payloads and signs, and the special values."""
    dtype = np.dtype(dtype).type
    uint, mantissa = BITS[dtype]
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, np.iinfo(uint).max, size=n, dtype=uint, endpoint=True)
    exponent = uint(((1 << (8 * np.dtype(uint).itemsize - 1 - mantissa)) - 1) << mantissa)
    nans = (bits & uint((1 << mantissa) - 1)) | exponent | (bits & uint(1 << (8 * np.dtype(uint).itemsize - 1)))
    nans = nans[(nans & uint((1 << mantissa) - 1)) != 0]
    info = np.finfo(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, info.max, -info.max, info.tiny,
                        info.smallest_subnormal, 1.0, -1.0], dtype)
    return np.concatenate([bits.view(dtype), nans.view(dtype), special])


def _general_softmax(a):
    """The general formula with the row's max and sum its one element (the code this file's formulas replace)."""
    e = np.exp(a - a)
    return e / e


def _general_log_softmax(a):
    shifted = a - a
    return np.subtract(shifted, np.log(np.exp(shifted)), out=shifted)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(-1, 1), (1, -1, 1), (-1,)])
def test_one_wide_formulas_give_the_general_formulas_bits(dtype, shape):
    uint = BITS[dtype][0]
    a = _every_kind_of_value(dtype).reshape(shape)
    with np.errstate(all="ignore"):
        pairs = [(reductions._softmax_one_wide(a), _general_softmax(a)),
                 (reductions._log_softmax_one_wide(a), _general_log_softmax(a))]
        for v in a.reshape(-1)[::97]:  # (one element: NumPy's loops on a single element)
            one = np.full((1, 1), v, dtype)
            pairs += [(reductions._softmax_one_wide(one), _general_softmax(one)),
                      (reductions._log_softmax_one_wide(one), _general_log_softmax(one))]
    for got, want in pairs:
        np.testing.assert_array_equal(got.view(uint), want.view(uint))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
@pytest.mark.parametrize("shape, dim", [((1, 1), -1), ((3, 1), 1), ((1, 4), 0), ((2, 1, 3), 1), ((1,), 0),
                                        ((2, 3), -1)])
def test_eager_shortcut_gives_the_general_paths_bits(name, dtype, shape, dim):
    values = _every_kind_of_value(dtype.np, n=64, seed=1)[-int(np.prod(shape)):]
    x = jt.tensor(values.reshape(shape), dtype=dtype)
    got = registry.OPS[name].fast((x, dim, None))
    with general_path():
        want = getattr(jt, name)(x, dim)
    assert got.shape == want.shape and got.stride() == want.stride() and got.dtype is dtype
    uint = BITS[dtype.np.type][0]
    np.testing.assert_array_equal(got.numpy().view(uint), want.numpy().view(uint))
    np.testing.assert_array_equal(getattr(x, name)(dim).numpy().view(uint), want.numpy().view(uint))


def test_one_wide_softmax_of_a_non_contiguous_tensor_takes_the_general_formula():
    x = jt.tensor([[1.0, 2.0, float("nan")]]).t()  # (3, 1) with strides (1, 1): contiguous in torch's sense
    y = jt.tensor([[1.0], [2.0], [float("inf")]])[::2]  # (2, 1), stepped
    for t in (x, y):
        with general_path():
            want = t.softmax(1)
        np.testing.assert_array_equal(t.softmax(1).numpy().view(np.uint32), want.numpy().view(np.uint32))


def test_one_wide_softmax_matches_torch_and_records_its_node():
    torch = pytest.importorskip("torch")
    a = np.array([[0.5], [-3.0], [np.inf], [np.nan]], np.float32)
    for name in ("softmax", "log_softmax"):
        got = getattr(jt.tensor(a), name)(-1).numpy()
        want = getattr(torch.from_numpy(a), name)(-1).numpy()
        np.testing.assert_array_equal(got, want)  # (NaN where torch's is NaN)
    x = jt.tensor([[2.0], [-1.0]], requires_grad=True)
    y = x.softmax(-1)
    assert y.grad_fn.name() == "SoftmaxBackward0"
    (y * jt.tensor([[3.0], [4.0]])).sum().backward()
    assert x.grad.tolist() == [[0.0], [0.0]]
    with jt.no_grad():
        assert x.log_softmax(1).grad_fn is None
