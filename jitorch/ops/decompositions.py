"""Matrix decompositions and solvers: the kernels behind ``jitorch.linalg`` and torch's older forms of them.

The kernels are the ATen operators torch.linalg's functions call (``linalg_inv_ex``, ``_linalg_svd``,
``linalg_lu_factor_ex``, ...), with ATen's schemas and results; they have no public variant (torch has
none by these names): ``jitorch.linalg`` calls them. ``det``, ``slogdet``, ``matrix_exp``, ``lu_unpack``,
``geqrf``, ``orgqr`` and ``ormqr`` are public as in torch, and so are the composites torch keeps beside
torch.linalg (``inverse``, ``cholesky``, ``qr``, ``svd``, ``triangular_solve``, ...).

NumPy's LAPACK does the numerics, batched over leading dims, in float32 or float64 as torch's CPU kernels
(half types have none, as in torch). Where NumPy has no batched routine (LU with its pivots, triangular
solves, the matrix exponential, Householder products) the kernels here loop over columns, each step
vectorised over the batch. A matrix a kernel cannot handle (singular, not positive-definite) raises
`LinAlgError` with torch's message, naming the batch element, or is reported in the ``info`` result of the
``_ex`` forms, whose other results then hold what LAPACK leaves (infinities for a singular solve).
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.strided import broadcast_shapes
from . import functions
from .registry import OPS, TensorSpec, defop, scalar_name
from .value_checks import RULES, check


class LinAlgError(RuntimeError):
    """A matrix a linear algebra function cannot handle (singular, not positive-definite): torch.linalg.LinAlgError."""


LinAlgError.__module__ = "jitorch.linalg"

_LAPACK_DTYPES = (_dt.float32, _dt.float64)


# Checks of the meta rules, in torch's words ------------------------------------------------------------------

def check_matrix(fn, A, name="A"):
    if A.ndim < 2:
        raise RuntimeError(f"{fn}: The input tensor {name} must have at least 2 dimensions.")


def check_square(fn, A, name="A"):
    check_matrix(fn, A, name)
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{fn}: {name} must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")


def check_floating(fn, A):
    if not A.dtype.is_floating_point:
        raise RuntimeError(f"{fn}: Expected a floating point or complex tensor as input. Got {scalar_name(A.dtype)}")


def check_precision(fn, A):
    """torch's functions that refuse the half types before reaching a kernel."""
    if A.dtype not in _LAPACK_DTYPES:
        raise RuntimeError(f"{fn}: Low precision dtypes not supported. Got {scalar_name(A.dtype)}")


def check_kernel(kernel, A):
    """torch's LAPACK kernels exist for float32 and float64 only."""
    if A.dtype not in _LAPACK_DTYPES:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(A.dtype)}'")


def check_kernel_unless_empty(kernel, A):
    """`check_kernel` for the functions whose empty ``A`` reaches no kernel in torch (det, solve, cholesky, lu,
    svd, eigh): their empty results come in any dtype that passes the function's own checks."""
    if math.prod(A.shape):
        check_kernel(kernel, A)


def check_same_dtype(fn, A, B):
    if A.dtype is not B.dtype:
        raise RuntimeError(f"{fn}: Expected A and B to have the same dtype, but found A of type "
                           f"{scalar_name(A.dtype)} and B of type {scalar_name(B.dtype)} instead")


def _spec(A, shape, dtype=None):
    return TensorSpec(tuple(shape), dtype or A.dtype, A.device)


def _int_spec(A, shape, dtype=_dt.int32):
    return TensorSpec(tuple(shape), dtype, A.device)


def renamed(old, new, call):
    """``call(False)``, an ``_ex`` op run unchecked, whose last result (LAPACK's info) is then checked as ``old``
    checks it, its error raised as function ``new``: a torch function built on another names itself in its
    messages (``linalg.inv`` on ``linalg.inv_ex``'s singular matrix). The check is eager's at once, a compiled
    graph's check node at each call (`value_checks.check`)."""
    results = call(False)
    check("linalg_failures", [results[-1]], new, old)
    return results


# the message of each ``_ex`` function's error for LAPACK's info k (`raise_failures`)
_FAILURES = {
    "linalg.inv_ex": lambda k: (f"The diagonal element {k} is zero, the inversion could not be completed because "
                                "the input matrix is singular."),
    "torch.linalg.solve_ex": lambda k: "The solver failed because the input matrix is singular.",
    "linalg.cholesky_ex": lambda k: ("The factorization could not be completed because the input is not "
                                     f"positive-definite (the leading minor of order {k} is not positive-definite)."),
    "torch.linalg.lu_factor_ex": lambda k: (
        f"U[{k},{k}] is zero and using it on lu_solve would result in a division by zero. If you still want to "
        "perform the factorization, consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"),
}


def _linalg_failures(info, fn, ex):
    raise_failures(fn, info, _FAILURES[ex])


RULES["linalg_failures"] = _linalg_failures


def raise_failures(fn, info, message):
    """Raise LinAlgError for the first matrix whose ``info`` is not 0, with ``message(info)`` (a plain
    RuntimeError for `lu_factor`'s zero pivot, as torch's)."""
    bad = np.flatnonzero(info)
    if bad.size:
        batch = f"(Batch element {bad[0]}): " if info.ndim else ""
        error = RuntimeError if message is _FAILURES["torch.linalg.lu_factor_ex"] else LinAlgError
        raise error(f"{fn}: {batch}{message(int(info.flat[bad[0]]))}")


# Array helpers --------------------------------------------------------------------------------------------

def _eye_like(a, n=None):
    n = a.shape[-1] if n is None else n
    return np.broadcast_to(np.eye(n, dtype=a.dtype), a.shape[:-2] + (n, n))


def _mT(a):
    return np.swapaxes(a, -1, -2)


def _pivot_rows(columns):
    """Each row's pivot as LAPACK's i?amax picks it: the first element of the largest magnitude, a later one only
    if strictly larger than the first's (so a NaN is never picked after the first element, and a NaN first stays:
    torch's getrf, MKL's, picks so)."""
    magnitude = np.abs(columns)
    later = np.argmax(np.where(np.isnan(magnitude), -1, magnitude), axis=1)
    return np.where(np.isnan(magnitude[:, 0]), 0, later)


