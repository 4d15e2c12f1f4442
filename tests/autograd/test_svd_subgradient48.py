"""The singular values' gradient alone (svdvals, the nuclear and spectral norms) is torch's ``U diag(gS) Vh``
(found by session 48's OpInfo sweep: linalg.norm's subgradients_at_zero samples): the engine filled zeros for U's
and Vh's gradients, and the SVD rule divided those zeros by the differences of repeated singular values, so the
nuclear norm's gradient at a zero matrix, or of any matrix with a repeated singular value, was NaN."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt

# (LAPACK's singular vectors of these are the identity's columns, in torch and in jitorch, eager and compiled; for a
# rank-one matrix the null space's vectors are any basis, and so is a subgradient weighting its values unequally)
MATRICES = {
    "zero": lambda shape: np.zeros(shape),
    "identity": lambda shape: np.eye(*shape) * 2.0,
}


def _norms(lib, A):
    return (lib.linalg.matrix_norm(A, "nuc") + lib.linalg.matrix_norm(A, 2) * 3 + lib.linalg.norm(A, "nuc") * 5
            + (lib.linalg.svdvals(A) * lib.arange(1.0, min(A.shape) + 1, dtype=A.dtype)).sum())


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 4)])
@pytest.mark.parametrize("matrix", sorted(MATRICES))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_norm_of_repeated_singular_values_differentiates_as_torch(matrix, shape, compiled):
    a = MATRICES[matrix](shape)
    A, B = jt.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (jt.compile(lambda x: _norms(jt, x)) if compiled else lambda x: _norms(jt, x))(A).backward()
    _norms(torch, B).backward()
    assert np.isfinite(A.grad.numpy()).all()
    np.testing.assert_allclose(A.grad.numpy(), B.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_svd_with_u_and_vh_used_still_takes_the_full_rule():
    """Where U's or Vh's gradient is defined the rule is torch's full one (gradcheck on distinct values)."""
    a = jt.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)

    def f(x):
        U, S, Vh = jt.linalg.svd(x, full_matrices=False)
        return (U[:, 0] * U[:, 0]).sum() + S.sum() + (Vh[0] * jt.arange(3.0, dtype=x.dtype)).abs().sum()
    assert jt.autograd.gradcheck(f, (a,))
