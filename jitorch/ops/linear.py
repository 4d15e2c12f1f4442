"""``linear`` as one op: torch's ``aten::linear``, ``input @ weight.T + bias``.

Composed, an eager linear layer is a ``matmul`` of ``weight.t()`` and an ``add``: two ops and two autograd
nodes per layer. As one op its batch dims fold into the rows of one matrix product, and its derivative rule
(autograd/rules/linear.py) computes the weight's gradient in the weight's own layout.
``nn.functional.linear`` calls it in eager code on CPU for a 2-d weight and stays composed in a traced step,
where the bias add fuses into its consumers (the op has no lowering of its own).
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime.device import CPU
from . import registry
from .linalg import array_product
from .meta import opmath
from .registry import TensorSpec, defop, scalar_name


def _linear_meta(input, weight, bias):
    if weight.ndim != 2 or input.ndim == 0:
        raise RuntimeError(f"linear: expected a 2-D weight and an input of at least 1 dim, got weight of shape "
                           f"{list(weight.shape)} and input of shape {list(input.shape)}")
    rows = input.shape[-2] if input.ndim > 1 else 1
    if input.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{input.shape[-1]} and "
                           f"{weight.shape[1]}x{weight.shape[0]})")
    if bias is not None and tuple(bias.shape) not in ((), (weight.shape[0],)):
        raise RuntimeError(f"linear: expected a bias of shape [{weight.shape[0]}] or [], got {list(bias.shape)}")
    for t in (weight, bias):
        if t is not None and t.dtype is not input.dtype:
            raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {scalar_name(input.dtype)} and "
                               f"{scalar_name(t.dtype)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"addmm_impl_cpu_\" not implemented for '{scalar_name(input.dtype)}'")
    return TensorSpec(tuple(input.shape[:-1]) + (weight.shape[0],), input.dtype, input.device, opmath(input.dtype))


def _linear_cpu(spec, x, weight, bias):
    c, result = spec.compute.np, spec.dtype.np
    # (the rows counted: NumPy cannot infer -1 rows of an empty input with no features)
    out = array_product(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]).astype(c, copy=False),
                        weight.T.astype(c, copy=False))
    if bias is not None:
        # half types: the product rounded, then the sum, as the composed matmul and add (torch's CPU linear
        # of a vector or a strided batch)
        out = out.astype(result, copy=False).astype(c, copy=False)
        out += bias.astype(c, copy=False)
    return out.reshape(spec.shape).astype(result, copy=False)


_FAST_DTYPES = (_dt.float32, _dt.float64)


def _linear_fast(args, record=True):
    """`registry.OpDef.fast` of ``linear``: the product of CPU float32 or float64 tensors of one dtype whose
    shapes agree, computed as `_linear_cpu` computes it, without the general path's conversion, meta rule
    and wrapping, its backward node recorded as `registry.record_fast` records it where a tensor requires grad in
    grad mode (None there if not ``record``); None (the general path, which raises the errors) for anything else.
    Each layer of a model's eager forward calls it, where the general path cost more than the product of a few
    rows (in a training step too: session 54)."""
    x, weight, bias = args
    Tensor = registry.Tensor
    if not (isinstance(x, Tensor) and isinstance(weight, Tensor)) or x.device is not CPU or weight.device is not CPU:
        return None
    dtype = x.dtype
    shape, wshape = x._shape, weight._shape
    if (weight.dtype is not dtype or dtype not in _FAST_DTYPES or len(wshape) != 2 or not shape
            or shape[-1] != wshape[1]):
        return None
    grad = x._requires_grad or weight._requires_grad
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.dtype is not dtype or bias.device is not CPU or bias._shape != wshape[:1]:
            return None
        grad = grad or bias._requires_grad
    grad = grad and registry.records_grad()
    if grad and not record:
        return None
    xa = x._arr if x._arr is not None else x._array()
    wa = weight._arr if weight._arr is not None else weight._array()
    token = fp_errors.enter()
    try:
        out = array_product(xa if len(shape) == 2 else xa.reshape(math.prod(shape[:-1]), shape[-1]), wa.T)
        if bias is not None:
            out += bias._arr if bias._arr is not None else bias._array()
    finally:
        fp_errors.leave(token)
    result = Tensor._fresh(out if len(shape) == 2 else out.reshape(shape[:-1] + wshape[:1]), dtype)
    return registry.record_fast(_op, args, result) if grad else result


_op = defop("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", meta=_linear_meta, cpu=_linear_cpu,
            variants=(), doc="``input @ weight.T + bias`` for a 2-D weight, the input's leading dims kept.")
_op.fast = _linear_fast
