"""``lobpcg``: the k largest (or smallest) eigenpairs of a symmetric positive definite generalized eigenproblem
``A X = B X E`` by the locally optimal block preconditioned conjugate gradient method, as torch's
``torch/_lobpcg.py`` (Knyazev's method; "ortho" is Stathopoulos and Wu's robust variant, Duersch et al.'s
SVQB orthogonalization), step for step.

Built on registry ops (products, ``linalg.eigh``, ``linalg.cholesky``, ``linalg.qr``), run eagerly: the
iteration reads norms into Python to decide when to stop, as torch's does. Two things differ from torch and
are expected to: the random start ``X`` (when not given) comes from jitorch's generator, and ``linalg.eigh``'s
eigenvectors come from another LAPACK, so signs of intermediate bases may differ; both change the iterates,
not what they converge to. A gradient with respect to ``A`` (``B`` None) is torch's: its formula for the
eigenvalues and eigenvectors of the symmetrised ``A`` (LOBPCGAutogradFunction), not the iteration's.
"""

from __future__ import annotations

import functools

import jitorch as _jt

__all__ = ["lobpcg"]


def _matmul(A, B):
    """``A @ B``, with A None standing for the identity."""
    return B if A is None else _jt.matmul(A, B)


def _qform(A, S):
    """``S^T A S``."""
    return _matmul(S.mT, _matmul(A, S))


def _symeig(A, largest=False):
    """Eigenpairs of the symmetric A (its upper triangle), ascending, or descending with ``largest``."""
    E, Z = _jt.linalg.eigh(A, UPLO="U")
    if largest:
        E, Z = _jt.flip(E, dims=(-1,)), _jt.flip(Z, dims=(-1,))
    return E, Z


def _basis(A):
    return _jt.linalg.qr(A).Q


def _floating_dtype(A):
    return A.dtype if A.dtype in (_jt.float16, _jt.float32, _jt.float64) else _jt.float32


# torch's gradient of the eigenpairs (the complete eigenspace; a partial one through A's characteristic polynomial)

def _symeig_backward_complete_eigenspace(D_grad, U_grad, A, D, U):
    F = D.unsqueeze(-2) - D.unsqueeze(-1)
    F.diagonal(dim1=-2, dim2=-1).fill_(float("inf"))
    F.pow_(-1)
    Ut = U.mT.contiguous()
    return _jt.matmul(U, _jt.matmul(_jt.diag_embed(D_grad) + _jt.matmul(Ut, U_grad) * F, Ut))


def _polynomial_coefficients_given_roots(roots):
    """The coefficients, lowest power first, of the monic polynomial with ``roots`` (last dim)."""
    order = roots.shape[-1]
    shape = list(roots.shape)
    shape[-1] += 2
    coeffs = roots.new_zeros(shape)
    coeffs[..., 0] = 1
    coeffs[..., -1] = 1
    for i in range(1, order + 1):
        new = coeffs.clone() if roots.requires_grad else coeffs
        out = new.narrow(-1, order - i, i + 1)
        out -= roots.narrow(-1, i - 1, 1) * coeffs.narrow(-1, order - i + 1, i + 1)
        coeffs = new
    return coeffs.narrow(-1, 1, order + 1)


def _polynomial_value(poly, x, zero_power, transition):
    res = zero_power.clone()
    for k in range(poly.size(-1) - 2, -1, -1):
        res = transition(res, x, poly[..., k])
    return res


def _matrix_polynomial_value(poly, x):
    def transition(value, x, coeff):
        res = x.matmul(value)
        res.diagonal(dim1=-2, dim2=-1).add_(coeff.unsqueeze(-1))
        return res
    eye = _jt.eye(x.size(-1), x.size(-1), dtype=x.dtype, device=x.device)
    return _polynomial_value(poly, x, eye.view(*[1] * (x.ndim - 2), x.size(-1), x.size(-1)), transition)


def _vector_polynomial_value(poly, x):
    def transition(value, x, coeff):
        return _jt.addcmul(coeff.unsqueeze(-1), x, value)
    return _polynomial_value(poly, x, x.new_ones(1).expand(x.shape), transition)


