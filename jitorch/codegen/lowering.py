"""Which graph nodes the code generator can lower, and how: scalar lowerings per op.

Each lowering is its op's "lowering" piece in the registry (``op.pieces``): a `Pointwise`, a
`Reduction` or a `Cast`, with the condition on a node's arguments under which it applies. The fusion
pass asks `kind_of(node)`; the kernel builder asks the node's op for its lowering. Each lowering mirrors the
eager formula of its op in jitorch/ops/pointwise.py (NumPy's semantics for
NaN, signed zeros and ties), since compiled results are checked against eager.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from llvmlite import ir

from ..ir import lowerable
from ..ir.graph import Value, iter_values
from ..ops import powers
from ..ops.creation import arange_plan
from ..ops.meta import opmath
from ..ops.pointwise import ldexp_power_dtype
from ..ops.pointwise_scaled import multiplier
from ..ops.reductions import reduces_nothing
from ..ops.registry import attach
from ..runtime import dtypes as _dt
from ..runtime.casts import convert
from . import mathlib
from .emitter import Scalar, llvm_type

# Element dtypes kernels handle (half types are computed in float32, as eager does).
DTYPES = frozenset(_dt.ALL)


def _maximum(e, p, q):
    """NumPy's maximum(p, q): p if p > q or p is NaN, else q (ties give q)."""
    take_p = e.logical("or_", e.compare(">", p, q), e.isnan(p))
    return e.select(take_p, p, q)


def _minimum(e, p, q):
    take_p = e.logical("or_", e.compare("<", p, q), e.isnan(p))
    return e.select(take_p, p, q)


def _add(e, a, b, alpha):
    return e.add(a, b if alpha == 1 else e.mul(b, e.const(alpha, b.dtype)))


def _sub(e, a, b, alpha):
    return e.sub(a, b if alpha == 1 else e.mul(b, e.const(alpha, b.dtype)))


def _abs(e, a):
    if a.dtype.is_floating_point:
        return e.intrinsic("llvm.fabs", a)
    if not a.dtype.is_signed:
        return a
    return e.select(e.compare("<", a, e.const(0, a.dtype)), e.neg(a), a)


def _sign(e, a):
    zero = e.const(0, a.dtype)
    pos, neg = e.cast(e.compare(">", a, zero), a.dtype), e.cast(e.compare("<", a, zero), a.dtype)
    return e.sub(pos, neg)


def _clamp(e, x, lo, hi):
    if lo is not None:
        x = _maximum(e, lo, x)
    if hi is not None:
        x = _minimum(e, hi, x)
    return x


def _rounding(intrinsic):
    def lower(e, x, *rest):
        return e.intrinsic(intrinsic, x) if x.dtype.is_floating_point else x
    return lower


def _round(e, x, decimals):
    # can_lower admits decimals None or 0 only; rint rounds half to even, as NumPy and torch do
    return e.intrinsic("llvm.rint", x) if x.dtype.is_floating_point else x


def _frac(e, x):
    return e.sub(x, e.intrinsic("llvm.trunc", x))


def _lerp(e, start, end, weight):
    diff = e.sub(end, start)
    one, half = e.const(1, start.dtype), e.const(0.5, start.dtype)
    low = e.add(start, e.mul(weight, diff))
    high = e.sub(end, e.mul(diff, e.sub(one, weight)))
    return e.select(e.compare("<", _abs(e, weight), half), low, high)


def _isinf(e, x):
    if not x.dtype.is_floating_point:
        return e.const(False, _dt.bool)
    return e.compare("==", _abs(e, x), e.const(float("inf"), x.dtype))


def _isfinite(e, x):
    if not x.dtype.is_floating_point:
        return e.const(True, _dt.bool)
    return e.compare("<", _abs(e, x), e.const(float("inf"), x.dtype))


def _truthy(e, x):
    return e.cast(x, _dt.bool)


def _logical(op):
    def lower(e, a, b):
        return e.logical(op, _truthy(e, a), _truthy(e, b))
    return lower


def _logical_not(e, a):
    return e.logical("xor", _truthy(e, a), e.const(True, _dt.bool))


def _bitwise(op):
    def lower(e, a, b):
        return e.bitwise(op, a, b)
    return lower


def _bitwise_not(e, a):
    ones = e.const(True, _dt.bool) if a.dtype is _dt.bool else e.const(-1, a.dtype)
    return e.bitwise("xor", a, ones)


def _compare(op):
    def lower(e, a, b):
        return e.compare(op, a, b)
    return lower


def _math(name):
    def lower(e, x, *rest):
        return e.math(name, x)
    return lower


def _relu(e, x):
    return _maximum(e, e.const(0, x.dtype), x)


def _sign_differs(e, r, b):
    """Whether a nonzero remainder ``r`` and the divisor ``b`` have opposite signs (NaN ``r`` counts as
    nonzero, as in C's ``if (mod)``): where Python's modulus and floor division step away from C's."""
    zero = e.const(0, r.dtype)
    return e.logical("and_", e.compare("!=", r, zero), e.logical("xor", e.compare("<", r, zero),
                                                                  e.compare("<", b, zero)))


