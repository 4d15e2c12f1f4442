"""Derivative rules of the matrix decompositions and solvers (jitorch/ops/decompositions.py) and of addmv,
addr and addbmm.

Formulas follow PyTorch's ``FunctionsManual.cpp`` for real matrices, written with registry ops so that
they differentiate again. Those of Cholesky and eigh give the symmetric gradient torch gives: the kernels
read one triangle of a symmetric input, the gradient is taken with respect to the symmetric matrix. SVD,
eigh and QR assume what torch assumes (distinct singular values or eigenvalues, a full-rank R).
"""

from __future__ import annotations

import math

from jitorch.autograd.rule import (defgrad, differentiates, is_linearizing, nondifferentiable, not_implemented, only_if,
                                   only_with_grads_of, reads, undefined_grads)
from jitorch.autograd.rules.common import per_input, wanted
from jitorch.autograd.rules.structural import _scaled, sum_to
from jitorch.ops import functions as jt
from jitorch.ops.decompositions import lu_solve, renamed, solve_is_vector
from jitorch.ops.registry import OPS
from jitorch.runtime.grad_mode import is_grad_enabled


def _solve_triangular(A, B, upper, left=True, unit=False):
    return OPS["linalg_solve_triangular"](A, B, upper, left, unit)


def _matrix_eye(n, like):
    return jt.eye(n, dtype=like.dtype, device=like.device)


def _not_implemented(name):
    """The rule of an op whose derivative jitorch does not implement (torch has none for geqrf either)."""
    return lambda g, a, out: not_implemented(name)


# Determinants, inverse, solves ---------------------------------------------------------------------------------

def _other_products(S):
    """Per singular value, the product of the others, without dividing (exact for a singular matrix)."""
    ones = jt.ones_like(S[..., :1])
    before = jt.cat([ones, S[..., :-1].cumprod(-1)], -1)
    after = jt.cat([S[..., 1:].flip([-1]).cumprod(-1).flip([-1]), ones], -1)
    return before * after


def _det(g, a, out):
    """The cofactor matrix ``det(A) A^-T``, from the SVD so that singular matrices have theirs too:
    ``det(U) det(Vh) U diag(prod_{j != i} s_j) Vh``. A matrix holding NaN has NaN for its cofactors, as torch's
    gradient and tangent are (the SVD, which refuses it, factors zeros in its place; fuzz seed 7895132)."""
    A = a.self
    finite = A.isnan().logical_not().all(-1, keepdim=True).all(-2, keepdim=True)
    U, S, Vh = OPS["_linalg_svd"](jt.where(finite, A, 0), False, True, None)
    sign = jt.det(U.detach()) * jt.det(Vh.detach())
    # (times NaN, not replaced by it: the tangent, this rule's transpose in g, must be NaN too)
    cofactor = (U * _other_products(S).unsqueeze(-2)).matmul(Vh) * jt.where(finite, 1.0, math.nan).to(A.dtype)
    return (g * sign).unsqueeze(-1).unsqueeze(-1) * cofactor


def _slogdet(g, a, out):
    """``g_logabsdet * A^-T``, as torch's: solved with A's LU (of ``A^T`` where A is contiguous, as torch's forward
    factors it), so that a singular ``A`` gives LAPACK's infinities (fuzz seed 7100586 raised LinAlgError), and
    forward mode's tangent, this rule's transpose, is torch's ``trace(A^-1 dA)`` there (seed 7882824). A backward
    that records its own graph (create_graph, but not forward mode's `rule.linearizing`) refuses a singular
    ``A``, as torch's linalg.solve there. The sign's gradient is none (real matrices)."""
    A = a.self
    # (on the diagonal, not times the identity: its zeros would make the tangent's infinities NaN)
    scaled = jt.diag_embed(g[1].unsqueeze(-1).expand(*g[1].shape, A.shape[-1]))
    if is_grad_enabled() and not is_linearizing():
        return renamed("torch.linalg.solve_ex", "torch.linalg.solve",
                       lambda check: OPS["linalg_solve_ex"](A.mT, scaled, True, check))[0]
    transposed = A.is_contiguous()
    LU, pivots = OPS["linalg_lu_factor_ex"](A.mT if transposed else A, True, False)[:2]
    return lu_solve(LU, pivots, scaled, adjoint=not transposed)


