"""Matrix products: matmul (and ``@``), mm, bmm, mv, dot, outer, addmm, baddbmm, einsum.

Kernels hand the operands to NumPy's matmul as they are: NumPy passes
transposed operands to BLAS without copying, so a float32 or float64 product
costs what ``np.matmul`` costs, except the skinny products of small convolutions, which the code generator's
kernels compute (`skinny_shape`). Half types compute in float32. Integer
products wrap like torch's; bool products raise like torch's CPU kernels.

Each meta rule checks in torch's order (shapes, then dtypes, then dtypes
without a kernel) and raises torch's messages, naming the operation torch
dispatches to: ``matmul`` of a vector and a matrix fails as ``mm`` would.
"""

from __future__ import annotations

from collections import namedtuple
from functools import lru_cache
from math import prod

import numpy as np

from ..runtime import blas_calls
from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime import threads
from ..runtime.device import CPU
from ..runtime.strided import broadcast_shapes, contiguous_strides, list_str, wrap_dim
from . import functions, registry
from .meta import opmath
from .registry import TensorSpec, cpp_name, defop, scalar_name, warn_once
from .views import contiguous_format


def _no_kernel(kernel, dtype, work=True):
    """torch has no bool kernels; an empty product never reaches one (but ``dot`` always does)."""
    if dtype is _dt.bool and work:
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")


# The checks of torch's four product kernels, on shapes and dtypes ------------

def _check_mm(s1, s2, d1, d2):
    """mat1 (n, k) @ mat2 (k, m)."""
    if s1[1] != s2[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({s1[0]}x{s1[1]} and {s2[0]}x{s2[1]})")
    _check_mm_dtypes(d1, d2, s1[0] * s1[1] * s2[1])


def _check_mm_dtypes(d1, d2, work):
    if d1 is not d2:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {cpp_name(d1)} != {cpp_name(d2)}")
    _no_kernel("addmm_impl_cpu_", d1, work)


def _check_mv(s1, s2, d1, d2):
    """mat (n, k) @ vec (k,)."""
    if s1[1] != s2[0]:
        raise RuntimeError(f"size mismatch, got input ({s1[0]}), mat ({s1[0]}x{s1[1]}), vec ({s2[0]})")
    if d1 is not d2:
        m, v = scalar_name(d1), scalar_name(d2)
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {v}, {m}, and {v}")
    _no_kernel("addmv_impl_cpu", d1, s1[0] * s1[1])


def _check_dot(s1, s2, d1, d2):
    """vec (k,) . vec (k,)."""
    if d1 is not d2:
        raise RuntimeError(
            f"dot : expected both vectors to have same dtype, but found {scalar_name(d1)} and {scalar_name(d2)}")
    if s1[0] != s2[0]:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{s1[0]}] and src [{s2[0]}] to have the same number of "
            f"elements, but got {s1[0]} and {s2[0]} elements respectively")
    _no_kernel("dot", d1)


def _check_bmm(s1, s2, d1, d2):
    """batch1 (b, n, k) @ batch2 (b, k, m); returns the result dtype."""
    if s2[0] != s1[0] or s2[1] != s1[2]:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{s1[0]}, {s1[2]}] but got: "
            f"[{s2[0]}, {s2[1]}].")
    return _check_bmm_dtypes(d1, d2, s1[0], s1[1], s1[2], s2[2])


def _check_bmm_dtypes(d1, d2, b, n, k, m):
    """The dtype checks of torch's bmm kernels, and the result dtype (batch2's).
    An empty product reaches no kernel, so it checks nothing; small matrices
    (n*k*m < 400) take a loop kernel, larger ones BLAS (float, double) or
    per-matrix mm, each wording its errors its own way."""
    if b * n * m == 0 or k == 0:
        return d2
    if n * k * m < 400:
        _no_kernel("bmm", d1)
        if d1 is not d2:
            raise RuntimeError(f"expected scalar type {scalar_name(d1)} but found {scalar_name(d2)}")
    elif d2 in _BLAS_DTYPES:
        if d1 is not d2:
            raise RuntimeError(f"expected scalar type {scalar_name(d2)} but found {scalar_name(d1)}")
    else:
        _check_mm_dtypes(d1, d2, True)
    return d2


def _require_ndim(t, ndim, message):
    if t.ndim != ndim:
        raise RuntimeError(message.format(ndim=t.ndim))


def _read_sizes(t, *dims):
    """torch's ``t.size(d)`` for each of ``dims``, for its IndexError where ``t`` has too few dims: addbmm and
    baddbmm read sizes before they check the operands are 3-D."""
    for d in dims:
        if t.ndim == 0:
            raise IndexError(f"Dimension specified as {d} but tensor has no dimensions")
        wrap_dim(d, t.ndim)


# Meta rules -----------------------------------------------------------------------

def _mm_meta(a, b):
    _require_ndim(a, 2, "self must be a matrix")
    _require_ndim(b, 2, "mat2 must be a matrix")
    _check_mm(a.shape, b.shape, a.dtype, b.dtype)
    return TensorSpec((a.shape[0], b.shape[1]), a.dtype, a.device)


def _bmm_meta(a, b):
    _require_ndim(a, 3, "batch1 must be a 3D tensor")
    _require_ndim(b, 3, "batch2 must be a 3D tensor")
    dtype = _check_bmm(a.shape, b.shape, a.dtype, b.dtype)
    return TensorSpec((a.shape[0], a.shape[1], b.shape[2]), dtype, a.device)


def _mv_meta(a, b):
    if a.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    if a.ndim != 2 or b.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {a.ndim}, {b.ndim}")
    _check_mv(a.shape, b.shape, a.dtype, b.dtype)
    return TensorSpec((a.shape[0],), a.dtype, a.device)


def _dot_meta(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    _check_dot(a.shape, b.shape, a.dtype, b.dtype)
    return TensorSpec((), a.dtype, a.device)


def _folds(t, transpose):
    """Whether torch.matmul folds the batch dims of ``t`` (of ``t.mT`` with
    ``transpose``) into the rows of one matrix: when that needs no copy, or
    ``t`` is empty. Values do not depend on it, torch's errors do."""
    shape = list(t.shape)
    if prod(shape) == 0:
        return True
    strides = list(getattr(t, "_stride", None) or contiguous_strides(shape))
    if transpose:
        shape[-2:], strides[-2:] = shape[:-3:-1], strides[:-3:-1]
    return all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 2))


def _matmul_meta(a, b):
    """torch.matmul's cases: dot, mv, mm, a batch folded into the rows of mm/mv, or
    broadcast batches of bmm; each fails with the message of the kernel it uses."""
    sa, sb = tuple(a.shape), tuple(b.shape)
    da, db = len(sa), len(sb)
    if da == 0 or db == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {da}D and {db}D")
    if da <= 2 and db <= 2:
        if da == 1 and db == 1:
            _check_dot(sa, sb, a.dtype, b.dtype)
        elif db == 1:
            _check_mv(sa, sb, a.dtype, b.dtype)
        else:
            _check_mm(sa if da == 2 else (1, sa[0]), sb, a.dtype, b.dtype)
        batch = ()
    elif db <= 2 and _folds(a, False):
        (_check_mv if db == 1 else _check_mm)((prod(sa[:-1]), sa[-1]), sb, a.dtype, b.dtype)
        batch = sa[:-2]
    elif da == 1 and _folds(b, True):
        _check_mv((prod(sb[:-2]) * sb[-1], sb[-2]), sa, b.dtype, a.dtype)
        batch = sb[:-2]
    else:
        batch = broadcast_shapes(sa[:-2], sb[:-2])
        k2, m = (sb[-2], sb[-1]) if db >= 2 else (sb[0], 1)
        _check_bmm((prod(batch), sa[-2] if da >= 2 else 1, sa[-1]), (prod(batch), k2, m), a.dtype, b.dtype)
    shape = batch + sa[-2:-1] * (da >= 2) + sb[-1:] * (db >= 2)
    # the dtypes agree unless the product is empty; then torch gives the second one
    return TensorSpec(shape, b.dtype, a.device)


