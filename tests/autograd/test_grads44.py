"""Gradients found silently wrong by the session-44 fuzzers, against exact references (100-digit mpmath) where
torch's are wrong too, and against torch and gradcheck elsewhere."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

import jitorch as jt


def _frechet(a, e):
    """The exact derivative of the matrix exponential at ``a`` along ``e``: the upper right block of
    exp([[a, e], [0, a]]) in 100-digit arithmetic."""
    n = a.shape[-1]
    block = np.zeros((2 * n, 2 * n))
    block[:n, :n] = block[n:, n:] = a
    block[:n, n:] = e
    with mpmath.workdps(100):
        return np.array(mpmath.expm(mpmath.matrix(block.tolist())).tolist(), dtype=np.float64)[:n, n:]


# sample 2's x1[4, 2:, :] of transform fuzz seed 8409257
SEED_8409257 = np.array([[2.171347602183608, -1.809064190349952, 1.8620017167493037],
                         [0.8384205912237741, 1.159923377099556, -2.512969855978191],
                         [2.3675863107757964, 1.073021107383787, 1.6816358000079523]])


def test_matrix_exp_gradient_is_exact_under_a_gradient_far_larger_than_the_matrix():
    """Transform fuzz seed 8409257: vmap(grad) of ``expm1(matrix_exp(x))`` on 3x3 samples. The exponential's
    entries reach 37, so ``expm1``'s gradient reaches 1e16, and the backward's block matrix [[A^T, g], [0, A^T]]
    took ~55 squarings, halving A below the identity's rounding: jitorch's gradient was 3e16 where the exact is
    1.6e18 (torch's, 2.2e17, has the same error; docs/differences-from-torch.md)."""
    w = np.array([[1.0, 2, 3], [-1, 0.5, 2], [0, 1, -2]])
    with mpmath.workdps(100):
        e = np.array(mpmath.expm(mpmath.matrix(SEED_8409257.tolist())).tolist(), dtype=np.float64)
    exact = _frechet(SEED_8409257.T, np.exp(e) * w)
    x = jt.tensor(SEED_8409257, requires_grad=True)
    (jt.matrix_exp(x).expm1() * jt.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), exact, rtol=1e-12, atol=0)
    t = torch.tensor(SEED_8409257, requires_grad=True)
    (torch.matrix_exp(t).expm1() * torch.tensor(w)).sum().backward()
    assert np.abs(t.grad.numpy() - exact).max() > 0.5 * np.abs(exact).max()  # (torch's error, documented)
    batch = jt.tensor(np.stack([SEED_8409257, SEED_8409257 / 4]))
    got = jt.func.vmap(jt.func.grad(lambda m: (jt.matrix_exp(m).expm1() * jt.tensor(w)).sum()))(batch)
    np.testing.assert_allclose(got[0].numpy(), exact, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype, bound", [("float64", 1e-13), ("float32", 2e-7)])
@pytest.mark.parametrize("norm", [1e-3, 1.0, 10.0, 50.0])
@pytest.mark.parametrize("size", [1e-30, 1.0, 1e20])
def test_matrix_exp_derivatives_are_within_rounding_of_the_exact_across_norms(dtype, bound, norm, size):
    """Backward (``A^T``'s derivative along g) and forward mode (``A``'s along a tangent) against the exact,
    for matrices of 1-norm 1e-3 to 50 and gradients/tangents from 1e-30 to 1e20 of their size, each matrix of a
    batch of two scaled alike. Before the gradient's scaling, a 1e20 gradient gave errors of 0.3 to 1e4 of the
    largest entry (torch's still does)."""
    rng = np.random.default_rng(int(norm * 1000) + int(np.log10(size)) + 100)
    a = rng.standard_normal((2, 3, 3))
    a = a / np.abs(a).sum(-2).max(-1)[:, None, None] * norm * np.array([1, 0.5])[:, None, None]
    g = rng.standard_normal((2, 3, 3)) * size * np.array([1, 1e-3])[:, None, None]
    a, g = a.astype(dtype), g.astype(dtype)
    x = jt.tensor(a, requires_grad=True)
    jt.matrix_exp(x).backward(jt.tensor(g))
    _, tangent = jt.func.jvp(jt.matrix_exp, (jt.tensor(a),), (jt.tensor(g),))
    for i in range(2):
        a64, g64 = a[i].astype(np.float64), g[i].astype(np.float64)
        for got, exact in ((x.grad[i], _frechet(a64.T, g64)), (tangent[i], _frechet(a64, g64))):
            err = np.abs(got.numpy().astype(np.float64) - exact).max() / np.abs(exact).max()
            assert err <= bound, (i, err)


def test_matrix_exp_gradient_passes_gradcheck_and_gradgradcheck_at_large_norm():
    """The scaled rule differentiates again (its scale is a constant of the incoming gradient)."""
    a = jt.tensor(SEED_8409257 * 3, requires_grad=True)
    assert jt.autograd.gradcheck(jt.matrix_exp, (a,))
    assert jt.autograd.gradgradcheck(jt.matrix_exp, (a,))


def test_matrix_exp_gradient_of_a_non_finite_gradient_is_torchs():
    """An infinite or NaN incoming gradient keeps its scale of 1 and gives torch's non-finite pattern."""
    a = np.eye(2) * 0.5
    for bad in (np.inf, np.nan):
        g = np.array([[bad, 0.0], [0.0, 1.0]])
        x, t = jt.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        jt.matrix_exp(x).backward(jt.tensor(g))
        torch.matrix_exp(t).backward(torch.tensor(g))
        np.testing.assert_array_equal(np.isfinite(x.grad.numpy()), np.isfinite(t.grad.numpy()))


def _renorm_grads(x, w, fn):
    """The gradient of ``sum(fn(x) * w)`` by torch, eager jitorch and compiled jitorch."""
    t = torch.tensor(x, requires_grad=True)
    (fn(t) * torch.tensor(w)).sum().backward()
    found = [t.grad.numpy()]
    for run in (fn, jt.compile(fn)):
        e = jt.tensor(x, requires_grad=True)
        (run(e) * jt.tensor(w)).sum().backward()
        found.append(e.grad.numpy())
    return found


_RENORMS = {"out-of-place": lambda p, dim, maxnorm: lambda x: x.renorm(p, dim, maxnorm),
            "in-place": lambda p, dim, maxnorm: lambda x: (x * 1).renorm_(p, dim, maxnorm)}


@pytest.mark.parametrize("form", sorted(_RENORMS))
def test_renorm_gradient_passes_g_through_a_slice_whose_norm_is_nan_seed_8663642(form):
    """Main fuzz seed 8663642 (``--namespaced --out-views 0.5``): ``erfinv(x1).renorm_(0.25, -3, 2)`` with NaNs
    (erfinv beyond 1) and a 0 in each slice: the slices' norms are NaN, so renorm leaves them, and torch's
    gradient is ``g`` there (-1.64 at the seed's element). jitorch's was NaN: it differentiated the composite's
    body, whose unselected branch still multiplied a zero gradient by the NaN norm's derivative. Now renorm has
    torch's rule, in each form, eager and compiled, for p = 0.25, 1, 2 and inf."""
    x = np.array([[0.5, np.nan, 0.0], [3.0, 0.25, 1.0], [0.0, 0.0, 0.0], [np.inf, 1.0, 0.0]], dtype=np.float32)
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    for p in (0.25, 1, 2, np.inf):
        want, eager, compiled = _renorm_grads(x, w, _RENORMS[form](p, 0, 1.0))
        assert np.isfinite(want[0]).all()
        np.testing.assert_allclose(eager, want, rtol=1e-6)
        np.testing.assert_array_equal(compiled, eager)


def test_compiled_inplace_renorm_has_renorms_gradient_seed_8670237():
    """Main fuzz seed 8670237 (``--cuda --chains 0.3``): ``x0.clip(a).renorm_(2, 1, b)`` in a compiled function
    raised "the derivative for 'renorm' is not implemented" in backward, where eager differentiated the in-place
    composite's body; both now take renorm's rule, and the compiled backward holds the rule's graph."""
    x = np.array([[0.5, -2.0], [3.0, 0.25]], dtype=np.float32)
    w = np.array([[1.0, -2.0], [0.5, 3.0]], dtype=np.float32)
    want, eager, compiled = _renorm_grads(x, w, lambda x: x.clip(-1.5).renorm_(2, 1, 1.0))
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(compiled, want)


@pytest.mark.parametrize("p", [0.5, 1, 2, 3.5, np.inf])
def test_renorm_gradient_passes_gradcheck_and_is_torchs_at_the_edges(p):
    """gradcheck in float64 with slices above ``maxnorm`` (scaled), below it (left), of zeros, gradgradcheck
    without the zeros; and torch's gradient at a slice whose norm is exactly ``maxnorm`` (left alone: torch's
    ``norm > maxnorm``)."""
    rng = np.random.default_rng(int(p * 10) if np.isfinite(p) else 99)
    x = rng.standard_normal((3, 4, 2)) * np.array([3.0, 0.1, 0.0])[:, None, None]
    fn = lambda t: t.renorm(p, 0, 1.5)  # noqa: E731
    assert jt.autograd.gradcheck(fn, (jt.tensor(x, requires_grad=True),))
    # (not through the zero slice: the norm's second derivative is not finite at 0, torch's gradgradcheck fails)
    assert jt.autograd.gradgradcheck(fn, (jt.tensor(x[:2], requires_grad=True),))
    at = x.copy()
    at[0] = 0
    at[0, 1, 0] = -1.0  # (a norm of exactly 1 for every p)
    w = rng.standard_normal(x.shape)
    want, eager, compiled = _renorm_grads(at, w, lambda t: t.renorm(p, 0, 1.0))
    np.testing.assert_allclose(eager, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(compiled, eager, rtol=1e-12, atol=1e-12)
