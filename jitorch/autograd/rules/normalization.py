"""Derivative rule of ``layer_norm`` (jitorch/ops/normalization.py), in closed form.

With ``xhat = (x - mean) * rstd`` over the normalized dims and ``gy`` the output gradient times the weight:
``dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))``, ``dweight = sum(g * xhat)`` and ``dbias = sum(g)``
over the leading dims. Written with ops, so that it differentiates again; the statistics are recomputed from
the saved input, as torch's ``native_layer_norm_backward`` reads its saved mean and rstd.
"""

from __future__ import annotations

from ...ops import functions as jt

from ..rule import defgrad, differentiates, reads
from .common import wanted


def _layer_norm(g, a, out):
    x = a.input
    dims = list(range(x.ndim - len(a.normalized_shape), x.ndim))
    lead = list(range(x.ndim - len(a.normalized_shape)))
    var, mean = jt.var_mean(x, dims, correction=0, keepdim=True)
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


defgrad("layer_norm", differentiates("input weight bias", reads("input weight", _layer_norm)))
