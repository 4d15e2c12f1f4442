"""Scaled dot-product attention: the eager arithmetic of ``nn.functional``'s composition without history,
and the fused op ``_attention`` (with its backward ``_attention_backward``) that training takes.

``scaled_dot_product_attention`` is composed of ops (``matmul``, ``mul``, ``masked_fill``, ``softmax``,
``matmul``) so that autograd differentiates it and a trace fuses it. Where no history is recorded (under
``no_grad``, as in sampling from a model) the composition's dispatch cost more than its arithmetic on a few
rows: `attention_fast` runs the same NumPy kernels in the same order on the arrays, so its result is the
composition's, bit for bit, and makes one tensor.

Where history is recorded (a training step, eager or compiled), ``nn.functional`` calls the op
``_attention`` for CPU float32/float64 attention without a mask, with the causal one or a bool or additive
``attn_mask`` (torch's semantics; rows with every key masked give zeros): one node in the
graph, whose derivative rule is the op ``_attention_backward``. Both run the code generator's fused kernels
where it has registered ``ATTENTION_KERNEL`` (jitorch/codegen/attention.py: one (batch, head) tile per
iteration, the scores in L1, the tiles on the thread team), else NumPy's products. The op also returns the
softmax weights, which its backward reads (the composition saved them too), as bytes: a ``reserve`` that
carries no gradient (torch's fused CPU attention returns its logsumexp so, not differentiable).
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime.device import CPU
from . import registry
from .linalg import array_product
from .reductions import _softmax
from .registry import TensorSpec, defop

_FAST_DTYPES = (_dt.float32, _dt.float64)
# (direction, NumPy dtype, L, S, D, causal, scale, batch shape, buffers' element strides but the columns') ->
# a compiled kernel over the batch's tiles (codegen/attention.py's ``run_tiles(arrays, tiles)``) or None; set by
# the code generator
ATTENTION_KERNEL = None
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


def fused(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
    """Whether ``nn.functional.scaled_dot_product_attention`` takes the op ``_attention``: history is
    recorded for one of the tensors, all three are CPU float32 or float64 tensors of one dtype and batch
    shape with the query's and value's last dims equal and no empty dim, with no mask, the causal one or a
    CPU bool or additive (the query's dtype) mask that broadcasts to the scores' shape, without dropout or
    grouped heads. An additive mask that requires grad gets the scores' gradient from the backward's NumPy
    products (the kernels do not write it). Under no_grad the composition's bits stay (`attention_fast`,
    ONNX export)."""
    Tensor = registry.Tensor
    if (dropout_p != 0.0 or enable_gqa
            or not (isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor))
            or not (query._requires_grad or key._requires_grad or value._requires_grad)
            or not registry.records_grad()):
        return False
    dtype = query.dtype
    q, k, v = query._shape, key._shape, value._shape
    if not (dtype in _FAST_DTYPES and key.dtype is dtype and value.dtype is dtype and query.device is CPU
            and key.device is CPU and value.device is CPU and len(q) >= 2 and len(k) == len(q) and len(v) == len(q)
            and q[:-2] == k[:-2] == v[:-2] and q[-1] == k[-1] == v[-1] and k[-2] == v[-2]
            and 0 not in q and 0 not in k):
        return False
    return attn_mask is None or (isinstance(attn_mask, Tensor) and attn_mask.device is CPU and not is_causal
                                 and (attn_mask.dtype is _dt.bool or attn_mask.dtype is dtype)
                                 and _broadcasts(attn_mask._shape, (*q[:-1], k[-2])))


def saves_output(query, key, value, attn_mask):
    """Whether torch's CPU attention for a call that `fused` takes is its flash kernel, whose node saves the output
    (its backward reads it), so that a write into the output before the backward raises: (batch, heads, L, E)
    query, key and value whose last dims are contiguous, no mask or one of 2 or 4 dims that wants no gradient.
    Elsewhere torch composes the math path, which saves the softmax weights and not the output, and a write into
    the output leaves its backward's gradients right; the fused op's backward never reads the output."""
    return (len(query._shape) == 4 and all(t._stride[-1] == 1 for t in (query, key, value))
            and (attn_mask is None or len(attn_mask._shape) in (2, 4) and not attn_mask._requires_grad))


def _broadcasts(shape, to):
    """Whether ``shape`` broadcasts to ``to`` without growing it."""
    return len(shape) <= len(to) and all(n in (1, m) for n, m in zip(reversed(shape), reversed(to)))


def _additive(mask, dtype, shape):
    """``mask`` (an array: bool, True where a key is allowed, or of ``dtype``, added to the scores) as the
    scores' addend, broadcast to ``shape`` (a view: the kernels read its stride-0 dims in place)."""
    if mask.dtype == np.bool_:
        mask = np.where(mask, dtype.type(0), dtype.type(-np.inf))
    return np.broadcast_to(mask, shape)


