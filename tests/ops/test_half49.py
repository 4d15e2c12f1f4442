"""Regression tests of the defects session 49's OpInfo sweep in float16 and bfloat16 (tests/ops/opinfo_sweep.py
--all --start 300 --dtype float16 --dtype bfloat16) and its leftovers found, each against torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch as jt

_FAR = [-math.inf, -1000.0, -50.0, -30.0, -3.0, -0.0, 0.0, 3.0, 15.0, 19.9, 30.0, 100.0, math.inf, math.nan]
_RTOL = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}
_ACTIVATIONS = [("softplus", {}), ("softplus", {"beta": 2.0}), ("softplus", {"beta": -1.0}),
                ("softplus", {"threshold": 200.0}), ("mish", {})]


def _pair(values, dtype, requires_grad=False):
    x = torch.tensor(values, dtype=torch.float64).to(getattr(torch, dtype))
    y = jt.tensor(np.array(values, dtype=np.float64)).to(getattr(jt, dtype))
    return x.requires_grad_(requires_grad), y.requires_grad_(requires_grad)


def _assert_as_torchs(theirs, ours, rtol, atol=0.0):
    """Equal within ``rtol`` and ``atol`` (NaN where torch's is), zeros of torch's sign."""
    a, b = theirs.detach().double().numpy(), ours.detach().double().numpy()
    np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, equal_nan=True)
    zeros = a == 0
    np.testing.assert_array_equal(np.signbit(b[zeros]), np.signbit(a[zeros]))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name, kwargs", _ACTIVATIONS)
def test_softplus_and_mish_far_below_zero_are_zeros_of_torchs_sign(name, kwargs, dtype):
    """softplus(-inf) and softplus(-1000) were -0.0 where torch's ``log1p(exp(x))`` is +0.0 (jitorch negated
    logsigmoid(-x), whose 0 - log1p(0) is +0), so mish(-1000) was +0.0 where torch's is -0.0, and a float16
    softplus(-30) -0.0; a beta of -1 turned it round (softplus(inf, beta=-1) +0.0, torch's -0.0)."""
    x, y = _pair(_FAR, dtype)
    theirs = getattr(torch.nn.functional, name)(x, **kwargs)
    ours = getattr(jt.nn.functional, name)(y, **kwargs)
    assert str(ours.dtype)[8:] == dtype
    _assert_as_torchs(theirs, ours, _RTOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, kwargs", _ACTIVATIONS)
def test_softplus_and_mish_gradients_far_below_zero_are_torchs(name, kwargs, dtype):
    """The gradient of softplus at x = -30 (float32) was 0 where torch's is sigmoid(x) = 9.36e-14: jitorch's
    ``max(x, 0) - logsigmoid`` form summed +1/2 and -1/2 + 9.36e-14 at |x|, which rounds the small part away;
    mish's gradient there had the wrong sign (9.36e-14, torch's -2.71e-12)."""
    values = [v for v in _FAR if math.isfinite(v)]
    x, y = _pair(values, dtype, requires_grad=True)
    getattr(torch.nn.functional, name)(x, **kwargs).sum().backward()
    getattr(jt.nn.functional, name)(y, **kwargs).sum().backward()
    # (subnormal gradients, sigmoid(-100) in float32, differ by their last representable bits)
    _assert_as_torchs(x.grad, y.grad, 1e-5, atol=torch.finfo(x.dtype).tiny)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_softplus_below_a_threshold_past_exps_range_overflows_as_torchs(dtype):
    """torch computes ``log1p(exp(x))`` below the threshold, in float32 for the half types: inf at x = 100 with
    threshold 200 (float32's exp overflows), 15 at x = 15 (float16's exp would overflow past 11)."""
    x, y = _pair([15.0, 100.0, -2.5], dtype)
    _assert_as_torchs(torch.nn.functional.softplus(x, threshold=200.0),
                      jt.nn.functional.softplus(y, threshold=200.0), _RTOL[dtype])


def test_sweep_records_a_deadline_inside_torchs_comparison_as_timed_out(monkeypatch):
    """OpInfo polygamma.polygamma_n_2, bfloat16 reference sample #10 transposed (1029 x 917, on a loaded
    machine): the deadline's alarm went off inside torch.testing.assert_close, which wraps it in a RuntimeError
    ("Comparing TensorLikePair..."), so the sweep counted a harness failure where the sample had timed out."""
    from tests.ops import opinfo_sweep as sweep

    def alarm(*args, **kwargs):
        raise sweep.SampleTimeout("over 20 s")
    run = sweep.Sweep(dtypes=(torch.float32,), reference=False, grads=False, compiled=False, errors=False, limit=1)
    op = sweep.ops_named(["exp"])[0]
    monkeypatch.setattr(torch, "isclose", alarm)
    run.run_op(op, ours=lambda x, **k: jt.exp(x) * 2)  # (a differing value, so that assert_close compares)
    kinds = {(o.kind, o.why) for o in run.outcomes}
    assert kinds == {("mismatch", "timed out (over 20 s)")}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [5, 100, 1000])
def test_vecdot_of_two_vectors_sums_unrounded_half_products_as_torchs_vdot(dtype, n):
    """OpInfo linalg.vecdot, float16 sample #6 expanded ((5,) by (5,)): torch's vecdot of two vectors is vdot,
    whose kernel sums the half types' products in float32 unrounded (41.844, float64's 41.849); jitorch
    multiplied in float16 first and summed the rounded products (41.906, 2 ulps off), and raised for a ``dim``
    past the vectors' one, which vdot does not read."""
    gen = torch.Generator().manual_seed(n)
    x, y = ((torch.randn(n, generator=gen) * 5).to(getattr(torch, dtype)) for _ in range(2))
    jx, jy = (jt.tensor(t.double().numpy()).to(getattr(jt, dtype)) for t in (x, y))
    theirs, ours = torch.linalg.vecdot(x, y), jt.linalg.vecdot(jx, jy)
    assert ours.shape == () and str(ours.dtype)[8:] == dtype
    assert ours.double().item() == theirs.double().item()
    assert jt.linalg.vecdot(jx, jy, dim=3).double().item() == torch.linalg.vecdot(x, y, dim=3).double().item()
    matrix = torch.linalg.vecdot(x.expand(3, n), y)  # (two dims: torch multiplies, rounding, then sums)
    np.testing.assert_array_equal(jt.linalg.vecdot(jx.expand(3, n), jy).double().numpy(), matrix.double().numpy())


def _lstsq_pair(a, b, driver):
    theirs = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    ours = jt.linalg.lstsq(jt.tensor(a), jt.tensor(b), driver=driver)
    return theirs, ours


@pytest.mark.parametrize("driver", ["gelsd", "gelss"])
@pytest.mark.parametrize("other", [(4, 2), (4,)])
def test_lstsq_residuals_of_a_rank_deficient_matrix_are_empty_as_torchs(driver, other):
    """OpInfo linalg.lstsq, samples #8 (gelss) and #11 (gelsd) expanded (a (4, 3) matrix of equal rows: rank 1):
    torch's residuals of these drivers are computed only where every matrix has rank n, else empty; jitorch's
    were the (3,) sums of squares of its minimum-norm solution."""
    a = np.ones((4, 3)) * np.array([0.5, -2.0, 3.0])
    theirs, ours = _lstsq_pair(a, np.arange(float(np.prod(other))).reshape(other), driver)
    assert list(ours.residuals.shape) == list(theirs.residuals.shape) == [0]
    assert int(ours.rank) == int(theirs.rank) == 1
    full = np.stack([a, a + np.eye(4, 3)])  # (a batch with one full-rank matrix: still empty, as torch's)
    theirs, ours = _lstsq_pair(full, np.ones((2, 4, 2)), driver)
    assert list(ours.residuals.shape) == list(theirs.residuals.shape) == [0]


@pytest.mark.parametrize("driver", ["gels", "gelsd", "gelss"])
@pytest.mark.parametrize("shapes", [((4, 3), (4,)), ((2, 4, 3), (2, 4))])
def test_lstsq_residuals_of_a_vector_other_keep_its_column_as_torchs(driver, shapes):
    """torch's residuals of a vector ``other`` (a tall full-rank A) keep a dim of 1, batch + (1,); jitorch
    dropped it (shape () for torch's (1,))."""
    gen = np.random.default_rng(4)
    a, b = gen.standard_normal(shapes[0]), gen.standard_normal(shapes[1])
    theirs, ours = _lstsq_pair(a, b, driver)
    for t, o in zip(theirs, ours):
        assert list(o.shape) == list(t.shape)
    np.testing.assert_allclose(ours.residuals.numpy(), theirs.residuals.numpy(), rtol=1e-10)
    np.testing.assert_allclose(ours.solution.numpy(), theirs.solution.numpy(), rtol=1e-10)


def test_sweep_takes_torchs_lstsq_gels_error_on_a_singular_matrix_as_documented_where_jitorchs_is_its_own():
    """OpInfo linalg.lstsq, gels samples #0-#2 expanded (equal rows: rank 1): torch's QR without pivoting raises
    LinAlgError where its rounding leaves an exact zero pivot (float32 #0; float64 #0 divides by a residue
    instead); jitorch's minimum-norm solution is documented where it equals its own on contiguous copies, and a
    result that depends on the layout stays a mismatch."""
    from tests.ops import opinfo_sweep as sweep
    op = sweep.ops_named(["linalg.lstsq"])[0]

    def run(ours):
        found = sweep.Sweep(dtypes=(torch.float32,), layouts=("expanded",), reference=False, grads=False,
                            compiled=False, errors=False, limit=3)
        found.run_op(op, ours=ours)
        return [(o.kind, o.why) for o in found.outcomes]
    kinds = run(None)
    assert kinds and all(k == "documented" and w.startswith("singular (equal rows)") for k, w in kinds)

    def by_layout(a, b, **kwargs):
        return jt.linalg.lstsq(a + 1e-3 * (a.stride(-2) == 0), b, **kwargs)
    assert {k for k, _ in run(by_layout)} == {"mismatch"}


def test_sweep_compares_the_polynomials_torch_leaves_unset_at_a_nan_x_outside_it():
    """OpInfo special.chebyshev_polynomial_u reference #46/#93 expanded (a row of x holding NaN against finite
    n): torch's recurrence stops on the NaN before its first step and returns its unset result (6.9e-310, 0.86,
    -1.25e6: whatever the register held), where jitorch's is NaN; the sweep compares the rest, and jitorch's
    NaN there."""
    from tests.ops import opinfo_sweep as sweep
    x = torch.tensor([[math.nan, 0.5], [0.25, -0.75]], dtype=torch.float64)
    n = torch.tensor([[6.0, 3.0], [2.0, 9.0]], dtype=torch.float64)
    # (torch's unset value written in, as its kernel returned it: what a register holds is no test's to rely on)
    theirs = torch.special.chebyshev_polynomial_u(x.nan_to_num(), n).index_put((torch.tensor(0), torch.tensor(0)),
                                                                                torch.tensor(6.9e-310, dtype=torch.float64))
    jx, jn = jt.tensor(x.numpy()), jt.tensor(n.numpy())
    ours = jt.special.chebyshev_polynomial_u(jx, jn)
    assert math.isnan(ours[0, 0].item())
    assert sweep.compare(theirs, ours) and sweep._outside_nan_x(theirs, ours, x, "values")
    off = ours * jt.tensor([[1.0, 1.0], [1.0, 1.001]], dtype=jt.float64)
    assert not sweep._outside_nan_x(theirs, off, x, "values")
    assert not sweep._outside_nan_x(theirs, jt.nan_to_num(ours, nan=2.0), x, "values")
