"""Gradients of the linear algebra functions (jitorch/autograd/rules/linalg.py) against torch's, in float64,
through losses that do not depend on the signs of singular or eigen vectors. (gradcheck and gradgradcheck of
every op: tests/autograd/test_registry_gradcheck.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt

RNG = np.random.default_rng(11)
WEIGHTS = RNG.standard_normal((4, 4))


def _arrays():
    a = RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    return {"A": a, "B": RNG.standard_normal((3, 2)), "R": RNG.standard_normal((4, 3)),
            "S": a + np.swapaxes(a, -1, -2), "P": a @ np.swapaxes(a, -1, -2) + np.eye(3)}


def _weighted(lib, t):
    """A sum of ``t`` weighted elementwise, so that every element's gradient differs."""
    w = WEIGHTS[:t.shape[-2], :t.shape[-1]] if t.ndim >= 2 else WEIGHTS[0, :t.shape[-1]]
    return (t * lib.tensor(w)).sum()


def _symmetric(t):
    return (t + t.mT) / 2


LOSSES = [
    ("det", lambda L, x: L.linalg.det(x["A"]).sum()),
    ("slogdet", lambda L, x: L.linalg.slogdet(x["A"]).logabsdet.sum()),
    ("logdet", lambda L, x: L.logdet(x["P"]).sum()),
    ("inv", lambda L, x: _weighted(L, L.linalg.inv(x["A"]))),
    ("solve", lambda L, x: _weighted(L, L.linalg.solve(x["A"], x["B"]))),
    ("solve_triangular", lambda L, x: _weighted(L, L.linalg.solve_triangular(x["A"], x["B"], upper=False))),
    ("cholesky", lambda L, x: _weighted(L, L.linalg.cholesky(_symmetric(x["P"])))),
    ("qr", lambda L, x: sum(_weighted(L, f * f) for f in L.linalg.qr(x["R"]))),
    ("svd", lambda L, x: sum(_weighted(L, f * f) for f in L.linalg.svd(x["R"], full_matrices=False))),
    ("svdvals", lambda L, x: _weighted(L, L.linalg.svdvals(x["A"]))),
    ("eigh", lambda L, x: sum(_weighted(L, f * f) for f in L.linalg.eigh(_symmetric(x["S"])))),
    ("eigvalsh", lambda L, x: _weighted(L, L.linalg.eigvalsh(_symmetric(x["S"])))),
    ("vector_norm", lambda L, x: L.linalg.vector_norm(x["A"], 3, dim=-1).sum()),
    ("matrix_norm nuc", lambda L, x: L.linalg.matrix_norm(x["A"], "nuc").sum()),
    ("matrix_norm 2", lambda L, x: L.linalg.matrix_norm(x["A"], 2).sum()),
    ("matrix_norm inf", lambda L, x: L.linalg.matrix_norm(x["A"], float("inf")).sum()),
    ("matrix_power", lambda L, x: _weighted(L, L.linalg.matrix_power(x["A"], -2))),
    ("matrix_exp", lambda L, x: _weighted(L, L.linalg.matrix_exp(x["A"] / 3))),
    ("pinv", lambda L, x: _weighted(L, L.linalg.pinv(x["R"]))),
    ("lstsq", lambda L, x: _weighted(L, L.linalg.lstsq(x["R"], x["R"][:, :2] + 1).solution)),
    ("lu", lambda L, x: sum(_weighted(L, f) for f in L.linalg.lu(x["A"])[1:])),
    ("lu_solve", lambda L, x: _weighted(L, L.linalg.lu_solve(*L.linalg.lu_factor(x["A"]), x["B"]))),
    ("cholesky_solve", lambda L, x: _weighted(L, L.cholesky_solve(x["B"], L.linalg.cholesky(x["P"][0])))),
    ("triangular_solve", lambda L, x: _weighted(L, L.triangular_solve(x["B"], x["A"][0], upper=True).solution)),
    ("trace kron tensordot", lambda L, x: L.trace(L.kron(x["A"][0], x["B"])[:3, :3])
     + L.tensordot(x["A"], x["R"].mT, 1).sum()),
    ("addmv addr addbmm", lambda L, x: L.addmv(x["B"][:, 0], x["A"][0], x["B"][:, 1], beta=0.5, alpha=2).sum()
     + L.addr(x["A"][0], x["B"][:, 0], x["B"][:, 1], alpha=3).sum() + L.addbmm(x["A"][0], x["A"], x["A"]).sum()),
]


@pytest.mark.parametrize("name, loss", LOSSES, ids=[n for n, _ in LOSSES])
def test_gradients_match_torch(name, loss):
    arrays = _arrays()
    mine = {k: jt.tensor(v).requires_grad_() for k, v in arrays.items()}
    theirs = {k: torch.tensor(v).requires_grad_() for k, v in arrays.items()}
    loss(jt, mine).backward()
    loss(torch, theirs).backward()
    for k in arrays:
        want = theirs[k].grad
        got = mine[k].grad
        if want is None:
            assert got is None or not got.numpy().any(), f"{name}: {k} has a gradient, torch's has none"
            continue
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-7, atol=1e-9, err_msg=f"{name}: {k}")


def test_svdvals_and_eigvalsh_compute_vectors_only_when_differentiated():
    A = jt.tensor(RNG.standard_normal((3, 3)))
    assert not jt.linalg.svdvals(A).requires_grad
    assert jt.linalg.svdvals(A.requires_grad_()).requires_grad
    with pytest.raises(NotImplementedError, match="derivative for '_linalg_svd' is not implemented"):
        jt.ops.registry.OPS["_linalg_svd"](A, False, False, None)[1].sum().backward()


def test_lstsq_singular_values_do_not_require_grad_as_torchs():
    A = jt.tensor(RNG.standard_normal((4, 2))).requires_grad_()
    solution, residuals, rank, singular_values = jt.linalg.lstsq(A, jt.ones(4, 1, dtype=jt.float64), driver="gelsd")
    assert solution.requires_grad and residuals.requires_grad and not singular_values.requires_grad