def _fmod(e, a, b):
    return e.fmod(a, b) if a.dtype.is_floating_point else e.int_divmod(a, b)[1]


def _remainder(e, a, b):
    # torch's rule (eager's formula): fmod's result plus the divisor where their signs differ
    m = _fmod(e, a, b)
    return e.select(_sign_differs(e, m, b), e.add(m, b), m)


def _floor_divide(e, a, b):
    if not a.dtype.is_floating_point:
        q, r = e.int_divmod(a, b)
        return e.sub(q, e.cast(_sign_differs(e, r, b), q.dtype))
    # NumPy's npy_floor_divide: (a - fmod(a, b)) / b, stepped down where Python's modulus differs from
    # fmod's, snapped to the nearest integer; a zero takes the sign of a / b, and b == 0 gives a / b
    zero, one = e.const(0, a.dtype), e.const(1, a.dtype)
    quotient = e.div(a, b)
    mod = e.fmod(a, b)
    div = e.div(e.sub(a, mod), b)
    div = e.select(_sign_differs(e, mod, b), e.sub(div, one), div)
    down = e.intrinsic("llvm.floor", div)
    down = e.select(e.compare(">", e.sub(div, down), e.const(0.5, a.dtype)), e.add(down, one), down)
    result = e.select(e.compare("!=", div, zero), down, e.intrinsic("llvm.copysign", zero, quotient))
    return e.select(e.compare("==", b, zero), quotient, result)


def _div_trunc(e, a, b):
    if a.dtype.is_floating_point:
        return e.intrinsic("llvm.trunc", e.div(a, b))
    return e.int_divmod(a, b)[0]


_LN2 = math.log(2.0)


def _logaddexp(e, a, b):
    """NumPy's npy_logaddexp: equal arguments (infinities of one sign) give ``a + log 2``; otherwise the
    larger plus ``log1p(exp(-|a - b|))``; NaN in gives NaN."""
    d = e.sub(a, b)
    a_larger = e.compare(">", d, e.const(0, a.dtype))
    big = e.select(a_larger, a, b)
    tail = e.math("log1p", e.math("exp", e.neg(_abs(e, d))))
    result = e.select(e.logical("or_", a_larger, e.compare("<=", d, e.const(0, a.dtype))), e.add(big, tail), d)
    return e.select(e.compare("==", a, b), e.add(a, e.const(_LN2, a.dtype)), result)


def _hypot(e, a, b):
    """libm's hypot, as NumPy calls it: an infinity gives inf even beside NaN; float32 is computed in
    float64 (glibc's hypotf); float64 by glibc's scaled kernel (Borges, 2019)."""
    x, y = _abs(e, a), _abs(e, b)
    inf = e.const(float("inf"), a.dtype)
    if a.dtype is _dt.float32:
        wx, wy = e.cast(x, _dt.float64), e.cast(y, _dt.float64)
        h = e.cast(e.intrinsic("llvm.sqrt", e.add(e.mul(wx, wx), e.mul(wy, wy))), a.dtype)
    else:
        h = _hypot64(e, x, y)
    either_inf = e.logical("or_", e.compare("==", x, inf), e.compare("==", y, inf))
    return e.select(either_inf, inf, h)


def _hypot64(e, x, y):
    """glibc's __hypot for finite or NaN ``|x|, |y|``: order them, scale huge or tiny ones by 2**-600 or
    2**600, one corrected square root (`_hypot_kernel`); a negligible smaller term gives ``ax + ay``."""
    c = lambda v: e.const(v, x.dtype)  # noqa: E731
    x_smaller = e.compare("<", x, y)
    ax, ay = e.select(x_smaller, y, x), e.select(x_smaller, x, y)
    huge, tiny = e.compare(">", ax, c(2.0 ** 511)), e.compare("<", ay, c(2.0 ** -511))
    scale = e.select(huge, c(2.0 ** -600), e.select(tiny, c(2.0 ** 600), c(1.0)))
    kernel = _hypot_kernel_fma if _LIBM_HYPOT_FMA else _hypot_kernel
    h = e.div(kernel(e, e.mul(ax, scale), e.mul(ay, scale)), scale)
    # negligible as glibc tests it: a tiny ay by ``ax >= ay * 2**54``, exact where ``ax * 2**-54``
    # would round into the subnormals (ax = 1.01 * 2**-1021 beside ay = 2**-1074 is not negligible)
    tiny = e.logical("and_", tiny, e.compare("<=", ax, c(2.0 ** 511)))
    negligible = e.select(tiny, e.compare(">=", ax, e.mul(ay, c(2.0 ** 54))),
                          e.compare("<=", ay, e.mul(ax, c(2.0 ** -54))))
    return e.select(negligible, e.add(ax, ay), h)


def _hypot_kernel_fma(e, ax, ay):
    """glibc's kernel where libm is built with FMA (``__FP_FAST_FMA``: AArch64, POWER)."""
    t1, t2 = e.add(ay, ay), e.sub(ax, ay)
    return e.intrinsic("llvm.sqrt", e.select(e.compare(">=", t1, ax), e.intrinsic("llvm.fma", t1, ax, e.mul(t2, t2)),
                                             e.intrinsic("llvm.fma", ax, ax, e.mul(ay, ay))))


