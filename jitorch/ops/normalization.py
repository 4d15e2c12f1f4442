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


def _layer_norm_cpu(spec, x, normalized_shape, weight, bias, eps, cudnn_enable):
    if x.size == 0:
        return np.empty(x.shape, spec.dtype.np)
    c = spec.compute.np
    n = c.type(math.prod(normalized_shape))
    rows = x.reshape(-1, math.prod(normalized_shape)).astype(c, copy=False)
    # two passes, as eager's var_mean: the mean, then the mean square deviation from it
    out = rows - np.add.reduce(rows, axis=1, keepdims=True) / n
    var = np.einsum("ij,ij->i", out, out)[:, None] / n
    out *= 1 / np.sqrt(var + c.type(eps))
    if weight is not None:
        out *= weight.reshape(-1).astype(c, copy=False)
    if bias is not None:
        out += bias.reshape(-1).astype(c, copy=False)
    return out.reshape(x.shape).astype(spec.dtype.np, copy=False)


defop("layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, "
      "bool cudnn_enable=True) -> Tensor", meta=_layer_norm_meta, cpu=_layer_norm_cpu,
      variants=("function",),
      doc="``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing dims ``normalized_shape`` (biased "
          "variance); half types compute in float32.")
