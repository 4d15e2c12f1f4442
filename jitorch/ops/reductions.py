"""Reductions over dims: sums, means, extremes, statistics, scans and softmax."""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from .meta import reduced_shape, reduction_dims
from .registry import TensorSpec, defop


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dtype
    return _dt.int64 if not x.dtype.is_floating_point else x.dtype


def _sum_meta(x, dim, keepdim, dtype):
    dims = reduction_dims(x, dim)
    return TensorSpec(reduced_shape(x.shape, dims, keepdim), _sum_dtype(x, dtype), x.device)


def _axis(x, dim):
    if dim is None or len(dim) == 0:
        return None
    return tuple(d % x.ndim for d in dim) if x.ndim else None


def _sum_cpu(spec, x, dim, keepdim, dtype):
    acc = np.float32 if spec.dtype in (_dt.float16, _dt.bfloat16) else spec.dtype.np
    return np.sum(x, axis=_axis(x, dim), keepdims=keepdim, dtype=acc)


defop("sum(Tensor self, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
      meta=_sum_meta, cpu=_sum_cpu, kind="reduction", variants=("function", "method", "out"),
      doc="Sum over ``dim`` (all dims by default); integers and bools sum as int64.")
