"""(Log-)softmax of one row (`reductions._softmax_one_row`, `_log_softmax_one_row`: a sampling step's logits), the
row's max and sum taken into 0-d arrays rather than (1, 1) ones: bit for bit the general formulas on every class
of value (NaN payloads of both signs, quiet and signalling, infinities), under NumPy 1.x and 2.x; the eager
shortcut serves such rows with the general path's bits, torch's values and autograd."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import reductions, registry
from jitorch.runtime.summation import BLOCK, add_reduce
from tests.support import general_path

UINT = {np.float32: np.uint32, np.float64: np.uint64}
# widths around NumPy's SIMD vectors and its pairwise sum's blocks of 8 and 128, and the last width served
WIDTHS = [2, 3, 7, 8, 9, 16, 17, 31, 33, 65, 127, 128, 129, 257, 1000, BLOCK]


def _general_softmax(a, axis):
    """The general formula (the code `_softmax_one_row` stands for), its max and sum kept as (1, ..., 1) arrays."""
    e = np.exp(a - np.maximum.reduce(a, axis=axis, keepdims=True, initial=-np.inf))
    return e / add_reduce(e, axis=axis, keepdims=True)


def _general_log_softmax(a, axis):
    shifted = a - np.maximum.reduce(a, axis=axis, keepdims=True, initial=-np.inf)
    norm = np.log(add_reduce(np.exp(shifted), axis=axis, keepdims=True))
    return np.subtract(shifted, norm, out=shifted)


def _row(dtype, width, kind, rng):
    """A row of ``width`` normal values; ``kind`` 1: scaled up (exp overflows unshifted), 2: a few NaNs with random
    payloads, 3: as 2 with negative and signalling NaNs and an infinity, 4: all -inf but one NaN, 5: +inf."""
    uint = UINT[dtype]
    a = rng.standard_normal(width).astype(dtype) * (60 if kind == 1 else 1)
    if kind in (2, 3):
        mantissa = 23 if dtype is np.float32 else 52
        exponent = uint(((1 << (8 * a.itemsize - 1 - mantissa)) - 1) << mantissa)
        k = min(width, 3)
        payloads = rng.integers(1, 1 << mantissa, size=k, dtype=np.int64).astype(uint) | exponent
        if kind == 3:
            payloads[::2] |= uint(1 << (8 * a.itemsize - 1))
            a[rng.integers(0, width)] = np.inf
        a[rng.choice(width, size=k, replace=False)] = payloads.view(dtype)
    elif kind == 4:
        a[:] = -np.inf
        a[rng.integers(0, width)] = np.nan
    elif kind == 5:
        a[rng.integers(0, width)] = np.inf
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(-1,), (1, -1), (1, 1, -1)])
def test_one_row_formulas_give_the_general_formulas_bits(dtype, shape):
    rng = np.random.default_rng(7)
    uint = UINT[dtype]
    for width in WIDTHS:
        for kind in range(6):
            a = _row(dtype, width, kind, rng).reshape(shape)
            assert reductions._one_row(a, a.ndim - 1)
            with np.errstate(all="ignore"):
                pairs = [(reductions._softmax(a, a.ndim - 1), _general_softmax(a, a.ndim - 1)),
                         (reductions._log_softmax(a, a.ndim - 1), _general_log_softmax(a, a.ndim - 1))]
            for got, want in pairs:
                assert got.shape == want.shape and got.flags.c_contiguous
                np.testing.assert_array_equal(got.view(uint), want.view(uint), err_msg=f"{width} {kind}")


def test_one_row_is_a_single_short_contiguous_row():
    row = np.ones((1, 65), np.float32)
    assert reductions._one_row(row, 1) and reductions._one_row(row.reshape(65), 0)
    assert not reductions._one_row(np.ones((2, 65), np.float32), 1)  # (two rows)
    assert not reductions._one_row(row, 0)  # (rows of one element: `_one_wide`'s)
    assert not reductions._one_row(np.ones((1, 130), np.float32)[:, ::2], 1)  # (stepped)
    assert not reductions._one_row(np.ones(BLOCK + 1, np.float32), 0)  # (past a block: `add_reduce`'s order)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
@pytest.mark.parametrize("shape, dim", [((1, 65), -1), ((65,), 0), ((1, 1, 9), 2), ((1, 5, 1), 1), ((4, 1), 0)])
def test_eager_shortcut_serves_one_row_with_the_general_paths_bits(name, dtype, shape, dim):
    rng = np.random.default_rng(3)
    x = jt.tensor(_row(dtype.np.type, int(np.prod(shape)), 3, rng).reshape(shape), dtype=dtype)
    got = registry.OPS[name].fast((x, dim, None))
    assert got is not None  # (served by the shortcut)
    with general_path():
        want = getattr(jt, name)(x, dim)
    assert got.shape == want.shape and got.stride() == want.stride() and got.dtype is dtype
    uint = UINT[dtype.np.type]
    np.testing.assert_array_equal(got.numpy().view(uint), want.numpy().view(uint))
    formula = _general_softmax if name == "softmax" else _general_log_softmax
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got.numpy().view(uint), formula(x.numpy(), dim % len(shape)).view(uint))
    functional = getattr(jt.nn.functional, name)(x, dim=dim)
    np.testing.assert_array_equal(functional.numpy().view(uint), want.numpy().view(uint))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_one_row_against_torch_values_and_gradients(name):
    a = np.random.default_rng(5).standard_normal((1, 65)).astype(np.float32) * 4
    x = jt.tensor(a, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    with jt.no_grad():
        served = getattr(jt.nn.functional, name)(x, dim=-1)
    assert not served.requires_grad
    y = getattr(jt.nn.functional, name)(x, dim=-1)
    u = getattr(torch.nn.functional, name)(t, dim=-1)
    assert y.grad_fn is not None  # (recorded: the general path, as the shortcut leaves grad mode to it)
    np.testing.assert_allclose(served.numpy(), u.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(y.detach().numpy(), served.numpy())
    w = np.random.default_rng(6).standard_normal((1, 65)).astype(np.float32)
    (y * jt.tensor(w)).sum().backward()
    (u * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_one_row_and_one_wide_softmax_raise_no_floating_point_error_under_numpy_raise():
    # (the shortcut silences NumPy's errors itself; the one-wide exp of +0 or a quiet NaN runs unsilenced)
    values = [0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e38, -1e-45]
    signalling = np.array([0x7F800001, 0xFFA00000], np.uint32).view(np.float32)
    for a in (np.array(values, np.float32), signalling):
        for x in (jt.tensor(a.reshape(1, -1)), jt.tensor(a.reshape(-1, 1))):
            with np.errstate(all="raise"):
                for name in ("softmax", "log_softmax"):
                    got = getattr(jt, name)(x, -1)
                    with general_path():
                        want = getattr(jt, name)(x, -1)
                    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))
