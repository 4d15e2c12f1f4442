"""Extreme arguments of session 50's erfinv (Cephes ndtri + Newton) and vectorised polygamma against torch."""

import numpy as np
import torch

import jitorch as jt

EXTREMES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 1e-310, 1e-300, 0.5, 1.0, -1.0, -2.5, 1e10, 1e300]


def test_polygamma_of_order_two_and_more_at_plus_infinity_is_nan_as_torchs():
    """The vectorised zeta (`special_math._zeta_integer`) set +inf's value to 0 (the limit), where torch's Cephes
    sum, as jitorch's own zeta and its polygamma before, gives NaN; float32 arguments past its range are +inf too."""
    for dtype in (np.float64, np.float32):
        x = np.array(EXTREMES, dtype)
        for n in (2, 3, 7):
            got = jt.polygamma(n, jt.tensor(x)).numpy()
            want = torch.polygamma(n, torch.from_numpy(x)).numpy()
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            infinite = np.isinf(want)
            np.testing.assert_array_equal(got[infinite], want[infinite])
            finite = np.isfinite(want)
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-13 if dtype is np.float64 else 1e-6)


def test_erfinv_at_the_edges_of_its_domain_and_of_the_floats_is_torchs():
    edge = 1 - 2 * 0.13533528323661269189  # where the approximation changes from the middle's to the tails'
    y = np.array(EXTREMES + [np.nextafter(1, 2), np.nextafter(1, 0), -np.nextafter(1, 0), edge,
                             np.nextafter(edge, 1), np.nextafter(edge, 0), 1 - 1e-15])
    for dtype in (np.float64, np.float32):
        got = jt.erfinv(jt.tensor(y.astype(dtype))).numpy()
        want = torch.erfinv(torch.from_numpy(y.astype(dtype))).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        number = ~np.isnan(want)  # (NaN's sign bit is no part of the result)
        np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=0)


def test_roll_over_several_dims_ending_on_a_dim_of_one_element_is_contiguous_as_torchs():
    """torch rolls one dim at a time (a cat of two narrows each); a roll along a dim of one element has an empty
    narrow, which suggests the contiguous format, so the result is contiguous. jitorch's layout rule applied the
    first dim's cat rule only: a channels-last (2, 4, 3, 1) rolled along (2, 3) stayed channels-last."""
    t = torch.arange(24.0).reshape(2, 4, 3, 1).contiguous(memory_format=torch.channels_last)
    x = jt.arange(24.0).reshape(2, 4, 3, 1).contiguous(memory_format=jt.channels_last)
    for shifts, dims in (((2, -1), (2, 3)), ((1, 1), (3, 2)), ((3, 1), (1, 2))):
        want = t.roll(shifts, dims)
        for got in (x.roll(shifts, dims), jt.compile(lambda a: a.roll(shifts, dims))(x)):
            assert got.stride() == want.stride()
            np.testing.assert_array_equal(got.numpy(), want.numpy())