def lu_factor_array(a):
    """LU with partial pivoting as LAPACK's getrf: (LU, 1-based pivots as int32, info), batched. ``info`` is
    the 1-based index of the first zero pivot (0: none); a zero column is left as it is, as LAPACK does."""
    *batch, m, n = a.shape
    k = min(m, n)
    lu = np.array(a, copy=True).reshape(math.prod(batch), m, n)  # (-1 is ambiguous for an empty matrix)
    count = lu.shape[0]
    pivots = np.zeros((count, k), np.int32)
    info = np.zeros(count, np.int32)
    rows = np.arange(count)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(k):
            p = j + _pivot_rows(lu[:, j:, j])
            pivots[:, j] = p + 1
            row = lu[rows, j].copy()
            lu[rows, j] = lu[rows, p]
            lu[rows, p] = row
            pivot = lu[:, j, j]
            zero = pivot == 0
            info = np.where((info == 0) & zero, j + 1, info).astype(np.int32)
            column = lu[:, j + 1:, j] / np.where(zero, 1, pivot)[:, None]
            lu[:, j + 1:, j] = column
            lu[:, j + 1:, j + 1:] -= column[:, :, None] * lu[:, j, None, j + 1:]
    return lu.reshape(a.shape), pivots.reshape(*batch, k), info.reshape(batch)


def permutation_array(pivots, m, dtype):
    """The permutation matrices P (A = P L U) of LAPACK's 1-based row interchanges ``pivots`` (..., k)."""
    batch = pivots.shape[:-1]
    order = np.broadcast_to(np.arange(m), batch + (m,)).copy()
    count = math.prod(batch)  # (-1 is ambiguous for empty matrices)
    flat, piv = order.reshape(count, m), pivots.reshape(count, pivots.shape[-1]).astype(np.int64) - 1
    rows = np.arange(flat.shape[0])
    for j in range(piv.shape[1]):
        p = piv[:, j]
        row = flat[rows, j].copy()
        flat[rows, j] = flat[rows, p]
        flat[rows, p] = row
    # row i of P^T A is row order[i] of A: P[order[i], i] = 1
    perm = np.zeros(batch + (m, m), dtype)
    np.put_along_axis(perm, order.reshape(batch + (1, m)), 1, axis=-2)
    return perm


def triangular_solve_array(a, b, upper, unit=False):
    """X with ``a @ X = b``, ``a`` triangular (the other triangle is not read), by substitution as LAPACK's
    trsm: a zero on the diagonal gives infinities and NaNs, no error. Batch dims broadcast."""
    n = a.shape[-1]
    shape = broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:]
    x = np.zeros(shape, np.result_type(a, b))
    order = range(n - 1, -1, -1) if upper else range(n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in order:
            done = slice(i + 1, n) if upper else slice(0, i)
            row = b[..., i, :] - np.matmul(a[..., i:i + 1, done], x[..., done, :])[..., 0, :]
            x[..., i, :] = row if unit else row / a[..., i, i, None]
    return x


def lu_solve_array(lu, pivots, b):
    """X with ``A @ X = b`` from A's LU factors."""
    perm = permutation_array(pivots, lu.shape[-1], lu.dtype)
    y = triangular_solve_array(lu, np.matmul(_mT(perm), b), upper=False, unit=True)
    return triangular_solve_array(lu, y, upper=True)


# det, slogdet ----------------------------------------------------------------------------------------------

def _det_meta(A):
    check_square("linalg.det", A)
    check_floating("linalg.det", A)
    check_kernel_unless_empty("lu_cpu", A)
    return _spec(A, A.shape[:-2])


def _slogdet_meta(A):
    check_square("linalg.slogdet", A)
    check_floating("linalg.slogdet", A)
    check_precision("linalg.slogdet", A)
    return _spec(A, A.shape[:-2]), _spec(A, A.shape[:-2])


def _lu_diagonal(a):
    """The diagonal of the LU factors torch's det and slogdet take of ``a`` (each of a batch) and the sign of
    their permutation. torch factors the memory as LAPACK's column-major matrix: ``a``'s transpose when ``a`` is
    C-contiguous (det(A) = det(A^T)), else a column-major copy of ``a``. For finite matrices the factors differ only
    by rounding; where one holds inf or NaN, which of them is factored decides inf against NaN (inf - inf
    appears in one elimination and not the other), so the caller takes these only there."""
    factored = _mT(a) if a.flags.c_contiguous else a
    lu, pivots, _ = lu_factor_array(factored)
    swaps = np.count_nonzero(pivots != np.arange(1, a.shape[-1] + 1, dtype=np.int32), axis=-1)
    return np.diagonal(lu, axis1=-2, axis2=-1), np.where(swaps % 2, -1, 1).astype(a.dtype)


def _nonfinite(a):
    """The matrices of a batch holding an inf or NaN, as a mask of the batch."""
    return ~np.isfinite(a).all(axis=(-2, -1))


def _det_cpu(spec, a):
    """NumPy's det of finite matrices; a matrix holding inf or NaN takes torch's product of its LU's pivots, not
    NumPy's ``sign * exp(sum(log|pivot|))``, which makes a zero pivot times an infinite one 0 (transform-fuzz seed
    8300170: ``lgamma`` poles in a matrix, 0 against torch's inf)."""
    if not a.size:
        return np.ones(spec.shape, a.dtype)
    det = np.asarray(np.linalg.det(a))
    bad = _nonfinite(a)
    if bad.any():
        diagonal, sign = _lu_diagonal(a)
        with np.errstate(invalid="ignore", over="ignore"):
            det = np.where(bad, diagonal.prod(-1) * sign, det)
    return det.astype(a.dtype, copy=False)


defop("det(Tensor self) -> Tensor", meta=_det_meta, cpu=_det_cpu, kind="linalg",
      doc="Determinant of a square matrix, or of each of a batch (``linalg.det``).")
def _slogdet_cpu(spec, a):
    """NumPy's sign skips a NaN pivot; torch's multiplies its sign, 0: a matrix whose log is NaN has sign 0, so
    that ``logdet``, NaN there, takes the log's tangent (fuzz seed 7895132)."""
    sign, logabsdet = np.linalg.slogdet(a)
    bad = _nonfinite(a) if a.size else np.zeros(a.shape[:-2], bool)
    if bad.any():
        diagonal, swaps = _lu_diagonal(a)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            sign = np.where(bad, np.nan_to_num(np.sign(diagonal).prod(-1)) * swaps, sign)
            logabsdet = np.where(bad, np.log(np.abs(diagonal)).sum(-1), logabsdet)
    return np.where(np.isnan(logabsdet), sign * 0, sign), logabsdet


defop("slogdet(Tensor self) -> (Tensor sign, Tensor logabsdet)", meta=_slogdet_meta,
      cpu=_slogdet_cpu, kind="linalg", variants=("function", "method", "out"),
      doc="Sign and log of the absolute value of the determinant (``linalg.slogdet``): the sign is 0 and "
          "the log -inf for a singular matrix, the sign 0 and the log NaN for one holding NaN.")


def _logdet(A):
    check_square("logdet", A)
    check_floating("logdet", A)
    check_precision("logdet", A)
    sign, logabsdet = functions.slogdet(A)
    # a negative determinant has no real log: NaN, as torch
    return functions.where(sign < 0, math.nan, logabsdet)


defop("logdet(Tensor self) -> Tensor", composite=_logdet,
      doc="Log of the determinant: NaN for a negative one, -inf for a singular matrix.")


# Inverse and solves ----------------------------------------------------------------------------------------

def _inv_ex_meta(A, check_errors):
    check_square("linalg.inv", A)
    check_floating("linalg.inv", A)
    check_precision("linalg.inv", A)
    return _spec(A, A.shape), _int_spec(A, A.shape[:-2])


def _solve_or_lu(a, b):
    """``solve(a, b)`` and the getrf info of ``a``; a singular matrix is solved through its LU as LAPACK's getrs
    does (infinities and NaNs)."""
    try:
        return np.linalg.solve(a, b), np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        lu, pivots, info = lu_factor_array(a)
        return lu_solve_array(lu, pivots, b), info


def _inv_ex_cpu(spec, a, check_errors):
    inverse, info = _solve_or_lu(a, _eye_like(a))
    if check_errors:
        raise_failures("linalg.inv_ex", info, _FAILURES["linalg.inv_ex"])
    return inverse, info


defop("linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)", meta=_inv_ex_meta,
      cpu=_inv_ex_cpu, kind="linalg", variants=(),
      doc="Inverse of a square matrix and LAPACK's info (the 1-based index of a zero pivot of its LU; 0: invertible).")


def _inverse(A):
    inverse, _ = renamed("linalg.inv_ex", "linalg.inv", lambda check_errors: OPS["linalg_inv_ex"](A, check_errors))
    return inverse


defop("inverse(Tensor self) -> Tensor", composite=_inverse, variants=("function", "method", "out"),
      doc="Inverse of a square matrix, or of each of a batch; a singular one raises LinAlgError.")


def solve_is_vector(A, B):
    """torch's rule: ``B`` is a (batch of) vector(s) if 1-D or of A's shape without its last dim."""
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def _solve_ex_meta(A, B, left, check_errors):
    fn = "linalg.solve"
    check_floating(fn, A)
    check_square(fn, A)
    check_same_dtype(fn, A, B)
    vector = solve_is_vector(A, B)
    n = A.shape[-1]
    rows, cols = (B.shape[-1], 1) if vector else tuple(B.shape[-2:])
    if (rows if left else cols) != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"{fn}: Incompatible shapes of A and B for the equation {equation} ({n}x{n} and "
                           f"{rows}x{cols})")
    if vector and not left:
        raise RuntimeError("linalg.solve: Vector broadcasting of the left hand side is not supported for left=False. "
                           "In this case linalg.solve is equivalent to B / A.squeeze(-1)")
    check_kernel_unless_empty("lu_cpu", A)
    batch = broadcast_shapes(A.shape[:-2], B.shape[:-1] if vector else B.shape[:-2])
    shape = batch + ((n,) if vector else tuple(B.shape[-2:]))
    return _spec(A, shape), _int_spec(A, batch)


