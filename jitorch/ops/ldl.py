"""The LDL^T factorization of symmetric matrices with Bunch-Kaufman pivoting and its solve (torch.linalg's
ldl_factor, ldl_factor_ex, ldl_solve): the kernels ``linalg_ldl_factor_ex`` and ``linalg_ldl_solve``.

The factorization is LAPACK's unblocked ``?sytf2`` (lower triangle; torch calls ``?sytrf``), step for step:
the same pivot choices (1x1 or 2x2 blocks, by the ratio ``(1 + sqrt(17)) / 8``), the same updates in the
same order, so for the sizes MKL's ``sytrf`` factors unblocked its bits are torch's; the solve is ``?sytrs``.
``LD`` holds L's multipliers below the diagonal and D's blocks on it (its upper triangle zero, as torch's);
``pivots`` are LAPACK's 1-based interchanges, a 2x2 block's two entries both minus its interchange. For real
matrices ``hermitian`` changes nothing. A zero pivot column gives ``info`` its 1-based index, as LAPACK.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as _dt
from .decompositions import check_floating, check_kernel, check_square
from .registry import TensorSpec, defop, scalar_name

_ALPHA = (1 + math.sqrt(17)) / 8


def _lower(m):
    """The lower triangle (diagonal included) of an m x m matrix, as a mask."""
    return np.tri(m, dtype=bool)


def _interchange(a, kk, kp):
    """Swap rows and columns ``kk < kp`` of the lower triangle of the trailing matrix ``a[kk:, kk:]``."""
    a[kp + 1:, [kk, kp]] = a[kp + 1:, [kp, kk]]
    column = a[kk + 1:kp, kk].copy()
    a[kk + 1:kp, kk] = a[kp, kk + 1:kp]
    a[kp, kk + 1:kp] = column
    a[[kk, kp], [kk, kp]] = a[[kp, kk], [kp, kk]]


def _pivot(a, k):
    """``(kp, kstep)`` of Bunch-Kaufman's choice at column ``k``; kp None for a zero (or NaN) column."""
    n = a.shape[0]
    absakk = abs(a[k, k])
    imax, colmax = k, 0.0
    if k < n - 1:
        imax = k + 1 + int(np.argmax(np.abs(a[k + 1:, k])))
        colmax = abs(a[imax, k])
    if max(absakk, colmax) == 0 or math.isnan(absakk):
        return None, 1
    if absakk >= _ALPHA * colmax:
        return k, 1
    rowmax = float(np.max(np.abs(a[imax, k:imax]))) if imax > k else 0.0
    if imax < n - 1:
        rowmax = max(rowmax, float(np.max(np.abs(a[imax + 1:, imax]))))
    if absakk >= _ALPHA * colmax * (colmax / rowmax):
        return k, 1
    if abs(a[imax, imax]) >= _ALPHA * rowmax:
        return imax, 1
    return imax, 2


