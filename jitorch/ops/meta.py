"""Meta rules shared by many ops: broadcasting, type promotion, dims.

A meta rule reads only shapes, dtypes and devices, so it runs the same on real
tensors, meta tensors and the tracer's values.
"""

from __future__ import annotations

from numbers import Number

from ..runtime import dtypes as _dt
from ..runtime.device import CPU
from ..runtime.strided import broadcast_shapes, wrap_dim, wrap_dims
from .registry import TensorSpec, scalar_name

# Type promotion kinds, as torch's ELEMENTWISE_TYPE_PROMOTION_KIND.
DEFAULT = "default"            # promoted type of the operands
INT_TO_FLOAT = "int_to_float"  # integral or bool results become the default float dtype
ALWAYS_BOOL = "always_bool"    # comparisons: compute in the promoted type, return bool
KEEP_INT = "keep_int"          # bitwise ops: integral or bool only


def is_tensor(x):
    return hasattr(x, "_shape") or isinstance(x, TensorSpec) or hasattr(x, "shape") and not isinstance(x, Number)


def opmath(d):
    """The dtype a kernel computes in: float32 for the half types."""
    return _dt.float32 if d is _dt.float16 or d is _dt.bfloat16 else d


def pointwise_meta(op_name, promotion, operands, typed=None):
    """Shape, dtype and device of a pointwise op over tensors and Python numbers; the dtype is that of the
    ``typed`` operands (default: all of them)."""
    shapes = []
    device = None
    for x in operands:
        if isinstance(x, Number):
            continue
        shapes.append(x.shape)
        if device is None or (device.type == "cpu" and x.ndim == 0):
            device = x.device
    if not shapes:
        raise TypeError(f"{op_name}(): expected at least one Tensor argument")
    shape = shapes[0] if len(shapes) == 1 else broadcast_shapes(*shapes)
    common = _dt.result_type(*(operands if typed is None else typed))
    if promotion == DEFAULT:
        return TensorSpec(shape, common, device, opmath(common))
    if promotion == INT_TO_FLOAT:
        out = common if common.is_floating_point else _dt.get_default_dtype()
        return TensorSpec(shape, out, device, opmath(out))
    if promotion == ALWAYS_BOOL:
        # compared in the common dtype itself, halves included: exact, and operands round to it as in torch
        return TensorSpec(shape, _dt.bool, device, common)
    if promotion == KEEP_INT:
        if common.is_floating_point:
            raise NotImplementedError(f'"{op_name}_cpu" not implemented for \'{scalar_name(common)}\'')
        return TensorSpec(shape, common, device, common)
    raise ValueError(f"unknown promotion kind {promotion}")


def reduced_shape(shape, dims, keepdim):
    """Shape after reducing ``dims`` (already wrapped); all dims when ``dims`` is empty."""
    if dims is None or len(dims) == 0:
        dims = range(len(shape))
    dims = set(dims)
    if keepdim:
        return tuple(1 if i in dims else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in dims)


def reduction_dims(x, dim):
    """Wrap a dim argument (None, int or tuple) of a reduction; () means all dims."""
    if dim is None:
        return ()
    if isinstance(dim, int):
        dim = (dim,)
    return wrap_dims(dim, x.ndim)


__all__ = ["DEFAULT", "INT_TO_FLOAT", "ALWAYS_BOOL", "KEEP_INT", "pointwise_meta", "reduced_shape",
           "reduction_dims", "opmath", "wrap_dim", "wrap_dims", "broadcast_shapes", "TensorSpec", "CPU"]