def _symeig_backward_partial_eigenspace(D_grad, U_grad, A, D, U, largest):
    Ut = U.mT.contiguous()
    proj_U_ortho = -U.matmul(Ut)
    proj_U_ortho.diagonal(dim1=-2, dim2=-1).add_(1)
    gen = _jt.Generator(A.device)  # (torch's: a fresh generator, its default seed)
    U_ortho = proj_U_ortho.matmul(_jt.randn((*A.shape[:-1], A.size(-1) - D.size(-1)), dtype=A.dtype,
                                            device=A.device, generator=gen))
    U_ortho_t = U_ortho.mT.contiguous()
    chr_poly_D = _polynomial_coefficients_given_roots(D)
    U_grad_projected = U_grad
    series_acc = U_grad_projected.new_zeros(U_grad_projected.shape)
    for k in range(1, chr_poly_D.size(-1)):
        poly_D = _vector_polynomial_value(chr_poly_D[..., k:], D)
        series_acc += U_grad_projected * poly_D.unsqueeze(-2)
        U_grad_projected = A.matmul(U_grad_projected)
    chr_poly_D_at_A = _matrix_polynomial_value(chr_poly_D, A)
    at_U_ortho = _jt.matmul(U_ortho_t, _jt.matmul(chr_poly_D_at_A, U_ortho))
    sign = -1 if largest and k % 2 == 1 else +1
    L = _jt.linalg.cholesky(sign * at_U_ortho)
    res = _symeig_backward_complete_eigenspace(D_grad, U_grad, A, D, U)
    res -= U_ortho.matmul(sign * _jt.cholesky_solve(U_ortho_t.matmul(series_acc), L)).matmul(Ut)
    return res


def _symeig_backward(D_grad, U_grad, A, D, U, largest):
    if U.size(-1) == U.size(-2):
        return _symeig_backward_complete_eigenspace(D_grad, U_grad, A, D, U)
    return _symeig_backward_partial_eigenspace(D_grad, U_grad, A, D, U, largest)


def _forward(ctx, A, k, B, X, n, iK, niter, tol, largest, method, tracker, ortho_iparams, ortho_fparams,
             ortho_bparams):
    A = A.contiguous()
    B = None if B is None else B.contiguous()
    D, U = _lobpcg(A, k, B, X, n, iK, niter, tol, largest, method, tracker, ortho_iparams, ortho_fparams,
                   ortho_bparams)
    ctx.save_for_backward(A, B, D, U)
    ctx.largest = largest
    return D, U


def _backward(ctx, D_grad, U_grad):
    A, B, D, U = ctx.saved_tensors
    if B is not None:
        raise ValueError("lobpcg.backward does not support backward with B != I yet.")
    largest = True if ctx.largest is None else ctx.largest
    return (_symeig_backward(D_grad, U_grad, A, D, U, largest),) + (None,) * 13


@functools.cache
def _gradient_function():
    """lobpcg as an autograd Function with torch's gradient of its eigenpairs with respect to A (made at the
    first call that needs it: ``import jitorch`` loads this module before jitorch.autograd)."""
    return type("LOBPCGAutogradFunction", (_jt.autograd.Function,),
                {"forward": staticmethod(_forward), "backward": staticmethod(_backward)})


def lobpcg(A, k=None, B=None, X=None, n=None, iK=None, niter=None, tol=None, largest=None, method=None,
           tracker=None, ortho_iparams=None, ortho_fparams=None, ortho_bparams=None):
    """The ``k`` largest (``largest``, default) or smallest eigenvalues of ``A X = B X E`` (A symmetric, B
    symmetric positive definite, or None for the identity) and their eigenvectors, batched over leading dims,
    from the start ``X`` (random by default) of ``n`` columns; ``iK`` a preconditioner, ``method`` "ortho"
    (default) or "basic", at most ``niter`` iterations (default 1000) to relative residual ``tol``. Where A
    (or B) requires grad, the gradient is torch's formula for A's symmetrised eigenpairs."""
    if A.requires_grad or (B is not None and B.requires_grad):
        A_sym = (A + A.mT) / 2
        B_sym = (B + B.mT) / 2 if B is not None else None
        return _gradient_function().apply(A_sym, k, B_sym, X, n, iK, niter, tol, largest, method, tracker,
                                     ortho_iparams, ortho_fparams, ortho_bparams)
    return _lobpcg(A, k, B, X, n, iK, niter, tol, largest, method, tracker, ortho_iparams, ortho_fparams,
                   ortho_bparams)