# Products of fewer multiply-adds run whole: a part handed to a worker costs 10 to 60 µs (`threads.run_parts`).
SPLIT_MIN_WORK = 1 << 22


# A batch of small matrices times a batch of transposed ones (unit stride down each column of ``b``, as
# attention's ``q @ k.transpose(-2, -1)`` has): OpenBLAS's small-matrix kernel for that layout runs at about
# half the speed of the one for rows, so ``b`` is copied into rows first: copy included, 1.2-1.3x faster
# alone at 48 and 24 products of 64x32 @ 32x64 and 64x64 @ 64x64 (benchmarks/products.py), 11-15% less CPU
# time inside the compiled GPT steps (colder caches there). The copy costs more than it saves on one large
# product, or where few rows of ``a`` reuse each of ``b``.
SMALL_TRANSPOSED_MAX = 64 * 64  # elements of one matrix of b
SMALL_TRANSPOSED_MIN_ROWS = 64  # rows of a


def _rows_first(a, b):
    """``b`` laid out in rows where it is a batch of small transposed float matrices (see above)."""
    if (b.ndim >= 3 and a.ndim >= 2 and b.strides[-2] == b.itemsize and b.shape[-1] > 1
            and b.shape[-2] * b.shape[-1] <= SMALL_TRANSPOSED_MAX and a.shape[-2] >= SMALL_TRANSPOSED_MIN_ROWS
            and prod(b.shape[:-2]) > 1 and 0 not in b.strides[:-2] and b.dtype in _SPLIT_DTYPES):
        # (a batch broadcast by stride 0 is left as it is: its copy would hold every repeat)
        return np.ascontiguousarray(b)
    return b


# A product of few rows times a transposed matrix (``x @ W.T``, as a linear layer computes it on a few tokens):
# OpenBLAS's small-matrix kernel for that layout (gemm "TN" in its column-major terms) refuses a product of more
# than `TRANSPOSED_SMALL_MAX` result elements, and its general kernel then packs all of ``W`` on every call.
# Computed as ``(W @ x.T).T`` (``x.T`` copied into rows, the result copied back), the product takes the kernels
# for plain rows: float32, one thread, 128-wide rows times a 128x512 weight, 4 rows 36 -> 9 µs, 8 rows 41 -> 15,
# 16 rows 52 -> 31, 32 rows 73 -> 59 (200x800: 8 rows 111 -> 60); from about 48 rows, or 24 of few columns,
# the copies cost more than the packing. Decided on the whole product's shape (never on a part of a split one),
# so values do not depend on the thread count.
SWAPPED_MAX_ROWS = 32
TRANSPOSED_SMALL_MAX = 1200


def _swapped(a, b):
    """Whether ``a @ b`` (float matrices of one dtype) runs as ``(b.T @ a.T).T`` (see above): ``b`` laid out in
    columns, ``a`` of at most `SWAPPED_MAX_ROWS` rows and the result of more than `TRANSPOSED_SMALL_MAX`
    elements."""
    if a.ndim != 2 or b.ndim != 2 or not b.flags.f_contiguous or b.flags.c_contiguous:
        return False
    (m, k), n = a.shape, b.shape[1]
    return m <= SWAPPED_MAX_ROWS and m * n > TRANSPOSED_SMALL_MAX and (m <= 16 or k >= 64)


def _swapped_product(a, b, out):
    """``a @ b`` as ``(b.T @ a.T).T``, into ``out`` if given (`_swapped`)."""
    rows = _matmul(b.T, np.ascontiguousarray(a.T))
    if out is None:
        return np.ascontiguousarray(rows.T)
    np.copyto(out, rows.T)
    return out


def _matmul(a, b, out=None, mkl=None):
    """``np.matmul`` with NumPy's floating-point errors silenced (torch does not warn where a product meets
    inf times 0 or a NaN): the error state is per thread, and the workers run parts of products too.
    A product over one term (a column times a row) is ``np.multiply``, the same single rounding: NumPy's
    matmul runs that case in a plain C loop, 4-5x slower (DCGAN's first transposed convolution's gradient).
    ``mkl``: whether MKL runs the product this one is a part of (`_product`)."""
    sa, sb = a.shape, b.shape  # (each read makes a tuple)
    one_term = len(sa) >= 2 and len(sb) >= 2 and sa[-1] == 1 == sb[-2] and a.dtype == b.dtype
    return _product(a, b if one_term else _rows_first(a, b), one_term, out, mkl)


def _product(a, b, one_term, out=None, mkl=None):
    """`_matmul`'s NumPy call, its rule for a product over one term (``one_term``) taken; where MKL runs the product
    (``mkl``: decided on the whole product where this is a part of one, by default, None, on this one:
    `runtime.blas_calls.runs_mkl`), a product that NumPy would compute as one gemm call is MKL's gemm call
    (`_mkl_gemm`), as a compiled step's products on the team are (`runtime.blas_calls.gemm_call`)."""
    if not one_term and a.dtype in _SPLIT_DTYPES and a.ndim >= 2 and b.ndim >= 2:
        if blas_calls.runs_mkl(a, b) if mkl is None else mkl:
            r = _mkl_gemm(a, b, out)
            if r is not None:
                return r
    fn = np.multiply if one_term else np.matmul
    try:
        return fp_errors.silenced(fn, a, b) if out is None else fp_errors.silenced(fn, a, b, out=out)
    except RuntimeError as e:
        return fp_errors.when_busy(e, fn, a, b) if out is None else fp_errors.when_busy(e, fn, a, b, out=out)


def _mkl_gemm(a, b, out):
    """``a @ b`` (matrices, or batches of one) as MKL's gemm call (`runtime.blas_calls.run_gemm`: NumPy's rules for
    when matmul makes one), into ``out`` (a new array where None), else None (nothing has run)."""
    if a.dtype != b.dtype:
        return None
    if out is None:
        if a.ndim == 2 == b.ndim:
            shape = (a.shape[0], b.shape[1])
        elif a.size == prod(a.shape[-2:]) and b.size == prod(b.shape[-2:]):
            shape = (1,) * (max(a.ndim, b.ndim) - 2) + (a.shape[-2], b.shape[-1])
        else:
            return None
        out = np.empty(shape, a.dtype)
    return out if blas_calls.run_gemm(a, b, out, True) else None


# A product of few rows and a short sum over long rows (a small convolution's: cnn's 16 x 72 by 72 x 36864, its
# windows' gradient 72 x 16 by 16 x 36864), where OpenBLAS ran at 12-50 GFLOP/s on one core: the code generator's
# kernel (`codegen.gemm`, registered here: the ops layer cannot import it) computes it, eager and compiled alike.
# The rule, measured (benchmarks/conv_layers.py's shapes and a sweep, float32, one thread, the kernel against
# NumPy's OpenBLAS in turns, process CPU time): 1.1-2.5x OpenBLAS's speed on 16x72, 72x16, 8x9, 64x48, 48x64,
# 16x16 and 4x64 by 16K-64K columns and on 32x256 by 8K; level at 64x128 and 128x128 by 4K; behind at 256x128
# by 2K (OpenBLAS's blocking pays once both dims are large) and at 64x64 by 2304 (cnn's linear layer: 1.4-1.5x
# slower), so it takes 8K columns and more. Below 2**20 multiply-adds the ctypes call and Python checks weigh
# (and such products' eager path calls NumPy directly: `_DIRECT_MAX_WORK`).
# The weight gradient of such a convolution is the other skinny product: few rows and columns, a sum over every
# window (cnn's 16 x 36864 by 36864 x 72, the windows read transposed: unit stride along the sum in both
# operands), where OpenBLAS ran at 15-56 GFLOP/s: the code generator's long-sum kernel (`codegen.gemm._Dots`)
# ran 1.2-5x faster on 16x36864x72, 8x43264x9, 64x16384x48 and 48x16384x64 (same measurement).
SKINNY_KERNEL = LONG_SUM_KERNEL = WINDOW_KERNEL = WINDOW_SUM_KERNEL = None
SKINNY_MAX_ROWS, SKINNY_MAX_SUM, SKINNY_MAX_AREA, SKINNY_MIN_COLS, SKINNY_MIN_WORK = 128, 256, 8192, 8192, 1 << 20
LONG_SUM_MAX_ROWS, LONG_SUM_MAX_COLS, LONG_SUM_MAX_AREA, LONG_SUM_MIN_SUM = 64, 128, 4096, 8192
# 2-D products of fewer multiply-adds run as one NumPy call on eager's fast path, without `array_product`
_DIRECT_MAX_WORK = min(SPLIT_MIN_WORK, SKINNY_MIN_WORK)


