"""Gradient clipping: clip_grad_norm_ (= get_total_norm + clip_grads_with_norm_) and clip_grad_value_.

``foreach`` is accepted for torch compatibility; one implementation serves both settings. In eager code
on dense float32/float64 CPU gradients of one dtype, the norms and the scaling run on the gradients'
arrays without an op dispatch per gradient: the 2-norm's sums of squares of all gradients in one call of a
generated kernel (`_kernel_norms`: float64 sums, within a few float32 roundings of torch's), other orders
with the same NumPy calls as the norm op's kernel (so its values bit for bit), the scaling as the ``mul_``
op's kernel computes it; in a trace, under a profiler or autocast, and for other tensors, the ops run.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ...ops import registry
from ...ops.reductions import _vector_norm, numpy_axis
from ...runtime import fp_errors, profiling
from ...runtime.autocast_mode import STATE as _AUTOCAST_STATE
from ...runtime.device import CPU
from ...runtime.dtypes import float32, float64
from ...runtime.grad_mode import no_grad
from ...runtime.summation import add_reduce
from ...ops.registry import FUNCTIONS as _fn
from ...tensor import Tensor


def _as_list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _grads(parameters):
    return [p.grad for p in _as_list(parameters) if p.grad is not None]


def _numpy_arrays(tensors, written=False):
    """The NumPy arrays of ``tensors`` when the norms and the scaling may be computed on them directly as the
    ops' CPU kernels compute them: no dispatch hook (a trace, a profiler), no autocast, and every tensor a
    CPU tensor with memory, of one dtype, float32 or float64, none an inference tensor, and contiguous if
    ``written`` (no write overlaps itself). None otherwise."""
    if registry.DISPATCH_HOOKS or profiling.RECORDER is not None or _AUTOCAST_STATE.key is not None:
        return None
    dtype = tensors[0].dtype
    if dtype not in (float32, float64):
        return None
    arrays = []
    for t in tensors:
        storage = t._storage
        if t.device is not CPU or t.dtype is not dtype or storage.data is None or storage.inference:
            return None
        if written and not t.is_contiguous():
            return None
        arrays.append(t._arr if t._arr is not None else t._array())
    return arrays


def _norm(a, norm_type):
    """``a``'s norm as the norm op's kernel computes it (`_vector_norm` over every dim). Its 2-norm squares
    ``abs(a)``; squaring ``a`` itself gives the same squares bit for bit but for a NaN's sign, so the
    abs is taken only when the sum comes out NaN."""
    axis = numpy_axis(a, None)
    if norm_type != 2.0:
        return _vector_norm(a, norm_type, axis, False)
    # (an array also when ``a`` is 0-d; laid out as np.abs lays it out, which sets the order of the sum)
    m = np.square(a, out=np.empty_like(a))
    total = add_reduce(m, axis)
    if total != total:
        total = add_reduce(np.square(np.abs(a, out=m), out=m), axis)
    return total ** 0.5


def _kernel_norms(arrays):
    """The 2-norms of ``arrays`` (one float dtype), the C-contiguous ones from one call of the generated
    sum-of-squares kernel over all of them (`codegen.foreach.sum_squares_kernel`: float64 sums, where torch
    and the norm op sum float32 squares in float32, so within a few float32 roundings of theirs), the others by
    `_norm`; None where the kernel cannot be built. A float32 norm is infinite where its sum of squares
    exceeds float32's range, as torch's float32 sum overflows."""
    from ...codegen.foreach import run_blocks, sum_squares_kernel
    dtype = arrays[0].dtype
    kernel = sum_squares_kernel(dtype.name)
    if kernel is None:
        return None
    dense = [i for i, a in enumerate(arrays) if a.flags.c_contiguous]
    sums, which = run_blocks(kernel, [[arrays[i]] for i in dense], np.zeros(len(dense)))
    # (block by block, in order; a NaN's sign cleared, as the norm op's abs clears it)
    squares = np.abs(np.bincount(which, weights=sums[:, 0], minlength=len(dense)))
    wide = np.sqrt(squares)
    norms = np.empty(len(arrays), dtype)
    norms[dense] = np.where(np.isinf(squares.astype(dtype)), np.inf, wide).astype(dtype)
    for i, a in enumerate(arrays):
        if not a.flags.c_contiguous:
            norms[i] = _norm(a, 2.0)
    return norms


def _total_norm(tensors, norm_type):
    """The norm of the norms of ``tensors`` (at least one, no None): for a finite positive ``norm_type``,
    on their arrays where `_numpy_arrays` allows (the norm kernel called as the op calls it, the same
    result bit for bit, with no op dispatch per tensor), else with the ops (which raise for the
    orders that have no value on an empty tensor)."""
    arrays = _numpy_arrays(tensors) if 0 < norm_type < math.inf else None
    if arrays is None:
        norms = _fn["stack"]([t.norm(norm_type) for t in tensors])
        return norms.max() if norm_type == math.inf else norms.norm(norm_type)
    dtype = tensors[0].dtype
    token = fp_errors.enter()
    try:
        norms = _kernel_norms(arrays) if norm_type == 2.0 else None
        if norms is None:
            norms = np.array([_norm(a, norm_type) for a in arrays], dtype.np)
        total = _vector_norm(norms, norm_type, numpy_axis(norms, None), False)
    finally:
        fp_errors.leave(token)
    return Tensor._fresh(np.asarray(total, dtype.np), dtype)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all ``tensors`` together (as if concatenated into one vector)."""
    tensors = [t for t in _as_list(tensors) if t is not None]
    norm_type = float(norm_type)
    if not tensors:
        return _fn["zeros"](())
    with no_grad():
        total = _total_norm(tensors, norm_type)
    if error_if_nonfinite and not bool(total.isfinite()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients of ``parameters`` by ``min(1, max_norm / (total_norm + 1e-6))``."""
    grads = _grads(parameters)
    if not grads:
        return
    with no_grad():
        coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        arrays = _numpy_arrays([coef] + grads, written=True)
        # (a ``total_norm`` of other than 0 dims broadcasts, or fails, as the ops decide)
        if arrays is None or coef._shape or len({id(g._storage) for g in grads}) < len(grads):
            for g in grads:
                g.mul_(coef.to(g.device))
            return
        # each g.mul_(coef) as its kernel computes it, with no op dispatch per gradient
        token = fp_errors.enter()
        try:
            for g, a in zip(grads, arrays[1:]):
                np.multiply(a, arrays[0], out=a)
                g._storage._version += 1
        finally:
            fp_errors.leave(token)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Rescale the gradients of ``parameters`` in place so that their total norm is at most
    ``max_norm``; returns the total norm before clipping."""
    parameters = _as_list(parameters)
    total = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """`clip_grad_norm_`'s deprecated name (a FutureWarning, as in torch)."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient of ``parameters`` to ``[-clip_value, clip_value]`` in place."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(min=-clip_value, max=clip_value)