def _hypot_kernel(e, ax, ay):
    """glibc's kernel without FMA (x86-64's build): ``sqrt(ax² + ay²)`` corrected by one Newton step on
    its rounding errors."""
    c = lambda v: e.const(v, ax.dtype)  # noqa: E731
    h = e.intrinsic("llvm.sqrt", e.add(e.mul(ax, ax), e.mul(ay, ay)))
    near = e.compare("<=", h, e.mul(c(2.0), ay))
    d_near, d_far = e.sub(h, ay), e.sub(h, ax)
    t1_near = e.mul(ax, e.sub(e.mul(c(2.0), d_near), ax))
    t2_near = e.mul(e.sub(d_near, e.mul(c(2.0), e.sub(ax, ay))), d_near)
    t1_far = e.mul(e.mul(c(2.0), d_far), e.sub(ax, e.mul(c(2.0), ay)))
    t2_far = e.add(e.mul(e.sub(e.mul(c(4.0), d_far), ay), ay), e.mul(d_far, d_far))
    t1, t2 = e.select(near, t1_near, t1_far), e.select(near, t2_near, t2_far)
    return e.sub(h, e.div(e.add(t1, t2), e.mul(c(2.0), h)))


# The two kernels round differently in about one case in eight with operands of similar size; eager is
# NumPy, which calls the host's libm: a pair on which they differ tells which one it has.
_LIBM_HYPOT_FMA = float(np.hypot(18.17280756673385, 18.177153600510024)) == 25.703304220937696


def _shift(direction):
    def lower(e, a, n):
        return e.shift_left(a, n) if direction == "left" else e.shift_right(a, n)
    return lower


_HALVES = (_dt.float16, _dt.bfloat16)


def _isclose(e, a, b, rtol, atol, equal_nan):
    """Eager's formula, each operation rounded as NumPy rounds it: integers and bools are measured in the
    default float dtype; float16 arithmetic rounds every step to float16; bfloat16 (ml_dtypes) rounds
    ``a - b`` to bfloat16 but takes Python floats into float32."""
    dtype = a.dtype if a.dtype.is_floating_point else _dt.get_default_dtype()
    work = _dt.float32 if dtype in _HALVES else dtype
    if a.dtype in _HALVES:  # compared and computed in float32, which holds them exactly
        a, b = e.cast(a, work), e.cast(b, work)
    close = e.compare("==", a, b)
    if equal_nan and a.dtype.is_floating_point:
        close = e.logical("or_", close, e.logical("and_", e.isnan(a), e.isnan(b)))
    if rtol == 0 and atol == 0:
        return close
    scalars = _dt.float32 if dtype is _dt.bfloat16 else dtype  # the dtype Python floats round to

    def rounded(s, to=dtype):
        return e.cast(e.cast(s, to), work) if to in _HALVES else s

    def number(v):
        return rounded(e.const(convert(np.array(v), scalars.np).item(), work), scalars)

    a, b = e.cast(a, work), e.cast(b, work)
    error = rounded(_abs(e, rounded(e.sub(a, b))))
    bound = rounded(e.add(number(atol), rounded(_abs(e, rounded(e.mul(number(rtol), b), scalars)), scalars)),
                    scalars)
    within = e.logical("and_", _isfinite(e, error), e.compare("<=", error, bound))
    return e.logical("or_", close, within)


def _stored(dtype, value):
    """A Python fill value as eager's fills convert it (the cast table)."""
    return convert(np.array(value), dtype.np)


# ops whose Python fill value eager converts to the tensor's dtype
FILL_VALUES = ("fill.Scalar", "masked_fill")


def _fill(e, x, value):
    if isinstance(value, Scalar):
        return value  # a 0-d tensor, already converted to x's dtype
    return e.const(_stored(x.dtype, value).item(), x.dtype)


def _masked_fill(e, x, mask, value):
    fill = value if isinstance(value, Scalar) else e.const(_stored(x.dtype, value).item(), x.dtype)
    return e.select(_truthy(e, mask), fill, x)


def _multiplier(e, value, dtype):
    """addcmul's and addcdiv's ``value`` as eager reads it in the compute dtype (truncated for integers)."""
    return e.const(multiplier(value, dtype).item(), dtype)


def _addcmul(e, x, a, b, value):
    scaled = e.mul(_multiplier(e, value, a.dtype), a)
    if x.dtype is not _dt.float32:
        return e.add(x, e.mul(scaled, b))
    # eager's float32 formula: the fused multiply-add, in float64 where the product is exact
    wide = [e.cast(v, _dt.float64) for v in (x, scaled, b)]
    return e.cast(e.add(wide[0], e.mul(wide[1], wide[2])), _dt.float32)


@dataclass(frozen=True)
class Pointwise:
    """How a pointwise op lowers: ``emit(e, *operands in the compute dtype, *other args)`` gives its
    Scalar in the compute dtype. ``when(node)`` says whether a node's arguments lower (None: all do;
    else the node runs as an external op); ``math``: it needs the math library."""

    emit: Callable
    when: Callable = None
    math: bool = False
    kind = "pointwise"


