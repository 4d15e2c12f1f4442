"""``jitorch.linalg``: torch.linalg's functions for real matrices, batched over leading dims.

Each is torch's function of the same name and signature, built on the registry's kernels
(jitorch/ops/decompositions.py) and products, so that autograd differentiates it and the tracer
records it. A matrix a function cannot handle raises `LinAlgError` (a RuntimeError) with torch's message.

Not here: ``eig`` and ``eigvals`` (their results are complex, and jitorch has no complex dtype).
"""

from __future__ import annotations

import math
from numbers import Number

import jitorch as _jt
from jitorch.ops import registry as _registry
from jitorch.ops.decompositions import (  # noqa: F401  (LinAlgError is part of the namespace)
    LinAlgError, check_floating, check_matrix, check_precision, check_square, cholesky_as, lu_solve as _lu_solve,
    renamed,
)
from jitorch.ops.out_dtypes import check_out_dtypes, linalg_message
from jitorch.ops.registry import OPS as _OPS, cpp_name as _cpp_name, scalar_name as _scalar_name

__all__ = [
    "LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eigh", "eigvalsh",
    "householder_product", "inv", "inv_ex", "ldl_factor", "ldl_factor_ex", "ldl_solve", "lstsq", "lu", "lu_factor",
    "lu_factor_ex", "lu_solve", "matmul",
    "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet",
    "solve", "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve", "vander", "vecdot",
    "vector_norm",
]

_linalg_svd = _registry._return_type("linalg_svd", ("U", "S", "Vh"))
_linalg_eigh = _registry._return_type("linalg_eigh", ("eigenvalues", "eigenvectors"))
_linalg_lu = _registry._return_type("linalg_lu", ("P", "L", "U"))
_linalg_lu_factor = _registry._return_type("linalg_lu_factor", ("LU", "pivots"))
_linalg_slogdet = _registry._return_type("linalg_slogdet", ("sign", "logabsdet"))
_linalg_ldl_factor = _registry._return_type("linalg_ldl_factor", ("LD", "pivots"))


def _call(name, args, out=None):
    """Registry op ``name`` on schema-ordered ``args``, written into ``out`` if given."""
    return _registry.call(_OPS[name], tuple(args), out)


def _written(name, result, out):
    """``result`` (of a function built on op ``name``), or written into the ``out=`` tensor(s)."""
    if out is None:
        return result
    return _registry.write_out(_OPS[name], out, result, ())


def _wants_grad(A):
    return A.requires_grad and _jt.is_grad_enabled()


# Norms -----------------------------------------------------------------------------------------------------

def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """The ``ord``-norm of the elements over ``dim`` (all of them by default): a number, inf or -inf."""
    if isinstance(ord, str) or not isinstance(ord, Number):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, not {type(ord).__name__}")
    if isinstance(dim, int):
        dim = (dim,)
    return _jt.norm(x, float(ord), dim, keepdim, dtype=dtype, out=out)


_MATRIX_ORDERS = ("fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2)


def _matrix_dims(A, dim):
    if A.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    dim = tuple(dim)
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}")
    d0, d1 = (d % A.ndim for d in dim)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    return d0, d1


def _reduce_both(t, d0, d1, keepdim, first, second):
    """``second`` over d1 of ``first`` over d0, keeping the dims, then dropping them unless ``keepdim``."""
    r = getattr(getattr(t, first)(d0, keepdim=True), second)(d1, keepdim=True)
    return r if keepdim else r.squeeze((d0, d1))


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """Matrix norm over the two ``dim``: 'fro', 'nuc', inf, -inf, 1, -1, 2 or -2."""
    d0, d1 = _matrix_dims(A, dim)
    check_floating("linalg.matrix_norm", A)
    _check_norm_out("linalg.matrix_norm", A, dtype, out)
    if ord not in _MATRIX_ORDERS:
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    if dtype is not None:
        A = A.to(dtype)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim, out=out)
    if ord in ("nuc", 2, -2):
        check_precision("linalg.matrix_norm", A)
        s = svdvals(A.movedim((d0, d1), (-2, -1)))
        # (the largest singular value of none is 0, as the largest row sum below; the smallest raises)
        r = s.sum(-1) if ord == "nuc" or ord == 2 and s.shape[-1] == 0 else s.amax(-1) if ord == 2 else s.amin(-1)
        if keepdim:
            r = r.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1))
        return _written("norm", r, out)
    extreme = "amax" if ord > 0 else "amin"
    # 1-norms: largest column sum (sum over rows first); inf-norms: largest row sum
    first, second = (d0, d1) if abs(ord) == 1 else (d1, d0)
    r = A.abs().sum(first, keepdim=True)
    # torch's largest sum of none is 0 (its smallest raises, as amin of an empty dim)
    r = r.sum(second, keepdim=True) if ord > 0 and r.shape[second] == 0 else getattr(r, extreme)(second, keepdim=True)
    return _written("norm", r if keepdim else r.squeeze((d0, d1)), out)


