"""Derivative rules of reductions, scans and softmax (jitorch/ops/reductions.py), after PyTorch's derivatives.yaml.

A reduction's gradient goes back to the input's shape here (`common.expand_reduced`):
the engine only sums gradients down, never broadcasts them up. Choices where
the derivative is not unique are torch's: ``amax``/``amin`` and the full
``max``/``min``/``median`` split the gradient evenly among the elements equal
to the result; ``max.dim``, ``min.dim`` and ``median.dim`` give it all to the
element their index chose; ``norm`` and ``std`` give 0 where the result is 0.
``prod`` and ``cumprod`` never divide by the input, so zeros in it are exact.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from ...ops import functions as jt
from ...ops.registry import OPS
from jitorch.ops.meta import wrap_dim
from jitorch.ops.reductions import norm_order
from jitorch.runtime import dtypes as _dt

from ..rule import defgrad, nondifferentiable, only_if, reads
from .common import expand_reduced, over_nonzero, per_input, reduced_dims, rounded_once, unreduce


def _count(x, dim):
    """How many elements of ``x`` each result of a reduction over ``dim`` covers."""
    return math.prod(x.shape[d] for d in reduced_dims(x, dim))


# Sums and means ----------------------------------------------------------------------------------

def _nansum(g, a, out):
    """torch's nansum_backward: ``g`` times whether each element is a number, a product (not a selection), so
    that an infinite or NaN ``g`` (an all-NaN row's nanmean divides by a count of 0) gives NaN at the NaNs."""
    return expand_reduced(g, a.self, a.dim, a.keepdim) * a.self.isnan().logical_not()


# The means divide ``g`` before broadcasting it back, as their results divide a sum: so that the forward-mode
# tangent (the transpose of this rule, `jitorch.autograd.forward_ad`) is the tangents' sum over the count, NaN
# over no elements as the mean is (0 / 0, torch's; transform-fuzz seeds 7871815, 7874133, 7875067), where
# dividing after broadcasting would sum nothing into 0.

def _nanmean(g, a, out):
    x = a.self
    counted = x.isnan().logical_not().sum(a.dim, keepdim=a.keepdim)
    return expand_reduced(g / counted, x, a.dim, a.keepdim) * x.isnan().logical_not()


defgrad("sum", per_input(self=reads("", lambda g, a, out: expand_reduced(g, a.self, a.dim, a.keepdim))))
defgrad("nansum", per_input(self=reads("self", _nansum)))
defgrad("mean", per_input(self=reads("", lambda g, a, out: expand_reduced(g / _count(a.self, a.dim), a.self, a.dim,
                                                                          a.keepdim))))
defgrad("nanmean", per_input(self=reads("self", _nanmean)))


# Products: exclusive cumulative products, no division ----------------------------------------------

def _shifted(x, dim, by, fill):
    """``x`` moved ``|by|`` places along ``dim``, toward the end (``by > 0``) or the front; ``fill`` where it left."""
    n = x.shape[dim]
    k = min(abs(by), n)
    kept = x.narrow(dim, 0, n - k) if by > 0 else x.narrow(dim, k, n - k)
    pad = jt.full([k if i == dim else n for i, n in enumerate(x.shape)], fill, dtype=x.dtype, device=x.device)
    return jt.cat([pad, kept] if by > 0 else [kept, pad], dim)


def _exclusive_cumprod(x, dim):
    """``[1, x0, x0*x1, ...]`` along ``dim``."""
    return _shifted(x, dim, 1, 1).cumprod(dim)


def _products_of_others(x, dim):
    """Each element's product of the other elements along ``dim`` (torch's prod_safe_zeros_backward)."""
    return _exclusive_cumprod(x, dim) * _exclusive_cumprod(x.flip(dim), dim).flip(dim)


def _prod(g, a, out):
    x = a.self
    if x.ndim == 0:
        return g
    if a.dim is None:
        return g * _products_of_others(x.reshape(-1), 0).reshape(x.shape)
    return unreduce(g, x, a.dim, a.keepdim) * _products_of_others(x, wrap_dim(a.dim, x.ndim))


def _cumprod(g, a, out):
    """``grad_i = sum over k >= i of g_k * prod(x_j, j <= k, j != i) = E_i * S_i``.

    E is the exclusive cumulative product and S solves ``S_i = g_i + x_(i+1) S_(i+1)``,
    found by doubling: after a step of ``span``, ``total_i`` sums the terms k in
    ``[i, i + 2 span)`` and ``factor_i`` is the product of ``x`` over ``(i, i + 2 span]``.
    That is log2(n) steps of shifts, products and sums, with no division (exact at
    zeros, unlike ``cumsum(g * out) / x``) and differentiable again.
    """
    x = a.self
    if x.ndim == 0:
        return g
    d = wrap_dim(a.dim, x.ndim)
    n = x.shape[d]
    total, factor = g, _shifted(x, d, -1, 0)
    span = 1
    while span < n:
        total = total + factor * _shifted(total, d, -span, 0)
        if 2 * span < n:
            factor = factor * _shifted(factor, d, -span, 0)
        span *= 2
    return _exclusive_cumprod(x, d) * total


def _cumsum(g, a, out):
    if a.self.ndim == 0:
        return g
    d = wrap_dim(a.dim, a.self.ndim)
    return g.flip(d).cumsum(d).flip(d)


# (the result is saved unread, as torch's prod node saves it: a write into it before the backward raises)
defgrad("prod", per_input(self=reads("self result", _prod)))
# (the result is saved unread, as torch's cumprod node saves it: a write into it before the backward raises)
defgrad("cumprod", per_input(self=reads("self result", _cumprod)))
defgrad("cumsum", per_input(self=reads("", _cumsum)))


# Extremes, medians and order statistics --------------------------------------------------------------

def _evenly(g, mask, dim):
    """``g`` shared evenly among the True elements of ``mask`` in each reduced slice (torch's tie rule)."""
    return mask * (g / mask.sum(dim, keepdim=True))


def _amax(g, a, out):
    x = a.self
    return _evenly(unreduce(g, x, a.dim, a.keepdim), x == unreduce(out, x, a.dim, a.keepdim), a.dim)


def _whole(g, a, out):
    """max(), min(), median() of every element: ties (NaN ties with NaN) share the gradient evenly, the
    others get zeros, not ``0 * g`` (torch's CPU ``evenly_distribute_backward`` fills a mask: a NaN
    gradient stays on the ties)."""
    x = a.self
    mask = (x == out) | (x.isnan() & out.isnan())
    return jt.where(mask, g / mask.sum(), 0)


def _selected(g, a, out):
    """The values' gradient, all to the element the indices chose along ``dim`` (torch's value_selecting_reduction)."""
    x = a.self
    values, indices = g[0], out[1]
    if x.ndim == 0:
        return values
    d = wrap_dim(a.dim, x.ndim)
    if not a.keepdim:
        values, indices = values.unsqueeze(d), indices.unsqueeze(d)
    positions = jt.arange(x.shape[d], device=x.device).reshape([-1 if i == d else 1 for i in range(x.ndim)])
    return jt.where(positions == indices, values, 0)


defgrad("amax amin", per_input(self=reads("self result", _amax)))


def _log_softmax_stats(g, a, out):
    """The max's gradient as amax's (ties share it evenly); the log-sum's is ``softmax(x)`` less the max's."""
    x, (m, n), (g_max, g_log_sum) = a.self, out, g
    return g_log_sum * (x - m - n).exp() + _evenly(g_max - g_log_sum, x == m, a.dim)


defgrad("_log_softmax_stats", per_input(self=reads("self result", _log_softmax_stats)))
defgrad("max min median nanmedian", per_input(self=reads("self result", _whole)))
defgrad("max.dim min.dim median.dim mode nanmedian.dim", per_input(self=reads("result1", _selected)))


# Log-sum-exp and softmax ------------------------------------------------------------------------------

def _logsumexp(g, a, out):
    x = a.self
    return unreduce(g, x, a.dim, a.keepdim) * (x - unreduce(out, x, a.dim, a.keepdim)).exp()


defgrad("logsumexp", per_input(self=reads("self result", _logsumexp)))
defgrad("softmax", per_input(self=reads("result", rounded_once(
    lambda g, a, out: out * (g - (g * out).sum(a.dim, keepdim=True))))))
defgrad("log_softmax", per_input(self=reads("result", rounded_once(
    lambda g, a, out: g - out.exp() * g.sum(a.dim, keepdim=True)))))


# Moments and norms ------------------------------------------------------------------------------------

def _var(g, a, out):
    """torch's var_backward, ``2 (x - mean) / (N - correction)``. Over every element with no degrees of freedom
    left: inf (NaN where x is the mean); over given dims torch takes ``N - correction`` as it is: an infinite
    factor at 0 (its sign from the gradient and ``x - mean``), a negative one past it."""
    x = a.self
    centered = x - x.mean(a.dim, keepdim=True)
    g = unreduce(g, x, a.dim, a.keepdim)
    dof = _count(x, a.dim) - (1 if a.correction is None else a.correction)
    if a.dim is None or x.ndim == 0:
        if dof <= 0:
            return g * jt.where(centered == 0, math.nan, math.inf)
    elif dof == 0:
        # (the infinite factor on each element, not on ``g``: the forward tangent, this rule's transpose, then sums
        # the scaled products, as torch's var_jvp: 0 over no elements, NaN where they cancel; transform-fuzz seed
        # 8431497, tests/func/test_fuzz44_transforms.py)
        return g * (centered * math.inf)
    return (2.0 / dof) * g * centered


def _std(g, a, out):
    return _var(over_nonzero(g, out * 2), a, out)


def _nuclear(g, a):
    """The nuclear norm's gradient, as torch's through its singular values: ``g U Vh`` of the reduced SVD of each
    matrix over ``dim`` (every dim of a matrix without one)."""
    x = a.self
    dims = tuple(range(x.ndim)) if a.dim is None else tuple(d % x.ndim for d in a.dim)
    u, _, vh = OPS["_linalg_svd"](x.movedim(dims, (-2, -1)), False, True, None)
    g = g.squeeze(dims) if a.keepdim else g
    return (g[..., None, None] * u.matmul(vh)).movedim((-2, -1), dims)


def _norm(g, a, out):
    """torch's norm_backward, by the vector order ``p``; the gradient is 0 where the norm is 0."""
    x = a.self
    p = norm_order(a.p, a.dim)
    if p == "matrix":
        return _nuclear(g, a)
    g, norm = unreduce(g, x, a.dim, a.keepdim), unreduce(out, x, a.dim, a.keepdim)
    if p == 1:
        return x.sign() * g
    if p == 2:
        return g * over_nonzero(x, norm)
    if math.isinf(p):
        magnitude = x.abs()
        return x.sign() * _evenly(g, (magnitude == norm) | magnitude.isnan(), a.dim)
    if p < 1:
        return x.sign() * jt.where(x == 0, 0, x.abs().pow(p - 1)) * g * norm.pow(1 - p)
    scale = over_nonzero(g, norm.pow(p - 1))
    if p < 2:
        return x.sign() * x.abs().pow(p - 1) * scale
    return x * x.abs().pow(p - 2) * scale


defgrad("var.correction", per_input(self=reads("self", _var)))
defgrad("std.correction", per_input(self=reads("self result", _std)))
# the order 0 (a count) gives no gradient at all, as torch's undefined one: zeros would still move a parameter
# through an optimizer's momentum or weight decay, where torch's optimizers skip a parameter without one
defgrad("norm", only_if(lambda a: norm_order(a.p, a.dim) != 0, per_input(self=reads("self result", _norm))))


def _renorm(g, a, out):
    """torch's renorm_backward: where a slice's norm exceeds ``maxnorm``, the derivative of ``x * maxnorm /
    (norm + 1e-7)`` (the norm's by `_norm`), elsewhere ``g`` itself, selected (not multiplied), so that a slice
    left alone passes ``g`` on whatever its norm's derivative is (NaN for a NaN norm, main fuzz seed 8663642 of
    ``--namespaced --out-views 0.5``); in torch's accumulate dtype on CPU (float32 for half types, else
    float64). A rule of its own, not the composite's body, so that a compiled trace of ``renorm_`` has one (seed
    8670237 of ``--cuda --chains 0.3``)."""
    x = a.self
    d = wrap_dim(a.dim, x.ndim)
    dims = tuple(i for i in range(x.ndim) if i != d)
    acc = _dt.float32 if x.dtype in (_dt.float16, _dt.bfloat16) else _dt.float64
    x, g = x.to(acc), g.to(acc)
    norm = x.norm(a.p, dims, keepdim=True)
    along = _norm((x * g).sum(dims, keepdim=True), SimpleNamespace(self=x, p=a.p, dim=dims, keepdim=True), norm)
    inverse = 1 / (norm + 1e-7)
    factor = inverse * a.maxnorm
    return jt.where(norm > a.maxnorm, factor * g - factor * inverse * along, g)


defgrad("renorm", per_input(self=reads("self", _renorm)))


# Index and bool results -----------------------------------------------------------------------------

nondifferentiable("argmax", "argmin", "count_nonzero", "all", "any")


def _cdist_terms(g, a, out, x, y):
    """Each element's part of torch's _cdist_backward for the rows of ``x`` against those of ``y`` (the
    differences ``x - y`` of every pair): the norm's derivative by ``p`` with torch's conventions, which are not
    those of `_norm` through the composite's body: every element at an infinity norm's value takes all of ``g``
    (amax's backward split it evenly among ties), a NaN difference's sign is NaN (abs's backward gives 0), and
    the order 0 gives zeros."""
    diff = x.unsqueeze(-2) - y.unsqueeze(-3)
    g, dist = g.unsqueeze(-1), out.unsqueeze(-1)
    p = a.p
    # (torch's sign by ceil and floor, which keeps NaN)
    sign = jt.clamp(diff.ceil(), 0, 1) + jt.clamp(diff.floor(), -1, 0)
    if p == 0:
        return jt.zeros_like(diff)
    if p == 1:
        return g * sign
    if math.isinf(p):
        return g * sign * (1 - jt.minimum(jt.ones_like(diff), (diff.abs() - dist).abs().ceil()))
    if p == 2:
        return jt.where(dist == 0, 0, g * diff / dist)
    if p < 2:
        term = jt.where(dist == 0, 0, sign * diff.abs().pow(p - 1) * g / dist.pow(p - 1))
        return jt.where((diff == 0) & (p < 1), 0, term)
    return jt.where(dist == 0, 0, diff * diff.abs().pow(p - 2) * g / dist.pow(p - 1))


# cdist's own rule (its op's ``own_derivative``: the composite's body runs without history)
defgrad("cdist", per_input(x1=reads("x1 x2 result", lambda g, a, out: _cdist_terms(g, a, out, a.x1, a.x2).sum(-2)),
                           x2=reads("x1 x2 result", lambda g, a, out: -_cdist_terms(g, a, out, a.x1, a.x2).sum(-3))))