def _solve_ex_cpu(spec, a, b, left, check_errors):
    if a.size == 0 or b.size == 0:  # (in any dtype: an empty system reaches no kernel)
        return np.zeros(spec[0].shape, a.dtype), np.zeros(spec[1].shape, np.int32)
    vector = spec[0].ndim == spec[1].ndim + 1
    if vector:
        b = b[..., None]
    batch = spec[1].shape
    a = np.broadcast_to(a, batch + a.shape[-2:])
    if not left:  # X A = B is A^T X^T = B^T
        a, b = _mT(a), _mT(b)
    x, info = _solve_or_lu(a, np.broadcast_to(b, batch + b.shape[-2:]))
    if check_errors:
        raise_failures("torch.linalg.solve_ex", info, _FAILURES["torch.linalg.solve_ex"])
    if not left:
        x = _mT(x)
    return (x[..., 0] if vector else x), info


defop("linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor info)",
      meta=_solve_ex_meta, cpu=_solve_ex_cpu, kind="linalg", variants=(),
      doc="X with ``A @ X = B`` (``X @ A = B`` with ``left=False``) and the info of A's LU; batch dims broadcast, "
          "and B may be a vector.")


def _triangular_meta(A, B, upper, left, unitriangular):
    fn = "linalg.solve_triangular"
    check_matrix(fn, A)
    check_matrix(fn, B, "B")
    check_square(fn, A)
    n = A.shape[-1]
    rows, cols = (B.shape[-2], B.shape[-1]) if left else (B.shape[-1], B.shape[-2])
    if rows != n:
        raise RuntimeError(f"{fn}: Incompatible shapes of A and B for the equation {'AX = B' if left else 'XA = B'} "
                           f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    check_same_dtype(fn, A, B)
    check_kernel("triangular_solve_cpu", A)
    return _spec(A, broadcast_shapes(A.shape[:-2], B.shape[:-2]) + tuple(B.shape[-2:]))


def _triangular_cpu(spec, a, b, upper, left, unitriangular):
    if left:
        return triangular_solve_array(a, b, upper, unitriangular)
    return _mT(triangular_solve_array(_mT(a), _mT(b), not upper, unitriangular))


defop("linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> "
      "Tensor", meta=_triangular_meta, cpu=_triangular_cpu, kind="linalg", variants=(),
      doc="X with ``A @ X = B`` (``X @ A = B`` with ``left=False``) for triangular A, whose other triangle (and "
          "diagonal, with ``unitriangular``) is not read; a zero on the diagonal gives infinities, as torch.")


def _triangular_solve_meta(B, A, upper, transpose, unitriangular):
    check_kernel("triangular_solve_cpu", A)
    fn = "torch.triangular_solve"
    check_matrix(fn, A)
    check_matrix(fn, B, "B")
    X = _triangular_meta(A, B, upper, True, unitriangular)
    return X, _spec(A, X.shape[:-2] + tuple(A.shape[-2:]))


def _triangular_solve_cpu(spec, b, a, upper, transpose, unitriangular):
    m = _mT(a) if transpose else a
    x = triangular_solve_array(m, b, upper != transpose, unitriangular)
    return x, np.array(np.broadcast_to(a, spec[1].shape))


defop("triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) "
      "-> (Tensor solution, Tensor cloned_coefficient)", meta=_triangular_solve_meta, cpu=_triangular_solve_cpu,
      kind="linalg", variants=("function", "method", "out"),
      doc="X with ``op(A) @ X = self`` for triangular A (``op`` transposes with ``transpose``), and a copy of A.")


# Cholesky ---------------------------------------------------------------------------------------------------

def _cholesky_ex_meta(A, upper, check_errors):
    check_square("linalg.cholesky", A)
    check_floating("linalg.cholesky", A)
    check_kernel_unless_empty("cholesky_cpu", A)
    return _spec(A, A.shape), _int_spec(A, A.shape[:-2])


def cholesky_array(a):
    """Lower Cholesky factors column by column as LAPACK's potf2 (reading the lower triangle), and info: the
    order of the first leading minor that is not positive-definite, where the factor stops (its diagonal
    element left as computed, what follows as in A)."""
    *batch, n, _ = a.shape
    lo = np.tril(np.array(a, copy=True)).reshape(math.prod(batch), n, n)  # (-1 is ambiguous for an empty one)
    info = np.zeros(lo.shape[0], np.int32)
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(n):
            going = info == 0
            d = lo[:, j, j] - np.einsum("bk,bk->b", lo[:, j, :j], lo[:, j, :j])
            bad = going & ~(d > 0)
            lo[bad, j, j] = d[bad]
            info[bad] = j + 1
            ok = going & ~bad
            root = np.sqrt(np.where(ok, d, 1))
            lo[ok, j, j] = root[ok]
            below = (lo[:, j + 1:, j] - np.einsum("bik,bk->bi", lo[:, j + 1:, :j], lo[:, j, :j])) / root[:, None]
            lo[ok, j + 1:, j] = below[ok]
    return lo.reshape(a.shape), info.reshape(batch)


def _cholesky_ex_cpu(spec, a, upper, check_errors):
    if a.size == 0:  # (in any dtype: an empty matrix reaches no kernel)
        return np.zeros(spec[0].shape, a.dtype), np.zeros(spec[1].shape, np.int32)
    try:
        lo, info = np.linalg.cholesky(a), np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        lo, info = cholesky_array(a)
    if check_errors:
        raise_failures("linalg.cholesky_ex", info, _FAILURES["linalg.cholesky_ex"])
    return (_mT(lo) if upper else lo), info


defop("linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)",
      meta=_cholesky_ex_meta, cpu=_cholesky_ex_cpu, kind="linalg", variants=(),
      doc="Cholesky factor L (``A = L @ L.mT``; ``U = L.mT`` with ``upper``) of a symmetric positive-definite "
          "matrix, from its lower triangle, and the order of the first leading minor that is not "
          "positive-definite (0: none).")


def cholesky_as(fn, A, upper):
    """The Cholesky factor, a matrix that is not positive-definite raising LinAlgError as function ``fn``."""
    L, _ = renamed("linalg.cholesky_ex", fn, lambda check_errors: OPS["linalg_cholesky_ex"](A, upper, check_errors))
    return L


def _cholesky(A, upper):
    if A.numel() == 0:  # torch.cholesky gives an empty input's copy unchecked (any shape and dtype), in its graph
        return A.clone()
    check_square("cholesky", A)
    check_kernel("cholesky_cpu", A)
    return cholesky_as("cholesky", A, upper)


defop("cholesky(Tensor self, bool upper=False) -> Tensor", composite=_cholesky,
      variants=("function", "method", "out"),
      doc="Cholesky factor of a symmetric positive-definite matrix (lower, or upper with ``upper``).")


def _cholesky_solve(B, L, upper):
    fn = "torch.cholesky_solve"
    check_matrix(fn, B, "B")
    check_matrix(fn, L)
    if L.shape[-1] != L.shape[-2]:  # (torch's words have no function name here)
        raise RuntimeError(f"A must be batches of square matrices, but they are {L.shape[-2]} by {L.shape[-1]} "
                           "matrices")
    if L.dtype is not B.dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type {scalar_name(B.dtype)} "
                           f"and A of type {scalar_name(L.dtype)} instead.")
    check_kernel("cholesky_solve_cpu", L)
    solve = OPS["linalg_solve_triangular"]
    if upper:  # A = U^T U
        return solve(L, solve(L.mT, B, False, True, False), True, True, False)
    return solve(L.mT, solve(L, B, False, True, False), True, True, False)