@dataclass(frozen=True)
class Cast:
    """A dtype conversion on one device (``_to_copy``) or a copy (``clone``): the kernel converts each element."""

    when: Callable
    math = False
    kind = "pointwise"


def pointwise(names, emit, when=None, math=False):
    """Attach ``emit`` as the lowering of the ops ``names`` (and their aliases): see `Pointwise`."""
    attach("lowering", names, Pointwise(emit, when, math))


# Integer division by zero raises in eager, which a kernel cannot: integer divisions lower only by a
# nonzero Python number.
def _integer_divisor_known_nonzero(node):
    dtype, divisor = node.outputs[0].type.dtype, node.args[1]
    if dtype.is_floating_point:
        return True
    return not isinstance(divisor, Value) and convert(np.array(divisor), dtype.np).item() != 0


def _rounded_divisor_lowers(node):
    """floor_divide's and div(rounding_mode='trunc')'s rule: `_integer_divisor_known_nonzero`, and on the CPU
    a half-type result only by one divisor for every element (a number or a one-element tensor): torch's CPU
    kernels divide a half type by a tensor of several elements rounding steps to the half type (eager's
    formulas), which a kernel computing in float32 would not; on CUDA torch computes in float32 throughout."""
    out = node.outputs[0].type
    divisor = node.args[1]
    if out.dtype in _HALVES and out.device.type == "cpu" and isinstance(divisor, Value) \
            and math.prod(divisor.type.shape) != 1:
        return False
    return _integer_divisor_known_nonzero(node)


def _fill_value_converts(node):
    """Whether eager converts the Python fill value (else eager raises, and the op stays eager's)."""
    try:
        _stored(node.outputs[0].type.dtype, node.args[-1])
    except (OverflowError, ValueError, TypeError):
        return False
    return True


def _largest(dtype):
    return _dt.finfo(dtype).max if dtype.is_floating_point else _dt.iinfo_range(dtype)[1]


def _fill_tensor_always_fits(node):
    """Whether every value of the 0-d fill tensor's dtype fits the result's: eager (as torch's CPU kernel, which
    reads ``value.item()``) raises for one that does not, which a kernel cannot, so such a fill stays eager's."""
    value, out = node.args[-1].type.dtype, node.outputs[0].type.dtype
    if value == out or _dt.bool in (value, out):  # (any number converts to a bool, as torch's check says)
        return True
    if not out.is_floating_point and (value.is_floating_point or _dt.iinfo_range(value)[0] < _dt.iinfo_range(out)[0]):
        return False
    return _largest(value) <= _largest(out)


def _pow_by_number(e, a, b):
    """A float32 ``a ** n`` for a number ``n`` the simplification pass left where `powers.by_products` says so
    (`powers.pow_by_products`, eager's formula: in double, rounded once), else None."""
    value = b.value
    if a.dtype is not _dt.float32 or not isinstance(value, ir.Constant) or not isinstance(value.constant, float) \
            or not powers.by_products(value.constant):
        return None
    x = e.cast(a, _dt.float64)
    return e.cast(Scalar(mathlib.run(e.b, powers.pow_by_products, x.value, value.constant), _dt.float64), _dt.float32)


def _floating_result(node):
    return node.outputs[0].type.dtype.is_floating_point


def _binary(method):
    def lower(e, a, b):
        return getattr(e, method)(a, b)
    return lower


pointwise("add", _add)
pointwise("sub", _sub)
pointwise("rsub", lambda e, a, b, alpha: _sub(e, b, a, alpha))
pointwise("mul", _binary("mul"))
pointwise("true_divide", _binary("div"))
pointwise("neg", lambda e, a: e.neg(a))
pointwise("abs", _abs)
pointwise("sign", _sign)
pointwise("relu", _relu)
pointwise("reciprocal", lambda e, a: e.div(e.const(1, a.dtype), a))
pointwise("maximum", lambda e, a, b: _maximum(e, b, a))
pointwise("minimum", lambda e, a, b: _minimum(e, b, a))
pointwise("clamp", _clamp)
pointwise("clamp_min", lambda e, x, lo: _clamp(e, x, lo, None))
pointwise("clamp_max", lambda e, x, hi: _clamp(e, x, None, hi))
pointwise("sqrt", lambda e, x: e.intrinsic("llvm.sqrt", x))
pointwise("rsqrt", lambda e, x: e.div(e.const(1, x.dtype), e.intrinsic("llvm.sqrt", x)))
pointwise("floor", _rounding("llvm.floor"))
pointwise("ceil", _rounding("llvm.ceil"))
pointwise("trunc", _rounding("llvm.trunc"))
pointwise("round", _round, when=lambda node: not node.args[1])
pointwise("frac", _frac)
pointwise("lerp", _lerp)
pointwise("where.self", lambda e, c, a, b: e.select(_truthy(e, c), a, b))
for _name, _op in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    pointwise(_name, _compare(_op))
for _name, _operator in (("and", "and_"), ("or", "or_"), ("xor", "xor")):
    pointwise(f"logical_{_name}", _logical(_operator))
    pointwise(f"bitwise_{_name}", _bitwise(_operator))