def _check_norm_out(name, A, dtype, out):
    """torch.linalg's error for an out tensor of another dtype than the norm's (the input's dtype checked first)."""
    if A.dtype.is_floating_point:
        check_out_dtypes(name, linalg_message(name), out, [dtype or A.dtype])


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """A vector norm (``dim`` an int, or ``A`` 1-D) or a matrix norm (``dim`` two dims, or ``A`` 2-D, or ``ord``
    a string); with neither ``ord`` nor ``dim``, the 2-norm of all elements."""
    _check_norm_out("linalg.norm", A, dtype, out)
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or isinstance(ord, str) or (dim is None and ord is not None and A.ndim == 2):
        if dim is None and A.ndim != 2 and ord is not None:
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                               f"{A.ndim}D.")
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype,
                           out=out)
    if dim is None and ord is not None and A.ndim != 1:
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                           f"{A.ndim}D.")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype, out=out)


def cond(A, p=None, *, out=None):
    """Condition number of ``A`` in the norm ``p`` (2 by default: the ratio of its extreme singular values)."""
    check_matrix("linalg.cond", A)
    if isinstance(p, str):
        check_square(f"linalg.cond(ord={p})", A)
    if A.numel() == 0:  # torch's: zeros, checked no further (a non-square empty matrix's too, but for 'fro', 'nuc')
        return _written("norm", _jt.zeros(tuple(A.shape[:-2]), dtype=A.dtype, device=A.device), out)
    if p in (None, 2, -2):
        s = svdvals(A)
        r = s[..., 0] / s[..., -1] if p != -2 else s[..., -1] / s[..., 0]
        return _written("norm", r, out)
    check_square(f"linalg.cond(ord={p})", A)
    inverse, info = inv_ex(A)
    r = matrix_norm(A, p) * matrix_norm(inverse, p)
    # a singular matrix's condition number is infinite
    return _written("norm", _jt.where(info > 0, math.inf, r), out)


# Determinants, inverses, solves -------------------------------------------------------------------------

def det(A, *, out=None):
    """Determinant of a square matrix, or of each of a batch."""
    return _call("det", (A,), out)


def slogdet(A, *, out=None):
    """Sign and log of the absolute value of the determinant (sign 0 and log -inf for a singular matrix)."""
    return _linalg_slogdet(*_call("slogdet", (A,), out))


def inv(A, *, out=None):
    """Inverse of a square matrix; a singular one raises LinAlgError."""
    return _jt.inverse(A, out=out)


def inv_ex(A, *, check_errors=False, out=None):
    """Inverse and LAPACK's info (nonzero: singular; its inverse is then infinities and NaNs)."""
    return _call("linalg_inv_ex", (A, check_errors), out)


def solve(A, B, *, left=True, out=None):
    """X with ``A @ X = B`` (``X @ A = B`` with ``left=False``); a singular A raises LinAlgError."""
    X, _ = renamed("torch.linalg.solve_ex", "torch.linalg.solve",
                   lambda check_errors: _call("linalg_solve_ex", (A, B, left, check_errors)))
    return _written("linalg_solve_ex", X, out)


def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    """X with ``A @ X = B`` and the info of A's LU (nonzero: singular)."""
    return _call("linalg_solve_ex", (A, B, left, check_errors), out)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """X with ``A @ X = B`` for triangular A (``X @ A = B`` with ``left=False``)."""
    return _call("linalg_solve_triangular", (A, B, upper, left, unitriangular), out)