defop("cholesky_solve(Tensor self, Tensor input2, bool upper=False) -> Tensor", composite=_cholesky_solve,
      variants=("function", "method", "out"),
      doc="X with ``A @ X = self`` given A's Cholesky factor ``input2`` (lower, or upper with ``upper``).")


def _cholesky_inverse(L, upper):
    check_square("cholesky_inverse", L)
    check_kernel("cholesky_inverse_out_cpu", L)
    n = L.shape[-1]
    eye = functions.eye(n, dtype=L.dtype, device=L.device)
    inverse = _cholesky_solve(eye.expand(tuple(L.shape)), L, upper)
    if n:  # LAPACK's potri reports a factor with a zero on its diagonal, which torch raises (fuzz seed 7999141)
        place = functions.arange(1, n + 1, device=L.device)
        info = functions.where(L.diagonal(0, -2, -1) == 0, place, n + 1).amin(-1)
        check("linalg_failures", [functions.where(info > n, 0, info)], "cholesky_inverse", "linalg.inv_ex")
    return inverse


defop("cholesky_inverse(Tensor self, bool upper=False) -> Tensor", composite=_cholesky_inverse,
      variants=("function", "method", "out"),
      doc="Inverse of A given its Cholesky factor (lower, or upper with ``upper``).")


# LU -----------------------------------------------------------------------------------------------------------

def _lu_factor_ex_meta(A, pivot, check_errors):
    fn = "torch.lu_factor"
    if A.ndim < 2:
        raise RuntimeError(f"{fn}: Expected tensor with 2 or more dimensions. Got size: {list(A.shape)} instead")
    check_kernel_unless_empty("lu_cpu", A)
    if not pivot and A.numel():  # (torch's CPU kernel returns an empty input first: fuzz seed 7501794)
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    m, n = A.shape[-2:]
    batch = tuple(A.shape[:-2])
    return _spec(A, A.shape), _int_spec(A, batch + (min(m, n),)), _int_spec(A, batch)


def _lu_factor_ex_cpu(spec, a, pivot, check_errors):
    lu, pivots, info = lu_factor_array(a)
    if check_errors:
        raise_failures("torch.linalg.lu_factor_ex", info, _FAILURES["torch.linalg.lu_factor_ex"])
    return lu, pivots, info


defop("linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, "
      "Tensor info)", meta=_lu_factor_ex_meta, cpu=_lu_factor_ex_cpu, kind="linalg", variants=(),
      doc="LU factorisation with partial pivoting, packed as LAPACK's getrf (L below the diagonal, its unit "
          "diagonal implied, U on and above), the 1-based row interchanges, and the 1-based index of the first "
          "zero pivot (0: none).")


