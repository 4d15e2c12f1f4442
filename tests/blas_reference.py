"""The product the chosen BLAS computes (`jitorch.runtime.blas_library`), for tests that compare jitorch's products
bit for bit: NumPy's matmul where OpenBLAS is chosen (NumPy's own), and where MKL is chosen for a product that
the rule gives MKL (a matrix product that NumPy would make as one gemm call, of a shape, dtype and transposes
that `blas_library.mkl_shape` takes), MKL's cblas gemm called here with ctypes through its LP64 entry points (32-bit
integers: another entry than jitorch's), with the transposes NumPy's matmul would pass; NumPy's for the rest (a
batch of several matrices, a vector or one-term product, a matrix times its own transpose, a small product, a shape
the rule gives OpenBLAS)."""

import ctypes

import numpy as np

from jitorch.runtime import blas_library

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _layout(x):
    """(transpose, leading dimension) of a matrix laid out in rows or columns, or None."""
    item = x.itemsize
    if x.strides[1] == item and x.strides[0] % item == 0 and x.strides[0] // item >= x.shape[1]:
        return _NO_TRANS, x.strides[0] // item
    if x.strides[0] == item and x.strides[1] % item == 0 and x.strides[1] // item >= x.shape[0]:
        return _TRANS, x.strides[1] // item
    return None


def _gemm(a, b, mkl):
    """``a @ b`` (2-D, one float dtype) as the LP64 cblas call of MKL where ``mkl``, or NumPy's where not or where
    NumPy makes no gemm call."""
    (m, k), n = a.shape, b.shape[1]
    la, lb = _layout(a), _layout(b)
    own_transpose = (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                     and a.strides == b.strides[::-1])
    if min(m, k, n) < 2 or la is None or lb is None or own_transpose or not mkl:
        return np.matmul(a, b)
    lib = blas_library.mkl_library()
    real = ctypes.c_float if a.dtype == np.float32 else ctypes.c_double
    fn = lib.cblas_sgemm if a.dtype == np.float32 else lib.cblas_dgemm
    fn.argtypes = [ctypes.c_int] * 6 + [real, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, real,
                                        ctypes.c_void_p, ctypes.c_int]
    out = np.empty((m, n), a.dtype)
    fn(_ROW_MAJOR, la[0], lb[0], m, n, k, 1.0, a.ctypes.data, la[1], b.ctypes.data, lb[1], 0.0, out.ctypes.data, n)
    return out


def chosen_matmul(a, b):
    """``np.matmul(a, b)`` as the chosen BLAS computes it (see the module's doc); MKL's product of at least
    ``SPLIT_MIN_WORK`` multiply-adds in the parts ``ops.linalg.mkl_parts`` gives, whatever the thread count: by
    rows where it has as many rows as columns, else by columns, each part a gemm call of its own."""
    from jitorch.ops.linalg import SPLIT_MIN_WORK, mkl_parts
    from jitorch.runtime.threads import bounds
    a, b = np.asarray(a), np.asarray(b)
    if (blas_library.chosen() == blas_library.OPENBLAS or a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype
            or a.dtype not in (np.float32, np.float64)
            or a.size != a.shape[-2] * a.shape[-1] or b.size != b.shape[-2] * b.shape[-1]):
        return np.matmul(a, b)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    a, b = a.reshape(a.shape[-2:]), b.reshape(b.shape[-2:])
    (m, k), n = a.shape, b.shape[1]
    la, lb = _layout(a), _layout(b)
    mkl = blas_library.mkl_shape(a.dtype, m, k, n, la is not None and la[0] == _TRANS,
                                 lb is not None and lb[0] == _TRANS)
    if not mkl or m * k * n < SPLIT_MIN_WORK:
        return _gemm(a, b, mkl).reshape(shape)
    parts = mkl_parts(m, n, m * k * n)
    if m >= n:
        return np.concatenate([_gemm(a[lo:hi], b, True) for lo, hi in bounds(m, parts)]).reshape(shape)
    return np.concatenate([_gemm(a, b[:, lo:hi], True) for lo, hi in bounds(n, parts)], 1).reshape(shape)