def _inverse(g, a, out):
    inverse = out[0].mT
    return -inverse.matmul(g[0]).matmul(inverse)


def _transposed_solve(A, gX, left):
    """A^-T gX (gX A^-T with ``left=False``)."""
    if left:
        return OPS["linalg_solve_ex"](A.mT, gX, True, False)[0]
    return OPS["linalg_solve_ex"](A, gX.mT, True, False)[0].mT


def _solve_ex(g, a, out):
    X, gX = out[0], g[0]
    vector = X.ndim == out[1].ndim + 1
    if vector:
        X, gX = X.unsqueeze(-1), gX.unsqueeze(-1)
    gB = _transposed_solve(a.A, gX, a.left)
    grads = {}
    if wanted(a.B):
        grads["B"] = gB.squeeze(-1) if vector else gB
    if wanted(a.A):
        grads["A"] = -(gB.matmul(X.mT) if a.left else X.mT.matmul(gB))
    return grads


def _triangle(t, upper, unit):
    return t.triu(1 if unit else 0) if upper else t.tril(-1 if unit else 0)


def _solve_triangular_rule(g, a, out):
    A, X = a.self, out
    gB = _solve_triangular(A.mT, g, not a.upper, a.left, a.unitriangular)
    grads = {}
    if wanted(a.B):
        grads["B"] = gB
    if wanted(a.self):
        gA = gB.matmul(X.mT) if a.left else X.mT.matmul(gB)
        grads["self"] = -_triangle(gA, a.upper, a.unitriangular)
    return grads


def _triangular_solve(g, a, out):
    """torch's single node: the solution's gradient as linalg.solve_triangular's, and the copy's back to A."""
    (X, _), (gX, gM) = out, g
    upper = a.upper != a.transpose
    M = a.A.mT if a.transpose else a.A
    gB = _solve_triangular(M.mT, gX, not upper, True, a.unitriangular)
    grads = {}
    if wanted(a.self):
        grads["self"] = gB
    if wanted(a.A):
        gM_solve = -_triangle(gB.matmul(X.mT), upper, a.unitriangular)
        grads["A"] = (gM_solve.mT if a.transpose else gM_solve) + gM
    return grads


defgrad("det", per_input(self=reads("self", _det)))
defgrad("slogdet", only_with_grads_of((1,), per_input(self=reads("self", _slogdet))))  # (fuzz seed 7101169)
defgrad("linalg_inv_ex", per_input(A=reads("result", _inverse)))
defgrad("linalg_solve_ex", differentiates("A B", reads("A result", _solve_ex)))
defgrad("linalg_solve_triangular", differentiates("self B", reads("self result", _solve_triangular_rule)))
defgrad("triangular_solve", differentiates("self A", reads("A result0", _triangular_solve)))


# Cholesky, LU ------------------------------------------------------------------------------------------------

def _cholesky(g, a, out):
    """gA = sym(L^-T Phi(L^T gL) L^-1), Phi taking the lower triangle with the diagonal halved."""
    L, gL = out[0], g[0]
    if a.upper:
        L, gL = L.mT, gL.mT
    n = L.shape[-1]
    half_lower = jt.ones((n, n), dtype=L.dtype, device=L.device).tril() - 0.5 * _matrix_eye(n, L)
    phi = L.mT.matmul(gL) * half_lower
    gA = _solve_triangular(L, _solve_triangular(L.mT, phi, True), False, left=False)
    return 0.5 * (gA + gA.mT)