pointwise("logical_not", _logical_not)
pointwise("bitwise_not", _bitwise_not)
pointwise("isnan", lambda e, x: e.isnan(x))
pointwise("isinf", _isinf)
pointwise("isfinite", _isfinite)
pointwise("floor_divide", _floor_divide, when=_rounded_divisor_lowers)
pointwise("_div_trunc", _div_trunc, when=_rounded_divisor_lowers)
pointwise("remainder", _remainder, when=_integer_divisor_known_nonzero)
pointwise("fmod", _fmod, when=_integer_divisor_known_nonzero)
pointwise("hypot", _hypot)
pointwise("logaddexp", _logaddexp, math=True)
pointwise("isclose", _isclose)
pointwise("bitwise_left_shift", _shift("left"))
pointwise("bitwise_right_shift", _shift("right"))
pointwise("fill.Scalar", _fill, when=_fill_value_converts)
pointwise("fill.Tensor", _fill)
pointwise("zero", lambda e, x: _fill(e, x, 0))
pointwise("masked_fill", _masked_fill, when=_fill_value_converts)
pointwise("masked_fill.Tensor", _masked_fill, when=_fill_tensor_always_fits)
for _name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh", "erf",
              "erfc", "sigmoid", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"):
    pointwise(_name, _math(_name), math=True)
pointwise("_normal_cdf", _math("normal_cdf"), math=True)
pointwise("_normal_pdf", _math("normal_pdf"), math=True)
pointwise("pow", lambda e, a, b: _pow_by_number(e, a, b) or e.math("pow", a, b), when=_floating_result, math=True)

def _fmax(e, a, b):
    """eager's fmax: ``a`` where ``a >= b`` or ``b`` is NaN (ties give the first operand), else ``b``."""
    return e.select(e.logical("or_", e.compare(">=", a, b), e.isnan(b)), a, b)


def _fmin(e, a, b):
    return e.select(e.logical("or_", e.compare("<=", a, b), e.isnan(b)), a, b)


def _heaviside(e, x, values):
    zero = e.const(0, x.dtype)
    return e.select(e.compare("==", x, zero), values, e.cast(e.compare(">", x, zero), x.dtype))


def _xlogy(e, x, y):
    """eager's xlogy: NaN where ``y`` is, else 0 where ``x`` is 0, else ``x log(y)`` (the log jitorch defines,
    `powers.log_double`, as eager's)."""
    product = e.mul(x, e.math("log_defined", y))
    zero = e.const(0, x.dtype)
    return e.select(e.isnan(y), e.const(float("nan"), x.dtype), e.select(e.compare("==", x, zero), zero, product))


def _constant_times(c):
    return lambda e, x: e.mul(x, e.const(c, x.dtype))


def _sinc(e, x):
    product = e.mul(x, e.const(math.pi, x.dtype))
    return e.select(e.compare("==", x, e.const(0, x.dtype)), e.const(1, x.dtype),
                    e.div(e.math("sin", product), product))


def _angle(e, x):
    pi_or_zero = e.select(e.compare("<", x, e.const(0, x.dtype)), e.const(math.pi, x.dtype), e.const(0, x.dtype))
    return e.select(e.isnan(x), x, pi_or_zero)


def _equals(value):
    def lower(e, x):
        if not x.dtype.is_floating_point:
            return e.const(False, _dt.bool)
        return e.compare("==", x, e.const(value, x.dtype))
    return lower


def _signbit(e, x):
    if not x.dtype.is_floating_point:
        return e.compare("<", x, e.const(0, x.dtype)) if x.dtype.is_signed else e.const(False, _dt.bool)
    wide = e.cast(x, _dt.float64 if x.dtype is _dt.float64 else _dt.float32)  # exact, the sign bit (of NaN too) kept
    bits = _dt.int64 if wide.dtype is _dt.float64 else _dt.int32
    as_int = Scalar(e.b.bitcast(wide.value, llvm_type(bits)), bits)
    return e.compare("<", as_int, e.const(0, bits))


def _logit(e, x, eps):
    if eps is not None and eps >= 0:
        lo = e.const(eps, x.dtype)
        hi = e.sub(e.const(1, x.dtype), lo)
        # eager's (torch's) clamp: lo below lo, else hi above hi, so an eps over 1/2 (lo > hi) gives both
        x = e.select(e.compare("<", x, lo), lo, e.select(e.compare(">", x, hi), hi, x))
    return e.math("log", e.div(x, e.sub(e.const(1, x.dtype), x)))


def _not_half(node):
    """Eager's logit rounds each step of a half type to it; a kernel computes halves in float32."""
    return node.outputs[0].type.dtype not in _HALVES


