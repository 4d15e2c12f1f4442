"""Derivative rule of ``linear`` (jitorch/ops/linear.py): ``dinput = g @ weight``, ``dweight = g^T @ input``
with every leading dim folded into the rows (so the weight's gradient comes out contiguous, in its layout),
``dbias`` the sum of ``g`` over the rows. Written with ops, so that it differentiates again."""

from __future__ import annotations

from ..rule import defgrad, differentiates, reads
from .common import wanted


def _linear(g, a, out):
    x, weight, bias = a.input, a.weight, a.bias
    grads = {}
    if wanted(x):
        grads["input"] = g.matmul(weight)
    rows = g.reshape(-1, g.shape[-1])
    if wanted(weight):
        grads["weight"] = rows.t().matmul(x.reshape(-1, x.shape[-1]))
    if bias is not None and wanted(bias):
        grads["bias"] = rows.sum(0) if bias.ndim == 1 else g.sum()
    return grads


defgrad("linear", differentiates("input weight bias", reads("input weight", _linear)))