def _parameters(m, n, k, niter, tol, largest, method, ortho_iparams, ortho_fparams, ortho_bparams):
    iparams = {"m": m, "n": n, "k": k, "niter": 1000 if niter is None else niter}
    fparams = {"tol": tol}
    bparams = {"largest": True if largest is None else largest}
    if method == "ortho":
        iparams.update(ortho_iparams or {})
        fparams.update(ortho_fparams or {})
        bparams.update(ortho_bparams or {})
        iparams.setdefault("ortho_i_max", 3)
        iparams.setdefault("ortho_j_max", 3)
        for name in ("ortho_tol", "ortho_tol_drop", "ortho_tol_replace"):
            fparams.setdefault(name, tol)
        bparams.setdefault("ortho_use_drop", False)
    return iparams, fparams, bparams


def _lobpcg(A, k, B, X, n, iK, niter, tol, largest, method, tracker, ortho_iparams, ortho_fparams, ortho_bparams):
    if A.shape[-2] != A.shape[-1]:
        raise AssertionError(f"A must be square, got shape {A.shape}")
    if B is not None and A.shape != B.shape:
        raise AssertionError(f"A and B must have same shape, got {A.shape} vs {B.shape}")
    dtype = _floating_dtype(A)
    if tol is None:
        tol = {_jt.float32: 1.2e-07, _jt.float64: 2.23e-16}[dtype] ** 0.5
    m = A.shape[-1]
    k = (1 if X is None else X.shape[-1]) if k is None else k
    n = (k if n is None else n) if X is None else X.shape[-1]
    if m < 3 * n:
        raise ValueError(f"LOBPCG algorithm is not applicable when the number of A rows (={m}) is smaller than 3 x "
                         f"the number of requested eigenpairs (={n})")
    method = "ortho" if method is None else method
    iparams, fparams, bparams = _parameters(m, n, k, niter, tol, largest, method, ortho_iparams, ortho_fparams,
                                            ortho_bparams)
    if A.ndim > 2:
        batches = A.shape[:-2]
        N = 1
        for s in batches:
            N *= s
        bA = A.reshape((N,) + tuple(A.shape[-2:]))
        bB = B.reshape((N,) + tuple(A.shape[-2:])) if B is not None else None
        bX = X.reshape((N,) + tuple(X.shape[-2:])) if X is not None else None
        bE = _jt.empty((N, k), dtype=dtype, device=A.device)
        bXret = _jt.empty((N, m, k), dtype=dtype, device=A.device)
        for i in range(N):
            X_ = _jt.randn((m, n), dtype=dtype, device=A.device) if bX is None else bX[i]
            if not (X_.ndim == 2 and tuple(X_.shape) == (m, n)):
                raise AssertionError(f"X_ shape mismatch: got {X_.shape}, expected {(m, n)}")
            iparams["batch_index"] = i
            worker = LOBPCG(bA[i], bB[i] if bB is not None else None, X_, iK, iparams, fparams, bparams, method,
                            tracker)
            worker.run()
            bE[i] = worker.E[:k]
            bXret[i] = worker.X[:, :k]
        return bE.reshape(tuple(batches) + (k,)), bXret.reshape(tuple(batches) + (m, k))
    X = _jt.randn((m, n), dtype=dtype, device=A.device) if X is None else X
    if not (X.ndim == 2 and tuple(X.shape) == (m, n)):
        raise AssertionError(f"X shape mismatch: got {X.shape}, expected {(m, n)}")
    worker = LOBPCG(A, B, X, iK, iparams, fparams, bparams, method, tracker)
    worker.run()
    return worker.E[:k], worker.X[:, :k]


