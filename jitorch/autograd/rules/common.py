"""Pieces shared by the derivative rules: per-argument formulas and un-reducing a gradient."""

from __future__ import annotations

from ...ops import functions as jt
from jitorch.ops import registry
from jitorch.ops.meta import reduction_dims
from jitorch.runtime import dtypes as _dt

from ..rule import EVERYTHING, Unsaved, differentiates, reads


def wanted(value):
    """Whether an argument gets a gradient: a tensor that requires grad (as torch's ``needs_input_grad``).

    Python numbers, integer tensors and constants get none, so their formulas never run.
    """
    return isinstance(value, (registry.Tensor, Unsaved)) and value.requires_grad


def per_input(**formulas):
    """A rule from one formula ``f(g, a, out)`` per argument name; each runs only when its argument is
    `wanted`, and is saved for only when its argument requires grad (see `rule.reads`)."""
    def backward(g, a, out):
        return {name: f(g, a, out) for name, f in formulas.items() if wanted(getattr(a, name))}

    def saves(needed):
        names = set()
        for name, f in formulas.items():
            if name in needed:
                reads = getattr(f, "saves", EVERYTHING)
                if reads is EVERYTHING:
                    return EVERYTHING
                names |= reads
        return names
    backward.saves = saves
    return differentiates(" ".join(formulas), backward)


def rounded_once(formula, dtypes=None):
    """``formula(g, ...)`` computed in float32 where ``g`` is a half type (of ``dtypes``, by default both; its
    half-type tensor arguments widened) and rounded to ``g``'s dtype once, as torch's fused backward kernels
    (``tanh_backward``, ``_softmax_backward_data``; ``sigmoid_backward`` for bfloat16 only, float16's rounds each
    op) compute: each op of the formula rounding to the half type put the gradient an ulp or more off torch's
    (fuzz seeds 7902232, 7902920)."""
    dtypes = dtypes or _HALF

    def rule(g, *args):
        if g.dtype not in dtypes:
            return formula(g, *args)
        wide = [t.float() if isinstance(t, registry.Tensor) and t.dtype in _HALF else t for t in args]
        return formula(g.float(), *wide).to(g.dtype)
    return rule


_HALF = (_dt.float16, _dt.bfloat16)


def zeros(shape, like):
    """Zeros of ``shape`` in ``like``'s dtype and device, made from the shape alone (no op on ``like``
    is recorded, so a backward formula using them differentiates again)."""
    return jt.zeros(tuple(shape), dtype=like.dtype, device=like.device)


def zero_grad(*names):
    """The rule of an op whose gradient torch defines as zero (rounding, sign) for arguments ``names``."""
    return per_input(**{name: reads("", lambda g, a, out: zeros(g.shape, g)) for name in names})


def cut(*names):
    """The rule of an op whose results do not vary smoothly with its arguments ``names`` at all (a
    comparison, a random sample): torch's zero gradient, which finite differences cannot check
    (``cuts`` marks it). Written in place, such an op cuts the history of the tensor it writes."""
    rule = zero_grad(*names)
    rule.cuts = True
    return rule


def reduced_dims(x, dim):
    """The dims a reduction of ``x`` over ``dim`` removes (None and () mean every dim; a 0-d input has none)."""
    if x.ndim == 0:
        return ()
    return tuple(sorted(reduction_dims(x, dim))) or tuple(range(x.ndim))


def unreduce(t, x, dim, keepdim):
    """``t``, a result of reducing ``x`` over ``dim``, with the reduced dims back as size 1 (its keepdim form)."""
    if keepdim:
        return t
    for d in reduced_dims(x, dim):
        t = t.unsqueeze(d)
    return t


def expand_reduced(g, x, dim, keepdim):
    """The gradient ``g`` of a reduction of ``x`` over ``dim``, broadcast back to ``x``'s shape."""
    if not g.ndim:  # (a full reduction's: its unsqueezes to ones would add no more than the expand adds)
        return g.expand(x.shape)
    return unreduce(g, x, dim, keepdim).expand(x.shape)


def over_nonzero(t, d):
    """``t / d``, and 0 where ``d`` is 0 (torch's masked_fill), dividing by 1 there so that the
    gradient of this expression stays finite too (forward mode differentiates it: copysign's, seed 7894073)."""
    zero = d == 0
    return jt.where(zero, 0, t / jt.where(zero, 1, d))
