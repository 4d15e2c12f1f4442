"""Regression tests of gradient defects session 48's OpInfo sweep (tests/ops/opinfo_sweep.py) found, each against
torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt


@pytest.mark.parametrize("left, transpose", [(True, True), (True, False), (False, True), (False, False)])
def test_ormqr_of_a_matrix_without_columns_has_an_empty_gradient(left, transpose):
    """OpInfo ormqr, float64 samples #8-#11 (a 5x0 reflector matrix, no scales): torch's backward gives the
    reflectors an empty gradient; jitorch's rule concatenated no columns and raised ValueError ("torch.cat():
    expected a non-empty list of Tensors")."""
    c_shape = (5, 3) if left else (3, 5)
    rng = np.random.default_rng(0)
    c = rng.standard_normal(c_shape)

    def grads(lib):
        a = lib.zeros(5, 0, dtype=lib.float64, requires_grad=True)
        tau = lib.zeros(0, dtype=lib.float64, requires_grad=True)
        x = lib.tensor(c, requires_grad=True)
        r = lib.ormqr(a, tau, x, left=left, transpose=transpose)
        leaves = [a, tau, x]
        found = lib.autograd.grad((r * r).sum(), leaves, allow_unused=True)
        return r, [lib.zeros_like(t) if g is None else g for g, t in zip(found, leaves)]
    r_t, theirs = grads(torch)
    r_j, ours = grads(jt)
    np.testing.assert_allclose(r_j.detach().numpy(), r_t.detach().numpy(), rtol=1e-12)
    for want, got in zip(theirs, ours):
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("shape, dim, keepdim", [((3, 4), None, False), ((2, 3, 4), (1, 2), False),
                                                 ((2, 3, 4), (0, 2), True), ((4, 2, 3), (-1, 0), False)])
def test_nuclear_norm_differentiates_as_torch(shape, dim, keepdim):
    """OpInfo norm.nuc, float64 samples #0 and #1: torch differentiates the nuclear norm (through its singular
    values: ``g U Vh``); jitorch raised NotImplementedError ("the derivative for 'norm' with p='nuc' is not
    implemented")."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape)
    tx, jx = torch.tensor(a, requires_grad=True), jt.tensor(a, requires_grad=True)
    rt, rj = torch.norm(tx, "nuc", dim, keepdim), jt.norm(jx, "nuc", dim, keepdim)
    cot = rng.standard_normal(tuple(rt.shape))
    want = torch.autograd.grad(rt, tx, torch.tensor(cot))[0]
    got = jt.autograd.grad(rj, jx, jt.tensor(cot))[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    assert jt.autograd.gradcheck(lambda x: jt.norm(x, "nuc", dim, keepdim), (jx,))