def _check_unpack(LU, pivots, unpack_pivots):
    fn = "torch.lu_unpack"
    if LU.ndim < 2:
        raise RuntimeError(f"{fn}: Expected tensor with 2 or more dimensions. Got size: {list(LU.shape)} instead")
    if unpack_pivots:
        if pivots.dtype is not _dt.int32:
            raise RuntimeError(f"{fn}: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype.\n"
                               "Note: this function is intended to be used with the output produced by "
                               "torch.linalg.lu_factor")
        # (torch's kernel reads no pivot where min(m, n) is 0, and checks none of their shape then)
        if min(LU.shape[-2:]) and tuple(pivots.shape) != tuple(LU.shape[:-2]) + (min(LU.shape[-2:]),):
            raise RuntimeError(f"{fn}: Expected LU_pivots.size(-1) == min(LU.size(-1), LU.size(-2)) and "
                               "LU_pivots.shape[:-1] == LU.shape[:-2]")


def _permutation_meta(pivots, m, dtype):
    return _spec(pivots, tuple(pivots.shape[:-1]) + (m, m), dtype)


defop("_lu_permutation(Tensor pivots, int m, ScalarType dtype) -> Tensor", meta=_permutation_meta,
      cpu=lambda spec, pivots, m, dtype: permutation_array(pivots, m, spec.dtype.np), kind="linalg",
      variants=("function",),
      doc="The permutation matrices P (m x m, in ``dtype``) of LAPACK's 1-based row interchanges ``pivots``.")


def _lu_unpack(LU, pivots, unpack_data, unpack_pivots):
    _check_unpack(LU, pivots, unpack_pivots)
    m, n = LU.shape[-2:]
    k = min(m, n)
    empty = functions.zeros((0,), dtype=LU.dtype, device=LU.device)
    if not unpack_pivots:
        P = empty
    elif k == 0:  # no interchange to read: the identity of LU's batch
        P = functions.eye(m, dtype=LU.dtype, device=LU.device).expand(*LU.shape[:-2], m, m).contiguous()
    else:
        P = OPS["_lu_permutation"](pivots, m, LU.dtype)
    if not unpack_data:
        return OPS["lu_unpack"].result_type(P, empty, empty.clone())
    eye = functions.eye(m, k, dtype=LU.dtype, device=LU.device)
    L = LU[..., :, :k].tril(-1) + eye
    return OPS["lu_unpack"].result_type(P, L, LU[..., :k, :].triu())


defop("lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> "
      "(Tensor P, Tensor L, Tensor U)", composite=_lu_unpack, variants=("function", "out"),
      doc="P, L and U (``A = P @ L @ U``) from ``linalg.lu_factor``'s packed factors and pivots.")


def lu_solve(LU, pivots, B, left=True, adjoint=False):
    """X with ``A @ X = B`` (``X @ A = B`` with ``left=False``; A's transpose with ``adjoint``) from A's LU
    factors: a permutation and two triangular solves."""
    if LU.dtype not in _LAPACK_DTYPES and (LU.numel() == 0 or B.numel() == 0):
        # an empty system reaches no kernel in torch, which then takes the half types too (triangular solves not)
        shape = broadcast_shapes(tuple(LU.shape[:-2]), tuple(B.shape[:-2])) + tuple(B.shape[-2:])
        return functions.zeros(shape, dtype=B.dtype, device=B.device)
    P = OPS["_lu_permutation"](pivots, LU.shape[-1], LU.dtype)
    order = functions.arange(LU.shape[-1], dtype=LU.dtype, device=LU.device)
    where, before = P.matmul(order).long(), P.mT.matmul(order).long()  # (P X's row i is X's row where[i])
    solve = OPS["linalg_solve_triangular"]
    if left != adjoint:  # A = P L U: X = U^-1 L^-1 P^T B, or for X A = B, (A^T X^T = B^T) with A^T = U^T L^T P^T
        if not left:
            B = B.mT
        X = solve(LU, solve(LU, _permuted(B, before, -2), False, True, True), True, True, False)
        return X.mT if not left else X
    # A^T X = B: X = P L^-T U^-T B; X A = B: X = B U^-1 L^-1 P^T
    if left:
        return _permuted(solve(LU.mT, solve(LU.mT, B, False, True, False), True, True, True), where, -2)
    return _permuted(solve(LU, solve(LU, B, True, False, False), False, False, True), where, -1)


def _permuted(X, index, dim):
    """X's rows (``dim`` -2) or columns (-1) in the order ``index`` (batch..., n) gives, batches broadcast: taken
    rather than multiplied by a permutation matrix, whose zeros would turn an infinite entry (a singular U's)
    into NaN where LAPACK's row swaps keep it (torch's jvp of logdet at a singular matrix, fuzz seed 7882824)."""
    batch = broadcast_shapes(tuple(X.shape[:-2]), tuple(index.shape[:-1]))
    index = index.broadcast_to(batch + tuple(index.shape[-1:])).unsqueeze(-2 if dim == -1 else -1)
    return X.broadcast_to(batch + tuple(X.shape[-2:])).take_along_dim(index, dim)


def _lu_solve(B, LU, pivots):
    if not LU.dtype.is_floating_point:
        raise RuntimeError(f"torch.linalg.lu_solve: Expected a floating point or complex tensor as input. Got "
                           f"{scalar_name(LU.dtype)}")
    check_kernel("linalg.lu_solve_cpu", LU)
    check_square("torch.linalg.lu_solve", LU)
    return lu_solve(LU, pivots, B)


defop("lu_solve(Tensor self, Tensor LU_data, Tensor LU_pivots) -> Tensor", composite=_lu_solve,
      variants=("function", "method", "out"),
      doc="X with ``A @ X = self`` from A's LU factors and pivots (``linalg.lu_factor``).")


def _lu(A, pivot, get_infos):
    check_kernel_unless_empty("lu_cpu", A)
    LU, pivots, info = OPS["linalg_lu_factor_ex"](A, pivot, False)
    return (LU, pivots, info) if get_infos else (LU, pivots)


defop("lu(Tensor self, bool pivot=True, bool get_infos=False) -> Any", composite=_lu,
      doc="``(LU, pivots)`` of ``linalg.lu_factor``, with the infos too when ``get_infos``; a singular matrix "
          "raises nothing.")


# QR, Householder reflectors -------------------------------------------------------------------------------

_QR_MODES = ("reduced", "complete", "r")


def _qr_meta(A, mode):
    if mode not in _QR_MODES:
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           "or 'complete'")
    check_matrix("linalg.qr", A)
    check_floating("linalg.qr", A)
    check_kernel("geqrf_cpu", A)
    *batch, m, n = A.shape
    k = min(m, n)
    q = (0,) if mode == "r" else (*batch, m, m if mode == "complete" else k)
    return _spec(A, q), _spec(A, (*batch, m if mode == "complete" else k, n))


