"""Derivative rules of the pointwise ops (jitorch/ops/pointwise.py), after PyTorch's derivatives.yaml.

Formulas see ``g`` (the output's gradient), ``a`` (the arguments by schema
name; a Python number stays a number) and ``out``, and may give gradients of
the broadcast shape: the engine sums them down to each input. Each formula
runs only for an argument that requires grad (`common.per_input`). A rule
named for an op serves its aliases (``abs`` for ``absolute``: see
`registry.declare_aliases`).

Where a function has no derivative at a point, the value is torch's: ``relu``
passes nothing at 0, ``abs`` gives 0 at 0 (``sign``), ``maximum``/``minimum``
split ties half and half, ``clamp`` passes the gradient at its bounds.
Rounding, ``sign`` and the rounded divisions have torch's zero gradient.
"""

from __future__ import annotations

import math
from numbers import Number

import numpy as np

from ...ops import functions as jt
from ...ops import registry
from ...ops.pointwise import _where_formula
from ...runtime import fp_errors
from ...runtime.grad_mode import is_grad_enabled
from ...runtime import dtypes as _dt
from ...runtime.dtypes import result_type
from ...ops.pointwise import mvlgamma_shifts

from ..rule import defgrad, differentiates, is_linearizing, nondifferentiable, not_implemented, reads
from .common import cut, over_nonzero, per_input, rounded_once, zero_grad, zeros

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _times(g, c):
    """``g * c`` for a Python number ``c``, without an op for alpha's usual values 1 and -1."""
    return g if c == 1 else -g if c == -1 else g * c


# Unary ops: (names, what d reads, d(g, x, out)) ----------------------------------------------------

def _relu_backward(g, y):
    """``where(y <= 0, 0, g)``, torch's threshold_backward (a NaN passes): on plain CPU float tensors of one shape, y
    contiguous and g contiguous or one broadcast value (a sum's gradient), in a backward that records nothing and
    that no hook takes, NumPy's selection of the same bits, laid out as the ops lay it out (contiguous), without
    their dispatch (a third of a small ReLU's backward); otherwise the ops."""
    if (y.__class__ is registry.Tensor and g.__class__ is registry.Tensor and g.dtype is y.dtype
            and y.dtype in _PLAIN and g._shape == y._shape and y.device.type == "cpu" and g.device.type == "cpu"
            and y._storage._data is not None and g._storage._data is not None and y.is_contiguous()
            and (g.is_contiguous() or not any(g._stride)) and not is_grad_enabled() and _AUTOCAST.key is None
            and not (registry.DISPATCH_HOOKS and registry.hooks_take_calls())):
        out = fp_errors.silenced(_where_formula, np.less_equal(y._array(), 0), 0, g._array())
        return registry.Tensor._fresh(np.ascontiguousarray(out), g.dtype)
    return jt.where(y <= 0, 0, g)


_PLAIN = (_dt.float32, _dt.float64)
_AUTOCAST = registry._AUTOCAST_STATE

_UNARY = (
    ("abs", "self", lambda g, x, y: g * x.sign()),
    ("neg", "", lambda g, x, y: -g),
    ("exp", "result", lambda g, x, y: g * y),
    ("exp2", "result", lambda g, x, y: g * y * _LN2),
    ("expm1", "result", lambda g, x, y: g * (y + 1)),
    ("log", "self", lambda g, x, y: g / x),
    ("log2", "self", lambda g, x, y: g / (x * _LN2)),
    ("log10", "self", lambda g, x, y: g / (x * _LN10)),
    ("log1p", "self", lambda g, x, y: g / (x + 1)),
    ("sqrt", "result", lambda g, x, y: g / (2 * y)),
    ("rsqrt", "result", lambda g, x, y: -0.5 * g * y.pow(3)),
    ("reciprocal", "result", lambda g, x, y: -g * (y * y)),
    ("sin", "self", lambda g, x, y: g * x.cos()),
    ("cos", "self", lambda g, x, y: g * -x.sin()),
    ("tan", "result", lambda g, x, y: g * (1 + y * y)),
    ("asin", "self", lambda g, x, y: g * (1 - x * x).rsqrt()),
    ("acos", "self", lambda g, x, y: g * -(1 - x * x).rsqrt()),
    ("atan", "self", lambda g, x, y: g / (x * x + 1)),
    ("sinh", "self", lambda g, x, y: g * x.cosh()),
    ("cosh", "self", lambda g, x, y: g * x.sinh()),
    ("tanh", "result", rounded_once(lambda g, x, y: g * (1 - y * y))),
    ("asinh", "self", lambda g, x, y: g * (x * x + 1).rsqrt()),
    ("acosh", "self", lambda g, x, y: g * (x * x - 1).rsqrt()),
    ("atanh", "self", lambda g, x, y: g / (1 - x * x)),
    ("sigmoid", "result", rounded_once(lambda g, x, y: g * (1 - y) * y, (_dt.bfloat16,))),
    # in torch's order, the constant's product before g's: a half type rounds each (fuzz seed 7802351)
    ("erf", "self", lambda g, x, y: (-x * x).exp() * _TWO_OVER_SQRT_PI * g),
    ("erfc", "self", lambda g, x, y: (-x * x).exp() * -_TWO_OVER_SQRT_PI * g),
    ("_normal_cdf", "self", lambda g, x, y: jt._normal_pdf(x) * g),
    ("_normal_pdf", "self", lambda g, x, y: -x * jt._normal_pdf(x) * g),
    ("relu", "result", lambda g, x, y: _relu_backward(g, y)),
    ("frac", "", lambda g, x, y: g),
)
for _names, _reads, _d in _UNARY:
    defgrad(_names, per_input(self=reads(_reads, lambda g, a, out, d=_d: d(g, a.self, out))))