pointwise("copysign", lambda e, a, b: e.intrinsic("llvm.copysign", a, b))
pointwise("fmax", _fmax)
pointwise("fmin", _fmin)
pointwise("heaviside", _heaviside)
pointwise("xlogy", _xlogy, math=True)
pointwise("deg2rad", _constant_times(math.pi / 180))
pointwise("rad2deg", _constant_times(180 / math.pi))
pointwise("sinc", _sinc, math=True)
pointwise("angle", _angle)
pointwise("isposinf", _equals(float("inf")))
pointwise("isneginf", _equals(float("-inf")))
pointwise("signbit", _signbit)
def _ldexp_power_unrounded(node):
    """Whether ldexp's power, which a kernel computes in the result's compute dtype, is eager's: torch rounds it to
    `ldexp_power_dtype` (a narrower exponent dtype's power stays eager's)."""
    other, compute = node.args[1], opmath(node.outputs[0].type.dtype)
    if not isinstance(other, Value):
        return True  # (a number: 0-d, its power in the compute dtype)
    return ldexp_power_dtype(other.type.dtype, len(other.type.shape), compute) is compute


pointwise("ldexp", lambda e, x, other: e.mul(x, e.math("exp2", other)), when=_ldexp_power_unrounded, math=True)
pointwise("logit", _logit, when=_not_half, math=True)
pointwise("atan2", lambda e, a, b: e.math("atan2", a, b), math=True)
pointwise("addcmul", _addcmul)
pointwise("addcdiv", lambda e, x, a, b, value: e.add(x, e.div(e.mul(_multiplier(e, value, a.dtype), a), b)))
attach("lowering", "_to_copy", Cast(when=lambda node: node.args[2] is None or node.args[2] == node.args[0].type.device))
# a clone is a copy of each element into the layout the executor gives its result (eager's, `_clone_strides`): as a
# kernel it reads a strided operand through the views folded into it (the saved im2col windows of a split call's
# forward graph, whose clone is a graph output, were NumPy's strided copy)
attach("lowering", "clone", Cast(when=None))


@dataclass(frozen=True)
class Gather:
    """An indexed load (``gather``, ``index_select``): each output element reads the source at its own position,
    but along ``dim``, where it reads the position the index tensor holds there (see `kernel._Builder`'s
    gathers). Both operands are read where they lie, as a view's are, so fusion keeps a gather in the group of
    its consumers and out of its operands' (`ir.passes.fusion`); the index is checked against the source's
    dim before the kernel runs (`ops.indexing.check_gather_index`), so a kernel never reads out of bounds.
    ``when(node)`` says whether a node's arguments lower (else it runs as an eager step)."""

    when: Callable
    math = False
    kind = "gather"


def _gathers_on_cpu(node):
    """A gather or index_select on the CPU along an int dim of a non-empty source, by a non-empty index of
    gather's form (the source's number of dims) or index_select's (a vector). (On CUDA, eager's kernels check
    the indices on the device; the CPU's check runs on the host before the kernel.)"""
    src, dim, index = node.args[:3]
    out = node.outputs[0].type
    if out.device.type != "cpu" or not isinstance(dim, int) or not isinstance(src, Value) \
            or not isinstance(index, Value) or not src.type.shape or not math.prod(out.shape) \
            or index.type.dtype not in (_dt.int32, _dt.int64):
        return False
    if node.op.name == "gather":
        return len(index.type.shape) == len(src.type.shape)
    return len(index.type.shape) == 1


attach("lowering", "gather index_select", Gather(when=_gathers_on_cpu))


@dataclass(frozen=True)
class Index:
    """An index expression (``arange``): each element's value computed from its position alone, where a kernel
    reads it: a leaf without a buffer, which views and gathers in the kernel read as they read a buffer's
    leaves (`kernel._Builder.read`). ``terms(node)``: (first value, increment)."""

    when: Callable
    terms: Callable
    math = False
    kind = "index"


def _arange_plan(node):
    """(length, first value, increment) of an arange node, as eager computes them."""
    start, end, step = node.args[:3]
    if end is None:
        start, end = 0, start
    return arange_plan(start, end, step, node.outputs[0].type.dtype)


def _integer_range_on_cpu(node):
    """An int64 arange on the CPU from Python numbers: ``first + increment * position``, exactly eager's."""
    out = node.outputs[0].type
    return out.device.type == "cpu" and out.dtype is _dt.int64 and not any(isinstance(a, Value) for a in node.args)


attach("lowering", "arange", Index(when=_integer_range_on_cpu, terms=lambda node: _arange_plan(node)[1:]))