def _lu_factor(g, a, out):
    """A = P L U, L (m, k) unit lower, U (k, n) upper, k = min(m, n) (torch's lu_factor_ex_backward). With L1 and
    U1 the leading k-by-k blocks: gA = P L1^-T phi U1^-T, phi = tril_-1(L^T gL) + triu(gU U^T), beside
    P gL2 U1^-T below it (tall, phi less L2^T gL2) or P L1^-T gU2 right of it (wide, phi less gU2 U2^T): the
    trailing rows of L and columns of U follow from the leading block's factors."""
    LU, pivots, gLU = out[0], out[1], g[0]
    m, n = LU.shape[-2:]
    k = min(m, n)
    P, L, U = jt.lu_unpack(LU, pivots)
    gL, gU = gLU[..., :k].tril(-1), gLU[..., :k, :].triu()
    phi = L.mT.matmul(gL).tril(-1) + gU.matmul(U.mT).triu()
    L1, U1 = L[..., :k, :], U[..., :k]
    if m > n:
        phi = phi - L[..., k:, :].mT.matmul(gL[..., k:, :])
    elif m < n:
        phi = phi - gU[..., k:].matmul(U[..., k:].mT)
    gA = _solve_triangular(L1.mT, _solve_triangular(U1.mT, phi, False, left=False), True, unit=True)
    if m > n:
        gA = jt.cat([gA, _solve_triangular(U1.mT, gL[..., k:, :], False, left=False)], -2)
    elif m < n:
        gA = jt.cat([gA, _solve_triangular(L1.mT, gU[..., k:], True, unit=True)], -1)
    return P.matmul(gA)


defgrad("linalg_cholesky_ex", per_input(self=reads("result", _cholesky)))
defgrad("linalg_lu_factor_ex", per_input(A=reads("result", _lu_factor)))
nondifferentiable("_lu_permutation")


# QR, SVD, eigh ----------------------------------------------------------------------------------------------

def _qr_tall(Q, R, gQ, gR):
    """m >= n: gA = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q, copyltu symmetric from M's lower triangle."""
    M = R.matmul(gR.mT) - gQ.mT.matmul(Q)
    b = gQ + Q.matmul(M.tril() + M.tril(-1).mT)
    return _solve_triangular(R.mT, b, False, left=False)


def _qr(g, a, out):
    if a.mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use "
                           "linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.")
    (Q, R), (gQ, gR) = out, g
    m, n = Q.shape[-2], R.shape[-1]
    if m >= n:
        if a.mode == "complete" and m > n:
            raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
        return _qr_tall(Q, R, gQ, gR)
    # m < n: torch's linalg_qr_backward, from Q and R alone (it saves no A, so a write into A after the call is
    # no error: fuzz seed 7301985). It is the transpose, op by op, of torch's forward formula (dX = tril_-1(Q^T dA_1
    # R_1^-1), dQ = Q (dX - dX^T), dR = Q^T dA - (dX - dX^T) R), so forward mode's tangent, this rule's transpose,
    # is torch's where R_1 is singular: the strict lower triangle drops what the solve made infinite (a 1-by-n A
    # of zeros has dQ = 0 and dR = dA; fuzz seed 7892786)
    K = Q.mT.matmul(gQ) - gR.matmul(R.mT)
    gX = _solve_triangular(R[..., :m].mT, Q.matmul((K - K.mT).tril(-1)), False, left=False)
    return jt.cat([gX, jt.zeros_like(R[..., m:])], -1) + Q.matmul(gR)


def _svd(g, a, out):
    """torch's svd_backward for real matrices with distinct singular values; with full_matrices the extra
    columns of U and rows of Vh take no part. From the singular values' gradient alone (U's and Vh's undefined:
    svdvals, the nuclear and spectral norms) it is ``U diag(gS) Vh``, defined for repeated singular values too."""
    (U, S, Vh), (gU, gS, gVh) = out, g
    if not a.compute_uv:
        raise NotImplementedError("the derivative for '_linalg_svd' is not implemented without U and Vh "
                                  "(compute_uv=False): linalg.svdvals computes them when differentiated")
    k = S.shape[-1]
    if a.full_matrices:
        U, Vh = U[..., :k], Vh[..., :k, :]
    if gU is None and gVh is None:
        return U.matmul(gS.unsqueeze(-1) * Vh) if gS is not None else jt.zeros_like(a.A)
    gS = jt.zeros_like(S) if gS is None else gS
    gU = jt.zeros_like(U) if gU is None else gU[..., :k]
    gVh = jt.zeros_like(Vh) if gVh is None else gVh[..., :k, :]
    m, n = U.shape[-2], Vh.shape[-1]
    UhgU = U.mT.matmul(gU)
    VhgV = Vh.matmul(gVh.mT)
    UhgU, VhgV = UhgU - UhgU.mT, VhgV - VhgV.mT
    S2 = S * S
    E = S2.unsqueeze(-2) - S2.unsqueeze(-1) + _matrix_eye(k, S)
    gA = (UhgU * S.unsqueeze(-2) + S.unsqueeze(-1) * VhgV) / E + gS.unsqueeze(-1) * _matrix_eye(k, S)
    if m > n:
        gUSinv = gU / S.unsqueeze(-2)
        gA = U.matmul(gA) + gUSinv - U.matmul(U.mT.matmul(gUSinv))
        return gA.matmul(Vh)
    if m < n:
        SinvgVh = gVh / S.unsqueeze(-1)
        gA = gA.matmul(Vh) + SinvgVh - SinvgVh.matmul(Vh.mT).matmul(Vh)
        return U.matmul(gA)
    return U.matmul(gA).matmul(Vh)


