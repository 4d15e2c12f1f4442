"""``layer_norm`` as one op: torch's ``aten::layer_norm``.

Composed of ops, an eager layer norm ran seven of them forward (``var_mean``, ``sub``, ``add``, ``rsqrt``,
``mul``, ``mul``, ``add``) and recorded as many autograd nodes, each differentiated on its own. One op runs
the same arithmetic as a few NumPy passes over the rows, and its derivative rule
(autograd/rules/normalization.py) is the closed form. Half types compute in float32 and round once, as
torch's kernel. ``nn.functional.layer_norm`` calls it in eager code on CPU and stays composed in a traced
step, where the composed ops fuse into the neighbouring kernels (the op has no lowering of its own).
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors, threads
from ..runtime.device import CPU
from ..runtime.summation import add_reduce
from . import registry
from .meta import opmath
from .registry import TensorSpec, defop, scalar_name


def check_layer_norm(input, normalized_shape, weight, bias):
    """torch's errors for a normalized shape the input does not end with, or parameters of another shape."""
    k = len(normalized_shape)
    shape = tuple(input.shape)
    if k == 0:
        raise RuntimeError(f"Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           f"element, but got normalized_shape = {list(normalized_shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != tuple(normalized_shape):
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{list(t.shape)} and normalized_shape = {list(normalized_shape)}")
    if len(shape) < k or shape[len(shape) - k:] != tuple(normalized_shape):
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(shape)}")


def _layer_norm_meta(input, normalized_shape, weight, bias, eps, cudnn_enable):
    check_layer_norm(input, normalized_shape, weight, bias)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"LayerNormKernelImpl\" not implemented for '{scalar_name(input.dtype)}'")
    for t in (weight, bias):
        if t is not None and t.dtype is not input.dtype:
            raise RuntimeError(f"expected scalar type {scalar_name(input.dtype)} but found {scalar_name(t.dtype)}")
    return TensorSpec(input.shape, input.dtype, input.device, opmath(input.dtype))


# (NumPy dtype name, has a weight, has a bias) -> a compiled layer norm over rows of any width
# (codegen/rows.py's `LayerNormKernel`: called with the (rows, cols) array, the weight, the bias and eps) or
# None; set by the code generator, which the ops layer cannot import
LAYER_NORM_KERNEL = None
# From this many elements an eager layer norm runs that kernel: one kernel per dtype serves every shape, but
# the first call loads the code generator, which a program of tiny tensors need not pay for. One row of 128
# float32 elements: the kernel's call 3.7 µs, NumPy's passes 9.9 (a GPT's layer norms while it generates).
LAYER_NORM_KERNEL_MIN = 1 << 7


# The kernel's dtypes by NumPy dtype: a NumPy dtype's ``name`` is a Python property (1.9 µs, an eager layer
# norm's largest step after the kernel)
_KERNEL_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


# (NumPy dtype name, has a weight, has a bias) -> (the LAYER_NORM_KERNEL that gave it, its kernel or None): the
# registered function's answer, asked once per key (it takes a lock and an import each call: 0.5 µs of a 3 µs
# kernel call), asked again after LAYER_NORM_KERNEL changes
_KERNELS: dict = {}


def _by_kernel(name, rows, weight, bias, eps):
    """The layer norm kernel's result on C-contiguous ``rows`` (2-D) of NumPy dtype ``name``, with ``weight`` and
    ``bias`` (C-contiguous arrays of that dtype, or None) flattened, in ``rows``' shape; None where no kernel is
    registered for them or none can be built (the caller runs NumPy's passes). Its arithmetic needs NumPy's
    floating-point error state no more than the kernel does: callers need not silence it."""
    key = (name, weight is not None, bias is not None)
    made = _KERNELS.get(key)
    if made is None or made[0] is not LAYER_NORM_KERNEL:
        if LAYER_NORM_KERNEL is None:
            return None
        made = _KERNELS[key] = (LAYER_NORM_KERNEL, LAYER_NORM_KERNEL(*key))
    kernel = made[1]
    if kernel is None:
        return None
    return kernel(rows, weight if weight is None or weight.ndim == 1 else weight.reshape(-1),
                  bias if bias is None or bias.ndim == 1 else bias.reshape(-1), eps)


def _kernel_reads(t, dtype):
    """Whether the layer norm kernel reads ``t`` (a weight or bias array, or None) as it is: C-contiguous of
    ``dtype``."""
    return t is None or t.dtype == dtype and t.flags.c_contiguous


def _layer_norm_cpu(spec, x, normalized_shape, weight, bias, eps, cudnn_enable):
    if x.size == 0:
        return np.empty(x.shape, spec.dtype.np)
    c = spec.compute.np
    width = math.prod(normalized_shape)
    rows = x.reshape(-1, width)
    if rows.dtype != c:  # (tested first: ``astype(copy=False)`` of the same dtype costs 0.15 µs)
        rows = rows.astype(c)
    name = _KERNEL_DTYPES.get(c)
    if (LAYER_NORM_KERNEL is not None and name is not None and rows.size >= LAYER_NORM_KERNEL_MIN
            and rows.flags.c_contiguous and _kernel_reads(weight, c) and _kernel_reads(bias, c)):
        out = _by_kernel(name, rows, weight, bias, eps)
        if out is not None:
            if out.shape != x.shape:
                out = out.reshape(x.shape)
            return out if out.dtype == spec.dtype.np else out.astype(spec.dtype.np)
    n = c.type(width)
    out = np.empty(rows.shape, c)
    weight = None if weight is None else weight.reshape(-1).astype(c, copy=False)
    bias = None if bias is None else bias.reshape(-1).astype(c, copy=False)
    # (by rows on the thread team where large: each row's passes are the whole call's)
    threads.by_rows(_normalized_rows, rows, out, n, c.type(eps), weight, bias)
    return out.reshape(x.shape).astype(spec.dtype.np, copy=False)


def _normalized_rows(rows, out, n, eps, weight, bias):
    """``out``: the rows of 2-D ``rows`` (of ``n`` elements each) normalised, scaled by ``weight`` and shifted by
    ``bias`` (1-D, or None)."""
    # two passes, as eager's var_mean: the mean, then the mean square deviation from it
    np.subtract(rows, add_reduce(rows, 1, True) / n, out=out)
    var = np.einsum("ij,ij->i", out, out)[:, None] / n
    out *= 1 / np.sqrt(var + eps)
    if weight is not None:
        out *= weight
    if bias is not None:
        out += bias


_FAST_SPECS = {d: TensorSpec(None, d, CPU, d) for d in (_dt.float32, _dt.float64)}


def _layer_norm_fast(args, record=True):
    """`registry.OpDef.fast` of ``layer_norm``: CPU float32 or float64 tensors of one dtype whose shapes agree,
    normalised by `_layer_norm_cpu` without the general path's conversion, meta rule and wrapping; None (the
    general path, which raises the errors and records the backward node) for anything else, and for tensors
    that require grad while grad mode records it."""
    x, normalized, weight, bias, eps = args[:5]
    Tensor = registry.Tensor
    if not isinstance(x, Tensor) or x.device is not CPU or eps.__class__ is not float and eps.__class__ is not int:
        return None
    spec = _FAST_SPECS.get(x.dtype)
    if normalized.__class__ is int:
        normalized = (normalized,)
    elif normalized.__class__ is list or normalized.__class__ is tuple:
        for n in normalized:  # (a loop, not ``all`` of a generator: 0.3 µs less on a model's every layer norm)
            if n.__class__ is not int:  # (the converter refuses bools and takes NumPy's ints)
                return None
        if normalized.__class__ is list:
            normalized = tuple(normalized)
    else:
        return None
    shape = x._shape
    k = len(normalized)
    if spec is None or not k or len(shape) < k or shape[len(shape) - k:] != normalized or 0 in shape:
        return None
    grad = x._requires_grad
    arrays = [x._arr if x._arr is not None else x._array()]
    for t in (weight, bias):
        if t is not None:
            if (not isinstance(t, Tensor) or t.dtype is not x.dtype or t.device is not CPU
                    or t._shape != normalized):
                return None
            grad = grad or t._requires_grad
            arrays.append(t._arr if t._arr is not None else t._array())
        else:
            arrays.append(None)
    if grad and registry.records_grad():
        return None
    strides = _CONTIGUOUS.get(shape)
    if (strides is not None and x._stride == strides and arrays[0].size >= LAYER_NORM_KERNEL_MIN
            and LAYER_NORM_KERNEL is not None and (weight is None or weight._stride == _CONTIGUOUS.get(normalized))
            and (bias is None or bias._stride == _CONTIGUOUS.get(normalized))):
        # (`_layer_norm_cpu`'s kernel call, its tests answered by the tensors' geometry: C-contiguous arrays of
        # ``x``'s dtype; the result, in the rows' shape, C-contiguous)
        rows = arrays[0]
        out = _by_kernel(_KERNEL_NAMES[x.dtype], rows.reshape(-1, math.prod(normalized)) if k != 1 or len(shape) != 2
                         else rows, arrays[1], arrays[2], eps)
        if out is not None:
            return Tensor._fresh(out if len(shape) == 2 else out.reshape(shape), x.dtype, shape, strides)
    token = fp_errors.enter()
    try:
        out = _layer_norm_cpu(spec, arrays[0], normalized, arrays[1], arrays[2], eps, True)
    finally:
        fp_errors.leave(token)
    return Tensor._fresh(out, x.dtype)


_CONTIGUOUS = registry.CONTIGUOUS_STRIDES
_KERNEL_NAMES = {_dt.float32: "float32", _dt.float64: "float64"}


_op = defop("layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, "
      "bool cudnn_enable=True) -> Tensor", meta=_layer_norm_meta, cpu=_layer_norm_cpu,
      variants=("function",),
      doc="``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing dims ``normalized_shape`` (biased "
          "variance); half types compute in float32.")
_op.fast = _layer_norm_fast