def sytf2(a):
    """``(LD, pivots, info)`` of one symmetric matrix (its lower triangle read), LAPACK's ``?sytf2``."""
    a = np.tril(a)
    n = a.shape[0]
    one = a.dtype.type(1)
    pivots = np.zeros(n, np.int32)
    info = 0
    k = 0
    with np.errstate(all="ignore"):
        while k < n:
            kp, kstep = _pivot(a, k)
            if kp is None:
                info = info or k + 1
                kp = k
            else:
                if kp != k + kstep - 1:
                    if kstep == 2:
                        a[[k + 1, kp], k] = a[[kp, k + 1], k]
                    _interchange(a, k + kstep - 1, kp)
                if kstep == 1 and k < n - 1:
                    d11 = one / a[k, k]
                    x = a[k + 1:, k]
                    # ?syr on the lower triangle: a(i, j) + x(i) (-d11 x(j)), columns of a zero x(j) untouched
                    rank1 = a[k + 1:, k + 1:] + np.outer(x, -d11 * x)
                    keep = _lower(n - k - 1) & (x != 0)[None, :]
                    a[k + 1:, k + 1:] = np.where(keep, rank1, a[k + 1:, k + 1:])
                    a[k + 1:, k] *= d11
                elif kstep == 2 and k < n - 2:
                    d21 = a[k + 1, k]
                    d11 = a[k + 1, k + 1] / d21
                    d22 = a[k, k] / d21
                    d21 = one / (d11 * d22 - one) / d21
                    # column j's update reads rows i >= j of columns k and k + 1, which it overwrites at row j only
                    # after: every read is of the values before the update
                    ck, ck1 = a[k + 2:, k].copy(), a[k + 2:, k + 1].copy()
                    wk = d21 * (d11 * ck - ck1)
                    wkp1 = d21 * (d22 * ck1 - ck)
                    rank2 = a[k + 2:, k + 2:] - np.outer(ck, wk) - np.outer(ck1, wkp1)
                    a[k + 2:, k + 2:] = np.where(_lower(n - k - 2), rank2, a[k + 2:, k + 2:])
                    a[k + 2:, k], a[k + 2:, k + 1] = wk, wkp1
            pivots[k:k + kstep] = kp + 1 if kstep == 1 else -(kp + 1)
            k += kstep
    return a, pivots, info


def sytrs(ld, pivots, b):
    """X with ``A X = b`` from one matrix's ``sytf2`` results, LAPACK's ``?sytrs`` (lower)."""
    b = b.copy()
    n = ld.shape[0]
    k = 0
    with np.errstate(all="ignore"):
        while k < n:  # L D Y = b
            if pivots[k] > 0:
                kp = pivots[k] - 1
                b[[k, kp]] = b[[kp, k]]
                b[k + 1:] -= np.outer(ld[k + 1:, k], b[k])
                b[k] *= 1 / ld[k, k]  # (?scal by the reciprocal)
                k += 1
            else:
                kp = -pivots[k] - 1
                b[[k + 1, kp]] = b[[kp, k + 1]]
                b[k + 2:] -= np.outer(ld[k + 2:, k], b[k])
                b[k + 2:] -= np.outer(ld[k + 2:, k + 1], b[k + 1])
                akm1k = ld[k + 1, k]
                akm1, ak = ld[k, k] / akm1k, ld[k + 1, k + 1] / akm1k
                denom = akm1 * ak - 1
                bkm1, bk = b[k] / akm1k, b[k + 1] / akm1k
                b[k], b[k + 1] = (ak * bkm1 - bk) / denom, (akm1 * bk - bkm1) / denom
                k += 2
        k = n - 1
        while k >= 0:  # L^T X = Y
            if pivots[k] > 0:
                b[k] -= ld[k + 1:, k] @ b[k + 1:]
                kp = pivots[k] - 1
                b[[k, kp]] = b[[kp, k]]
                k -= 1
            else:
                b[k] -= ld[k + 1:, k] @ b[k + 1:]
                b[k - 1] -= ld[k + 1:, k - 1] @ b[k + 1:]
                kp = -pivots[k] - 1
                b[[k, kp]] = b[[kp, k]]
                k -= 2
    return b


def _factor_meta(A, hermitian, check_errors):
    fn = "torch.linalg.ldl_factor_ex"
    if A.ndim < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    check_square(fn, A)
    check_floating(fn, A)
    check_kernel("ldl_factor_kernel_cpu", A)
    batch = tuple(A.shape[:-2])
    return (TensorSpec(tuple(A.shape), A.dtype, A.device), TensorSpec(batch + (A.shape[-1],), _dt.int32, A.device),
            TensorSpec(batch, _dt.int32, A.device))


def check_info(fn, info):
    """torch's error for a zero pivot (its checker knows no ldl code: an internal assert's words)."""
    bad = np.flatnonzero(info)
    if bad.size:
        raise RuntimeError(f"{fn}: Unknown error code: {int(info.flat[bad[0]])}.")