def tensorinv(A, ind=2, *, out=None):
    """The tensor ``X`` with ``tensordot(A, X, ind)`` the identity, of shape ``A.shape[ind:] + A.shape[:ind]``."""
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    if math.prod(rows) != math.prod(cols):
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) == prod(self.shape[:ind]),"
                           f" but got {math.prod(cols)} != {math.prod(rows)}")
    result = inv(A.reshape(math.prod(rows), math.prod(cols))).reshape(cols + rows)
    return _written("inverse", result, out)


def tensorsolve(A, B, dims=None, *, out=None):
    """The tensor ``X`` with ``tensordot(A, X, X.ndim) = B``; ``dims`` of A are moved to its end first."""
    if dims is not None:
        dims = [d % A.ndim for d in dims]
        A = A.movedim(dims, list(range(A.ndim - len(dims), A.ndim)))
    shape = tuple(A.shape[B.ndim:])
    rows = math.prod(B.shape)
    if math.prod(A.shape[:B.ndim]) != rows or math.prod(shape) != rows:
        raise RuntimeError("Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                           f"prod(self.shape[:other.ndim]), but got {math.prod(shape)} != "
                           f"{math.prod(A.shape[:B.ndim])}")
    return _written("linalg_solve_ex", solve(A.reshape(rows, rows), B.reshape(rows)).reshape(shape), out)


# Decompositions ----------------------------------------------------------------------------------------------

def cholesky(A, *, upper=False, out=None):
    """Cholesky factor of a symmetric positive-definite matrix; another raises LinAlgError."""
    return _written("linalg_cholesky_ex", cholesky_as("linalg.cholesky", A, upper), out)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """Cholesky factor and the order of the first leading minor that is not positive-definite (0: none)."""
    return _call("linalg_cholesky_ex", (A, upper, check_errors), out)


def lu_factor_ex(A, *, pivot=True, check_errors=False, out=None):
    """LU factors packed as LAPACK's getrf, the 1-based row interchanges, and the index of a zero pivot."""
    return _call("linalg_lu_factor_ex", (A, pivot, check_errors), out)


def lu_factor(A, *, pivot=True, out=None):
    """LU factors packed as LAPACK's getrf and the 1-based row interchanges; an exactly singular matrix raises."""
    LU, pivots, _ = renamed("torch.linalg.lu_factor_ex", "torch.linalg.lu_factor",
                            lambda check_errors: lu_factor_ex(A, pivot=pivot, check_errors=check_errors))
    return _written("linalg_lu_factor_ex", _linalg_lu_factor(LU, pivots), out)


def ldl_factor_ex(A, *, hermitian=False, check_errors=False, out=None):
    """Bunch-Kaufman LDL^T of symmetric matrices (lower triangles read), packed as LAPACK's sytrf; the
    1-based interchanges; the index of a zero pivot (0: none)."""
    return _call("linalg_ldl_factor_ex", (A, hermitian, check_errors), out)


def ldl_factor(A, *, hermitian=False, out=None):
    """``ldl_factor_ex``'s LD and pivots; a zero pivot raises."""
    try:
        LD, pivots, _ = ldl_factor_ex(A, hermitian=hermitian, check_errors=True)
    except RuntimeError as e:  # (torch names itself in the zero pivot's error only: its other checks are _ex's)
        if "Unknown error code" not in str(e):
            raise
        raise RuntimeError(str(e).replace("ldl_factor_ex", "ldl_factor")) from None
    return _written("linalg_ldl_factor_ex", _linalg_ldl_factor(LD, pivots), out)


def ldl_solve(LD, pivots, B, *, hermitian=False, out=None):
    """X with ``A @ X = B`` from ``ldl_factor``'s LD and pivots."""
    return _call("linalg_ldl_solve", (LD, pivots, B, hermitian), out)


