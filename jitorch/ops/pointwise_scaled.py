"""Pointwise ops of three tensors with a Python-number multiplier: ``addcmul`` and ``addcdiv``.

torch computes ``self + value * tensor1 * tensor2`` (``/ tensor2``) left to right in the
promoted dtype (float32 for the half types; ``addcmul`` of float32 fuses its last multiply-add), with
``value`` converted to that dtype first:
an integer computation truncates a float ``value`` toward zero, and wraps as the dtype does.
"""

from __future__ import annotations

import math
from numbers import Number

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.casts import convert
from .meta import DEFAULT, opmath
from .pointwise_base import check_fits, defpointwise, scalar_in
from .registry import scalar_name

_ADDCDIV_INTEGERS = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a true "
    "division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + value * "
    "torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
    "for float inputs. The future addcdiv behavior is just the latter implementation: (input + value * "
    "tensor1 / tensor2), for all dtypes.")


def multiplier(value, dtype):
    """``value`` as torch's kernels read it in the compute ``dtype`` (``Scalar.to<scalar_t>()``): a NumPy
    scalar, truncated toward zero and wrapped for integer dtypes."""
    if dtype.is_floating_point:
        return scalar_in(value, dtype.np)  # (an int beyond 2**53 rounded once, as torch converts it)
    whole = value if isinstance(value, int) else math.trunc(value)
    return convert(np.array(whole), dtype.np)[()]


def _check(name):
    def check(spec, x, tensor1, tensor2, value):
        for position, arg, v in ((1, "input", x), (2, "tensor1", tensor1), (3, "tensor2", tensor2)):
            if isinstance(v, Number):
                raise TypeError(f"{name}(): argument '{arg}' (position {position}) must be Tensor, "
                                f"not {type(v).__name__}")
        if name == "addcdiv" and not tensor1.dtype.is_floating_point and not tensor2.dtype.is_floating_point:
            raise RuntimeError(_ADDCDIV_INTEGERS)
        if spec.dtype is _dt.bool:
            raise NotImplementedError(f"\"{name}_cpu_out\" not implemented for '{scalar_name(spec.dtype)}'")
        check_fits(value, opmath(spec.dtype))  # (torch converts value to the dtype its kernel computes in)
    return check


def _addcmul(x, tensor1, tensor2, value):
    scaled = multiplier(value, _dt.to_dtype(x.dtype)) * tensor1
    if x.dtype != np.float32:
        return x + scaled * tensor2
    # torch's float kernel fuses the last multiply and add (an FMA): in float64 the product of two float32
    # values is exact, so the sum is rounded once, as an FMA rounds it
    return (x.astype(np.float64) + scaled.astype(np.float64) * tensor2).astype(np.float32)


def _addcdiv(x, tensor1, tensor2, value):
    return x + multiplier(value, _dt.to_dtype(x.dtype)) * tensor1 / tensor2


for _name, _formula, _what in (("addcmul", _addcmul, "value * tensor1 * tensor2"),
                               ("addcdiv", _addcdiv, "value * tensor1 / tensor2")):
    defpointwise(f"{_name}(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor", _formula,
                 DEFAULT, check=_check(_name),
                 doc=f"``self + {_what}`` elementwise, broadcast and promoted; ``value`` is converted to the "
                     "result dtype first (truncated for integers).")
