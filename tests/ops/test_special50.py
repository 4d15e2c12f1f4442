"""erfinv (Cephes ndtri's rational approximations and a Newton step) and polygamma of order 2 and more (zeta's direct
sum and Euler-Maclaurin tail, vectorised) against torch: values over the whole domain, edge values, each dtype's
rounding, gradients (gradcheck)."""

import numpy as np
import pytest
import torch

import jitorch as jt


def _erfinv_operands():
    """Uniform values over (-1, 1), values within 1e-16 of +-1, tiny and subnormal ones, the edges of the middle
    approximation, and the domain's ends and beyond."""
    rng = np.random.default_rng(50)
    return np.concatenate([rng.uniform(-1, 1, 4000), 1 - 10.0 ** -rng.uniform(0, 16, 1000),
                           -1 + 10.0 ** -rng.uniform(0, 16, 500), 10.0 ** -rng.uniform(0, 300, 300),
                           [0.7293294335267746, -0.7293294335267747, 1e-310, 5e-324, -5e-324, 0.9999999999999999,
                            0.0, -0.0, 1.0, -1.0, 1.0000000000000002, -1.5, 2.0, np.inf, -np.inf, np.nan]])


def _ulps(got, want):
    """The distance in units in the last place of ``want``'s dtype (equal infinities, and NaNs, are 0 apart)."""
    bits = {np.float64: np.int64, np.float32: np.int32}[want.dtype.type]
    g, w = got.view(bits).astype(np.int64), want.view(bits).astype(np.int64)
    g = np.where(g < 0, np.iinfo(bits).min - g, g)  # (sign-magnitude to a line through zero)
    w = np.where(w < 0, np.iinfo(bits).min - w, w)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    return np.where(same, 0, np.abs(g - w))


def test_erfinv_float64_is_within_one_ulp_of_torch_over_the_whole_domain_and_exact_at_its_ends():
    y = _erfinv_operands()
    got, want = jt.erfinv(jt.tensor(y)).numpy(), torch.erfinv(torch.from_numpy(y)).numpy()
    assert _ulps(got, want).max() <= 1
    ends = jt.erfinv(jt.tensor([1.0, -1.0, 1.0000000000000002, -1.5, np.inf, np.nan, -0.0], dtype=jt.float64)).numpy()
    assert ends[0] == np.inf and ends[1] == -np.inf and np.isnan(ends[2:6]).all()
    assert ends[6] == 0 and np.signbit(ends[6])


def test_erfinv_float32_is_within_one_ulp_of_torch_and_the_half_types_round_as_torch():
    y = _erfinv_operands()
    y32 = y.astype(np.float32)
    got, want = jt.erfinv(jt.tensor(y32)).numpy(), torch.erfinv(torch.from_numpy(y32)).numpy()
    assert got.dtype == np.float32 and _ulps(got, want).max() <= 1
    for jt_dtype, torch_dtype in ((jt.float16, torch.float16), (jt.bfloat16, torch.bfloat16)):
        t = torch.from_numpy(y32).to(torch_dtype)
        got = jt.erfinv(jt.tensor(t.float().numpy()).to(jt_dtype))
        assert got.dtype == jt_dtype
        np.testing.assert_array_equal(got.float().numpy(), torch.erfinv(t).float().numpy())


def test_erfinv_of_integers_is_the_default_float_dtype_as_torchs():
    got = jt.erfinv(jt.tensor([0, 1, -1, 2]))
    want = torch.erfinv(torch.tensor([0, 1, -1, 2]))
    assert str(got.dtype) == str(want.dtype).replace("torch", "jitorch")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_erfinv_gradient_passes_gradcheck_up_to_its_tails():
    y = jt.tensor([-0.999, -0.9, -0.5, -1e-3, 0.0, 0.3, 0.72, 0.75, 0.99, 0.99999], dtype=jt.float64,
                  requires_grad=True)
    assert jt.autograd.gradcheck(jt.erfinv, (y,), eps=1e-9, atol=1e-6, rtol=1e-6)


ORDERS = [2, 3, 4, 7, 12]


@pytest.mark.parametrize("n", ORDERS)
def test_polygamma_float64_matches_torch_for_positive_and_negative_arguments(n):
    rng = np.random.default_rng(n)
    positive = np.concatenate([rng.uniform(0, 1, 500), rng.uniform(1, 60, 500), 10.0 ** rng.uniform(-6, 8, 300),
                               [9.0, 8.999999, 1e-300, 5e-324, 1e308]])
    got, want = jt.polygamma(n, jt.tensor(positive)).numpy(), torch.polygamma(n, torch.from_numpy(positive)).numpy()
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-14, atol=0)
    # negative arguments sum |x| terms of both signs, as torch's: the same cancellations (near the zeros between the
    # poles, 2e-13 of the value apart), not more accurate
    negative = np.concatenate([rng.uniform(-40, 0, 500), [-1.0, -2.0, -0.5, -3.25, -np.inf, np.nan]])
    got, want = jt.polygamma(n, jt.tensor(negative)).numpy(), torch.polygamma(n, torch.from_numpy(negative)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=0)


def test_polygamma_of_a_high_order_keeps_float64_past_the_shift_of_cephes():
    """The Euler-Maclaurin tail's 12 terms at ``w = 9`` (Cephes' shift) leave ``2 (s)_26 / (2 pi w)^26`` of it, which
    grows with the order: from ``w = 15`` it gave polygamma(20, 15.02) 4e-13 off; the shift now grows with it."""
    x = np.array([15.02, 15.34, 14.02, 9.5, 20.0, 23.0, 30.0])
    for n in (20, 35):
        got, want = jt.polygamma(n, jt.tensor(x)).numpy(), torch.polygamma(n, torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=5e-15, atol=0)


@pytest.mark.parametrize("jt_dtype, torch_dtype, ulp", [(jt.float32, torch.float32, 2.0 ** -23),
                                                        (jt.float16, torch.float16, 2.0 ** -10),
                                                        (jt.bfloat16, torch.bfloat16, 2.0 ** -7)])
def test_polygamma_of_the_narrow_types_is_torchs_float64_value_rounded(jt_dtype, torch_dtype, ulp):
    """jitorch computes them in float64 and rounds once (torch's float32 polygamma(2) is 6e-4 off near its zeros)."""
    x = torch.from_numpy(np.random.default_rng(3).uniform(-5, 20, 2000)).to(torch_dtype)
    for n in (2, 3):
        got = jt.polygamma(n, jt.tensor(x.double().numpy()).to(jt_dtype))
        assert got.dtype == jt_dtype
        want = torch.polygamma(n, x.double()).to(torch_dtype).double().numpy()
        finite = np.isfinite(want)
        np.testing.assert_allclose(got.double().numpy()[finite], want[finite], rtol=ulp, atol=0)


def test_polygamma_gradient_passes_gradcheck():
    x = jt.tensor([-2.5, -0.3, 0.2, 1.0, 4.5, 9.0, 30.0], dtype=jt.float64, requires_grad=True)
    for n in (2, 3):
        assert jt.autograd.gradcheck(lambda t: jt.polygamma(n, t), (x,), eps=1e-7, atol=1e-5, rtol=1e-5)