def lu(A, *, pivot=True, out=None):
    """P, L, U with ``A = P @ L @ U``: L unit lower triangular, U upper triangular."""
    LU, pivots, _ = lu_factor_ex(A, pivot=pivot)
    return _written("lu_unpack", _linalg_lu(*_jt.lu_unpack(LU, pivots, unpack_pivots=pivot)), out)


def lu_solve(LU, pivots, B, *, left=True, adjoint=False, out=None):
    """X with ``A @ X = B`` (``X @ A = B`` with ``left=False``; A^T with ``adjoint``) from ``lu_factor``'s results."""
    check_floating("torch.linalg.lu_solve", LU)
    check_square("torch.linalg.lu_solve", LU)
    return _written("lu_solve", _lu_solve(LU, pivots, B, left, adjoint), out)


def qr(A, mode="reduced", *, out=None):
    """QR decomposition: ``mode`` 'reduced', 'complete' or 'r' (R only; Q empty)."""
    return _call("linalg_qr", (A, mode), out)


def householder_product(A, tau, *, out=None):
    """The first columns of the product of the Householder reflectors in ``A``'s columns scaled by ``tau``."""
    return _call("linalg_householder_product", (A, tau), out)


def svd(A, full_matrices=True, *, driver=None, out=None):
    """``A = U @ diag(S) @ Vh``, singular values descending; square U and Vh unless ``full_matrices=False``."""
    return _written("_linalg_svd", _linalg_svd(*_call("_linalg_svd", (A, full_matrices, True, driver))), out)


def svdvals(A, *, driver=None, out=None):
    """Singular values, descending."""
    return _written("_linalg_svd", _call("_linalg_svd", (A, False, _wants_grad(A), driver))[1], out)


def eigh(A, UPLO="L", *, out=None):
    """Eigenvalues (ascending) and orthonormal eigenvectors of a symmetric matrix, read from one triangle."""
    return _written("_linalg_eigh", _linalg_eigh(*_call("_linalg_eigh", (A, UPLO, True))), out)


def eigvalsh(A, UPLO="L", *, out=None):
    """Eigenvalues (ascending) of a symmetric matrix, read from one triangle."""
    return _written("_linalg_eigh", _call("_linalg_eigh", (A, UPLO, _wants_grad(A)))[0], out)


def _tolerances(atol, rtol, tol, rcond):
    """torch's older spellings: ``tol`` an absolute tolerance, ``rcond`` a relative one."""
    if tol is not None:
        return tol, 0.0 if rtol is None else rtol
    if rcond is not None:
        return atol, rcond
    return atol, rtol