def _eigh(g, a, out):
    """gA = V (diag(gL) + skew(V^T gV) / 2 / E) V^T, E_ij = L_j - L_i (torch's linalg_eig_backward, symmetric)."""
    if not a.compute_v:
        raise NotImplementedError("the derivative for '_linalg_eigh' is not implemented without the eigenvectors "
                                  "(compute_v=False): linalg.eigvalsh computes them when differentiated")
    (L, V), (gL, gV) = out, g
    n = L.shape[-1]
    eye = _matrix_eye(n, L)
    VhgV = V.mT.matmul(gV)
    E = L.unsqueeze(-2) - L.unsqueeze(-1) + eye
    inner = 0.5 * (VhgV - VhgV.mT) / E * (1 - eye) + gL.unsqueeze(-1) * eye
    return V.matmul(inner).matmul(V.mT)


defgrad("linalg_qr", per_input(A=reads("result", _qr)))
defgrad("_linalg_svd", undefined_grads(per_input(A=reads("result", _svd))))
defgrad("_linalg_eigh", per_input(A=reads("result", _eigh)))


# Pseudo-inverse, least squares, matrix exponential -----------------------------------------------------------

def pinv_backward(g, pinvA, A):
    """torch's pinv_backward: the gradient of ``pinv(A)`` for A of constant rank."""
    m, n = A.shape[-2:]
    pinvAh, gh = pinvA.mT, g.mT
    if m <= n:
        K = gh.matmul(pinvA)
        KpinvAh = K.matmul(pinvAh)
        return (-(pinvA.matmul(K)).mT + KpinvAh - A.matmul(pinvA).matmul(KpinvAh)
                + pinvAh.matmul(pinvA).matmul(gh - K.matmul(A)))
    K = pinvA.matmul(gh)
    pinvAhK = pinvAh.matmul(K)
    return (-(K.matmul(pinvA)).mT + (gh - A.matmul(K)).matmul(pinvA).matmul(pinvAh) + pinvAhK
            - pinvAhK.matmul(pinvA).matmul(A))


def _pinv(g, a, out):
    return pinv_backward(g, out, a.self)


def _lstsq(g, a, out):
    """The solution's gradient as that of ``pinv(A) @ B`` (torch's linalg_lstsq_backward); the residuals'
    ``|A X - B|^2`` as at the optimum (where A^T (A X - B) = 0); the singular values' as svdvals'."""
    A, B = a.self, a.b
    X, residuals, sv = out[0], out[1], out[3]
    gX, gres, gsv = g[0], g[1], g[3]
    vector = solve_is_vector(A, B)
    if vector:
        B, X, gX = B.unsqueeze(-1), X.unsqueeze(-1), gX.unsqueeze(-1)
    pinvA = OPS["linalg_pinv.atol_rtol_float"](A, None, None, False)
    gA, gB = pinv_backward(gX.matmul(B.mT), pinvA, A), pinvA.mT.matmul(gX)
    if residuals.numel():
        r = A.matmul(X) - B
        weighted = 2 * r * (gres.unsqueeze(-1) if vector else gres.unsqueeze(-2))
        gA, gB = gA + weighted.matmul(X.mT), gB - weighted
    if sv.numel():
        U, _, Vh = OPS["_linalg_svd"](A, False, True, None)
        gA = gA + (U * gsv.unsqueeze(-2)).matmul(Vh)
    grads = {}
    if wanted(a.self):
        grads["self"] = gA
    if wanted(a.b):
        grads["b"] = gB.squeeze(-1) if vector else gB
    return grads


