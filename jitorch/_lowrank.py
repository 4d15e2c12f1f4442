"""``svd_lowrank`` and ``pca_lowrank``: randomized low-rank SVD (Halko, Martinsson and Tropp 2009, algorithms 4.4
and 5.1), step for step as torch's ``torch/_lowrank.py``.

Built on ``randn``, ``matmul``, ``linalg.qr`` and ``linalg.svd``, so autograd differentiates the results and the
tracer records them. The random matrix comes from jitorch's generator, not torch's, so for a seed the results
are other (equally good) approximations than torch's; given the same random matrix they are torch's.
"""

from __future__ import annotations

import jitorch as _jt


def _floating_dtype(A):
    return A.dtype if A.dtype in (_jt.float16, _jt.float32, _jt.float64) else _jt.float32


def get_approximate_basis(A, q, niter=2, M=None):
    """A tensor Q of ``q`` orthonormal columns with ``Q Q^H (A - M)`` approximating ``A - M`` (``M`` None: 0),
    after ``niter`` subspace iterations."""
    niter = 2 if niter is None else niter
    R = _jt.randn(A.shape[-1], q, dtype=_floating_dtype(A), device=A.device)
    X = _jt.matmul(A, R)
    if M is not None:
        X = X - _jt.matmul(M, R)
    Q = _jt.linalg.qr(X).Q
    for _ in range(niter):
        X = _jt.matmul(A.mH, Q)
        if M is not None:
            X = X - _jt.matmul(M.mH, Q)
        Q = _jt.linalg.qr(X).Q
        X = _jt.matmul(A, Q)
        if M is not None:
            X = X - _jt.matmul(M, Q)
        Q = _jt.linalg.qr(X).Q
    return Q


def svd_lowrank(A, q=6, niter=2, M=None):
    """``(U, S, V)`` with ``A - M ≈ U diag(S) V^H`` (``M`` broadcast to A, or None), of rank ``q``, batched over
    leading dims."""
    q = 6 if q is None else q
    m, n = A.shape[-2:]
    if M is not None:
        M = M.broadcast_to(A.size())
    if m < n:  # the algorithm assumes a tall A
        A = A.mH
        if M is not None:
            M = M.mH
    Q = get_approximate_basis(A, q, niter=niter, M=M)
    B = _jt.matmul(Q.mH, A)
    if M is not None:
        B = B - _jt.matmul(Q.mH, M)
    U, S, Vh = _jt.linalg.svd(B, full_matrices=False)
    V = Vh.mH
    U = Q.matmul(U)
    if m < n:
        U, V = V, U
    return U, S, V


def pca_lowrank(A, q=None, center=True, niter=2):
    """Principal component analysis of the data matrix ``A`` (m samples by n features): `svd_lowrank` of ``A``
    less its column means (``center``), ``q`` = min(6, m, n) by default."""
    m, n = A.shape[-2:]
    if q is None:
        q = min(6, m, n)
    elif not (q >= 0 and q <= min(m, n)):
        raise ValueError(f"q(={q}) must be non-negative integer and not greater than min(m, n)={min(m, n)}")
    if not (niter >= 0):
        raise ValueError(f"niter(={niter}) must be non-negative integer")
    if not center:
        return svd_lowrank(A, q, niter=niter, M=None)
    return svd_lowrank(A - A.mean(dim=(-2,), keepdim=True), q, niter=niter, M=None)
