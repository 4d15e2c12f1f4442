"""float32 erf, computed in float32: its ulp error against float64's erf over a sweep of float32 values, its
agreement with torch's (Sleef's) erff, its edge values, and exact GELU's forward and backward against torch."""

import math

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import erf_float32

ERF64 = np.frompyfunc(math.erf, 1, 1)


def sweep():
    """Every 4093rd positive float32 below 4.6 (denormals included), 100k evenly spaced ones, both signs."""
    bits = np.arange(1, 0x40933334, 4093, dtype=np.int64).astype(np.int32).view(np.float32)
    x = np.concatenate([bits, np.linspace(0.0, 4.6, 100_001, dtype=np.float32)])
    return np.concatenate([x, -x])


def ulps(got, exact):
    """|got - exact| in ulps of float32 at ``exact`` (0.5 is correct rounding)."""
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)


def test_within_two_ulps_of_the_exact_erf():
    x = sweep()
    err = ulps(erf_float32.erf(x), ERF64(x.astype(np.float64)).astype(np.float64))
    assert err.max() <= 2.0
    assert err.mean() <= 0.35


def test_agrees_with_torch_to_two_ulps():
    x = sweep()
    got = jt.erf(jt.tensor(x))
    assert got.dtype == jt.float32
    expected = torch.erf(torch.from_numpy(x)).numpy()
    # both are near-exact: 1.83 ulp (ours) and 0.78 (Sleef's) at most, so they differ by 2 ulps at most
    assert ulps(got.numpy(), expected.astype(np.float64)).max() <= 2.0


def test_edge_values_as_torch():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 4.05, 4.5, 7.0, -1e30], np.float32)
    got = jt.erf(jt.tensor(x)).numpy()
    expected = torch.erf(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def test_erf_near_its_saturation_is_within_an_ulp_of_one():
    """Regression: erf(3.9) = 1 - 3.5e-8 lies between float32's 1 - 2**-24 and 1, so a near-exact erf may give
    either; NumPy's float32 tanh differs by an ulp between CPUs (AVX2 and AVX-512 loops), and on an Intel Xeon
    this gave 1 - 2**-24 (the correctly rounded value) where torch gives 1.0. Both are within 1 ulp."""
    x = np.array([3.8, 3.9, 3.92], np.float32)
    got = jt.erf(jt.tensor(x)).numpy().astype(np.float64)
    exact = np.array([math.erf(float(v)) for v in x])
    assert np.all(np.abs(got - exact) <= np.spacing(np.float32(1.0)) / 2 * 1.5)
    assert np.all(got <= 1.0)


@pytest.mark.parametrize("shape", [(), (3, 5)])
def test_shapes_and_strides(shape):
    x = torch.randn(shape + (4,) if shape else (), dtype=torch.float32)
    view = x[..., ::2] if shape else x
    got = jt.erf(jt.tensor(x.numpy())[..., ::2] if shape else jt.tensor(x.numpy()))
    assert tuple(got.shape) == tuple(view.shape)
    assert ulps(got.numpy().reshape(-1), torch.erf(view).numpy().reshape(-1).astype(np.float64)).max() <= 2.0


def test_exact_gelu_forward_and_backward_against_torch():
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32) * 3
    a = jt.tensor(x, requires_grad=True)
    b = torch.tensor(x, requires_grad=True)
    ya, yb = jt.nn.functional.gelu(a), torch.nn.functional.gelu(b)
    # both compute 1 + erf(x / sqrt(2)), which cancels for negative x: an ulp of erf there is 6e-8 absolute
    np.testing.assert_allclose(ya.detach().numpy(), yb.detach().numpy(), rtol=1e-6, atol=1e-6)
    g = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    ya.backward(jt.tensor(g))
    yb.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 47, 48, 49, 1000])
def test_chunks_give_the_bits_of_one_pass(monkeypatch, n):
    # erf runs its passes on cache-sized chunks: chunk ends anywhere (48 elements, then the whole array
    # in one chunk) give the same bits, of every shape
    x = (np.random.default_rng(n).standard_normal(n) * 3).astype(np.float32)
    x[:4] = np.array([np.nan, -0.0, np.inf, 3.9], np.float32)[:min(n, 4)]
    whole = erf_float32.erf(x)
    monkeypatch.setattr(erf_float32, "CHUNK", 48)
    chunked = erf_float32.erf(x.reshape(-1, 1) if n else x)
    assert chunked.shape == ((n, 1) if n else (0,)) and chunked.dtype == np.float32
    np.testing.assert_array_equal(chunked.reshape(-1).view(np.int32), whole.view(np.int32))