def _matrix_exp(g, a, out):
    """The upper right block of exp([[A^T, g], [0, A^T]]), with each matrix's ``g`` scaled by a power of two to
    entries below 1 and the block scaled back (the block is linear in ``g``): the exponential's scaling and
    squaring takes its number of squarings from the whole matrix's norm, and a ``g`` far larger than ``A`` (the
    gradient of ``expm1(matrix_exp(x))``, transform fuzz seed 8409257) made it halve ``A`` to below the
    rounding of the identity, losing ``A`` (torch's gradient has that error)."""
    At = a.self.mT
    n = At.shape[-1]
    # (frexp's exponent of 0, inf and NaN is 0: those keep their scale 1; no elements, no largest one)
    scale = jt.frexp(g.detach().abs().amax((-2, -1), keepdim=True))[1].to(g.dtype).exp2() if g.numel() else 1
    top = jt.cat([At, g / scale], -1)
    bottom = jt.cat([jt.zeros_like(At), At], -1)
    return jt.matrix_exp(jt.cat([top, bottom], -2))[..., :n, n:] * scale


defgrad("linalg_pinv.atol_rtol_float", per_input(self=reads("self result", _pinv)))
defgrad("_linalg_lstsq", differentiates("self b", reads("self b result", _lstsq)))
defgrad("matrix_exp", per_input(self=reads("self", _matrix_exp)))


def _householder_product(g, A, tau):
    """The gradients of ``Q = H_0 ... H_{k-1} E`` (``H_j = I - tau_j v_j v_j^T``, E the first n columns of I)
    with respect to A's reflector columns and tau: with ``P_j = (H_0 ... H_{j-1})^T gQ`` and
    ``R_j = H_{j+1} ... H_{k-1} E``, the gradient of ``H_j`` is ``P_j R_j^T``, so ``gtau_j = -(P_j^T v_j)
    (R_j^T v_j)`` and ``gv_j = -tau_j (P_j R_j^T v_j + R_j P_j^T v_j)``; only A's entries below the diagonal
    of the first k columns are read, the others get zeros (as torch's householder_product_backward, which gives
    no gradient at all without reflectors: `only_if` in `_householder_rule`)."""
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    V = A.tril(-1) + jt.eye(m, n, dtype=A.dtype, device=A.device)

    def reflect(j, X):
        v = V[..., :, j:j + 1]
        return X - tau[..., j, None, None] * v.matmul(v.mT.matmul(X))

    right = [jt.eye(m, n, dtype=A.dtype, device=A.device).expand(A.shape)]
    for j in range(k - 1, 0, -1):
        right.append(reflect(j, right[-1]))
    right.reverse()
    P, gv, gtau = g, [], []
    for j in range(k):
        v = V[..., :, j:j + 1]
        Rv, Pv = right[j].mT.matmul(v), P.mT.matmul(v)
        gtau.append(-(Pv * Rv).sum((-2, -1)))
        gv.append(-tau[..., j, None, None] * (P.matmul(Rv) + right[j].matmul(Pv)))
        P = reflect(j, P)
    gA = jt.cat(gv + [jt.zeros_like(V[..., :, :1])] * (n - k), -1).tril(-1)
    # A matrix whose reflectors or scales hold inf or NaN has NaN for every gradient it reads, as torch's (fuzz
    # seed 8302924: the partial derivative by a NaN tau_j does not read tau_j and was finite)
    read = (jt.ones_like(A).tril(-1) != 0) & (jt.arange(n, device=A.device) < k)
    finite = (tau.isfinite().all(-1) & (A.isfinite() | read.logical_not()).all(-1).all(-1))[..., None]
    gA = jt.where(finite[..., None] | read.logical_not(), gA, math.nan)
    return gA, jt.where(finite, jt.stack(gtau, -1), math.nan)