defgrad("floor ceil trunc round sign", zero_grad("self"))
defgrad("floor_divide _div_trunc", zero_grad("self", "other"))  # torch's div(rounding_mode=...) is flat


# Binary and ternary ops --------------------------------------------------------------------------

def _pow_self(g, a, out):
    """``g * e * self ** (e - 1)``, and 0 where the exponent is 0 (even at self = 0). The branch not taken there
    raises self to 0, not -1: forward mode differentiates it too, and 0 ** -1 would make its 0 a NaN (seed
    7894731)."""
    e = a.exponent
    if isinstance(e, Number):
        return zeros(g.shape, g) if e == 0 else g * (e * a.self.pow(e - 1))
    zero = e == 0
    return jt.where(zero, 0, g * (e * a.self.pow(jt.where(zero, 1, e) - 1)))


def _pow_exponent(g, a, out):
    """``g * out * log(self)``, and 0 where self is 0 and the exponent non-negative (torch's convention), as torch's
    ``pow_backward_exponent`` computes it: ``self`` cast to the type the operands promote to before its log (a
    bfloat16 base with a float32 exponent: the log in float32, not rounded to bfloat16; fuzz seed 7300167), and
    ``g`` times the ``where`` (an infinite ``g`` where the gradient is 0 gives NaN)."""
    base, e = a.self, a.exponent
    if isinstance(base, Number):
        if base == 0:
            return g * jt.where(e >= 0, 0, out * -math.inf)
        return g * (out * (math.log(base) if base > 0 else math.nan))
    promoted = result_type(base, e)
    if base.dtype is not promoted:
        base = base.to(promoted)
    return g * jt.where((base == 0) & (e >= 0), 0, out * base.log())


def _extreme(g, x, other, loses):
    """maximum/minimum's gradient for ``x``: all of ``g`` where it won, half on a tie, none where it ``loses``."""
    return jt.where(loses, 0, jt.where(x == other, g / 2, g))


def _atan2_scale(a, g):
    """``1 / (self² + other²)``, and 0 where that sum is 0 (torch's atan2_backward: no gradient at the origin).
    An integer operand is squared in the gradient's float type: in its own it wraps (uint8 200² is 64), as
    torch's does (fuzz seed 7805681; docs/differences-from-torch.md)."""
    y, x = (v if v.dtype.is_floating_point else v.to(g.dtype) for v in (a.self, a.other))
    squares = y * y + x * x
    return jt.where(squares == 0, 0, squares.reciprocal())


def _clamp_self(g, a):
    """The gradient passes where ``min <= self <= max`` (the bounds included), as in torch."""
    keep = None
    if a.min is not None:
        keep = a.self >= a.min
    if a.max is not None:
        below = a.self <= a.max
        keep = below if keep is None else keep & below
    return jt.where(keep, g, 0)


def _clamp_min(g, a):
    """A tensor ``min`` gets the gradient where it was taken: ``self < min``, unless ``max`` wins (``max <= min``)."""
    taken = a.self < a.min
    if a.max is not None:
        taken = taken & (a.min < a.max)
    return jt.where(taken, g, 0)


def _clamp_max(g, a):
    """A tensor ``max`` gets the gradient where ``self > max``, and everywhere it is below ``min`` (it wins then)."""
    taken = a.self > a.max
    if a.min is not None:
        taken = taken | (a.max < a.min)
    return jt.where(taken, g, 0)


def _g(g, a, out):
    return g


