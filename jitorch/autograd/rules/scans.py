"""Derivative rules of the scans in jitorch/ops/scans.py: running extremes and ``logcumsumexp``."""

from __future__ import annotations

from jitorch.ops import functions
from jitorch.runtime import dtypes as _dt
from jitorch.runtime.strided import wrap_dim

from ..rule import defgrad, reads
from .common import per_input


def _running_extreme(g, a, out):
    """Each value's gradient goes to the element it was taken from (torch's cummaxmin_backward)."""
    x = a.self
    if x.ndim == 0:
        return g[0]
    return g[0].new_zeros(x.shape).scatter_add(wrap_dim(a.dim, x.ndim), out[1], g[0])


def _reverse_logcumsumexp(t, d):
    return t.flip([d]).logcumsumexp(d).flip([d])


def _logcumsumexp(g, a, out):
    """``grad_i = sum over j >= i of g_j exp(x_i - out_j)``, summed in log space separately over the positive
    and the negative ``g`` (torch's logcumsumexp_backward), so that nothing overflows."""
    x = a.self
    if x.ndim == 0:
        return g
    d = wrap_dim(a.dim, x.ndim)
    lowest = _dt.finfo(g.dtype).min
    log_abs = g.abs().log()
    parts = [functions.where(keep, log_abs, lowest) for keep in (g > 0, g < 0)]
    positive, negative = ((_reverse_logcumsumexp(p - out, d) + x).exp() for p in parts)
    return positive - negative


defgrad("cummax cummin", per_input(self=reads("result1", _running_extreme)))
defgrad("logcumsumexp", per_input(self=reads("self result", _logcumsumexp)))