def _readable(a):
    """Whether the kernels read ``a`` where it lies: rows of contiguous elements at any non-negative element
    strides (the heads of a GPT's q, k and v are views into one product's rows); else they read a C-contiguous
    copy."""
    item = a.itemsize
    return a.strides[-1] == item and not any(s < 0 or s % item for s in a.strides)


def _run(direction, arrays, n_inputs, is_causal, scale, masked=False):
    """The registered kernel over ``arrays`` (``n_inputs`` inputs, then the outputs it fills), True; False
    where no kernel serves them. ``masked``: the forward's inputs hold an additive mask after the values.
    An input the kernels cannot read where it lies (`_readable`) is copied. What a call's shapes and strides
    make of it (the kernel, the copies) is looked up in `_PLANS`: working it out (the layouts' element strides,
    the kernel's key) was 15 µs of Python in each of a compiled GPT step's calls."""
    q, k = arrays[0], arrays[1]
    key = (ATTENTION_KERNEL, direction, q.dtype, q.shape, k.shape[-2], is_causal, scale, masked,
           *[a.strides for a in arrays])
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(direction, arrays, n_inputs, is_causal, scale, masked)
        if len(_PLANS) >= 256:  # (a bound: shapes that vary without end make new ones)
            _PLANS.clear()
        _PLANS[key] = plan
    kernel, copies, tiles = plan
    if kernel is None:
        return False
    for n in copies:
        arrays[n] = np.ascontiguousarray(arrays[n])
    kernel.run_tiles(arrays, tiles)
    return True


# (the registered kernel function, direction, dtype, query shape, keys, causal, scale, masked, each array's
# byte strides) -> (kernel or None, the inputs to copy, tiles)
_PLANS: dict = {}