defgrad("add", per_input(self=reads("", _g), other=reads("", lambda g, a, out: _times(g, a.alpha))))
defgrad("sub", per_input(self=reads("", _g), other=reads("", lambda g, a, out: _times(g, -a.alpha))))
defgrad("rsub", per_input(self=reads("", lambda g, a, out: _times(g, -a.alpha)), other=reads("", _g)))
defgrad("mul", per_input(self=reads("other", lambda g, a, out: g * a.other),
                                  other=reads("self", lambda g, a, out: g * a.self)))
def _divided(formula):
    """A formula of ``div``: the true quotient's, or torch's zero where a ``rounding_mode`` made it flat."""
    return reads(" ".join(formula.saves),
                 lambda g, a, out: formula(g, a, out) if a.rounding_mode is None else zeros(g.shape, g))


_QUOTIENT = {"self": reads("other", lambda g, a, out: g / a.other),
             "other": reads("self other", lambda g, a, out: -g * (a.self / a.other / a.other))}
defgrad("true_divide", per_input(**_QUOTIENT))
# Composites whose in-place form (``div_``, ``square_``) records one node of the op itself: out of place,
# their parts record instead.
defgrad("div divide", per_input(**{name: _divided(f) for name, f in _QUOTIENT.items()}))
defgrad("square", per_input(self=reads("self", lambda g, a, out: g * (2 * a.self))))
defgrad("remainder", per_input(self=reads("", _g),
                               other=reads("self other", lambda g, a, out: -g * jt.floor_divide(a.self, a.other))))
defgrad("fmod", per_input(self=reads("", _g), other=reads(
    "self other", lambda g, a, out: -g * jt.div(a.self, a.other, rounding_mode="trunc"))))
defgrad("pow", per_input(self=reads("self exponent", _pow_self), exponent=reads("self exponent result", _pow_exponent)))
defgrad("maximum", per_input(
    self=reads("self other", lambda g, a, out: _extreme(g, a.self, a.other, a.self < a.other)),
    other=reads("self other", lambda g, a, out: _extreme(g, a.other, a.self, a.other < a.self))))
defgrad("minimum", per_input(
    self=reads("self other", lambda g, a, out: _extreme(g, a.self, a.other, a.self > a.other)),
    other=reads("self other", lambda g, a, out: _extreme(g, a.other, a.self, a.other > a.self))))
defgrad("hypot", per_input(self=reads("self result", lambda g, a, out: g * a.self / out),
                           other=reads("other result", lambda g, a, out: g * a.other / out)))
defgrad("logaddexp", per_input(self=reads("self other", lambda g, a, out: g / (1 + (a.other - a.self).exp())),
                               other=reads("self other", lambda g, a, out: g / (1 + (a.self - a.other).exp()))))
defgrad("atan2", per_input(self=reads("self other", lambda g, a, out: g * a.other * _atan2_scale(a, g)),
                           other=reads("self other", lambda g, a, out: -g * a.self * _atan2_scale(a, g))))


def _lerp_self(g, a, out):
    """``g * (1 - weight)``. A bool weight (0-d, which torch's lerp takes) is read as 0 or 1 in forward mode, as
    torch's forward formula ``lerp(self_t, end_t, weight)`` reads it (transform-fuzz seed 8406632); torch's
    backward formula subtracts it from a bool 1 and raises, and so does this rule outside forward mode."""
    w = a.weight
    if isinstance(w, Number) or w.dtype != _dt.bool:
        return g * (1 - w)
    return g * (1 - w.to(g.dtype)) if is_linearizing() else g * (jt.ones_like(w) - w)


defgrad("lerp", per_input(self=reads("weight", _lerp_self),
                          end=reads("weight", lambda g, a, out: g * a.weight),
                          weight=reads("self end", lambda g, a, out: g * (a.end - a.self))))
defgrad("clamp", per_input(self=reads("self min max", lambda g, a, out: _clamp_self(g, a)),
                                min=reads("self min max", lambda g, a, out: _clamp_min(g, a)),
                                max=reads("self min max", lambda g, a, out: _clamp_max(g, a))))
defgrad("clamp_min", per_input(self=reads("self min", lambda g, a, out: jt.where(a.self >= a.min, g, 0)),
                               min=reads("self min", lambda g, a, out: jt.where(a.self < a.min, g, 0))))
defgrad("clamp_max", per_input(self=reads("self max", lambda g, a, out: jt.where(a.self <= a.max, g, 0)),
                               max=reads("self max", lambda g, a, out: jt.where(a.self > a.max, g, 0))))