def pinv(A, rcond=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """Moore-Penrose pseudo-inverse; singular values below ``max(atol, rtol * largest)`` are taken as zero."""
    atol, rtol = _tolerances(atol, rtol, None, rcond)
    return _call("linalg_pinv.atol_rtol_float", (A, atol, rtol, hermitian), out)


def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """How many singular values (absolute eigenvalues with ``hermitian``) exceed ``max(atol, rtol * largest)``."""
    if A.ndim < 2 or A.dtype not in (_jt.float32, _jt.float64):
        raise RuntimeError("This function doesn't handle types other than float and double")
    atol, rtol = _tolerances(atol, rtol, tol, None)
    s = eigvalsh(A).abs() if hermitian else svdvals(A)
    # tolerances may be tensors, one per matrix of the batch (torch's unsqueeze(-1) against the singular values)
    absolute = _jt.as_tensor(0.0 if atol is None else atol, dtype=s.dtype)
    if rtol is None:
        default = _jt.finfo(A.dtype).eps * max(A.shape[-2:])
        rtol = default if atol is None else _jt.where(absolute > 0, 0.0, default)
    relative = _jt.as_tensor(rtol, dtype=s.dtype)
    largest = s.amax(-1, keepdim=True) if s.shape[-1] else _jt.zeros_like(s[..., :1])
    cutoff = _jt.maximum(relative.unsqueeze(-1) * largest, absolute.unsqueeze(-1))
    return _written("norm", (s > cutoff).sum(-1), out)


def lstsq(A, B, rcond=None, *, driver=None):
    """Least-squares solution of ``A @ X = B`` with torch's residuals, rank and singular values per ``driver``."""
    return _call("linalg_lstsq", (A, B, rcond, driver))


# Products and matrix functions -----------------------------------------------------------------------------

def matmul(input, other, *, out=None):
    """Matrix product (``torch.matmul``)."""
    return _jt.matmul(input, other, out=out)


def matrix_power(A, n, *, out=None):
    """``n``-th power of a square matrix (negative: of its inverse)."""
    return _jt.matrix_power(A, n, out=out)


def matrix_exp(A):
    """Matrix exponential."""
    return _jt.matrix_exp(A)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonal of each matrix (a view)."""
    return A.diagonal(offset, dim1, dim2)


def vecdot(x, y, *, dim=-1, out=None):
    """Dot products of the vectors along ``dim`` (broadcast)."""
    check_floating("linalg.vecdot", x)
    if x.dtype is not y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
                           f"{_scalar_name(x.dtype)} and y of type {_scalar_name(y.dtype)} instead")
    if x.ndim == 1 and y.ndim == 1:
        # torch's is vdot here (``dim`` unread): its dot kernel, whose half-type products are not rounded
        # before its float32 sum (the product's rounding put a float16 result 2 ulps off), and BLAS's order
        return _written("vdot", _jt.vdot(x, y), out)
    return _written("sum", (x * y).sum(dim), out)


def cross(input, other, *, dim=-1, out=None):
    """Cross products of the 3-vectors along ``dim`` (broadcast)."""
    return _jt.cross(input, other, dim, out=out)


def vander(x, *, N=None):
    """Vandermonde matrix: the powers 0, ..., N-1 of ``x`` along a new last dim."""
    if x.dtype in (_jt.float16, _jt.bfloat16, _jt.bool):
        raise RuntimeError(f"linalg.vander supports floating point, complex, and integer tensors, but got "
                           f"{_scalar_name(x.dtype)}")
    if x.ndim == 0:  # torch takes a 0-d x as one element
        x = x.reshape(1)
        N = 1 if N is None else N
    n = x.shape[-1] if N is None else N
    if n <= 1:
        raise RuntimeError("N must be greater than 1.")
    ones = _jt.ones_like(x).unsqueeze(-1)
    powers = x.unsqueeze(-1).expand(tuple(x.shape) + (n - 1,))
    return _jt.cat([ones, powers], -1).cumprod(-1).to(x.dtype)


def _chain_order(shapes):
    """The cheapest parenthesisation of a chain of matrix products (dynamic programming, as torch's multi_dot):
    ``split[i][j]`` is where the product of matrices i..j splits."""
    n = len(shapes)
    dims = [shapes[0][0]] + [s[1] for s in shapes]
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j], split[i][j] = min((cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k)
                                          for k in range(i, j))
    return split


def _chain(matrices, split, i, j):
    if i == j:
        return matrices[i]
    k = split[i][j]
    return _chain(matrices, split, i, k).mm(_chain(matrices, split, k + 1, j))


def multi_dot(tensors, *, out=None):
    """Product of two or more matrices in the cheapest order; the first may be a row vector, the last a column."""
    n = len(tensors)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    for i, t in enumerate(tensors):
        if i in (0, n - 1):
            if t.ndim not in (1, 2):
                raise RuntimeError(f"multi_dot(): the {'first' if i == 0 else 'last'} tensor must be 1D or 2D but got "
                                   f"{t.ndim}D")
        elif t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError(f"multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                               f"{_cpp_name(tensors[0].dtype)} and tensor {i} {_cpp_name(t.dtype)}")
    first, last = tensors[0].ndim == 1, tensors[-1].ndim == 1
    matrices = [tensors[0].unsqueeze(0) if first else tensors[0], *tensors[1:-1],
                tensors[-1].unsqueeze(-1) if last else tensors[-1]]
    for i in range(n - 1):
        if matrices[i].shape[1] != matrices[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes {list(tensors[i].shape)} and "
                               f"{list(tensors[i + 1].shape)} cannot be multiplied")
    result = _chain(matrices, _chain_order([tuple(m.shape) for m in matrices]), 0, n - 1)
    if first:
        result = result.squeeze(0)
    if last:
        result = result.squeeze(-1)
    return _written("mm", result, out)