@dataclass(frozen=True)
class Reduction:
    """How a reduction lowers: ``identity``, ``combine(e, acc, x)`` and ``finish(e, acc, count)`` (or
    None). ``item(e, x)`` maps each element (in the op's compute dtype) as it enters the accumulator
    (None: the element itself); the accumulator has the compute dtype, or the result dtype if ``counts``.
    ``keyed``: float elements are accumulated as their ordered integer keys (`_float_key`), so that the
    combine is an integer max or min, a reduction LLVM's loop vectoriser recognises on every version;
    the float compare-and-select that keeps NaN vectorises only under no-NaN flags, with which a NaN
    would be poison (kernel.float_extremum, the CPU's max along a run of reduced elements, uses them and
    catches NaN apart). ``leave`` turns the accumulator back into the compute dtype. ``indexed``: the op also
    gives the index of the element chosen (max.dim, argmax): ``combine(e, acc, x)`` then says whether ``x``
    takes the accumulator's place, and the kernel keeps its index beside it. ``rounds_input``: each element is
    cast to the result dtype before it enters (`reduced_input`)."""

    identity: object
    combine: Callable
    finish: Callable = None
    item: Callable = None
    counts: bool = False
    keyed: bool = False
    when: Callable = None
    indexed: bool = False
    rounds_input: bool = False
    math = False
    kind = "reduction"

    def accumulator(self, compute, result):
        """The dtype the reduction accumulates in."""
        dtype = result if self.counts else compute
        return _KEYS[dtype] if self.keyed and dtype in _KEYS else dtype

    def enter(self, e, x, compute, acc):
        """Element ``x`` (of any dtype) as it is combined into an accumulator of dtype ``acc``."""
        x = e.cast(x, compute)
        x = x if self.item is None else self.item(e, x)
        if self.keyed and compute in _KEYS:
            return _float_key(e, x, acc, nan_high=self.identity < 0)
        return e.cast(x, acc)

    def leave(self, e, acc, compute):
        """The accumulated value in the compute dtype (what ``finish`` and the epilogue see)."""
        return _float_of_key(e, acc, compute) if self.keyed and compute in _KEYS else acc

    def start(self, e, compute, acc):
        """The identity as the accumulator holds it: an integer max or min starts at its dtype's lowest
        or highest value, a keyed one at the key of -inf or inf."""
        identity = self.identity
        if identity in (float("inf"), float("-inf")) and not compute.is_floating_point:
            lo, hi = (0, 1) if compute.kind == "b" else _dt.iinfo_range(compute)
            identity = hi if identity > 0 else lo
        return self.enter(e, e.const(identity, compute), compute, acc)


# A float's bits read as a signed integer, the magnitude bits flipped where the sign is set, order the
# floats as the integers: -inf < ... < -0.0 < 0.0 < ... < inf (NaN outside, set by `_float_key`).
_KEYS = {_dt.float32: _dt.int32, _dt.float64: _dt.int64}


def _flip_negative(e, bits):
    """``bits`` with every bit but the sign inverted where the sign is set: its own inverse."""
    sign = e.b.ashr(bits.value, e.const(bits.dtype.itemsize * 8 - 1, bits.dtype).value)
    return Scalar(e.b.xor(bits.value, e.b.lshr(sign, e.const(1, bits.dtype).value)), bits.dtype)


def _float_key(e, x, key_dtype, nan_high):
    """The ordered integer key of float ``x``; NaN is the highest key if ``nan_high``, else the lowest,
    so that it wins a max (or a min) whatever else is reduced, as NumPy's NaN propagates."""
    key = _flip_negative(e, Scalar(e.b.bitcast(x.value, llvm_type(key_dtype)), key_dtype))
    lo, hi = _dt.iinfo_range(key_dtype)
    return e.select(e.isnan(x), e.const(hi if nan_high else lo, key_dtype), key)


def _float_of_key(e, key, dtype):
    """The float whose key is ``key`` (the two NaN keys give NaNs)."""
    return Scalar(e.b.bitcast(_flip_negative(e, key).value, llvm_type(dtype)), dtype)


def reduced_input(e, reduction, x, compute, result):
    """Element ``x`` of ``reduction``'s input as it reads it, in its ``compute`` dtype: for a reduction that
    `Reduction.rounds_input`, through its ``result`` dtype first where that is a float other than ``compute`` (a
    half type summed in float32). torch's sum casts its input to the ``dtype=`` it asks for before reducing, so
    each element rounds to it, as eager's does (fuzz seed 5770222: a compiled float64 ``sum(dtype=float16)``
    added unrounded elements); its mean of a half dtype reads the input as float32."""
    if reduction.rounds_input and result is not compute and result.is_floating_point:
        x = e.cast(x, result)
    return e.cast(x, compute)


def _add_all(e, acc, x):
    return e.add(acc, x, reassociate=True)


def _truth_combine(op):
    """all/any: the accumulator holds a truth value in its own dtype (bool, uint8 or a float). On a bool
    accumulator the operation is bitwise, so it holds whether bools are carried as i1 or as their i8."""
    def combine(e, acc, x):
        return e.cast(e.logical(op, _truthy(e, acc), _truthy(e, x)), acc.dtype)
    return combine


# Sums and products may reassociate, as every other library's do: the order of a float sum is not part
# of its meaning.
AMAX = Reduction(float("-inf"), lambda e, acc, x: _maximum(e, x, acc), keyed=True)
AMIN = Reduction(float("inf"), lambda e, acc, x: _minimum(e, x, acc), keyed=True)
attach("lowering", "sum", Reduction(0, _add_all, rounds_input=True))
attach("lowering", "nansum", Reduction(0, _add_all, item=lambda e, x: e.select(e.isnan(x), e.const(0, x.dtype), x),
                                       rounds_input=True))
