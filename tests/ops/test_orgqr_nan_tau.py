"""orgqr / linalg.householder_product with a NaN (or infinite) scale: torch runs LAPACK's org2r, which forms Q's
columns right to left and applies reflector i only to the columns right of i (up to its vector's last nonzero row
and the last column nonzero there), so a NaN tau_i reaches column i and the columns it touches, not those left of
it; jitorch applied ``I - tau v v^T`` to the whole matrix, where ``NaN * 0`` made every column NaN."""

import warnings

import numpy as np
import pytest
import torch

import jitorch

NAN, INF = float("nan"), float("inf")


def _pair(h, tau, dtype, grad=False):
    out = []
    for lib in (torch, jitorch):
        d = getattr(lib, dtype)
        out.append((lib.tensor(h, dtype=d, requires_grad=grad), lib.tensor(tau, dtype=d, requires_grad=grad)))
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_orgqr_with_a_nan_tau_leaves_the_columns_its_reflector_does_not_reach_finite(dtype):
    """Transform-fuzz seed 8302924: ``T.orgqr(c1, log(v3).double())`` with a NaN scale gave NaN everywhere, where
    torch's columns left of the NaN reflector (and columns its product ``v^T c`` leaves at 0: MKL's sger skips
    them, and its dger on some CPUs) stay finite. jitorch skips them in both dtypes (reference BLAS's ger); where
    torch's dger does not (Intel rocketlake), torch has NaNs there too: jitorch's NaNs are a subset of torch's
    and every other value agrees (on AMD znver4, session 48, they are equal)."""

    def check(got, want):
        assert not (np.isnan(got) & ~np.isnan(want)).any()
        if dtype == "float32":
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        both = ~np.isnan(want)
        np.testing.assert_allclose(got[both], want[both], rtol=1e-4, atol=1e-5)

    rng = np.random.default_rng(8302924)
    for trial in range(300):
        b, m = rng.integers(1, 4), rng.integers(1, 7)
        n = rng.integers(1, m + 1)
        k = rng.integers(0, n + 1)
        h = rng.standard_normal((b, m, n))
        h[rng.random(h.shape) < 0.3] = 0
        tau = rng.standard_normal((b, k))
        tau[rng.random(tau.shape) < 0.4] = NAN
        tau[rng.random(tau.shape) < 0.1] = 0
        if trial % 5 == 0:
            h[rng.random(h.shape) < 0.2] = rng.choice([NAN, INF])
        (th, tt), (jh, jt) = _pair(h, tau, dtype)
        check(jitorch.linalg.householder_product(jh, jt).numpy(), torch.linalg.householder_product(th, tt).numpy())
        check(jitorch.orgqr(jh, jt).numpy(), torch.orgqr(th, tt).numpy())


def test_orgqr_of_a_nan_reflector_column_keeps_the_columns_left_of_it():
    """The case by hand: a NaN scale of the last reflector makes its own column NaN (``e_i - tau v``) and leaves
    column 0 as reflector 0 makes it."""
    h = np.array([[0.0, 0.0], [0.5, 0.0], [0.25, 0.75]])
    tau = np.array([1.2, NAN])
    got = jitorch.orgqr(jitorch.tensor(h), jitorch.tensor(tau)).numpy()
    want = torch.orgqr(torch.tensor(h), torch.tensor(tau)).numpy()
    assert np.isfinite(want[:, 0]).all() and np.isnan(want[1:, 1]).all()
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_orgqr_gradient_of_a_matrix_with_a_non_finite_scale_is_nan_as_torchs():
    """The derivative by tau_j does not read tau_j (Q is affine in each scale), so jitorch's rule gave a finite
    gradient for a NaN tau_j; torch's gives NaN for every gradient of a matrix whose scales or reflector entries
    are not finite (and jitorch now does), and the same finite gradients elsewhere (seed 8302924's vmap(grad))."""
    rng = np.random.default_rng(0)
    h = rng.standard_normal((4, 4, 3))
    tau = rng.standard_normal((4, 3))
    tau[0, 0], tau[1, 1], tau[2, 2], h[3, 2, 0] = INF, NAN, NAN, NAN
    h = np.concatenate([h, rng.standard_normal((1, 4, 3))])
    tau = np.concatenate([tau, rng.standard_normal((1, 3))])
    weights = np.arange(h.size).reshape(h.shape) * 0.1
    grads = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lib, (H, T) in zip((torch, jitorch), _pair(h, tau, "float64", grad=True)):
            (lib.orgqr(H, T) * lib.tensor(weights)).sum().backward()
            grads.append((H.grad.numpy(), T.grad.numpy()))
    (tH, tT), (jH, jT) = grads
    assert np.isnan(tT[:4]).all() and np.isfinite(tT[4]).all()
    np.testing.assert_allclose(jT, tT, rtol=1e-10)
    np.testing.assert_allclose(jH, tH, rtol=1e-10)
