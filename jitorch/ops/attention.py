"""Eager scaled dot-product attention without history: the arithmetic of ``nn.functional``'s composition.

``scaled_dot_product_attention`` is composed of ops (``matmul``, ``mul``, ``masked_fill``, ``softmax``,
``matmul``) so that autograd differentiates it and a trace fuses it. Where no history is recorded (under
``no_grad``, as in sampling from a model) the composition's dispatch cost more than its arithmetic on a few
rows: `attention_fast` runs the same NumPy kernels in the same order on the arrays, so its result is the
composition's, bit for bit, and makes one tensor.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime.device import CPU
from . import registry
from .linalg import array_product
from .reductions import _softmax

_FAST_DTYPES = (_dt.float32, _dt.float64)
_FUTURES: dict = {}  # (L, S) -> the bool mask of the keys after each query (``triu(1)`` of ones)


def _future(L, S):
    mask = _FUTURES.get((L, S))
    if mask is None:
        if len(_FUTURES) >= 256:  # (a bound: sizes that vary without end make new ones)
            _FUTURES.clear()
        mask = _FUTURES[L, S] = np.triu(np.ones((L, S), bool), 1)
    return mask


def attention_fast(query, key, value, is_causal, scale):
    """``softmax(query @ key^T * scale, masked to the past if is_causal) @ value`` as a new tensor, for CPU
    float32 or float64 tensors of one dtype, of one batch shape and at least one element, none of which
    requires grad while grad mode records it; None for anything else (the caller composes the ops, which
    raise the errors). The caller checks that no dispatch hook and no autocast is on."""
    Tensor = registry.Tensor
    if not (isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor)):
        return None
    dtype = query.dtype
    q, k, v = query._shape, key._shape, value._shape
    if (dtype not in _FAST_DTYPES or key.dtype is not dtype or value.dtype is not dtype or query.device is not CPU
            or key.device is not CPU or value.device is not CPU or len(q) < 2 or len(k) != len(q)
            or len(v) != len(q) or q[:-2] != k[:-2] or k[:-2] != v[:-2] or q[-1] != k[-1] or k[-2] != v[-2]
            or 0 in q or 0 in k or 0 in v):
        return None
    if scale.__class__ is not float or (
            (query._requires_grad or key._requires_grad or value._requires_grad) and registry.records_grad()):
        return None
    token = fp_errors.enter()
    try:
        scores = array_product(query._array(), key._array().swapaxes(-2, -1))
        scores *= scale  # (``mul``'s kernel: NumPy's multiply by a Python float, in the tensors' dtype)
        if is_causal:
            np.copyto(scores, -np.inf, where=_future(q[-2], k[-2]))
        out = array_product(_softmax(scores, scores.ndim - 1), value._array())
    finally:
        fp_errors.leave(token)
    return registry.contiguous_result(out, dtype)