defgrad("where.self", per_input(self=reads("condition", lambda g, a, out: jt.where(a.condition, g, 0)),
                                other=reads("condition", lambda g, a, out: jt.where(a.condition, 0, g))))


# Bool and integer results ----------------------------------------------------------------------

# A comparison's result is bool, which never requires grad; written in place into a float tensor
# (``x.ge_(y)``) it gives that tensor torch's zero gradient, cutting what it held before.
defgrad("eq ne lt le gt ge", cut("self", "other"))
# torch's in-place logical ops write through their out= form, which autograd does not see: the
# tensor keeps its history and passes its gradient on unchanged (the bitwise ones refuse floats).
nondifferentiable(
    "isclose", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf", "isfinite",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift",
)


# More math and the special functions --------------------------------------------------------------

_PI = math.pi
_SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2


def _copysign_self(g, a, out):
    """``g * sign`` of the flip: ``out / self``, and 0 where ``self`` is 0 (torch's copysign backward)."""
    return g * over_nonzero(out, a.self)


def _kept(g, a, self_wins, of_self):
    """fmax/fmin's gradient, torch's: all of ``g`` to ``self`` where it was taken (``self_wins``, or ``other`` is
    NaN), to ``other`` everywhere else (``of_self`` False). Both NaN: ``self``'s alone (``other``'s too gave a tie of
    NaNs twice the gradient: ``v.fmin(v)``, transform-fuzz seed 8487236 of ``--out-views 0.5``)."""
    taken = self_wins | a.other.isnan()
    return jt.where(taken, g, 0) if of_self else jt.where(taken, 0, g)


def _logit(g, a, out):
    """``g / (x (1 - x))``; with ``eps``, 0 outside ``[eps, 1 - eps]`` (the clamp's flat parts), and without
    it (or with a negative one, which clamps nothing) NaN outside ``[0, 1]``, as torch's logit_backward: ``g``
    over a NaN denominator there, linear in ``g`` as forward AD's transpose trick needs (a constant NaN gave
    tangents 0 there, transform-fuzz seed 7871667). The flat parts divide by 1, not by ``x (1 - x)``: the
    transpose sends 0 through the division, and 0 over 0 at ``x`` = 0 or 1 made the tangent NaN there
    (transform-fuzz seed 7992359)."""
    x = a.self
    if a.eps is None or a.eps < 0:
        return g / jt.where((x < 0) | (x > 1), math.nan, x * (1 - x))
    flat = (x < a.eps) | (x > 1 - a.eps)
    return jt.where(flat, 0, g / jt.where(flat, 1, x * (1 - x)))


def _sinc(g, a, out):
    """torch's ``(pi x cos(pi x) - sin(pi x)) / (pi x^2)``, 0 where ``pi x^2`` is 0: from ``self`` alone, as
    torch's, which saves no result (fuzz seed 7201848: a write into sinc's result broke its backward)."""
    x = a.self
    x_pi = x * _PI
    x_squared_pi = x * x * _PI
    return g * jt.where(x_squared_pi == 0, 0, (x_pi * x_pi.cos() - x_pi.sin()) / x_squared_pi)


def _i1(g, a, out):
    """``I1' = I0 - I1 / x``, 1/2 at 0."""
    x = a.self
    return g * jt.where(x == 0, 0.5, jt.i0(x) - out / x)


def _i1e(g, a, out):
    """``i1e' = i0e - i1e (sgn(x) + 1 / x)``, 1/2 at 0."""
    x = a.self
    return g * jt.where(x == 0, 0.5, jt.special_i0e(x) - out * (x.sign() + x.reciprocal()))


def _xlog_other(shift):
    # (no shift added for xlogy: ``-0.0 + 0`` is +0.0, which turned the gradient's infinite sign)
    if not shift:
        return lambda g, a, out: g * a.self / a.other
    return lambda g, a, out: g * a.self / (a.other + shift)


def _logaddexp2(g, x, other):
    return g / (1 + (other - x).exp2())


def _frexp(g, a, out):
    return g[0] / out[1].to(g[0].dtype).exp2()


_MORE_UNARY = (
    ("deg2rad", "", lambda g, x, y: g * (_PI / 180)),
    ("rad2deg", "", lambda g, x, y: g * (180 / _PI)),
    ("lgamma", "self", lambda g, x, y: g * x.digamma()),
    ("digamma", "self", lambda g, x, y: g * x.polygamma(1)),
    # (from self, as torch's, which saves no result: a write into erfinv's result leaves its backward valid)
    ("erfinv", "self", lambda g, x, y: g * _SQRT_PI_OVER_2 * x.erfinv().square().exp()),
    ("i0", "self", lambda g, x, y: g * jt.special_i1(x)),
    ("special_i0e", "self result", lambda g, x, y: g * (jt.special_i1e(x) - x.sign() * y)),
    ("nan_to_num", "self", lambda g, x, y: g * x.isfinite()),
    ("angle", "", lambda g, x, y: zeros(g.shape, g)),
)
for _names, _reads, _d in _MORE_UNARY:
    defgrad(_names, per_input(self=reads(_reads, lambda g, a, out, d=_d: d(g, a.self, out))))