def skinny_shape(dtype, m, k, n):
    """Which generated kernel the rules above give an ``(m, k) @ (k, n)`` product of ``dtype`` (a NumPy
    dtype): "columns", "long sum" or None (the layouts are checked apart, in `_skinny`)."""
    if dtype not in _SPLIT_DTYPES or m * k * n < SKINNY_MIN_WORK:
        return None
    if m <= SKINNY_MAX_ROWS and k <= SKINNY_MAX_SUM and m * k <= SKINNY_MAX_AREA and n >= SKINNY_MIN_COLS:
        return "columns"
    if m <= LONG_SUM_MAX_ROWS and n <= LONG_SUM_MAX_COLS and m * n <= LONG_SUM_MAX_AREA and k >= LONG_SUM_MIN_SUM:
        return "long sum"
    return None


def window_layout(dtype, m, size, steps, transposed=False):
    """`codegen.gemm.window_kernel`'s ``(k, n, rows, cols)`` for an ``(m, k)`` matrix of ``dtype`` (a NumPy dtype)
    times the im2col operand of a convolution: the windows of ``size`` ``(1, C, *kernel, *out, N)`` at element
    ``steps`` (one group), merged into ``(C * K, L * N)``, where the rule gives that product the columns kernel
    (`skinny_shape`) and the windows' last dims run contiguously (merged into one run); else None.
    ``transposed``: for an ``(m, L * N)`` matrix times the windows transposed (a weight gradient), where the rule
    gives that product the long-sum kernel (`codegen.gemm.window_sum_kernel`): the same ``(C * K, L * N, rows,
    cols)``."""
    if dtype not in _SPLIT_DTYPES or len(size) < 5 or (len(size) - 3) % 2 or size[0] != 1:
        return None
    nd = (len(size) - 3) // 2
    k, n = prod(size[1:2 + nd]), prod(size[2 + nd:])
    kind = skinny_shape(dtype, m, n, k) if transposed else skinny_shape(dtype, m, k, n)
    if kind != ("long sum" if transposed else "columns") or steps[-1] != 1:
        return None
    cols = list(zip(size[2 + nd:], steps[2 + nd:]))
    while len(cols) > 1 and cols[-2][1] == cols[-1][0]:  # (rows of windows that touch: one run)
        cols[-2:] = [(cols[-2][0] * cols[-1][0], 1)]
    return k, n, tuple(zip(size[1:2 + nd], steps[1:2 + nd])), tuple(cols)


