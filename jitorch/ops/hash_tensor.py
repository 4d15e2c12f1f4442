"""``hash_tensor``: torch's XOR reduction of a tensor's elements as 64-bit patterns (its mode 0, the only one).

Each element is widened to its 64-bit equivalent (a float to float64, an integer or bool to int64) and its bits
read as uint64; the result is the XOR of those over the reduced dims (0 over none), of dtype uint64. No gradient.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from .meta import reduced_shape, reduction_dims
from .reductions import numpy_axis
from . import registry
from .registry import TensorSpec, defop, scalar_name


def _meta(x, dim, keepdim, mode):
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    if x.dtype in (_dt.uint16, _dt.uint32, _dt.uint64):
        raise NotImplementedError(f"\"xor_sum_cpu\" not implemented for '{scalar_name(x.dtype)}'")
    dims = reduction_dims(x, dim)
    if not dims and x.numel() == 0:  # (torch's reductions' messages, without their "()")
        raise RuntimeError("hash_tensor: Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           "reduction dim with the 'dim' argument.")
    for d in dims:
        if x.ndim and x.shape[d] == 0:
            raise IndexError(f"hash_tensor: Expected reduction dim {d} to have non-zero size.")
    return TensorSpec(reduced_shape(x.shape, dims, keepdim), _dt.uint64, x.device)


def _cpu(spec, x, dim, keepdim, mode):
    wide = np.float64 if x.dtype.kind == "f" or x.dtype in _dt.HALF_NP else np.int64
    bits = x.astype(np.float32 if x.dtype in _dt.HALF_NP else x.dtype).astype(wide).view(np.uint64)
    return np.bitwise_xor.reduce(bits, axis=numpy_axis(x, dim), keepdims=keepdim).astype(np.uint64)


def _out_check(out, *args):
    _meta(*args)  # (the input's errors first)
    if isinstance(out, registry.Tensor) and out.dtype is not _dt.uint64:
        raise RuntimeError(f"Expected result to be of dtype uint64, but got {scalar_name(out.dtype)}")


defop("hash_tensor(Tensor self, int[]? dim=None, *, bool keepdim=False, int mode=0) -> Tensor", meta=_meta,
      cpu=_cpu, kind="reduction", variants=("function", "method", "out"), out_check=_out_check,
      doc="The XOR of the elements' 64-bit patterns (floats as float64, integers as int64) over ``dim`` (every "
          "dim by default), as uint64.")