def _qr_cpu(spec, a, mode):
    if mode == "r":
        return np.zeros(0, a.dtype), np.linalg.qr(a, mode="r")
    return np.linalg.qr(a, mode=mode)


defop("linalg_qr(Tensor A, str mode=\"reduced\") -> (Tensor Q, Tensor R)", meta=_qr_meta, cpu=_qr_cpu,
      kind="linalg", variants=(),
      doc="QR decomposition by Householder reflections (LAPACK's geqrf, orgqr): Q with orthonormal columns, R "
          "upper triangular; ``mode`` 'reduced', 'complete' (square Q) or 'r' (R only, Q empty).")


def _qr(A, some):
    Q, R = OPS["linalg_qr"](A, "reduced" if some else "complete")
    return OPS["qr"].result_type(Q, R)


defop("qr(Tensor self, bool some=True) -> (Tensor Q, Tensor R)", composite=_qr,
      variants=("function", "method", "out"), doc="QR decomposition: reduced, or complete with ``some=False``.")


def _geqrf_meta(A):
    if A.ndim < 2:
        raise RuntimeError(f"torch.geqrf: input must have at least 2 dimensions.")
    check_kernel("geqrf_cpu", A)
    *batch, m, n = A.shape
    return _spec(A, A.shape), _spec(A, (*batch, min(m, n)))


def _geqrf_cpu(spec, a):
    if a.size == 0:
        return np.array(a, copy=True), np.zeros(spec[1].shape, a.dtype)
    h, tau = np.linalg.qr(a, mode="raw")
    return _mT(h), tau


defop("geqrf(Tensor self) -> (Tensor a, Tensor tau)", meta=_geqrf_meta, cpu=_geqrf_cpu, kind="linalg",
      variants=("function", "method", "out"),
      doc="LAPACK's geqrf: R on and above the diagonal, the Householder vectors below it, and their scales.")