defgrad("copysign", per_input(self=reads("self result", _copysign_self),
                              other=reads("", lambda g, a, out: zeros(g.shape, g))))
defgrad("fmax", per_input(self=reads("self other", lambda g, a, out: _kept(g, a, a.self >= a.other, True)),
                          other=reads("self other", lambda g, a, out: _kept(g, a, a.self >= a.other, False))))
defgrad("fmin", per_input(self=reads("self other", lambda g, a, out: _kept(g, a, a.self <= a.other, True)),
                          other=reads("self other", lambda g, a, out: _kept(g, a, a.self <= a.other, False))))
# torch's: the gradient passes to self where it steps (self != other, NaN included), none where self is other
# (fuzz seed 7100128); other gets none
defgrad("nextafter", per_input(self=reads("self other", lambda g, a, out: jt.where(a.self != a.other, g, 0)),
                               other=reads("", lambda g, a, out: zeros(g.shape, g))))
def _xlog_self(fn, edge):
    """torch's gradient for ``self`` of xlogy (``fn`` "xlogy", ``edge`` 0) or xlog1py ("special_xlog1py", -1):
    ``fn(g, other)`` (``g * log(other)``, 0 where ``g`` is 0 unless ``other`` is NaN: a zero gradient stays zero
    outside the log's domain, fuzz seed 7102598), 0 where ``self`` is 0 and ``other`` is at or below the edge of
    that domain (a number not above it, NaN too). Where ``self`` is 0 and ``other`` inside, ``g * log(other)``
    (jitorch gave 0 there)."""
    def formula(g, a, out):
        y = a.other
        grad = getattr(jt, fn)(g, y)
        if isinstance(y, Number):
            return grad if y > edge else jt.where(a.self == 0, 0, grad)
        return jt.where((a.self == 0) & (y <= edge), 0, grad)
    return formula


defgrad("xlogy", per_input(self=reads("self other", _xlog_self("xlogy", 0)),
                           other=reads("self other", _xlog_other(0))))
defgrad("special_xlog1py", per_input(self=reads("self other", _xlog_self("special_xlog1py", -1)),
                                     other=reads("self other", _xlog_other(1))))
defgrad("logaddexp2", per_input(self=reads("self other", lambda g, a, out: _logaddexp2(g, a.self, a.other)),
                                other=reads("self other", lambda g, a, out: _logaddexp2(g, a.other, a.self))))
defgrad("logit", per_input(self=reads("self", _logit)))
defgrad("sinc", per_input(self=reads("self", _sinc)))
defgrad("_polygamma", per_input(self=reads("self", lambda g, a, out: g * a.self.polygamma(a.n + 1))))
defgrad("special_i1", per_input(self=reads("self result", _i1)))
defgrad("special_i1e", per_input(self=reads("self result", _i1e)))
defgrad("special_zeta", per_input(
    # torch's "not implemented" (an empty gradient has nothing to miss)
    self=reads("", lambda g, a, out: zeros(g.shape, g) if 0 in g.shape else not_implemented("zeta", "special_zeta")),
    other=reads("self other", lambda g, a, out: g * -a.self * jt.special_zeta(a.self + 1, a.other))))
defgrad("frexp", differentiates("self", reads("result1", lambda g, a, out: {"self": _frexp(g, a, out)})))
nondifferentiable("isposinf", "isneginf", "signbit", "gcd", "lcm")


defgrad("ldexp", per_input(self=reads("other", lambda g, a, out: g * a.other.exp2()),
                           other=reads("result", lambda g, a, out: g * out * _LN2)))
# Composites whose in-place form records one node of the op itself
defgrad("float_power", per_input(self=reads("self exponent", _pow_self),
                                 exponent=reads("self exponent result", _pow_exponent)))
defgrad("mvlgamma", per_input(self=reads("self", lambda g, a, out: g * jt.sum(
    (a.self.unsqueeze(-1) + mvlgamma_shifts(a.self, a.p)).digamma(), -1))))
defgrad("special_entr", per_input(self=reads("self", lambda g, a, out: g * -(1 + a.self.log()))))