def _householder_rule(names):
    matrix, scales = names.split()

    def rule(g, a, out):
        A, tau = getattr(a, matrix), getattr(a, scales)
        gA, gtau = _householder_product(g, A, tau)
        return {name: grad for name, grad in ((matrix, gA), (scales, gtau)) if wanted(getattr(a, name))}
    return only_if(lambda a: getattr(a, scales).shape[-1] > 0, differentiates(names, reads(names, rule)))


defgrad("geqrf", differentiates("self", _not_implemented("geqrf")))
defgrad("orgqr", _householder_rule("self input2"))
defgrad("linalg_householder_product", _householder_rule("input tau"))


def _ormqr(g, a, out):
    """``ormqr`` as the reflections it applies to ``input3`` one by one (``X <- X - tau_j v_j v_j^T X`` from the
    left, ``X <- X - tau_j X v_j v_j^T`` from the right), differentiated in reverse: each reflection passes
    ``H_j G`` (``G H_j``) back, and with X its input, ``gtau_j = -(G^T v)·(X^T v)`` and ``gv_j = -tau_j (G X^T v +
    X G^T v)`` from the left (transposed from the right); A's reflector entries below the diagonal get gv."""
    A, tau, C, left = a.self, a.input2, a.input3, a.left
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    V = A.tril(-1) + jt.eye(m, n, dtype=A.dtype, device=A.device)
    order = list(range(k)) if left == a.transpose else list(range(k - 1, -1, -1))

    def reflect(j, X):
        v, t = V[..., :, j:j + 1], tau[..., j, None, None]
        return X - t * v.matmul(v.mT.matmul(X)) if left else X - t * X.matmul(v).matmul(v.mT)

    inputs = [C]  # the matrix each reflection applies to
    for j in order[:-1]:
        inputs.append(reflect(j, inputs[-1]))
    G, gv, gtau = g, [None] * k, [None] * k
    for j, X in zip(reversed(order), reversed(inputs)):
        v, t = V[..., :, j:j + 1], tau[..., j, None, None]
        Xt, Gt = (X, G) if left else (X.mT, G.mT)
        Xv, Gv = Xt.mT.matmul(v), Gt.mT.matmul(v)
        gtau[j] = -(Gv * Xv).sum((-2, -1))
        gv[j] = -t * (Gt.matmul(Xv) + Xt.matmul(Gv))
        G = reflect(j, G)
    grads = {}
    if wanted(a.self):
        # (a matrix without columns has no reflectors: its empty gradient, where cat of no parts would raise)
        grads["self"] = jt.cat(gv + [jt.zeros_like(V[..., :, :1])] * (n - k), -1).tril(-1) if n else jt.zeros_like(A)
    if wanted(a.input2):
        grads["input2"] = jt.stack(gtau, -1) if k else jt.zeros_like(tau)
    if wanted(a.input3):
        grads["input3"] = G
    return grads


defgrad("ormqr", differentiates("self input2 input3", reads("self input2 input3", _ormqr)))


# addmv, addr, addbmm ----------------------------------------------------------------------------------------------

def _scaled_self(g, a, out):
    return sum_to(_scaled(g, a.beta), a.self.shape)


def _batches(g, a):
    return g.unsqueeze(0).expand((a.batch1.shape[0],) + tuple(g.shape))


defgrad("addmv", per_input(self=reads("", _scaled_self),
                           mat=reads("vec", lambda g, a, out: _scaled(g.outer(a.vec), a.alpha)),
                           vec=reads("mat", lambda g, a, out: _scaled(a.mat.t().mv(g), a.alpha))))
defgrad("addr", per_input(self=reads("", _scaled_self),
                          vec1=reads("vec2", lambda g, a, out: _scaled(g.mv(a.vec2.to(g.dtype)), a.alpha)),
                          vec2=reads("vec1", lambda g, a, out: _scaled(g.t().mv(a.vec1.to(g.dtype)), a.alpha))))
defgrad("addbmm", per_input(
    self=reads("", _scaled_self),
    batch1=reads("batch2", lambda g, a, out: _scaled(_batches(g, a).bmm(a.batch2.transpose(1, 2)), a.alpha)),
    batch2=reads("batch1", lambda g, a, out: _scaled(a.batch1.transpose(1, 2).bmm(_batches(g, a)), a.alpha))))