def window_product(a, x, size, steps, out=None):
    """``a @ windows`` into ``out`` (an ``(m, n)`` array, else a new ``(1, m, n)`` one), where ``windows`` is the
    im2col operand of a convolution over ``x``, a contiguous array whose first element is the windows' first
    (`window_layout`'s geometry). The generated kernel reads the windows where they lie (no copy) where
    `window_layout` and the kernel take the layout; its bits are those of the columns kernel on the copied
    windows. Else None (nothing written)."""
    if WINDOW_KERNEL is None or a.ndim != 2 or a.dtype != x.dtype or not x.flags.c_contiguous \
            or not (a.flags.aligned and x.flags.aligned) or any(s % a.itemsize or s <= 0 for s in a.strides):
        return None
    layout = window_layout(a.dtype, a.shape[0], size, steps)
    if layout is None or layout[0] != a.shape[1]:
        return None
    k, n, rows, cols = layout
    m, item = a.shape[0], a.itemsize
    if out is not None and (out.shape != (m, n) or out.dtype != a.dtype or out.strides[1] != item
                            or out.strides[0] % item or out.strides[0] < n * item or not out.flags.aligned
                            or np.may_share_memory(out, x) or np.may_share_memory(out, a)):
        return None
    kernel = WINDOW_KERNEL(a.dtype, m, k, n, tuple(s // item for s in a.strides), rows, cols,
                           n if out is None else out.strides[0] // item)
    if kernel is None:
        return None
    result = np.empty((1, m, n), a.dtype) if out is None else out
    kernel.run(a, x, result, threads.get_num_threads())
    return result


def window_sum_product(a, x, size, steps, out=None):
    """``a @ windows.T`` into ``out`` (an ``(m, C * K)`` array, else a new ``(1, m, C * K)`` one), where ``windows``
    is the im2col operand ``(C * K, L * N)`` of a convolution over ``x`` (as `window_product`'s) and ``a`` an
    ``(m, L * N)`` matrix in rows of unit stride: a weight gradient, its windows read where they lie by the
    long-sum kernel where `window_layout` (transposed) and the kernel take them, the bits of the long-sum
    kernel's product of the copied windows. Else None (nothing written)."""
    if WINDOW_SUM_KERNEL is None or a.ndim != 2 or a.dtype != x.dtype or not x.flags.c_contiguous \
            or not (a.flags.aligned and x.flags.aligned) or a.strides[1] != a.itemsize or a.strides[0] % a.itemsize:
        return None
    layout = window_layout(a.dtype, a.shape[0], size, steps, transposed=True)
    if layout is None or layout[1] != a.shape[1]:
        return None
    n, k, rows, cols = layout
    m, item = a.shape[0], a.itemsize
    if out is not None and (out.shape != (m, n) or out.dtype != a.dtype or any(s % item or s < 0 for s in out.strides)
                            or not out.flags.aligned or np.may_share_memory(out, x) or np.may_share_memory(out, a)):
        return None
    result = np.empty((1, m, n), a.dtype) if out is None else out
    kernel = WINDOW_SUM_KERNEL(a.dtype, m, k, n, a.strides[0] // item, rows, cols,
                               tuple(s // item for s in result.strides[-2:]))
    if kernel is None:
        return None
    kernel.run(a, x, result, threads.get_num_threads())
    return result


def _skinny(a, b, out, whole):
    """``a @ b`` by a generated kernel (into ``out`` if given) where the rules take it and the operands lie as
    it reads them (no batch but dims of 1, the result apart from the operands; "columns": unit stride along
    the rows of ``b`` and of the result; "long sum": along the rows of ``a`` and the columns of ``b``), else
    None."""
    if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
        return None
    (m, k), n = a.shape[-2:], b.shape[-1]
    kind = skinny_shape(a.dtype, m, k, n)
    make = SKINNY_KERNEL if kind == "columns" else LONG_SUM_KERNEL
    if kind is None or make is None or prod(a.shape[:-2]) != 1 or prod(b.shape[:-2]) != 1:
        return None
    if out is None:
        out = np.empty((1,) * (max(a.ndim, b.ndim) - 2) + (m, n), a.dtype)
    item = a.itemsize
    strides = (*a.strides[-2:], *b.strides[-2:], *out.strides[-2:])
    unit = (3, 5) if kind == "columns" else (1, 2)  # (the strides that must be one element)
    if (any(strides[i] != item for i in unit) or any(s % item or s < 0 for s in strides)
            or not (a.flags.aligned and b.flags.aligned and out.flags.aligned)
            or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        return None
    sa0, sa1, sb0, sb1, sc0, sc1 = (s // item for s in strides)
    if kind == "columns":
        kernel = make(a.dtype, m, k, n, (sa0, sa1), sb0, sc0)
    else:
        kernel = make(a.dtype, m, k, n, sa0, sb1, (sc0, sc1))
    if kernel is None:
        return None
    kernel.run(a, b, out, 1 if whole else threads.get_num_threads())
    return out


def array_product(a, b, out=None, whole=False):
    """``np.matmul(a, b)``, into ``out`` if given (an array of the result's shape and dtype), without NumPy's
    floating-point warnings. A batch of matrices times one matrix is one BLAS call over all rows rather than
    one per matrix, and a large product of two float matrices (or batches) splits into
    ``threads.product_parts()`` parts run at once (`threads.run_parts`), unless ``whole`` (a product run beside another,
    `jit.interop`): by batch, else by rows, else by columns; each element is the same BLAS dot product either way (BLAS
    runs one thread once products split). A large product of a matrix and its own transpose is computed in row parts
    on one thread too (`_syrk`)."""
    if a.ndim >= 3 and b.ndim <= 2 and a.flags.c_contiguous:
        rows = a.reshape(prod(a.shape[:-1]), a.shape[-1])
        if out is None:
            return array_product(rows, b, whole=whole).reshape(a.shape[:-1] + b.shape[1:])
        array_product(rows, b, out.reshape(rows.shape[0], *b.shape[1:]), whole)
        return out
    sa, sb = a.shape, b.shape
    if len(sa) >= 3 and len(sa) == len(sb) and sa[:-2] == sb[:-2] and prod(sa) * sb[-1] < _DIRECT_MAX_WORK:
        # a small product of batches of one shape (attention's scores and values), which the rules below give
        # to `_matmul` (no generated kernel takes it, nothing splits it): at once, 2-3 µs of checks spared
        return _matmul(a, b, out)
    skinny = _skinny(a, b, out, whole)
    if skinny is not None:
        return skinny
    if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype or a.dtype not in _SPLIT_DTYPES:
        return _matmul(a, b, out)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    (m, k), n = a.shape[-2:], b.shape[-1]
    work = prod(batch) * m * n * k
    if work < SPLIT_MIN_WORK:
        return _swapped_product(a, b, out) if _swapped(a, b) else _matmul(a, b, out)
    mkl = blas_calls.runs_mkl(a, b)  # (the whole product's library, its parts' too: `runtime.blas_library`)
    if mkl:
        if out is None:
            out = np.empty(batch + (m, n), a.dtype)
        if blas_calls.run_gemm_parts(a, b, out, mkl_parts(m, n, work), m >= n):
            return out
    parts = 1 if whole else threads.product_parts()
    syrk = _syrk(a, b)  # (then in row parts, gemm calls, whatever the thread count: on one thread one by one)
    if parts == 1 and not syrk:
        return _matmul(a, b, out, mkl)
    inline, parts = parts == 1, max(parts, 2)
    if out is None:
        out = np.empty(batch + (m, n), a.dtype)
    pieces = _pieces(a, b, out, batch, parts, syrk)
    if inline:
        for piece in pieces:
            _matmul(*piece, mkl)
    elif not blas_calls.run_gemm_calls(pieces, mkl):
        threads.run_parts(_matmul, [(*piece, mkl) for piece in pieces])
    return out


def _pieces(a, b, out, batch, parts, syrk):
    """`array_product`'s ``parts`` pieces ``(a, b, out)`` of ``out = a @ b`` (``batch``: the result's batch dims):
    by the first batch dim where it has ``parts`` or more and the product is no syrk (``syrk``), else by rows where
    there are as many as columns, else by columns."""
    m, n = out.shape[-2:]
    if batch and batch[0] >= parts and not syrk:
        def piece(x, lo, hi):  # an operand's share of the first batch dim (a broadcast operand: all of it)
            return x[lo:hi] if x.ndim == out.ndim and x.shape[0] > 1 else x
        bounds = threads.bounds(batch[0], parts)
        return [(piece(a, lo, hi), piece(b, lo, hi), out[lo:hi]) for lo, hi in bounds]
    if m >= n:
        return [(a[..., lo:hi, :], b, out[..., lo:hi, :]) for lo, hi in threads.bounds(m, parts)]
    return [(a, b[..., lo:hi], out[..., lo:hi]) for lo, hi in threads.bounds(n, parts)]


# A product that MKL runs (`runtime.blas_calls.runs_mkl`) of `SPLIT_MIN_WORK` multiply-adds or more is computed
# in 2 parts, or more (a power of two, at most `MKL_MAX_PARTS`) where each still has `MKL_PART_WORK` and spans
# `MKL_PART_MIN` rows (or columns) or more, whatever the thread count: MKL's gemm may round a part of a product
# otherwise than the whole (its blocking depends on the shape: 32 of 348 random products of 64-1300 rows, cut in
# 2-8 row parts, did, float32 and float64), so a product's bits must not depend on how many threads share it, nor
# on whether it runs beside another (`jit.interop`), alone or in eager mode. One thread runs the parts one after
# another. Parts cost at one thread: the GPT, LSTM and CNN models' products of 9M-1.4G multiply-adds in 1, 2 and
# 4 parts ran at 0.92-1.26, 0.99-1.24 and 0.87-1.11 times NumPy's (OpenBLAS's) speed (float32, thread CPU, taking
# turns in one process), so products under 64M multiply-adds take 2 parts: at more than two threads they use two
# of them. Narrow parts cost more: in 8 parts of 128 columns, DCGAN's 256x2048x1024 ran at 0.72x MKL's whole speed
# (0.82x OpenBLAS's), in 4 of 256 at 0.93x; LSTM's 700x10000x200 (rows, "TN") in 8 parts of 88 rows at 0.70x, in
# 2 at 0.94x; 2048x256x1024 in 8 parts of 256 rows at 0.92x (benchmarks/blas_shapes.py, one thread, thread CPU).
MKL_PART_WORK = 1 << 24
MKL_MAX_PARTS = 8
MKL_PART_MIN = 256


def mkl_parts(m, n, work):
    """How many parts `array_product` computes an MKL product of ``work`` multiply-adds and an ``(m, n)`` result in
    (see above): by rows where ``m >= n``, else by columns."""
    parts = 2
    while parts < MKL_MAX_PARTS and work >= 2 * parts * MKL_PART_WORK and max(m, n) >= 2 * parts * MKL_PART_MIN:
        parts *= 2
    return min(parts, max(m, n) // 2)


def whole_gemm(a, b, out):
    """The operands ``(a, b, out)`` of the one NumPy matmul that ``array_product(a, b, out, whole=True)`` makes where
    that is a product of two float matrices (batches of rows folded into rows) that no generated kernel, swap,
    syrk or MKL split (`mkl_parts`) rule takes, else None: such a product may run as
    `runtime.blas_calls.gemm_call` (`jit.interop`)."""
    if out is None:
        return None
    if a.ndim >= 3 and b.ndim <= 2 and a.flags.c_contiguous and out.flags.c_contiguous:
        a, out = a.reshape(prod(a.shape[:-1]), a.shape[-1]), out.reshape(prod(a.shape[:-1]), *b.shape[1:])
    # (a batch of one: `_matmul` of that matrix, as neither `_rows_first` nor a split sees a batch there)
    a, b, out = blas_calls.one_matrix(a), blas_calls.one_matrix(b), blas_calls.one_matrix(out)
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _SPLIT_DTYPES:
        return None
    (m, k), n = a.shape, b.shape[1]
    if skinny_shape(a.dtype, m, k, n) is not None or _syrk(a, b) or (m * k * n < SPLIT_MIN_WORK and _swapped(a, b)):
        return None
    if m * k * n >= SPLIT_MIN_WORK and blas_calls.runs_mkl(a, b):
        return None  # (in its parts, as alone: MKL's whole may round otherwise)
    return a, b, out


def gemm_calls(a, b, out):
    """The words (`runtime.blas_calls.call_words`) of the gemm calls that ``array_product(a, b, out)`` makes, where
    it makes only such calls, for a product `whole_gemm` takes: one call where it runs whole (one product part,
    `threads.product_parts`, or fewer than `SPLIT_MIN_WORK` multiply-adds), else its parts' calls (`_pieces` of the
    matrices, each as `runtime.blas_calls.run_gemm_calls` makes it); None where it computes otherwise. How a product
    splits depends on the thread count: a caller that keeps the words keys them by `threads.product_parts` too."""
    plain = whole_gemm(a, b, out)
    if plain is None:
        return None
    a, b, out = plain
    (m, k), n = a.shape, b.shape[1]
    parts = threads.product_parts()
    if parts == 1 or m * k * n < SPLIT_MIN_WORK:
        calls = [blas_calls.call_words(a, b, out)]
    else:  # (`whole_gemm` leaves no MKL product of this size: the parts are NumPy's BLAS's calls)
        calls = [blas_calls.call_words(*piece, mkl=False) for piece in _pieces(a, b, out, (), max(parts, 2), False)]
    return None if None in calls else calls


_SPLIT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _syrk(a, b):
    """Whether NumPy's matmul computes ``a @ b`` (float matrices) with BLAS syrk (one triangle, mirrored): ``b`` is
    ``a`` with its last two dims swapped over the same memory (``x @ x.T``). syrk's sums may round otherwise than
    gemm's (OpenBLAS 0.3.23's do on this machine: NumPy 1.26's wheel), and the row parts of a split product are
    gemm calls, so such a product's bits depended on the thread count; `array_product` computes a large one in
    row parts whatever the thread count (a batch too), on one thread one after the other (the same multiply-adds as one gemm; one thread, 1024x256 float32: NumPy 2.4's
    OpenBLAS 6.4 ms syrk, 3.9 two gemm halves; NumPy 1.26's 14 and 18 ms)."""
    sa, sb = a.strides, b.strides
    return (sa[-1] == sb[-2] and sa[-2] == sb[-1] and a.shape[-2:] == b.shape[-2:][::-1]
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _matmul_cpu(spec, a, b):
    c = opmath(spec.dtype).np
    if a.dtype != c:
        a = a.astype(c)
    if b.dtype != c:
        b = b.astype(c)
    return array_product(a, b)


_BLAS_DTYPES = (_dt.float32, _dt.float64)
# dtypes whose products NumPy computes in the dtype itself, as torch does
_FAST_DTYPES = _BLAS_DTYPES + _dt.INTEGRAL


def _fast_path(op, ndims):
    """``fast(args, record=True)``: the common eager call without the dispatcher (CPU tensors
    of one such dtype, shapes NumPy accepts: its product rules are torch's; the backward node
    recorded as `registry.record_fast` says), or None for the general path and its errors.
    ``ndims`` pins the operands' dims for mm, bmm, mv and dot, which do not broadcast."""
    contiguous = registry.CONTIGUOUS_STRIDES
    batched = ndims == (3, 3)  # (bmm's: its operands' batch sizes must be equal; no other such op has a batch)

    def fast(args, record=True):
        a, b = args
        Tensor = registry.Tensor
        if not isinstance(a, Tensor) or not isinstance(b, Tensor):
            return None
        dtype = a.dtype
        sa, sb = a._shape, b._shape
        if (b.dtype is not dtype or dtype not in _FAST_DTYPES or a.device is not CPU or b.device is not CPU
                or not sa or not sb):
            return None
        grad = (a._requires_grad or b._requires_grad) and registry.records_grad()
        if grad and not record:
            return None
        if ndims is not None and (len(sa) != ndims[0] or len(sb) != ndims[1] or batched and sa[0] != sb[0]):
            return None
        xa, ya = a._arr, b._arr
        if xa is None:
            xa = a._array()
        if ya is None:
            ya = b._array()
        shape = None  # (the result's, where known here: two matrices')
        na, nb = len(sa), len(sb)
        try:  # (`array_product`'s choice for these operands, without its calls)
            if na == 2 == nb and sa[0] * sa[1] * sb[1] < _DIRECT_MAX_WORK:
                # (`_matmul` on two matrices of one dtype, or the swap `array_product` makes of few rows times a
                # transposed float matrix: its bits, as ``linear`` and the general path give them)
                if dtype in _BLAS_DTYPES and _swapped(xa, ya):
                    r = _swapped_product(xa, ya, None)
                else:
                    r = _product(xa, ya, sa[1] == 1 == sb[0])
                shape = (sa[0], sb[1])
            elif na < 3 and (na < 2 or nb < 2):
                r = _matmul(xa, ya)
            else:
                r = array_product(xa, ya)
        except ValueError:
            return None
        if r.__class__ is not np.ndarray:  # (a 0-d product is a NumPy scalar)
            r = np.asarray(r)
        if not r.flags.c_contiguous:
            r = registry.contiguous_result(r, dtype)
        elif shape is None or (strides := contiguous.get(shape)) is None:
            r = registry.Tensor._fresh(r, dtype)
        else:  # (its geometry known: `_fresh` spares reading it from the array)
            r = registry.Tensor._fresh(r, dtype, shape, strides)
        return registry.record_fast(op, args, r) if grad else r
    return fast


_PRODUCTS = [
    ("matmul(Tensor self, Tensor other) -> Tensor", _matmul_meta, None,
     "Matrix product with torch's rules: 1-D operands act as vectors (their dim is removed from the result), "
     "N-D operands as batches of matrices whose batch dims broadcast. Also ``a @ b``."),
    ("mm(Tensor self, Tensor mat2) -> Tensor", _mm_meta, (2, 2), "Product of two matrices."),
    ("bmm(Tensor self, Tensor mat2) -> Tensor", _bmm_meta, (3, 3),
     "Products of two batches of matrices, (b, n, k) @ (b, k, m)."),
    ("mv(Tensor self, Tensor vec) -> Tensor", _mv_meta, (2, 1), "Product of a matrix and a vector."),
    ("dot(Tensor self, Tensor tensor) -> Tensor", _dot_meta, (1, 1), "Dot product of two 1-D tensors of one dtype."),
    ("vdot(Tensor self, Tensor other) -> Tensor", _dot_meta, (1, 1), "Dot product (``dot`` for real tensors)."),
]
for _schema, _meta, _ndims, _doc in _PRODUCTS:
    _op = defop(_schema, meta=_meta, cpu=_matmul_cpu, kind="matmul", variants=("function", "method", "out"),
                doc=_doc)
    _op.fast = _fast_path(_op, _ndims)


# outer: a broadcast product --------------------------------------------------------

def _outer(self, vec2):
    for name, v in (("self", self), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {v.ndim}-D")
    return self.view(self.shape[0], 1).mul(vec2)


for _name in ("outer", "ger"):
    defop(f"{_name}(Tensor self, Tensor vec2) -> Tensor", composite=_outer, variants=("function", "method", "out"),
          overlap="partial",
          doc="Outer product of two vectors, ``self[i] * vec2[j]``, with type promotion.")


# addmm, baddbmm: beta * input + alpha * product ----------------------------------

def _check_expand(inp, target):
    """``input`` must broadcast to the product's shape (torch's expand messages)."""
    shape = inp.shape
    if len(shape) > len(target):
        raise RuntimeError(
            f"expand(torch.{scalar_name(inp.dtype)}Tensor{{{list_str(shape)}}}, size={list_str(target)}): the "
            f"number of sizes provided ({len(target)}) must be greater or equal to the number of dimensions in the "
            f"tensor ({len(shape)})")
    for i in range(1, len(shape) + 1):
        if shape[-i] != 1 and shape[-i] != target[-i]:
            raise RuntimeError(
                f"The expanded size of the tensor ({target[-i]}) must match the existing size ({shape[-i]}) at "
                f"non-singleton dimension {len(target) - i}.  Target sizes: {list_str(target)}.  "
                f"Tensor sizes: {list_str(shape)}")


def _addmm_meta(inp, m1, m2, beta, alpha):
    _require_ndim(m1, 2, "mat1 must be a matrix, got {ndim}-D tensor")
    _require_ndim(m2, 2, "mat2 must be a matrix, got {ndim}-D tensor")
    _check_mm(m1.shape, m2.shape, m1.dtype, m2.dtype)
    shape = (m1.shape[0], m2.shape[1])
    _check_expand(inp, shape)
    if inp.dtype is not m2.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {scalar_name(inp.dtype)} and "
                           f"{scalar_name(m2.dtype)}")
    return TensorSpec(shape, inp.dtype, inp.device)


def _baddbmm_meta(inp, b1, b2, beta, alpha):
    _read_sizes(b2, 2)
    _read_sizes(b1, 0, 1)
    _require_ndim(b1, 3, "batch1 must be a 3D tensor")
    _require_ndim(b2, 3, "batch2 must be a 3D tensor")
    shape = (b1.shape[0], b1.shape[1], b2.shape[2])
    _check_expand(inp, shape)
    if inp.dtype is not b1.dtype or inp.dtype is not b2.dtype:
        raise RuntimeError(f"Input dtypes must be the same, got: input {cpp_name(inp.dtype)}, batch1: "
                           f"{cpp_name(b1.dtype)}, batch2: {cpp_name(b2.dtype)}")
    _check_bmm(b1.shape, b2.shape, b1.dtype, b2.dtype)
    return TensorSpec(shape, inp.dtype, inp.device)


def _addmm_cpu(spec, inp, m1, m2, beta, alpha):
    out = _matmul_cpu(spec, m1, m2)
    if not spec.dtype.is_floating_point:
        beta, alpha = int(beta), int(alpha)  # torch truncates the scalars to the integer type
    if alpha != 1:
        out = np.multiply(out, _wrapped(alpha, out.dtype), dtype=out.dtype, casting="unsafe")
    if beta == 0:
        return out  # torch ignores input then, NaNs included
    scaled = inp.astype(out.dtype) if beta == 1 else np.multiply(inp, _wrapped(beta, out.dtype), dtype=out.dtype,
                                                                 casting="unsafe")
    return np.add(out, scaled, out=out)


def _wrapped(value, dtype):
    """A Python scalar in ``dtype``, wrapping out-of-range integers as a C cast does."""
    return np.array(value).astype(dtype)


_SCALED = "Scalar beta=1, Scalar alpha=1"
defop(f"addmm(Tensor self, Tensor mat1, Tensor mat2, *, {_SCALED}) -> Tensor", meta=_addmm_meta, cpu=_addmm_cpu,
      kind="matmul", variants=("function", "method", "inplace", "out"),
      doc="``beta * self + alpha * (mat1 @ mat2)``; ``self`` broadcasts to the product and is ignored when "
          "``beta`` is 0.")
defop(f"baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, {_SCALED}) -> Tensor", meta=_baddbmm_meta,
      cpu=_addmm_cpu, kind="matmul", variants=("function", "method", "inplace", "out"),
      doc="``beta * self + alpha * bmm(batch1, batch2)``; ``self`` broadcasts to the product.")


# einsum --------------------------------------------------------------------------

# Labels are ints: letters in torch's order (A-Z then a-z), then one per ellipsis dim.
EINSUM_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ELLIPSIS = len(EINSUM_LETTERS)


def _einsum_error(message):
    raise RuntimeError("einsum(): " + message)


def _label(ch, index):
    """The label of a subscript letter, or torch's error naming its index in the equation."""
    if ch not in EINSUM_LETTERS:
        _einsum_error(f"invalid subscript given at index {index} in the equation string, subscripts must be in "
                      "[a-zA-Z]")
    return EINSUM_LETTERS.index(ch)


def _parse_operands(lhs, n_ops):
    """Per operand: its labels, with None where its ellipsis stands."""
    ops = [[]]
    i = 0
    while i < len(lhs):
        ch = lhs[i]
        cur = ops[-1]
        if ch == ".":
            if None in cur:
                _einsum_error(f"found '.' for operand {len(ops) - 1} for which an ellipsis was already found")
            if lhs[i:i + 3] != "...":
                _einsum_error(f"found '.' for operand {len(ops) - 1} that is not part of any ellipsis")
            cur.append(None)
            i += 2
        elif ch == ",":
            if len(ops) == n_ops:
                _einsum_error("fewer operands were provided than specified in the equation")
            ops.append([])
        elif ch != " ":
            cur.append(_label(ch, i))
        i += 1
    if len(ops) < n_ops:
        _einsum_error("more operands were provided than specified in the equation")
    return ops


def _parse_output(rhs, start, seen):
    """Output labels, None where the ellipsis stands; ``start`` is the index of ``rhs`` in the equation."""
    out = []
    i = 0
    while i < len(rhs):
        ch = rhs[i]
        if ch == ".":
            if None in out:
                _einsum_error("found '.' for output but an ellipsis (...) was already found")
            if rhs[i:i + 3] != "...":
                _einsum_error("found '.' for output that is not part of any ellipsis (...)")
            out.append(None)
            i += 2
        elif ch != " ":
            label = _label(ch, start + i)
            if label in out:
                _einsum_error(f"output subscript {ch} appears more than once in the output")
            if label not in seen:
                _einsum_error(f"output subscript {ch} does not appear in the equation for any input operand")
            out.append(label)
        i += 1
    return out


def _expand_ellipsis(labels, ndim, index):
    """Replace an operand's ellipsis by labels for its dims, aligned to the right
    of the widest ellipsis (label _ELLIPSIS + k for the k-th dim from the right)."""
    n = len(labels) - (None in labels)
    if None not in labels:
        if n != ndim:
            _einsum_error(f"the number of subscripts in the equation ({n}) does not match the number of dimensions "
                          f"({ndim}) for operand {index} and no ellipsis was given")
        return labels
    if n > ndim:
        _einsum_error(f"the number of subscripts in the equation ({n}) is more than the number of dimensions "
                      f"({ndim}) for operand {index}")
    at = labels.index(None)
    covered = ndim - n
    return labels[:at] + [_ELLIPSIS + covered - 1 - k for k in range(covered)] + labels[at + 1:]


def _label_sizes(operands, shapes):
    """Size of every label: repeats within an operand must agree, sizes across operands broadcast."""
    sizes = {}
    for i, (labels, shape) in enumerate(zip(operands, shapes)):
        own = {}
        for pos, (label, n) in enumerate(zip(labels, shape)):
            if label in own and own[label] != n:
                _einsum_error(f"subscript {EINSUM_LETTERS[label]} is repeated for operand {i} but the sizes don't match, "
                              f"{n} != {own[label]}")
            own[label] = n
            seen = sizes.get(label)
            if seen is None or seen == 1:
                sizes[label] = n
            elif n != 1 and n != seen:
                if label >= _ELLIPSIS:
                    _einsum_error(f"dimension {pos} covered by ellipsis in operand {i}has size {n} which does not "
                                  f"broadcast with previously seen ellipsis with size {seen} for the respective "
                                  "dimension")
                _einsum_error(f"subscript {EINSUM_LETTERS[label]} has size {n} for operand {i} which does not broadcast "
                              f"with previously seen size {seen}")
    return sizes


# labels per operand and of the output, output shape, and NumPy's sublist form of the
# call: per operand (the shape it broadcasts to, its labels renumbered 0..51), output labels
_Plan = namedtuple("_Plan", "operands out shape numpy_operands numpy_out")


@lru_cache(maxsize=1024)
def einsum_plan(equation, shapes):
    """Operand labels, output labels, label sizes and output shape of an equation
    over operands of ``shapes`` (cached: a model calls einsum with few equations)."""
    if not shapes:
        raise ValueError("einsum(): must specify the equation string and at least one operand, or at least one "
                         "operand and its subscripts list")
    lhs, arrow, rhs = equation.partition("->")
    parsed = _parse_operands(lhs, len(shapes))
    operands = [_expand_ellipsis(labels, len(shape), i) for i, (labels, shape) in enumerate(zip(parsed, shapes))]
    ell = sorted({x for labels in operands for x in labels if x >= _ELLIPSIS}, reverse=True)
    if arrow:
        out = _parse_output(rhs, len(lhs) + 2, {x for labels in parsed for x in labels})
        if None in out:
            at = out.index(None)
            out[at:at + 1] = ell
    else:
        counts = {}
        for labels in operands:
            for x in labels:
                counts[x] = counts.get(x, 0) + 1
        out = ell + sorted(x for x, n in counts.items() if n == 1 and x < _ELLIPSIS)
    sizes = _label_sizes(operands, shapes)
    used = {x: k for k, x in enumerate(sorted({x for labels in operands for x in labels}))}
    numpy_operands = tuple((tuple(sizes[x] for x in labels), [used[x] for x in labels]) for labels in operands)
    return _Plan(tuple(map(tuple, operands)), tuple(out), tuple(sizes[x] for x in out), numpy_operands,
                 [used[x] for x in out])


def _sum_dtype(d):
    return d if d.is_floating_point else _dt.int64


@lru_cache(maxsize=1024)
def _einsum_dtype(operands, out, shapes, dtypes):
    """The result dtype, from a replay on shapes of torch's schedule: operands
    contract left to right; a summed label whose size is not 1 in just one
    operand is summed there first (integers sum as int64); summed labels the
    pair shares go through bmm (one dtype, no bool, unless the product is
    empty); a pair without any multiplies with type promotion."""
    ops = [(dict(zip(labels, shape)), d) for labels, shape, d in zip(operands, shapes, dtypes)]
    summed = {x for labels in operands for x in labels} - set(out)
    if len(ops) == 1:
        return _sum_dtype(dtypes[0]) if summed else dtypes[0]
    # torch's dim order: the output, then ellipsis dims, then letters
    order = list(out) + sorted(summed, key=lambda x: (x < _ELLIPSIS, -x if x >= _ELLIPSIS else x))
    counts = {x: sum(sizes.get(x, 1) != 1 for sizes, _ in ops) for x in summed}
    a, da = ops[0]
    for b, db in ops[1:]:
        a, b = dict(a), dict(b)
        shared = []
        for x in summed:
            in_a, in_b = a.get(x, 1) != 1, b.get(x, 1) != 1
            if in_a and in_b:
                counts[x] -= 1
                if counts[x] == 1:
                    shared.append(x)
                    counts[x] = 0
            elif counts[x] == 1 and (in_a or in_b):
                counts[x] = 0
                if in_a:
                    a[x], da = 1, _sum_dtype(da)
                else:
                    b[x], db = 1, _sum_dtype(db)
        merged = {x: n if b.get(x, 1) == 1 else b[x] for x, n in a.items()}
        merged.update((x, n) for x, n in b.items() if x not in a)
        if shared:
            # bmm of (both, a only, shared) by (both, shared, rest), as torch lays them out
            kept = [x for x in order if x not in shared]
            both = [x for x in kept if a.get(x, 1) != 1 and b.get(x, 1) != 1]
            only_a = [x for x in kept if a.get(x, 1) != 1 and b.get(x, 1) == 1]
            rest = [x for x in kept if a.get(x, 1) == 1]
            n, m = prod(a[x] for x in only_a), prod(b.get(x, 1) for x in rest)
            if only_a and rest and order.index(rest[-1]) < order.index(only_a[0]):
                da, db, n, m = db, da, m, n  # torch swaps them to write the output in order
            da = _check_bmm_dtypes(da, db, prod(a[x] for x in both), n, prod(a[x] for x in shared), m)
            merged.update((x, 1) for x in shared)
        else:
            da = _dt.promote_types(da, db)
        a = merged
    return da


def _einsum_meta(equation, tensors):
    shapes = tuple(tuple(t.shape) for t in tensors)
    plan = einsum_plan(equation, shapes)
    dtype = _einsum_dtype(plan.operands, plan.out, shapes, tuple(t.dtype for t in tensors))
    return TensorSpec(plan.shape, dtype, tensors[0].device)


# Below this many elements NumPy's C loop beats planning a BLAS contraction.
_EINSUM_BLAS_MIN = 4096


def _einsum_cpu(spec, equation, arrays):
    plan = einsum_plan(equation, tuple(a.shape for a in arrays))
    c = opmath(spec.dtype).np
    args = []
    for a, (full, labels) in zip(arrays, plan.numpy_operands):
        a = a if a.dtype == c else a.astype(c)
        # size-1 dims broadcast against their label's size, as in torch
        args += [a if a.shape == full else np.broadcast_to(a, full), labels]
    big = len(arrays) > 1 and max(a.size for a in arrays) >= _EINSUM_BLAS_MIN
    r = np.einsum(*args, plan.numpy_out, optimize=big)
    if any(np.may_share_memory(r, a) for a in arrays):
        r = r.copy()  # a pure transpose or diagonal comes back as a view
    return r


defop("einsum(str equation, Tensor... tensors) -> Tensor", meta=_einsum_meta, cpu=_einsum_cpu, kind="matmul",
      variants=("function",),
      doc="Einstein summation: ``einsum('ij,jk->ik', a, b)`` or ``einsum('ij,jk->ik', [a, b])``. Labels are "
          "letters; ``...`` stands for broadcast dims; without ``->`` the output holds the labels seen once, "
          "sorted, after the ellipsis dims.")


# addmv, addr, addbmm: addmm's kernel on the operands as matrices -------------------------------------------

def _check_integral_scalars(name, dtype, beta, alpha):
    if not dtype.is_floating_point and dtype is not _dt.bool:
        for what, v in (("beta", beta), ("alpha", alpha)):
            if isinstance(v, float):
                raise RuntimeError(f"For integral input tensors, argument {what} must not be a floating point number.")


def _addmv_meta(inp, mat, vec, beta, alpha):
    if mat.ndim != 2 or vec.ndim != 1 or inp.ndim > 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {inp.ndim}, {mat.ndim}, {vec.ndim}")
    n, k = mat.shape
    if vec.shape[0] != k or (inp.ndim == 1 and inp.shape[0] not in (1, n)):
        raise RuntimeError(f"size mismatch, got input ({', '.join(map(str, inp.shape))}), mat ({n}x{k}), vec "
                           f"({vec.shape[0]})")
    if not (inp.dtype is mat.dtype is vec.dtype):
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {scalar_name(inp.dtype)}, "
                           f"{scalar_name(mat.dtype)}, and {scalar_name(vec.dtype)}")
    _no_kernel("addmv_impl_cpu", mat.dtype, n * k)
    return TensorSpec((n,), inp.dtype, inp.device)


def _addr_meta(inp, vec1, vec2, beta, alpha):
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.ndim}-D")
    shape = (vec1.shape[0], vec2.shape[0])
    _check_expand(inp, shape)
    dtype = _dt.promote_types(_dt.promote_types(inp.dtype, vec1.dtype), vec2.dtype)
    _check_integral_scalars("addr", dtype, beta, alpha)
    return TensorSpec(shape, dtype, inp.device)


def _addbmm_meta(inp, b1, b2, beta, alpha):
    _read_sizes(b2, 2)
    _read_sizes(b1, 1)
    _require_ndim(b1, 3, "batch1 must be a 3D tensor")
    _require_ndim(b2, 3, "batch2 must be a 3D tensor")
    if b1.shape[0] != b2.shape[0]:
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got {b1.shape[0]} and {b2.shape[0]}")
    if b1.shape[2] != b2.shape[1]:
        raise RuntimeError(f"Incompatible matrix sizes for bmm ({b1.shape[1]}x{b1.shape[2]} and "
                           f"{b2.shape[1]}x{b2.shape[2]})")
    shape = (b1.shape[1], b2.shape[2])
    _check_expand(inp, shape)
    if inp.dtype is not b2.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {scalar_name(inp.dtype)} and "
                           f"{scalar_name(b2.dtype)}")
    _check_mm_dtypes(b1.dtype, b2.dtype, prod(shape) * b1.shape[0] * b1.shape[2])
    return TensorSpec(shape, inp.dtype, inp.device)


def _addr_cpu(spec, inp, vec1, vec2, beta, alpha):
    c = opmath(spec.dtype).np
    return _addmm_cpu(spec, inp, vec1.astype(c)[:, None], vec2.astype(c)[None, :], beta, alpha)


def _addbmm_cpu(spec, inp, b1, b2, beta, alpha):
    # the sum of the batch's products is one product over the batch and inner dims together
    return _addmm_cpu(spec, inp, np.moveaxis(b1, 0, 1).reshape(b1.shape[1], -1), b2.reshape(-1, b2.shape[2]),
                      beta, alpha)


_ADD_FORMS = ("function", "method", "inplace", "out")
defop(f"addmv(Tensor self, Tensor mat, Tensor vec, *, {_SCALED}) -> Tensor", meta=_addmv_meta, cpu=_addmm_cpu,
      kind="matmul", variants=_ADD_FORMS,
      doc="``beta * self + alpha * (mat @ vec)``; ``self`` broadcasts and is ignored when ``beta`` is 0.")
defop(f"addr(Tensor self, Tensor vec1, Tensor vec2, *, {_SCALED}) -> Tensor", meta=_addr_meta, cpu=_addr_cpu,
      kind="matmul", variants=_ADD_FORMS,
      doc="``beta * self + alpha * outer(vec1, vec2)``, with type promotion; ``self`` is ignored when ``beta`` is 0.")
defop(f"addbmm(Tensor self, Tensor batch1, Tensor batch2, *, {_SCALED}) -> Tensor", meta=_addbmm_meta,
      cpu=_addbmm_cpu, kind="matmul", variants=_ADD_FORMS,
      doc="``beta * self + alpha * sum_b(batch1[b] @ batch2[b])``; ``self`` broadcasts to the product.")


# trace, kron, inner, tensordot, chain_matmul, matrix_power: composites of the products ---------------------

def _trace(x):
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    _no_kernel("trace", x.dtype)
    return x.diagonal().sum()


defop("trace(Tensor self) -> Tensor", composite=_trace,
      doc="Sum of the main diagonal of a matrix; integers sum as int64.")


def _kron(a, b):
    n = max(a.ndim, b.ndim)
    sa, sb = (1,) * (n - a.ndim) + tuple(a.shape), (1,) * (n - b.ndim) + tuple(b.shape)
    # result[i * sb + j] = a[i] * b[j]: a's dims interleaved with size-1 dims, broadcast against b's
    left = a.reshape([d for s in sa for d in (s, 1)])
    right = b.reshape([d for s in sb for d in (1, s)])
    return left.mul(right).reshape([x * y for x, y in zip(sa, sb)])


defop("kron(Tensor self, Tensor other) -> Tensor", composite=_kron, variants=("function", "method", "out"),
      doc="Kronecker product: ``result[i * other.shape + j] = self[i] * other[j]``, dims aligned from the right.")


def _tensordot_dims(a, b, dims):
    """(dims of a, dims of b) to contract, from torch.tensordot's ``dims`` (a count or two lists)."""
    if isinstance(dims, registry.Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        return list(range(a.ndim - dims, a.ndim)), list(range(dims))
    da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    return da, db


def _tensordot(a, b, dims):
    if a.dtype is not b.dtype:
        raise RuntimeError("both inputs should have same dtype")
    da, db = _tensordot_dims(a, b, dims)
    da, db = [wrap_dim(d, a.ndim) for d in da], [wrap_dim(d, b.ndim) for d in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            if a.shape[x] != 1 and b.shape[y] != 1:
                raise RuntimeError(f"contracted dimensions need to match, but first has size {a.shape[x]} in dim {x} "
                                   f"and second has size {b.shape[y]} in dim {y}")
            # a size-1 dim broadcasts against the other's, as torch's
            if a.shape[x] == 1:
                a = a.expand([b.shape[y] if d == x else n for d, n in enumerate(a.shape)])
            else:
                b = b.expand([a.shape[x] if d == y else n for d, n in enumerate(b.shape)])
    keep_a = [d for d in range(a.ndim) if d not in da]
    keep_b = [d for d in range(b.ndim) if d not in db]
    k = prod(a.shape[d] for d in da)
    left = a.permute(keep_a + da).reshape(prod(a.shape[d] for d in keep_a), k)
    right = b.permute(db + keep_b).reshape(k, prod(b.shape[d] for d in keep_b))
    shape = [a.shape[d] for d in keep_a] + [b.shape[d] for d in keep_b]
    if left.shape[0] == 1 and right.shape[1] == 1:
        # torch's product of one element is a dot, which CPU autocast leaves in the inputs' dtype, where mm's is cast
        return left.reshape(-1).dot(right.reshape(-1)).reshape(shape)
    return left.mm(right).reshape(shape)


defop("tensordot(Tensor a, Tensor b, Any dims=2) -> Tensor", composite=_tensordot, variants=("function", "out"),
      out_copies=lambda args: True,  # (torch's out= form: the result copy_-ed)
      out_functional=lambda args: "tensordot",
      out_resize_error="tensordot(): the 'out' tensor was specified and requires gradients, and its shape does not "
                       "match the expected result. Either remove the 'out' argument, ensure it does not require "
                       "gradients, or make sure its shape matches the expected output.",
      doc="Contraction of ``a``'s last ``dims`` dims with ``b``'s first (``dims`` a count), or of the dims two "
          "lists name.")


def _inner(a, b):
    if a.ndim == 0 or b.ndim == 0:
        return a.mul(b)
    if a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list_str(a.shape)} and {list_str(b.shape)}")
    return _tensordot(a, b, ([-1], [-1]))


# torch's out= forms: inner's a 0-d operand's mul, else tensordot's result copy_-ed; matrix_power's matmul, and
# its power 0 or 1 copy_-ed
defop("inner(Tensor self, Tensor other) -> Tensor", composite=_inner, variants=("function", "method", "out"),
      out_copies=lambda args: args[0].ndim > 0 and args[1].ndim > 0, out_guard_name=lambda args: "mul",
      out_functional=lambda args: "tensordot" if args[0].ndim > 0 and args[1].ndim > 0 else None,
      doc="Sum of products over the last dims (a product with a 0-d tensor when one is 0-d).")


def _chain_matmul(matrices):
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for m in matrices:
        if m.ndim != 2:
            raise RuntimeError(f"Tensor dimension is {m.ndim}, expected 2 instead.")
    if len(matrices) == 1:
        return matrices[0].clone()
    result = matrices[0]
    for m in matrices[1:]:
        result = result.mm(m)
    return result


defop("chain_matmul(Tensor... matrices) -> Tensor", composite=_chain_matmul, variants=("function", "out"),
      out_copies=lambda args: len(args[0]) == 1, out_guard_name=lambda args: "mm",  # (torch's: one matrix copied)
      doc="Product of two or more matrices, left to right.")


def _matrix_power(a, n):
    if a.ndim < 2:
        raise RuntimeError("linalg.matrix_power: The input tensor A must have at least 2 dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, but they are "
                           f"{a.shape[-2]} by {a.shape[-1]} matrices")
    if n == 0:
        # torch copies the identity into a clone of ``a``: a result with ``a``'s history (a zero gradient)
        eye = registry.FUNCTIONS["eye"](a.shape[-1], dtype=a.dtype, device=a.device)
        return a.clone(memory_format=contiguous_format).copy_(eye.expand(tuple(a.shape)))
    if n < 0:
        a, n = registry.FUNCTIONS["inverse"](a), -n
    # binary powering: the squares of a, multiplied where n has a bit
    result, square = None, a
    while True:
        if n & 1:
            result = square if result is None else result.matmul(square)
        n >>= 1
        if not n:
            return result.clone(memory_format=contiguous_format) if result is a else result  # (torch's layout)
        square = square.matmul(square)


defop("matrix_power(Tensor self, int n) -> Tensor", composite=_matrix_power, variants=("function", "method", "out"),
      out_copies=lambda args: args[1] in (0, 1),
      doc="``n``-th power of a square matrix (or of each of a batch); 0 gives the identity, a negative ``n`` a "
          "power of the inverse.")


def _cross_dim(x, other, dim):
    """torch.cross's dim: the one given, else (deprecated, with torch's warning once per process) the first of
    size 3."""
    if dim is not None:
        return dim
    # once per process, as torch's (its first call warned eagerly, but a compiled graph's only at its trace)
    warn_once("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
              "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree with "
              "that of linalg.cross in a future release.", stacklevel=4)
    shape = broadcast_shapes(tuple(x.shape), tuple(other.shape))
    found = next((d for d, n in enumerate(shape) if n == 3), None)
    if found is None:
        raise RuntimeError("no dimension of size 3 in input")
    return found


def _cross(x, other, dim):
    if x.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    dim = _cross_dim(x, other, dim)
    if x.shape[dim] != 3 or other.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {x.shape[dim]} and "
                           f"{other.shape[dim]}")
    a, b = functions.broadcast_tensors(x, other)
    a0, a1, a2 = a.unbind(dim)
    b0, b1, b2 = b.unbind(dim)
    return functions.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], dim)


defop("cross(Tensor self, Tensor other, int? dim=None) -> Tensor", composite=_cross, kind="matmul",
      variants=("function", "method", "out"),
      doc="Cross products of the 3-vectors along ``dim`` (broadcast); without ``dim``, the first dim of size 3.")

