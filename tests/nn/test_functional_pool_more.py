"""Adaptive max pools, adaptive_avg_pool3d, LP pools and max-unpooling (functions and modules) against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn as jnn
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, check_compiled, same_error


def _input(nd, batched=True, positive=False):
    rng = np.random.default_rng(nd)
    x = rng.standard_normal(((2, 3) if batched else (3,)) + (8, 7, 6)[:nd])
    return (np.abs(x) + 0.1 if positive else x).astype(np.float32)


# adaptive pools --------------------------------------------------------------------------------------

@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("batched", [True, False])
def test_adaptive_max_pool_matches_torch(nd, size, batched):
    x = _input(nd, batched)
    check(lambda F, x: getattr(F, f"adaptive_max_pool{nd}d")(x, size, return_indices=True), x)
    check(lambda F, x: getattr(F, f"adaptive_max_pool{nd}d_with_indices")(x, size), x)


@pytest.mark.parametrize("size", [(2, None), (None, 3), (0, 2), (3, 5)])
def test_adaptive_max_pool2d_sizes_match_torch(size):
    # torch's backward refuses an empty output
    check(lambda F, x: F.adaptive_max_pool2d(x, size, True), _input(2), grad=0 not in size)


def test_adaptive_pools_3d_match_torch():
    x = _input(3)
    check(lambda F, x: F.adaptive_avg_pool3d(x, (2, None, 4)), x)
    check(lambda F, x: F.adaptive_avg_pool3d(x[0], 3), x)


def test_adaptive_pools_compile():
    check_compiled(lambda F, x: (F.adaptive_max_pool2d(x[0], (2, 3)), F.adaptive_avg_pool3d(x, 2)), _input(3))


@pytest.mark.parametrize("call, x", [
    (lambda F, x: F.adaptive_max_pool1d(x, 2), np.zeros((1, 2, 3, 4), np.float32)),
    (lambda F, x: F.adaptive_max_pool2d(x, 2), np.zeros((1, 2, 3, 4, 5), np.float32)),
    (lambda F, x: F.adaptive_max_pool3d(x, 2), np.zeros((3, 4, 5), np.float32)),
    (lambda F, x: F.adaptive_max_pool2d(x, 2), np.zeros((3, 0, 5), np.float32)),
    (lambda F, x: F.adaptive_max_pool2d(x, 2), np.zeros((1, 3, 4), np.int64)),
    (lambda F, x: F.adaptive_avg_pool3d(x, 2), np.zeros((3, 4, 5), np.float32)),
    (lambda F, x: F.adaptive_avg_pool3d(x, (2, 2)), np.zeros((2, 3, 4, 5), np.float32)),
])
def test_adaptive_pool_bad_input_raises_as_torch(call, x):
    same_error(call, x)


# LP pools -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=3, stride=2, ceil_mode=True)])
def test_lp_pool_matches_torch(nd, norm_type, kwargs):
    x = _input(nd, positive=True)
    check(lambda F, x: getattr(F, f"lp_pool{nd}d")(x, norm_type, **kwargs), x, atol=1e-4, rtol=1e-4)


def test_lp_pool_of_signed_input_matches_torch():
    """An odd power's negative window means clamp to 0 (their gradient is torch's too)."""
    check(lambda F, x: F.lp_pool2d(x, 1.0, 2), _input(2))


def test_lp_pool_compiles():
    check_compiled(lambda F, x: F.lp_pool2d(x, 2.0, 2, 1), _input(2, positive=True))


# max-unpooling ------------------------------------------------------------------------------------------

_UNPOOL_CASES = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=1)]


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kwargs", _UNPOOL_CASES)
@pytest.mark.parametrize("batched", [True, False])
def test_max_unpool_inverts_max_pool_as_torch(nd, kwargs, batched):
    x = _input(nd, batched)
    pooled, indices = getattr(torch.nn.functional, f"max_pool{nd}d")(torch.tensor(x), **kwargs,
                                                                       return_indices=True)
    size = x.shape[-nd:]
    check(lambda F, y, i: getattr(F, f"max_unpool{nd}d")(y, i, **kwargs, output_size=size),
          pooled.numpy(), indices.numpy(), compiled=nd == 2)


def test_max_unpool2d_output_size_with_batch_and_channel_dims():
    x = _input(2)[..., :7]
    y, i = torch.nn.functional.max_pool2d(torch.tensor(x), 2, return_indices=True)
    check(lambda F, y, i: F.max_unpool2d(y, i, 2, output_size=(2, 3, 8, 7)), y.numpy(), i.numpy())
    y, i = torch.nn.functional.max_pool2d(torch.tensor(x[..., :6]), 2, return_indices=True)
    check(lambda F, y, i: F.max_unpool2d(y, i, 2), y.numpy(), i.numpy())


def _pooled(nd=2):
    y, i = getattr(torch.nn.functional, f"max_pool{nd}d")(torch.tensor(_input(nd)), 2, return_indices=True)
    return y.numpy(), i.numpy()


@pytest.mark.parametrize("call", [
    lambda F, y, i: F.max_unpool2d(y, i.float(), 2),
    lambda F, y, i: F.max_unpool2d(y, i[..., :1], 2),
    lambda F, y, i: F.max_unpool2d(y[0, 0], i[0, 0], 2),
    lambda F, y, i: F.max_unpool2d(y, i, 2, output_size=(9, 9)),
    lambda F, y, i: F.max_unpool2d(y, i, 2, output_size=(1, 2, 3)),
    lambda F, y, i: F.max_unpool1d(y, i, 2),
    lambda F, y, i: F.max_unpool3d(y[0], i[0], 2),
    lambda F, y, i: F.max_unpool2d(y, i * 0 + 100, 2),
    lambda F, y, i: F.max_unpool2d(y, i * 0 - 1, 2),
    lambda F, y, i: F.max_unpool1d(y[0], i[0] * 0 + 100, 2),
    lambda F, y, i: F.max_unpool3d(y, i * 0 + 1000, 2),
])
def test_max_unpool_bad_input_raises_as_torch(call):
    same_error(call, *_pooled())


def test_max_unpool_refuses_a_wrong_length_tuple():
    y, i = (jt.tensor(a) for a in _pooled())
    with pytest.raises(RuntimeError, match="padding must be a single int, or a tuple of two ints"):
        JF.max_unpool2d(y, i, 2, padding=(1, 1, 1))


# modules ------------------------------------------------------------------------------------------------

_MODULES = [
    ("MaxPool3d", (2,), {}, 3), ("MaxPool3d", (3, 2, 1), {"ceil_mode": True}, 3),
    ("AvgPool3d", (2,), {}, 3), ("AvgPool3d", ((2, 3, 2), 1, 1), {"count_include_pad": False}, 3),
    ("AvgPool3d", (2,), {"divisor_override": 5}, 3),
    ("AdaptiveAvgPool3d", ((2, None, 3),), {}, 3), ("AdaptiveMaxPool1d", (3,), {}, 1),
    ("AdaptiveMaxPool2d", ((2, 3),), {}, 2), ("AdaptiveMaxPool3d", (2,), {}, 3),
    ("LPPool1d", (2, 3), {}, 1), ("LPPool2d", (2, 2), {"stride": 1}, 2), ("LPPool3d", (1.5, 2), {}, 3),
]


@pytest.mark.parametrize("name, args, kwargs, nd", _MODULES)
def test_pool_module_matches_torch(name, args, kwargs, nd):
    t_mod, j_mod = getattr(torch.nn, name)(*args, **kwargs), getattr(jnn, name)(*args, **kwargs)
    assert repr(j_mod) == repr(t_mod)
    x = _input(nd, positive=name.startswith("LP"))
    np.testing.assert_allclose(j_mod(jt.tensor(x)).numpy(), t_mod(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_module_matches_torch(nd):
    t_pool = getattr(torch.nn, f"MaxPool{nd}d")(2, return_indices=True)
    t_unpool, j_unpool = getattr(torch.nn, f"MaxUnpool{nd}d")(2), getattr(jnn, f"MaxUnpool{nd}d")(2)
    assert repr(j_unpool) == repr(t_unpool)
    x = torch.tensor(_input(nd))
    y, i = t_pool(x)
    expected = t_unpool(y, i, output_size=x.shape)
    got = j_unpool(jt.tensor(y.numpy()), jt.tensor(i.numpy()), output_size=x.shape)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_adaptive_max_pool_module_returns_indices():
    values, indices = jnn.AdaptiveMaxPool2d(2, return_indices=True)(jt.tensor(_input(2)))
    assert values.shape == indices.shape == (2, 3, 2, 2) and indices.dtype is jt.int64