def _factor_cpu(spec, a, hermitian, check_errors):
    n = a.shape[-1]
    flat = a.reshape((math.prod(a.shape[:-2]), n, n))
    ld, pivots, info = np.empty(flat.shape, a.dtype), np.empty(flat.shape[:-1], np.int32), np.empty(len(flat), np.int32)
    for i, m in enumerate(flat):
        ld[i], pivots[i], info[i] = sytf2(m)
    ld, pivots, info = ld.reshape(a.shape), pivots.reshape(a.shape[:-1]), info.reshape(a.shape[:-2])
    if check_errors:
        check_info("torch.linalg.ldl_factor_ex", info)
    return ld, pivots, info


defop("linalg_ldl_factor_ex(Tensor self, *, bool hermitian=False, bool check_errors=False) -> (Tensor LD, "
      "Tensor pivots, Tensor info)", meta=_factor_meta, cpu=_factor_cpu, kind="linalg", variants=(),
      autograd_fallback=lambda args: True,  # (torch has no derivative: a backward through it raises)
      doc="Bunch-Kaufman LDL^T of symmetric matrices (their lower triangles) as LAPACK's sytrf: L's multipliers "
          "and D's 1x1 and 2x2 blocks, the 1-based interchanges (a 2x2 block's negative), the 1-based index of "
          "a zero pivot (0: none).")


def _solve_meta(LD, pivots, B, hermitian):
    fn = "torch.linalg.ldl_solve"
    if LD.ndim < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    if B.ndim < 2:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-max(B.ndim, 1)}, "
                         f"{max(B.ndim, 1) - 1}], but got -2)")
    check_square(fn, LD)
    check_floating(fn, LD)
    if LD.shape[-1] != B.shape[-2]:
        raise RuntimeError(f"Incompatible matrix sizes for {fn}: each A matrix is {LD.shape[-1]} by "
                           f"{LD.shape[-1]} but each b matrix is {B.shape[-2]} by {B.shape[-1]}")
    if B.dtype is not LD.dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type {scalar_name(B.dtype)} "
                           f"and A of type {scalar_name(LD.dtype)} instead.")
    if tuple(pivots.shape) != tuple(LD.shape[:-1]):
        raise RuntimeError(f"{fn}: Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots with "
                           f"shape {list(pivots.shape)} instead")
    if pivots.dtype.is_floating_point or pivots.dtype is _dt.bool:
        raise RuntimeError(f"{fn}: Expected pivots to be integers. Got {scalar_name(pivots.dtype)}")
    check_kernel("ldl_solve_kernel_cpu", LD)
    batch = np.broadcast_shapes(tuple(LD.shape[:-2]), tuple(B.shape[:-2]))
    return TensorSpec(batch + tuple(B.shape[-2:]), B.dtype, B.device)


def _solve_cpu(spec, ld, pivots, b):
    batch = tuple(spec.shape[:-2])
    n, count = ld.shape[-1], math.prod(batch)
    ld = np.broadcast_to(ld, batch + (n, n)).reshape((count, n, n))
    pivots = np.broadcast_to(pivots, batch + (n,)).reshape((count, n))
    b = np.broadcast_to(b, tuple(spec.shape)).reshape((count,) + tuple(spec.shape[-2:]))
    out = np.empty(b.shape, b.dtype)
    for i in range(count):
        out[i] = sytrs(ld[i], pivots[i], b[i])
    return out.reshape(spec.shape)


defop("linalg_ldl_solve(Tensor LD, Tensor pivots, Tensor B, *, bool hermitian=False) -> Tensor", meta=_solve_meta,
      cpu=lambda spec, ld, pivots, b, hermitian: _solve_cpu(spec, ld, pivots, b), kind="linalg", variants=(),
      autograd_fallback=lambda args: True,
      doc="X with ``A X = B`` from ``linalg_ldl_factor_ex``'s LD and pivots (LAPACK's sytrs).")
