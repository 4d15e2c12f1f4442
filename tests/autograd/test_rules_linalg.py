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


def _maybe_compiled(fn, lib, compiled):
    return jt.compile(fn) if compiled and lib is jt else fn


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_slogdet_sign_alone_gives_no_gradient_as_torch(compiled):
    """Fuzz seed 7101169: a backward from slogdet's sign alone gave a zero gradient where torch gives none
    (``.grad`` stays None); with the log too, the sign's gradient is ignored."""
    for lib in (torch, jt):
        a = lib.tensor([[2.0, 1.0], [1.0, -3.0]], requires_grad=True)
        sign = _maybe_compiled(lambda a: lib.linalg.slogdet(a)[0] * 2, lib, compiled)(a)
        assert sign.requires_grad
        sign.sum().backward()
        assert a.grad is None
    grads = []
    for lib in (torch, jt):
        a = lib.tensor([[2.0, 1.0], [1.0, -3.0]], requires_grad=True)
        sign, logabsdet = _maybe_compiled(lambda a: lib.slogdet(a), lib, compiled)(a)
        (sign * 5 + logabsdet).backward()
        grads.append(a.grad.tolist())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_logdet_of_a_singular_matrix_has_torchs_infinite_gradient(compiled):
    """Fuzz seed 7100586: logdet's backward of a singular matrix raised LinAlgError (an inverse that checks);
    torch's solves with the forward's LU: LAPACK's infinities, in a batch beside a regular matrix."""
    results = []
    for lib in (torch, jt):
        a = lib.tensor([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [1.0, 3.0]]], requires_grad=True)
        out = _maybe_compiled(lambda a: lib.logdet(a) * 1, lib, compiled)(a)
        out.sum().backward()
        results.append((out.tolist(), a.grad.tolist()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)
    assert results[0][1][0] == [[-np.inf, np.inf], [np.inf, -np.inf]]


def test_logdet_of_a_singular_matrix_refuses_a_differentiable_backward_as_torch():
    """With create_graph torch's slogdet backward solves with linalg.solve, which refuses a singular matrix."""
    for lib, error in ((torch, torch.linalg.LinAlgError), (jt, jt.linalg.LinAlgError)):
        a = lib.tensor([[1.0, 2.0], [2.0, 4.0]], requires_grad=True)
        with pytest.raises(error, match="singular"):
            lib.autograd.grad(lib.logdet(a), a, create_graph=True)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape", [(5, 5), (5, 3), (3, 5)], ids=["square", "tall", "wide"])
def test_qr_backward_reads_no_input_so_a_later_write_into_it_is_no_error(shape, compiled):
    """Fuzz seed 7301985: ``r = a.qr()[1]; a.acos_()`` then a backward through ``r``: torch's linalg_qr_backward
    reads Q and R alone (a wide matrix's ``Y`` is ``Q V``), jitorch's rule also saved A and raised the
    modified-by-an-inplace-operation error. Gradients against torch's."""
    def program(T, x):
        a = x * 0.5
        q, r = T.linalg.qr(a)
        a.acos_()
        return q, r

    grads = []
    for T in (torch, jt):
        x = T.tensor(np.random.default_rng(0).uniform(-0.9, 0.9, shape).tolist(), requires_grad=True)  # (full rank)
        fn = jt.compile(lambda x: program(jt, x)) if compiled and T is jt else lambda x: program(T, x)
        q, r = fn(x)
        (q.sum() + (r * 2).sum()).backward()
        grads.append(x.grad.numpy().astype(np.float64))
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("n", [0, 1, -1, 2, -3])
def test_matrix_power_result_requires_grad_and_its_gradient_as_torchs(n, compiled):
    """Fuzz seed 7612221: ``matrix_power(0)`` of a tensor that requires grad gave a result that did not (a new
    identity); torch copies the identity into a clone of the input: it requires grad, with a zero gradient. The
    result's layout is torch's (contiguous, also of a transposed input's first power)."""
    seen, array = [], _arrays()["A"]
    for lib in (torch, jt):
        a = lib.tensor(array, requires_grad=True)
        y = _maybe_compiled(lambda a: a.mT.matrix_power(n), lib, compiled)(a)
        assert y.requires_grad
        _weighted(lib, y).backward()
        seen.append((y.detach().numpy(), a.grad.numpy(), y.stride()))
    if n >= 0:  # (torch's inverse is laid out column-major, jitorch's row-major: a known difference)
        assert seen[1][2] == seen[0][2]
    np.testing.assert_allclose(seen[1][0], seen[0][0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(seen[1][1], seen[0][1], rtol=1e-7, atol=1e-9)
    assert seen[0][1].any() == (n != 0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_kron_operand_written_afterwards_raises_where_torch_reads_new_values_seed_7612269(compiled):
    """Fuzz seed 7612269: ``m = c1 < c0; y = m.kron(c0); m[1:] = 0.5``. torch's kron multiplies ``_unsafe_view``s
    of its operands, with version counters of their own: its backward reads the written ``m``, a wrong gradient.
    jitorch's saves ``m`` (``c0``'s derivative needs it) as ``mul`` does and raises (docs/differences-from-torch.md);
    without the write, the gradients agree."""
    w = RNG.standard_normal((5, 4))
    c1 = RNG.standard_normal(4)

    def program(lib, c0, write):
        m = lib.tensor(c1).less(c0)
        y = m.kron(c0)
        if write:
            m[1:] = 0.5
        return y

    grads = []
    for lib in (torch, jt):
        c0 = lib.tensor(w, requires_grad=True)
        (_maybe_compiled(lambda c0: program(lib, c0, False), lib, compiled)(c0) * 2).sum().backward()
        grads.append(c0.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0])
    c0 = torch.tensor(w, requires_grad=True)
    program(torch, c0, True).sum().backward()
    assert (c0.grad.numpy() * 2 != grads[0]).any()  # torch read the written m
    c0 = jt.tensor(w, requires_grad=True)
    y = _maybe_compiled(lambda c0: program(jt, c0, True), jt, compiled)(c0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape, k", [((5, 3), 3), ((5, 3), 2), ((2, 4, 4), 3), ((4, 2), 1), ((3, 3), 0)])
def test_householder_product_gradient_as_torchs_seed_7612101(shape, k, compiled):
    """Fuzz seed 7612101: ``orgqr``/``linalg.householder_product`` had no derivative (torch has one). Both
    gradients against torch's (only the reflector entries below the diagonal of the first k columns get one;
    without reflectors torch gives none at all)."""
    rng = np.random.default_rng(k)
    a, tau, w = rng.standard_normal(shape), rng.standard_normal(shape[:-2] + (k,)), rng.standard_normal(shape)
    seen = []
    for lib in (torch, jt):
        A, T = lib.tensor(a, requires_grad=True), lib.tensor(tau, requires_grad=True)
        fns = (lib.linalg.householder_product, lib.orgqr)
        for fn in fns:
            A.grad = T.grad = None
            (_maybe_compiled(lambda A, T: fn(A, T) * lib.tensor(w), lib, compiled)(A, T)).sum().backward()
            seen.append((A.grad, T.grad))
    for got in seen[2:]:
        for mine, theirs in zip(got, seen[0]):
            if theirs is None:
                assert mine is None
            else:
                np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)
    assert k == 0 or not seen[2][0].numpy()[..., : k, : k].diagonal(0, -2, -1).any()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape, other, left, transpose", [
    ((5, 3), (5, 4), True, False), ((5, 3), (5, 4), True, True), ((4, 3), (5, 4), False, False),
    ((2, 4, 3), (2, 6, 4), False, True), ((4, 4), (4, 2), True, False)])
def test_ormqr_gradient_as_torchs(shape, other, left, transpose, compiled):
    """``ormqr`` had no derivative (torch has one): its gradients with respect to the reflectors, tau and the
    other matrix against torch's, from the left and the right, transposed or not, batched; gradcheck and
    gradgradcheck (the rule's ops are differentiable)."""
    rng = np.random.default_rng(len(shape) + left + 2 * transpose)
    h, tau = torch.geqrf(torch.tensor(rng.standard_normal(shape)))
    k = min(other[-2] if left else other[-1], shape[-1])
    h, tau = h.numpy(), tau[..., :k].numpy()
    c, w = rng.standard_normal(other), rng.standard_normal(other)
    seen = []
    for lib in (torch, jt):
        A, T, C = (lib.tensor(v, requires_grad=True) for v in (h, tau, c))
        fn = _maybe_compiled(lambda A, T, C: lib.ormqr(A, T, C, left, transpose) * lib.tensor(w), lib, compiled)
        fn(A, T, C).sum().backward()
        seen.append([t.grad.numpy() for t in (A, T, C)])
    for mine, theirs in zip(*reversed(seen)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-12)
    args = tuple(jt.tensor(v, requires_grad=True) for v in (h, tau, c))
    assert jt.autograd.gradcheck(lambda A, T, C: jt.ormqr(A, T, C, left, transpose), args)
    if not compiled and transpose and left:  # (once: a few hundred backward calls)
        assert jt.autograd.gradgradcheck(lambda A, T, C: jt.ormqr(A, T, C, left, transpose), args)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 1), (2, 1, 4), (3, 0), (0, 2)],
                         ids=["tall", "wide", "column", "row", "no-columns", "no-rows"])