class LOBPCG:
    """The worker: the state of one LOBPCG iteration (torch's class; a ``tracker`` is called with it after
    each step)."""

    def __init__(self, A, B, X, iK, iparams, fparams, bparams, method, tracker):
        self.A, self.B, self.iK = A, B, iK
        self.iparams, self.fparams, self.bparams = iparams, fparams, bparams
        self.method, self.tracker = method, tracker
        m, n = iparams["m"], iparams["n"]
        self.X = X
        self.E = _jt.zeros((n,), dtype=X.dtype, device=X.device)
        self.R = _jt.zeros((m, n), dtype=X.dtype, device=X.device)
        self.S = _jt.zeros((m, 3 * n), dtype=X.dtype, device=X.device)
        self.tvars = {}
        self.ivars = {"istep": 0}
        self.fvars = {"_": 0.0}
        self.bvars = {"_": False}

    def update(self):
        """One step (the first also measures the norms the convergence test scales by)."""
        if self.ivars["istep"] == 0:
            X_norm = float(_jt.norm(self.X))
            iX_norm = X_norm ** (-1)
            self.fvars["X_norm"] = X_norm
            self.fvars["A_norm"] = float(_jt.norm(_matmul(self.A, self.X))) * iX_norm
            self.fvars["B_norm"] = float(_jt.norm(_matmul(self.B, self.X))) * iX_norm
            self.ivars["iterations_left"] = self.iparams["niter"]
            self.ivars["converged_count"] = 0
            self.ivars["converged_end"] = 0
        if self.method == "ortho":
            self._update_ortho()
        else:
            self._update_basic()
        self.ivars["iterations_left"] -= 1
        self.ivars["istep"] += 1

    def update_residual(self):
        self.R = _matmul(self.A, self.X) - _matmul(self.B, self.X) * self.E

    def update_converged_count(self):
        """How many leading eigenpairs have converged (never fewer than before)."""
        prev = self.ivars["converged_count"]
        E, X, R = self.E, self.X, self.R
        rerr = _jt.norm(R, 2, (0,)) / (_jt.norm(X, 2, (0,)) * (self.fvars["A_norm"] + _jt.abs(E[:X.shape[-1]])
                                                                * self.fvars["B_norm"]))
        count = 0
        for converged in (rerr < self.fparams["tol"]).tolist():
            if not converged:
                break
            count += 1
        if count < prev:
            raise AssertionError(f"the number of converged eigenpairs (was {prev}, got {count}) cannot decrease")
        self.ivars["converged_count"] = count
        self.tvars["rerr"] = rerr
        return count

    def stop_iteration(self):
        return (self.bvars.get("force_stop", False) or self.ivars["iterations_left"] == 0
                or self.ivars["converged_count"] >= self.iparams["k"])

    def run(self):
        """Step until converged, out of iterations or stopped by the tracker (``bvars['force_stop']``)."""
        self.update()
        if self.tracker is not None:
            self.tracker(self)
        while not self.stop_iteration():
            self.update()
            if self.tracker is not None:
                self.tracker(self)

    def _update_basic(self):
        mm = _jt.matmul
        ns, nc = self.ivars["converged_end"], self.ivars["converged_count"]
        n, largest = self.iparams["n"], self.bparams["largest"]
        if self.ivars["istep"] == 0:
            Ri = self._get_rayleigh_ritz_transform(self.X)
            E, Z = _symeig(_qform(_qform(self.A, self.X), Ri), largest)
            self.X[:] = mm(self.X, mm(Ri, Z))
            self.E[:] = E
            np_ = 0
            self.update_residual()
            nc = self.update_converged_count()
            self.S[..., :n] = self.X
            W = _matmul(self.iK, self.R)
        else:
            S_ = self.S[:, nc:ns]
            Ri = self._get_rayleigh_ritz_transform(S_)
            E_, Z = _symeig(_qform(_qform(self.A, S_), Ri), largest)
            self.X[:, nc:] = mm(S_, mm(Ri, Z[:, :n - nc]))
            self.E[nc:] = E_[:n - nc]
            P = mm(S_, mm(Ri, Z[:, n:2 * n - nc]))
            np_ = P.shape[-1]
            self.update_residual()
            nc = self.update_converged_count()
            self.S[..., :n] = self.X
            self.S[:, n:n + np_] = P
            W = _matmul(self.iK, self.R[:, nc:])
        self.ivars["converged_end"] = ns = n + np_ + W.shape[-1]
        self.S[:, n + np_:ns] = W

    def _update_ortho(self):
        mm = _jt.matmul
        ns, nc = self.ivars["converged_end"], self.ivars["converged_count"]
        n, largest = self.iparams["n"], self.bparams["largest"]
        if self.ivars["istep"] == 0:
            Ri = self._get_rayleigh_ritz_transform(self.X)
            _, Z = _symeig(_qform(_qform(self.A, self.X), Ri), largest)
            self.X = mm(self.X, mm(Ri, Z))
            self.update_residual()
            np_ = 0
            nc = self.update_converged_count()
            self.S[:, :n] = self.X
            W = self._get_ortho(self.R, self.X)
        else:
            S_ = self.S[:, nc:ns]
            E_, Z = _symeig(_qform(self.A, S_), largest)
            self.X[:, nc:] = mm(S_, Z[:, :n - nc])
            self.E[nc:] = E_[:n - nc]
            P = mm(S_, mm(Z[:, n - nc:], _basis(Z[:n - nc, n - nc:].mT)))
            np_ = P.shape[-1]
            self.update_residual()
            nc = self.update_converged_count()
            self.S[:, :n] = self.X
            self.S[:, n:n + np_] = P
            W = self._get_ortho(self.R[:, nc:], self.S[:, :n + np_])
        ns = self.ivars["converged_end"] = n + np_ + W.shape[-1]
        self.S[:, n + np_:ns] = W

    def _get_rayleigh_ritz_transform(self, S):
        """The transform Ri with ``Ri^T S^T B S Ri`` the identity (a scaled Cholesky factor's inverse)."""
        SBS = _qform(self.B, S)
        d_row = SBS.diagonal(0, -2, -1) ** (-0.5)
        d_col = d_row.reshape(d_row.shape[0], 1)
        R = _jt.linalg.cholesky(SBS * d_row * d_col, upper=True)
        return _jt.linalg.solve_triangular(R, d_row.diag_embed(), upper=True, left=False)

    def _get_svqb(self, U, drop, tau):
        """U's columns B-orthonormalised by SVQB, dropping (``drop``) or lifting the directions whose
        eigenvalue is below ``tau`` times the largest."""
        if U.numel() == 0:
            return U
        UBU = _qform(self.B, U)
        d = UBU.diagonal(0, -2, -1)
        nz = _jt.where(abs(d) != 0.0)
        if len(nz[0]) < len(d):
            U = U[:, nz[0]]
            if U.numel() == 0:
                return U
            UBU = _qform(self.B, U)
            d = UBU.diagonal(0, -2, -1)
        d_col = (d ** (-0.5)).reshape(d.shape[0], 1)
        E, Z = _symeig(UBU * d_col * d_col.mT)
        t = tau * abs(E).max()
        if drop:
            keep = _jt.where(E > t)
            E, Z, d_col = E[keep[0]], Z[:, keep[0]], d_col[keep[0]]
        else:
            E[_jt.where(E < t)[0]] = t
        return _jt.matmul(U * d_col.mT, Z * E ** (-0.5))

    def _get_ortho(self, U, V):
        """U B-orthonormalised and B-orthogonal to V's columns (V B-orthonormal)."""
        mm = _jt.matmul
        m = self.iparams["m"]
        tau_ortho, tau_drop = self.fparams["ortho_tol"], self.fparams["ortho_tol_drop"]
        tau_replace = self.fparams["ortho_tol_replace"]
        i_max, j_max = self.iparams["ortho_i_max"], self.iparams["ortho_j_max"]
        use_drop = self.bparams["ortho_use_drop"]
        for key in [key for key in self.fvars if key.startswith("ortho_") and key.endswith("_rerr")]:
            self.fvars.pop(key)
        self.ivars.pop("ortho_i", 0)
        self.ivars.pop("ortho_j", 0)
        BV_norm = _jt.norm(_matmul(self.B, V))
        BU = _matmul(self.B, U)
        VBU = mm(V.mT, BU)
        i = j = 0
        for i in range(i_max):
            U = U - mm(V, VBU)
            drop = False
            tau_svqb = tau_drop
            for j in range(j_max):
                if use_drop:
                    U = self._get_svqb(U, drop, tau_svqb)
                    drop, tau_svqb = True, tau_replace
                else:
                    U = self._get_svqb(U, False, tau_replace)
                if U.numel() == 0:
                    self.ivars["ortho_i"], self.ivars["ortho_j"] = i, j
                    return U
                BU = _matmul(self.B, U)
                UBU = mm(U.mT, BU)
                R = UBU - _jt.eye(UBU.shape[-1], device=UBU.device, dtype=UBU.dtype)
                rerr = float(_jt.norm(R)) * float(_jt.norm(BU) * _jt.norm(U)) ** (-1)
                self.fvars[f"ortho_UBUmI_rerr[{i}, {j}]"] = rerr
                if rerr < tau_ortho:
                    break
            VBU = mm(V.mT, BU)
            rerr = float(_jt.norm(VBU)) * float(BV_norm * _jt.norm(U)) ** (-1)
            self.fvars[f"ortho_VBU_rerr[{i}]"] = rerr
            if rerr < tau_ortho:
                break
            if m < U.shape[-1] + V.shape[-1]:
                if self.B is None:
                    raise AssertionError("B must not be None")
                raise ValueError(f"Overdetermined shape of U: #B-cols(={self.B.shape[-1]}) >= #U-cols(={U.shape[-1]})"
                                 f" + #V-cols(={V.shape[-1]}) must hold")
        self.ivars["ortho_i"], self.ivars["ortho_j"] = i, j
        return U
