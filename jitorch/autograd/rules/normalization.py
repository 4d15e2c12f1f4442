"""Derivative rule of ``layer_norm`` (jitorch/ops/normalization.py), in closed form.

With ``xhat = (x - mean) * rstd`` over the normalized dims and ``gy`` the output gradient times the weight:
``dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))``, ``dweight = sum(g * xhat)`` and ``dbias = sum(g)``
over the leading dims. Written with ops, so that it differentiates again; the statistics are recomputed from
the saved input, as torch's ``native_layer_norm_backward`` reads its saved mean and rstd.
"""

from __future__ import annotations

import math

import numpy as np

from ...ops import functions as jt
from ...ops import registry
from ...ops.reductions import moments
from ...runtime import dtypes as _dt
from ...runtime import fp_errors
from ...runtime.autocast_mode import STATE as _AUTOCAST
from ...runtime.grad_mode import is_grad_enabled
from ...runtime.summation import add_reduce

from ..rule import defgrad, differentiates, reads
from .common import wanted


def _plain_arrays(g, a):
    """``(g, input, weight)`` as arrays when the rule may run on them directly: no recording backward
    (create_graph), dispatch hook (a trace or a profile sees the ops) or autocast, and C-contiguous CPU float32
    or float64 tensors of one dtype (NumPy's sums then add in the ops' order); else None."""
    x, w = a.input, a.weight
    if is_grad_enabled() or registry.DISPATCH_HOOKS or _AUTOCAST.key is not None:
        return None
    arrays = []
    for t in (g, x, w):
        if t is None:
            arrays.append(None)
            continue
        if (t.__class__ is not registry.Tensor or t.device.type != "cpu" or t.dtype is not x.dtype
                or x.dtype not in (_dt.float32, _dt.float64) or t._storage._data is None):
            return None
        arr = t._array()
        if not arr.flags.c_contiguous:
            return None
        arrays.append(arr)
    return arrays


def _layer_norm_arrays(g, x, w, eps, k, want):
    """The rule below on arrays, each op's NumPy kernel in its order (var_mean's, sub's, rsqrt's, the
    means' and sums'), for the gradients named in ``want``: the same bits without ~16 dispatches."""
    axis = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))
    n = math.prod(x.shape[d] for d in axis)
    dev = x - add_reduce(x, axis, True) / n  # var.correction's kernel, correction 0
    var = add_reduce(dev * dev, axis, True) / n
    mean = add_reduce(x, axis, True) / n
    rstd = np.reciprocal(np.sqrt(np.add(var, eps)))
    xhat = np.multiply(np.subtract(x, mean), rstd)
    grads = {}
    if "input" in want:
        gy = g if w is None else np.multiply(g, w)
        inner = np.subtract(gy, add_reduce(gy, axis, True) / n)
        inner = np.subtract(inner, np.multiply(xhat, add_reduce(np.multiply(gy, xhat), axis, True) / n))
        grads["input"] = np.multiply(inner, rstd)
    if "weight" in want:
        grads["weight"] = add_reduce(np.multiply(g, xhat), lead) if lead else np.multiply(g, xhat)
    if "bias" in want:
        grads["bias"] = add_reduce(g, lead) if lead else g.copy()
    return grads


def _layer_norm(g, a, out):
    x = a.input
    arrays = _plain_arrays(g, a)
    if arrays is not None:
        want = {name for name in ("input", "weight", "bias") if getattr(a, name) is not None and wanted(getattr(a, name))}
        token = fp_errors.enter()
        try:
            grads = _layer_norm_arrays(*arrays, a.eps, len(a.normalized_shape), want)
        finally:
            fp_errors.leave(token)
        return {name: registry.Tensor._fresh(np.ascontiguousarray(v), x.dtype) for name, v in grads.items()}
    dims = list(range(x.ndim - len(a.normalized_shape), x.ndim))
    lead = list(range(x.ndim - len(a.normalized_shape)))
    var, mean = moments(x, dims, 0, True)
    rstd = (var + a.eps).rsqrt()
    xhat = (x - mean) * rstd
    grads = {}
    if wanted(x):
        gy = g if a.weight is None else g * a.weight
        inner = gy - gy.mean(dims, keepdim=True) - xhat * (gy * xhat).mean(dims, keepdim=True)
        grads["input"] = inner * rstd
    if a.weight is not None and wanted(a.weight):
        grads["weight"] = (g * xhat).sum(lead) if lead else g * xhat
    if a.bias is not None and wanted(a.bias):
        grads["bias"] = g.sum(lead) if lead else g
    return grads


# (the bias is saved unread, as torch's native_layer_norm node saves it: a write into it before the backward raises)
defgrad("layer_norm", differentiates("input weight bias", reads("input weight bias", _layer_norm)))