def test_lu_factor_of_a_rectangular_matrix_differentiates_as_torchs_seed_7840849(shape, compiled):
    """Transform-fuzz seed 7840849: ``jvp`` through ``T.lu`` of a (2, 1) matrix raised NotImplementedError (the
    rule took square matrices alone); torch's lu_factor_ex_backward takes rectangular ones. Gradient and
    tangent against torch's, gradcheck and gradgradcheck (the rule differentiates again)."""
    rng = np.random.default_rng(7840849)
    a, weights, tangent = (rng.standard_normal(shape) for _ in range(3))
    got, want = [], []
    for lib, seen in ((torch, want), (jt, got)):
        def lu(x):
            return lib.linalg.lu_factor_ex(x * 1)[0] * lib.tensor(weights)
        x = lib.tensor(a, requires_grad=True)
        _maybe_compiled(lu, lib, compiled)(x).sum().backward()
        func = jt.func if lib is jt else torch.func
        seen += [x.grad.numpy(), func.jvp(lu, (lib.tensor(a),), (lib.tensor(tangent),))[1].numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    x = jt.tensor(a, requires_grad=True)
    assert jt.autograd.gradcheck(lambda x: jt.linalg.lu_factor_ex(x)[0], (x,))
    assert jt.autograd.gradgradcheck(lambda x: jt.linalg.lu_factor_ex(x)[0], (x,))