attach("lowering", "mean", Reduction(0, _add_all, lambda e, acc, n: e.div(acc, e.const(n, acc.dtype)),
                                     when=_floating_result))


def _not_half_on_cpu(node):
    """torch's CPU prod rounds every product of a half type to it, in its own order (eager's
    `ops.half_products`); a kernel rounds once, as torch's CUDA prod does."""
    out = node.outputs[0].type
    return out.dtype not in _HALVES or out.device.type != "cpu"


attach("lowering", "prod", Reduction(1, lambda e, acc, x: e.mul(acc, x, reassociate=True), when=_not_half_on_cpu))
attach("lowering", "amax max", AMAX)
attach("lowering", "amin min", AMIN)


def _takes_place(op):
    """An indexed max's (``op`` ">") or min's ("<") choice, as NumPy's argmax and argmin make it: ``x`` takes
    the accumulator's place if strictly greater (less), so the first of equal elements keeps it (-0.0 equals
    0.0), or if it is the first NaN: a NaN beats every number and nothing beats a NaN."""
    def takes(e, acc, x):
        better = e.compare(op, x, acc)
        if not x.dtype.is_floating_point:
            return better
        first_nan = e.logical("and_", e.isnan(x), e.logical("xor", e.isnan(acc), e.const(True, _dt.bool)))
        return e.logical("or_", better, first_nan)
    return takes


# The longest run an indexed reduction reduces in a kernel: LLVM does not vectorise the loop that keeps an
# index (about 4 ns an element), so longer rows run faster as eager's NumPy argmax; pooling windows and class
# scores are short, and there the kernel is 5 to 20 times faster than eager.
INDEXED_MAX_COUNT = 32


def _short_on_cpu(node):
    """Indexed reductions lower for the CPU target only (a GPU block's combine carries one value, not a
    (value, index) pair, and the CUDA ops have their own implementations), over at most
    `INDEXED_MAX_COUNT` elements."""
    shape = node.args[0].type.shape
    dim = node.args[1]
    count = math.prod(shape) if dim is None or not shape else shape[dim]
    return node.outputs[0].type.device.type == "cpu" and count <= INDEXED_MAX_COUNT


attach("lowering", "max.dim argmax", Reduction(float("-inf"), _takes_place(">"), when=_short_on_cpu, indexed=True))
attach("lowering", "min.dim argmin", Reduction(float("inf"), _takes_place("<"), when=_short_on_cpu, indexed=True))


def _reduces_some_dim(node):
    """all/any over an explicit empty dim list reduce nothing: they run as their kernel, testing each element."""
    return len(node.args) < 2 or not reduces_nothing(node.args[1])


attach("lowering", "all", Reduction(1, _truth_combine("and_"), when=_reduces_some_dim))
attach("lowering", "any", Reduction(0, _truth_combine("or_"), when=_reduces_some_dim))
attach("lowering", "count_nonzero", Reduction(0, _add_all, item=_truthy, counts=True))


def math_available():
    """Whether the math library (exp, log, sin, ...) is there for kernels to call."""
    try:
        from . import mathlib  # noqa: F401
    except ImportError:
        return False
    return True


def _dtypes_lower(node):
    """Whether every value ``node`` reads (in its arguments, lists included) or writes has a dtype of `DTYPES`,
    checked without building their list: the passes, fusion and the recompute pass ask `kind_of` of every node,
    4-5 thousand times in the GPT step's compile (the list and its generators were 45% of that)."""
    for a in node.args:
        if isinstance(a, Value):
            if a.type.dtype not in DTYPES:
                return False
        elif isinstance(a, (list, tuple)) and not all(v.type.dtype in DTYPES for v in iter_values(a)):
            return False
    return all(o.type.dtype in DTYPES for o in node.outputs)


def can_lower(node):
    """Whether the code generator can put ``node`` in a kernel (else it runs as an external op)."""
    lowering = node.op.pieces.get("lowering")
    if lowering is None or not _dtypes_lower(node):
        return False
    if lowering.math and not math_available():
        return False
    return lowering.when is None or lowering.when(node)


def kind_of(node):
    """"pointwise", "reduction", "view", "gather", "index" or "external": how fusion treats a node."""
    if node.op.view is not None:
        return "view"
    # The answer reads the node's op, arguments and outputs' types (`can_lower`: dtypes, the op's rule of
    # them) and nothing else that changes; the passes, fusion and the memory plan ask it 7,000 times in the
    # GPT-4x128 step's warm first call, 1-2 us each. It is kept on the node with the op, the arguments tuple and
    # the outputs it was read from (`Node.kind_memo`), when that tuple holds no list a pass could edit in place
    # (a pass that rewrites a node, its op too, assigns it new arguments), and with the set of `DTYPES` it read.
    memo = node.kind_memo
    op = node.op
    if memo is not None and memo[0] is node.args and memo[1] is op and memo[2] == node.outputs \
            and memo[3] is DTYPES:
        return memo[4]
    kind = op.pieces["lowering"].kind if can_lower(node) else "external"
    if node.args_frozen():
        node.kind_memo = (node.args, op, list(node.outputs), DTYPES, kind)
    return kind


lowerable.register(kind_of)