def _householder_meta(A, tau, fn="torch.linalg.householder_product", kernel="orgqr_cpu"):
    if A.ndim < 2:
        raise RuntimeError(f"{fn}: input must have at least 2 dimensions.")
    if A.shape[-2] < A.shape[-1]:
        raise RuntimeError(f"{fn}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if A.shape[-1] < tau.shape[-1]:
        raise RuntimeError(f"{fn}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if tau.ndim != A.ndim - 1 or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{fn}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                           f"{list(tau.shape[:-1])}")
    if tau.dtype is not A.dtype:
        raise RuntimeError(f"{fn}: tau dtype {scalar_name(tau.dtype)} does not match input dtype "
                           f"{scalar_name(A.dtype)}")
    check_kernel(kernel, A)
    return _spec(A, A.shape)


def _reflect(h, tau, x, j, from_left=True):
    """``x`` multiplied by the j-th reflector ``I - tau v v^T`` (v: column j of ``h`` below the diagonal, 1 on it)."""
    m = h.shape[-2]
    v = np.concatenate([np.zeros(h.shape[:-2] + (j,), h.dtype), np.ones(h.shape[:-2] + (1,), h.dtype),
                        h[..., j + 1:m, j]], axis=-1)
    t = tau[..., j, None, None]
    if from_left:
        return x - t * v[..., :, None] * np.matmul(v[..., None, :], x)
    return x - t * np.matmul(x, v[..., :, None]) * v[..., None, :]


def _last_nonzero(mask):
    """Per row of ``mask``, one past the index of its last True (0 where none): LAPACK's ilaxlr/ilaxlc."""
    n = mask.shape[-1]
    return np.where(mask.any(-1), n - np.argmax(np.flip(mask, -1), axis=-1), 0)


def _householder_cpu(spec, h, tau):
    """LAPACK's org2r, which torch's orgqr runs: Q's columns formed right to left in place, reflector i applied
    (larf) only to the columns right of i, and only to the rows up to its vector's last nonzero element and the
    columns up to the last one nonzero there, then column i set to ``e_i - tau_i v_i``. A NaN ``tau_i`` thus
    makes column i NaN and the columns it reaches, not the columns left of it, which ``I - tau v v^T`` applied to
    the whole matrix made NaN through ``NaN * 0`` (transform-fuzz seed 8302924). A column whose product ``v^T c``
    is 0 is left as it is, as reference BLAS's ger skips it: torch's MKL does so in float32, and in float64 on some
    CPUs only (AMD znver4 skips, Intel rocketlake does not, making those columns NaN), so that is the rule here."""
    a = np.array(h, copy=True)
    m, n = a.shape[-2:]
    k = tau.shape[-1]
    a[..., :, k:] = np.eye(m, n, dtype=a.dtype)[:, k:]
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(k - 1, -1, -1):
            t = tau[..., i]
            if i < n - 1:
                a[..., i, i] = 1
                v, c = a[..., i:, i], a[..., i:, i + 1:]
                rows = np.arange(m - i) < np.where(t != 0, _last_nonzero(v != 0), 0)[..., None]
                cols = np.arange(n - i - 1) < _last_nonzero((rows[..., None] & (c != 0)).any(-2))[..., None]
                touched = rows[..., :, None] & cols[..., None, :]
                v = np.where(rows, v, 0)
                w = np.matmul(v[..., None, :], np.where(touched, c, 0))
                touched &= w != 0
                a[..., i:, i + 1:] = np.where(touched, c - t[..., None, None] * v[..., :, None] * w, c)
            a[..., i + 1:, i] *= -t[..., None]
            a[..., i, i] = 1 - t
            a[..., :i, i] = 0
    return a


defop("orgqr(Tensor self, Tensor input2) -> Tensor", meta=lambda A, tau: _householder_meta(A, tau, "torch.orgqr"),
      cpu=_householder_cpu, kind="linalg", variants=("function", "method", "out"),
      doc="The first columns of the product of the Householder reflectors that ``geqrf`` gives (LAPACK's orgqr).")
defop("linalg_householder_product(Tensor input, Tensor tau) -> Tensor", meta=_householder_meta,
      cpu=_householder_cpu, kind="linalg", variants=(),
      doc="The first columns of the product of Householder reflectors ``I - tau_j v_j v_j^T``, ``v_j`` column j of "
          "``input`` below the diagonal with 1 on it.")


def _ormqr_meta(A, tau, C, left, transpose):
    fn = "torch.ormqr"
    if A.ndim < 2 or C.ndim < 2:
        raise RuntimeError(f"{fn}: input must have at least 2 dimensions.")
    k = tau.shape[-1] if tau.ndim else 0
    if k != min(C.shape[-2 if left else -1], A.shape[-1]):
        raise RuntimeError(f"{fn}: tau.shape[-1] must be equal to min(other.shape[{-2 if left else -1}], "
                           "input.shape[-1])")
    if A.shape[-2] != C.shape[-2 if left else -1]:
        which = "-2" if left else "-1"
        raise RuntimeError(f"{fn}: input.shape[-2] must be equal to other.shape[{which}]")
    if tau.dtype is not A.dtype or C.dtype is not A.dtype:
        raise RuntimeError(f"{fn}: Expected input, tau and other to have the same dtype")
    check_kernel("ormqr_cpu", A)
    return _spec(C, C.shape)


def _ormqr_cpu(spec, h, tau, c, left, transpose):
    k = tau.shape[-1]
    # Q = H_0 H_1 ... H_{k-1}; each H_j is symmetric, so Q^T = H_{k-1} ... H_0
    order = range(k) if left == transpose else range(k - 1, -1, -1)
    x = np.array(c, copy=True)
    for j in order:
        x = _reflect(h, tau, x, j, from_left=left)
    return x


defop("ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor",
      meta=_ormqr_meta, cpu=_ormqr_cpu, kind="linalg", variants=("function", "method", "out"),
      doc="``input3`` multiplied by Q (Q^T with ``transpose``; from the right with ``left=False``), Q the product "
          "of the Householder reflectors that ``geqrf`` gives (LAPACK's ormqr).")


# SVD, symmetric eigendecomposition, pseudo-inverse, least squares --------------------------------------------

def _svd_meta(A, full_matrices, compute_uv, driver):
    check_matrix("linalg.svd", A)
    check_floating("linalg.svd", A)
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")
    check_kernel_unless_empty("linalg_svd_cpu", A)
    *batch, m, n = A.shape
    k = min(m, n)
    if not compute_uv:
        return _spec(A, (0,)), _spec(A, (*batch, k)), _spec(A, (0,))
    cols = m if full_matrices else k
    return _spec(A, (*batch, m, cols)), _spec(A, (*batch, k)), _spec(A, (*batch, n if full_matrices else k, n))


def _svd_cpu(spec, a, full_matrices, compute_uv, driver):
    if not compute_uv:
        empty = np.zeros(0, a.dtype)
        return empty, np.linalg.svd(a, compute_uv=False), empty
    if a.size == 0:  # NumPy's LAPACK refuses empty matrices: U and Vh are then the first columns or rows of
        # identities of sizes m and n (fuzz seed 7301509: U of a 5 x 0 matrix is 5 x 0, not 0 x 0)
        *_, m, n = a.shape
        u = _eye_like(a[..., :, :0], m)[..., :spec[0].shape[-1]]
        vh = _eye_like(a[..., :0, :], n)[..., :spec[2].shape[-2], :]
        return u, np.zeros(spec[1].shape, a.dtype), vh
    return np.linalg.svd(a, full_matrices=full_matrices)


defop("_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) -> (Tensor U, "
      "Tensor S, Tensor Vh)", meta=_svd_meta, cpu=_svd_cpu, kind="linalg", variants=(),
      doc="Singular value decomposition ``A = U @ diag(S) @ Vh``, singular values in descending order; U and Vh "
          "are empty unless ``compute_uv``.")


def _svd(A, some, compute_uv):
    U, S, Vh = OPS["_linalg_svd"](A, not some, True, None)
    if not compute_uv:  # torch's zeros, of the shapes a full decomposition has
        *batch, m, n = A.shape
        U = functions.zeros((*batch, m, m), dtype=A.dtype, device=A.device)
        Vh = functions.zeros((*batch, n, n), dtype=A.dtype, device=A.device)
        return OPS["svd"].result_type(U, S, Vh)
    return OPS["svd"].result_type(U, S, Vh.mT)


defop("svd(Tensor self, bool some=True, bool compute_uv=True) -> (Tensor U, Tensor S, Tensor V)", composite=_svd,
      variants=("function", "method", "out"),
      doc="Singular value decomposition ``A = U @ diag(S) @ V.mT`` (V, not Vh); ``some=False`` gives square U and "
          "V; without ``compute_uv`` U and V are zeros.")


def _eigh_meta(A, UPLO, compute_v):
    check_square("linalg.eigh", A)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    check_kernel_unless_empty("linalg_eigh_cpu", A)
    return _spec(A, A.shape[:-1]), _spec(A, A.shape if compute_v else (0,))


def _eigh_cpu(spec, a, UPLO, compute_v):
    if a.size == 0:
        return np.zeros(spec[0].shape, a.dtype), np.zeros(spec[1].shape, a.dtype)
    if not compute_v:
        return np.linalg.eigvalsh(a, UPLO), np.zeros(0, a.dtype)
    return np.linalg.eigh(a, UPLO)


defop("_linalg_eigh(Tensor A, str UPLO=\"L\", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)",
      meta=_eigh_meta, cpu=_eigh_cpu, kind="linalg", variants=(),
      doc="Eigenvalues (ascending) and orthonormal eigenvectors of a symmetric matrix, read from its lower "
          "(``UPLO='L'``) or upper triangle; the eigenvectors are empty unless ``compute_v``.")


def _pinv_meta(A, atol, rtol, hermitian):
    if A.ndim < 2 or A.dtype not in _LAPACK_DTYPES:
        raise RuntimeError(f"linalg.pinv({scalar_name(A.dtype)}{{{list(A.shape)}}}): expected a tensor with 2 or "
                           "more dimensions of float, double, cfloat or cdouble types")
    if hermitian:
        check_square("linalg.eigh", A)
    return _spec(A, (*A.shape[:-2], A.shape[-1], A.shape[-2]))


def singular_tolerance(s, shape, atol, rtol):
    """torch's cutoff for the singular values ``s`` (descending) of matrices of ``shape``:
    ``max(atol, rtol * largest)``, rtol defaulting to eps * max(m, n) unless atol is positive."""
    if rtol is None:
        rtol = np.finfo(s.dtype).eps * max(shape[-2:]) if atol is None or atol <= 0 else 0.0
    largest = s[..., :1] if s.shape[-1] else np.zeros(s.shape[:-1] + (1,), s.dtype)
    return np.maximum(atol or 0.0, rtol * largest)


def _pinv_cpu(spec, a, atol, rtol, hermitian):
    if a.size == 0:
        return np.zeros(spec.shape, a.dtype)
    if hermitian:
        w, v = np.linalg.eigh(a)
        s, order = np.abs(w), None
        u, vh = v, _mT(v) * np.sign(w)[..., :, None]
        order = np.argsort(-s, axis=-1)
        s = np.take_along_axis(s, order, -1)
        u = np.take_along_axis(u, order[..., None, :], -1)
        vh = np.take_along_axis(vh, order[..., :, None], -2)
    else:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
    keep = s > singular_tolerance(s, a.shape, atol, rtol)
    with np.errstate(divide="ignore"):
        inverse = np.where(keep, 1 / np.where(keep, s, 1), 0).astype(a.dtype)
    return np.matmul(_mT(vh) * inverse[..., None, :], _mT(u))


defop("linalg_pinv.atol_rtol_float(Tensor self, *, float? atol=None, float? rtol=None, bool hermitian=False) -> "
      "Tensor", meta=_pinv_meta, cpu=_pinv_cpu, kind="linalg", variants=(),
      doc="Moore-Penrose pseudo-inverse from the SVD (the eigendecomposition with ``hermitian``), singular values "
          "below ``max(atol, rtol * largest)`` taken as zero.")


def _pinverse(A, rcond):
    return OPS["linalg_pinv.atol_rtol_float"](A, None, rcond, False)


defop("pinverse(Tensor self, float rcond=1e-15) -> Tensor", composite=_pinverse,
      doc="Moore-Penrose pseudo-inverse, singular values below ``rcond`` times the largest taken as zero.")


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq_meta(A, B, rcond, driver):
    fn = "torch.linalg.lstsq"
    if A.ndim < 2:
        raise RuntimeError(f"{fn}: input must have at least 2 dimensions.")
    if B.ndim < 1:
        raise RuntimeError(f"{fn}: other must have at least 1 dimension.")
    if A.dtype not in _LAPACK_DTYPES:
        raise RuntimeError("This function doesn't handle types other than float and double")
    if A.dtype is not B.dtype:
        raise RuntimeError(f"{fn}: Expected input and other to have the same dtype, but got input's dtype "
                           f"{scalar_name(A.dtype)} and other's dtype {scalar_name(B.dtype)}")
    vector = solve_is_vector(A, B)
    if B.shape[-1 if vector else -2] != A.shape[-2]:
        raise RuntimeError(f"{fn}: input.size(-2) should match other.size({-1 if vector else -2})")
    if driver is not None and driver not in _LSTSQ_DRIVERS:
        raise RuntimeError(f"{fn}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    driver = driver or "gelsy"
    *_, m, n = A.shape
    batch = broadcast_shapes(A.shape[:-2], B.shape[:-1] if vector else B.shape[:-2])
    cols = () if vector else (B.shape[-1],)
    # residuals: for tall problems, with drivers other than gelsy (a vector other's with its column kept, as torch's)
    residuals = (*batch, *(cols or (1,))) if m > n and driver != "gelsy" else (0,)
    return (_spec(A, (*batch, n, *cols)), _spec(A, residuals),
            _int_spec(A, batch if driver != "gels" else (0,), _dt.int64),
            _spec(A, (*batch, min(m, n)) if driver in ("gelsd", "gelss") else (0,)))


def _lstsq_cpu(spec, a, b, rcond, driver):
    driver = driver or "gelsy"
    vector = solve_is_vector(a, b)
    if vector:
        b = b[..., None]
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
    m, n = a.shape[-2:]
    if rcond is None:
        rcond = np.finfo(a.dtype).eps * max(m, n)
    x = np.zeros(batch + (n, b.shape[-1]), a.dtype)
    rank = np.zeros(batch, np.int64)
    sv = np.zeros(batch + (min(m, n),), a.dtype)
    for i in np.ndindex(*batch):
        x[i], _, rank[i], sv[i] = np.linalg.lstsq(a[i], b[i], rcond=rcond)
    residuals = np.zeros(0, a.dtype)
    if m > n and driver != "gelsy":
        residuals = (np.square(np.matmul(a, x) - b)).sum(-2)
    return ((x[..., 0] if vector else x), residuals, rank if driver != "gels" else np.zeros(0, np.int64),
            sv if driver in ("gelsd", "gelss") else np.zeros(0, a.dtype))


defop("_linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> (Tensor solution, "
      "Tensor residuals, Tensor rank, Tensor singular_values)", meta=_lstsq_meta, cpu=_lstsq_cpu, kind="linalg",
      variants=("function",),
      doc="Least-squares solution of ``A @ X = B``, with torch's other results per ``driver`` (CPU default "
          "'gelsy'): residuals (full-rank tall A, not gelsy), rank (not gels), singular values (gelsd, gelss).")


def _linalg_lstsq(A, B, rcond, driver):
    solution, residuals, rank, singular_values = OPS["_linalg_lstsq"](A, B, rcond, driver)
    if driver in ("gelsd", "gelss") and residuals.numel() and not bool((rank == A.shape[-1]).all()):
        # torch's residuals of these drivers are those of full-rank matrices only: empty unless every rank is n
        residuals = residuals.reshape(-1)[:0]
    # torch differentiates the solution and the residuals, not the singular values
    return OPS["linalg_lstsq"].result_type(solution, residuals, rank, singular_values.detach())


defop("linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> (Tensor solution, "
      "Tensor residuals, Tensor rank, Tensor singular_values)", composite=_linalg_lstsq, variants=(),
      doc="Least-squares solution of ``A @ X = B`` with torch's residuals, rank and singular values per ``driver``.")


# Matrix exponential ----------------------------------------------------------------------------------------

def _matrix_exp_meta(A):
    check_square("linalg.matrix_exp", A)
    check_floating("linalg.matrix_exp", A)
    return _spec(A, A.shape)


# Padé 13 coefficients and its bound on the 1-norm (Higham, "The scaling and squaring method for the matrix
# exponential revisited", 2005)
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
           10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


def expm_array(a):
    """exp(a) by scaling and squaring with the degree-13 Padé approximant, in float64 (rounded once to the
    result's dtype by the caller)."""
    a = a.astype(np.float64)
    if a.size == 0:
        return a
    norm = np.abs(a).sum(-2).max(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(np.isfinite(norm) & (norm > _THETA13), np.ceil(np.log2(norm / _THETA13)), 0).astype(np.int64)
    a = a / np.ldexp(1.0, s)[..., None, None]
    b = _PADE13
    eye = _eye_like(a)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    with np.errstate(all="ignore"):
        try:
            r = np.linalg.solve(v - u, v + u)
        except np.linalg.LinAlgError:  # a non-finite matrix: NaNs, as torch
            return np.full(a.shape, np.nan)
        for k in range(int(s.max(initial=0))):
            r = np.where((s > k)[..., None, None], r @ r, r)
    return r


defop("matrix_exp(Tensor self) -> Tensor", meta=_matrix_exp_meta, cpu=lambda spec, a: expm_array(a),
      kind="linalg", doc="Matrix exponential of a square matrix, or of each of a batch.")