def _plan(direction, arrays, n_inputs, is_causal, scale, masked):
    copies = tuple(n for n in range(n_inputs) if not _readable(arrays[n]))
    arrays = [np.ascontiguousarray(a) if n in copies else a for n, a in enumerate(arrays)]
    q, k = arrays[0], arrays[1]
    L, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    layouts = tuple(tuple(s // a.itemsize for s in a.strides[:-1]) for a in arrays)
    batch = q.shape[:-2]
    kernel = ATTENTION_KERNEL(direction, q.dtype, L, S, D, is_causal, scale, batch, layouts, masked)
    return kernel, copies, math.prod(batch)


def _check(query, key, value, attn_mask=None, is_causal=False):
    """Refuses (RuntimeError, before any output is made) what the kernels cannot read: tensors (or specs) of
    one float32/float64 dtype and device, one number of dims (2 or more) and one batch shape, queries, keys and
    values of one head dim, as many values as keys (broadcasting is ``nn.functional``'s, before the call); a
    mask of bool or the query's dtype that broadcasts to the scores' shape, not with ``is_causal``."""
    q, k, v = tuple(query.shape), tuple(key.shape), tuple(value.shape)
    if not (query.dtype is key.dtype is value.dtype and query.dtype in _FAST_DTYPES):
        raise RuntimeError(f"_attention: expected query, key and value of one dtype, float32 or float64, got "
                           f"{query.dtype}, {key.dtype} and {value.dtype}")
    if not query.device == key.device == value.device:
        raise RuntimeError(f"_attention: expected query, key and value on one device, got {query.device}, "
                           f"{key.device} and {value.device}")
    if not (len(q) >= 2 and len(k) == len(q) == len(v) and q[:-2] == k[:-2] == v[:-2] and q[-1] == k[-1] == v[-1]
            and k[-2] == v[-2]):
        raise RuntimeError(f"_attention: expected query (..., L, E), key (..., S, E) and value (..., S, E) of one "
                           f"batch shape, got {list(q)}, {list(k)} and {list(v)}")
    if attn_mask is None:
        return
    if is_causal:
        raise RuntimeError("_attention: Explicit attn_mask should not be set when is_causal=True")
    m = tuple(attn_mask.shape)
    if attn_mask.dtype is not _dt.bool and attn_mask.dtype is not query.dtype:
        raise RuntimeError(f"_attention: expected attn_mask of dtype bool or the query's {query.dtype}, got "
                           f"{attn_mask.dtype}")
    if attn_mask.device != query.device:
        raise RuntimeError(f"_attention: expected attn_mask on the query's device {query.device}, got "
                           f"{attn_mask.device}")
    if not _broadcasts(m, (*q[:-1], k[-2])):
        raise RuntimeError(f"_attention: attn_mask of shape {list(m)} does not broadcast to the scores' shape "
                           f"{[*q[:-1], k[-2]]}")


def _reserve_shape(query, key):
    """The shape of ``_attention``'s reserve: the (..., L, S) softmax weights as bytes."""
    return (*query.shape[:-1], key.shape[-2] * query.dtype.itemsize)


def _attention_meta(query, key, value, attn_mask, is_causal, scale):
    _check(query, key, value, attn_mask, is_causal)
    return (TensorSpec(query.shape, query.dtype, query.device),
            TensorSpec(_reserve_shape(query, key), _dt.uint8, query.device))


def _attention_cpu(spec, query, key, value, attn_mask, is_causal, scale):
    out = np.empty(spec[0].shape, spec[0].dtype.np)
    return out, _forward_into(out, query, key, value, attn_mask, is_causal, scale).view(np.uint8)


def _forward_into(out, query, key, value, attn_mask, is_causal, scale):
    """``_attention``'s output written into the array ``out`` (its shape and dtype, rows of contiguous elements
    at any strides: the kernels write each tile where it lies); returns the softmax weights (a new array)."""
    dtype = out.dtype
    L, S = query.shape[-2], key.shape[-2]
    scores_shape = (*query.shape[:-1], S)
    mask = None if attn_mask is None else _additive(attn_mask, dtype, scores_shape)
    weights = np.empty(scores_shape, dtype)
    inputs = [query, key, value] if mask is None else [query, key, value, mask]
    if (ATTENTION_KERNEL is None or out.size == 0 or key.size == 0 or out.strides[-1] != out.itemsize
            or not _run("forward", [*inputs, out, weights], len(inputs), is_causal, scale, mask is not None)):
        token = fp_errors.enter()
        try:
            scores = array_product(query, key.swapaxes(-2, -1))
            scores *= scale
            if is_causal:
                np.copyto(scores, -np.inf, where=_future(L, S))
            empty = None
            if mask is not None:  # (rows with every key masked give zeros: the composition's safe softmax)
                scores += mask
                empty = (scores == -np.inf).all(-1, keepdims=True)
                scores[np.broadcast_to(empty, scores.shape)] = 0
            weights = np.ascontiguousarray(_softmax(scores, scores.ndim - 1))
            if empty is not None:
                weights[np.broadcast_to(empty, weights.shape)] = 0
            np.copyto(out, array_product(weights, value))
        finally:
            fp_errors.leave(token)
    return weights


def attention_into(out, query, key, value, attn_mask, is_causal, scale):
    """``_attention`` on CPU tensors whose output goes into the tensor ``out`` (new memory of the output's shape
    and dtype, laid out densely in any order: a compiled step has it written in the order the product after it
    reads, ``[B, L, H, E]``, so that no copy moves it there), as its kernel computes it; returns the reserve.
    The arguments are those the op's meta rule accepted."""
    token = fp_errors.enter()
    try:
        arrays = [None if a is None else a._array() for a in (query, key, value, attn_mask)]
        weights = _forward_into(out._array(), *arrays, is_causal, scale)
    finally:
        fp_errors.leave(token)
    return registry.contiguous_result(weights.view(np.uint8), _dt.uint8)


defop("_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, bool is_causal, float scale) -> "
      "(Tensor output, Tensor reserve)",
      meta=_attention_meta, cpu=_attention_cpu, kind="attention", variants=(),
      doc="``softmax(query @ key^T * scale + attn_mask, masked to the past if is_causal) @ value`` for query "
          "(..., L, E), key and value (..., S, E) of one batch shape; a bool ``attn_mask`` is True where a key "
          "is allowed, a float one is added, and rows with every key masked give zeros. ``reserve`` holds the "
          "(..., L, S) softmax weights as bytes (what ``_attention_backward`` reads: no gradient passes "
          "through it, as through ``_rnn_layer``'s).")


def _backward_meta(grad_output, query, key, value, reserve, is_causal, scale, grad_scores=False):
    _check(query, key, value)
    if tuple(grad_output.shape) != tuple(query.shape) or grad_output.dtype is not query.dtype:
        raise RuntimeError(f"_attention_backward: expected grad_output of the query's shape {list(query.shape)} "
                           f"and dtype {query.dtype}, got {list(grad_output.shape)} and {grad_output.dtype}")
    if reserve.dtype is not _dt.uint8 or tuple(reserve.shape) != _reserve_shape(query, key):
        raise RuntimeError(f"_attention_backward: expected the reserve of _attention, uint8 of shape "
                           f"{list(_reserve_shape(query, key))}, got {reserve.dtype} of shape {list(reserve.shape)}")
    if not grad_output.device == reserve.device == query.device:
        raise RuntimeError(f"_attention_backward: expected grad_output and reserve on the query's device "
                           f"{query.device}, got {grad_output.device} and {reserve.device}")
    scores = (*query.shape[:-1], key.shape[-2]) if grad_scores else (0,)
    return (TensorSpec(query.shape, query.dtype, query.device), TensorSpec(key.shape, key.dtype, key.device),
            TensorSpec(value.shape, value.dtype, value.device), TensorSpec(scores, query.dtype, query.device))


def _backward_cpu(spec, grad_output, query, key, value, reserve, is_causal, scale, grad_scores=False):
    dtype = spec[0].dtype.np
    grads = tuple(np.empty(s.shape, dtype) for s in spec[:3])
    composed = _backward_arrays(grads, grad_output, query, key, value, reserve, is_causal, scale, grad_scores)
    return (*grads, np.empty(0, dtype)) if composed is None else composed


def _backward_arrays(grads, grad_output, query, key, value, reserve, is_causal, scale, grad_scores):
    """``_attention_backward`` on arrays: the kernel writes the gradients of q, k and v into ``grads`` (three
    arrays of their shapes and dtype, rows of contiguous elements at any strides: each tile where it lies) and
    this returns None; where no kernel serves them, NumPy's products' four new arrays (``grads`` untouched)."""
    dtype = grads[0].dtype
    # (the bytes' rows are whole weights' rows: a view of them as floats needs their last dim compact)
    weights = (reserve if reserve.strides[-1] == 1 else np.ascontiguousarray(reserve)).view(dtype)
    if (ATTENTION_KERNEL is not None and not grad_scores and query.size and key.size
            and all(g.strides[-1] == g.itemsize for g in grads)
            and _run("backward", [query, key, value, weights, grad_output, *grads], 5, is_causal, scale)):
        return None
    token = fp_errors.enter()
    try:
        # softmax's backward (torch's form: y (g - sum(g y))), then the products'
        grad_v = array_product(weights.swapaxes(-2, -1), grad_output)
        grad_w = array_product(grad_output, value.swapaxes(-2, -1))
        grad_s = weights * (grad_w - (grad_w * weights).sum(-1, keepdims=True))
        unscaled = grad_s.copy() if grad_scores else np.empty(0, dtype)
        grad_s *= scale
        return array_product(grad_s, key), array_product(grad_s.swapaxes(-2, -1), query), grad_v, unscaled
    finally:
        fp_errors.leave(token)


def attention_backward_into(grads, grad_output, query, key, value, reserve, is_causal, scale, grad_scores=False):
    """``_attention_backward`` on CPU tensors whose gradients of q, k and v go into the arrays ``grads`` (their
    shapes and dtype, at any strides: a compiled step has them written straight into their slices of the
    ``cat`` that joins them, see jit/cat_pieces.py), as the op computes them, the same bits. The arguments are
    those the op's meta rule accepted, without the scores' gradient."""
    token = fp_errors.enter()
    try:
        arrays = [a._array() for a in (grad_output, query, key, value, reserve)]
        composed = _backward_arrays(grads, *arrays, is_causal, scale, grad_scores)
        if composed is not None:
            for g, c in zip(grads, composed):
                np.copyto(g, c)
    finally:
        fp_errors.leave(token)


defop("_attention_backward(Tensor grad_output, Tensor query, Tensor key, Tensor value, Tensor reserve, "
      "bool is_causal, float scale, bool grad_scores=False) -> (Tensor grad_query, Tensor grad_key, "
      "Tensor grad_value, Tensor grad_scores)",
      meta=_backward_meta, cpu=_backward_cpu, kind="attention", variants=(),
      doc="The gradients of ``_attention``'s query, key and value from its output's gradient and its "
          "``reserve``; with ``grad_scores``, also that of the scaled scores (an additive mask's gradient), "
          "else an empty tensor.")
