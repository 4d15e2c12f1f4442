"""Pointwise ops: arithmetic, math functions, rounding, comparisons and logic.

Families of ops are tables declared by one loop each; a row names an op and
its aliases ("ne not_equal") and gives its NumPy formula. Formulas are plain
NumPy ufuncs where NumPy computes what torch does, and small functions where
it does not: signed zeros of ``remainder``, ties of ``maximum``, the sign of
NaN, integer division by zero, shifts past the bit width, integer powers with
negative exponents, and ``erf`` (NumPy has none).

Checks (``check=``) raise torch's errors from dtypes and arguments before
anything is computed; the only data-dependent error is integer division by
zero, raised by the formula before it returns.
"""

from __future__ import annotations

import math
from numbers import Number

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime.casts import convert
from . import arc_functions, erf_float32, normal_cdf, powers, registry, special_math
from .meta import ALWAYS_BOOL, DEFAULT, INT_TO_FLOAT, KEEP_INT, opmath
from .pointwise_base import check_fits, defpointwise, memory_order, scalar_in
from .registry import cpp_name, defop, scalar_name
from .schema import parse_schema

ALL = ("function", "method", "inplace", "out")
NO_INPLACE = ("function", "method", "out")
QUERY = ("function", "method")

UNARY = "(Tensor self) -> Tensor"
BINARY = "(Tensor self, Tensor other) -> Tensor"


def _declare(names, signature, formula, promotion, doc, check=None, **kwargs):
    """Declare ``formula`` under each of ``names`` ("clamp clip": an op and its aliases)."""
    for name in names.split():
        defpointwise(name + signature, formula, promotion, doc=doc, check=_operand_kinds(name, signature, check),
                     **kwargs)
    registry.declare_aliases(names)


# Checks ---------------------------------------------------------------------------

def _unsupported(kernel, kinds):
    """A check: torch has no ``kernel`` for result dtypes of these kinds ("b", "iu", "f"; "h": the half types)."""
    def check(spec, *args):
        if spec.dtype.kind in kinds or "h" in kinds and spec.dtype in (_dt.float16, _dt.bfloat16):
            raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(spec.dtype)}'")
    check.reads_dtype_only = True  # (the eager shortcut runs it once per dtype: `pointwise_base._fast_path`)
    return check


def _is_bool(x):
    return x.__class__ is bool or getattr(x, "dtype", None) is _dt.bool


def _require_tensor(op_name, position, name, value):
    if not isinstance(value, registry.Tensor) and isinstance(value, Number):  # (a tensor skips the ABC's check)
        raise TypeError(f"{op_name}(): argument '{name}' (position {position}) must be Tensor, "
                        f"not {type(value).__name__}")


def _by_name(*rows):
    return {name: value for names, value in rows for name in names.split()}


# Operand positions that torch takes only as tensors: it has no Scalar overload there.
_TENSORS_ONLY = _by_name(
    ("atan2 arctan2 hypot logaddexp maximum minimum logical_and logical_or logical_xor fmax fmin heaviside "
     "logaddexp2 nextafter gcd lcm ldexp", (0, 1)),
    ("copysign rsub fmod clamp clip clamp_min clamp_max eq ne not_equal lt less le less_equal gt greater ge greater_equal",
     (0,)),
)
_TORCH_ARG_NAMES = {"self": "input"}  # what torch's argument errors call ``self``


def _check_bound_kinds(op_name, x, lo, hi):
    """torch's clamp has a Tensor overload and a Number one: the bounds may not mix."""
    if lo is not None and hi is not None and isinstance(lo, Number) != isinstance(hi, Number):
        got = ", ".join(type(v).__name__ if isinstance(v, Number) else "Tensor" for v in (x, lo, hi))
        raise TypeError(f"{op_name}() received an invalid combination of arguments - got ({got}), but expected one "
                        f"of:\n * (Tensor input, Tensor min = None, Tensor max = None, *, Tensor out = None)\n"
                        f" * (Tensor input, Number min = None, Number max = None, *, Tensor out = None)")


def _operand_kinds(op_name, signature, check):
    """``check`` preceded by torch's TypeErrors for Python numbers where it takes only tensors."""
    tensors = _TENSORS_ONLY.get(op_name, ())
    if not tensors:
        return check
    names = [a.name for a in parse_schema(op_name + signature).args]
    bounds = op_name in ("clamp", "clip")

    def checked(spec, *args):
        for i in tensors:
            _require_tensor(op_name, i + 1, _TORCH_ARG_NAMES.get(names[i], names[i]), args[i])
        if bounds:
            _check_bound_kinds(op_name, *args)
        if check is not None:
            check(spec, *args)
    checked.tensors_only = check is None and not bounds  # (it refuses numbers and nothing else: `_fast_path`)
    return checked


def _check_alpha(spec, a, b, alpha):
    if alpha.__class__ is int and alpha == 1:  # the default, valid for every dtype
        return
    if alpha.__class__ is bool:
        if spec.dtype is not _dt.bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    elif isinstance(alpha, float) and not spec.dtype.is_floating_point:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    else:
        check_fits(alpha, spec.dtype)


def _check_sub(spec, a, b, alpha):
    bools = _is_bool(a) + _is_bool(b)
    if bools == 2:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if bools:
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")
    # torch subtracts by adding ``-alpha``, the value its checked conversion sees (int8 takes 128, not -128)
    _check_alpha(spec, a, b, -alpha if alpha.__class__ is int else alpha)


def _check_neg(spec, x):
    if spec.dtype is _dt.bool:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                           "invert a mask, use the `~` or `logical_not()` operator instead.")


def _check_relu(spec, x):
    if spec.dtype is _dt.bool:
        raise RuntimeError("Boolean inputs not supported for relu")


_check_neg.reads_dtype_only = _check_relu.reads_dtype_only = True


def _by_fill_or_copy(base, exponent):
    """Whether torch computes ``base ** exponent`` without its pow kernel: a number exponent 0 fills ones and 1
    copies the base (pow_Tensor_Scalar_out), so bools raise to them too."""
    return isinstance(exponent, Number) and not isinstance(base, Number) and exponent in (0, 1)


def _check_pow(spec, base, exponent):
    if spec.dtype is _dt.bool and not _by_fill_or_copy(base, exponent):
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    if isinstance(exponent, Number) and not isinstance(base, Number) and spec.dtype not in (_dt.float32, _dt.float64):
        check_fits(exponent, spec.dtype)  # torch checks a number exponent's cast, except to float and double
    if (exponent.__class__ is int and exponent < 0 and not isinstance(base, Number)
            and not base.dtype.is_floating_point):
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _check_round(spec, x, decimals):
    # torch rounds integers only in its overload without decimals: round(x, decimals=0) raises for them
    if spec.dtype.kind == "b" or (decimals is not None and spec.dtype.kind in "iu"):
        kernel = "round_vml_cpu" if not decimals else "round_cpu"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(spec.dtype)}'")


def _check_clamp(spec, x, lo, hi):
    if lo is None and hi is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    numbers = [isinstance(v, Number) for v in (lo, hi) if v is not None]
    if spec.dtype is _dt.bool and (any(numbers) or len(numbers) == 2):
        which = "" if len(numbers) == 2 else ("min_" if hi is None else "max_")
        kernel = f"clamp_{which}scalar_cpu" if all(numbers) else "clamp_cpu"
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")
    for v in (lo, hi):
        if isinstance(v, Number):
            check_fits(v, spec.dtype)


def _check_lerp(spec, start, end, weight):
    _require_tensor("lerp", 1, "input", start)
    _require_tensor("lerp", 2, "end", end)
    for name, x in (("end", end), ("weight", weight)):
        # torch takes a 0-d weight of any dtype, as it takes a number
        if not isinstance(x, Number) and x.dtype is not start.dtype and not (name == "weight" and x.ndim == 0):
            raise RuntimeError(f"expected dtype {cpp_name(start.dtype)} for `{name}` but got dtype "
                               f"{cpp_name(x.dtype)}")
    # torch's kernels are for floats: a tensor weight takes part in the promotion (a 0-d float weight makes
    # integer ends float), a number does not
    number = isinstance(weight, Number)
    dtype = start.dtype if number else spec.dtype
    if not dtype.is_floating_point:
        kernel = "lerp_kernel_scalar" if number else "lerp_kernel_tensor"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(dtype)}'")
    if number:
        check_fits(weight, opmath(dtype))  # (torch converts the weight to the dtype its kernel computes in)


def _check_where(spec, condition, a, b):
    _require_tensor("where", 1, "condition", condition)
    if condition.dtype is _dt.uint8:
        registry.meta_warn("where received a uint8 condition tensor. This behavior is deprecated and will be "
                           "removed in a future version of PyTorch. Use a boolean condition instead.", stacklevel=5)
    elif condition.dtype is not _dt.bool:
        raise RuntimeError("where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{scalar_name(condition.dtype)}")
    for v in (a, b):
        if isinstance(v, Number) and spec.dtype not in (_dt.float16, _dt.bfloat16):  # torch's cast to them is unchecked
            check_fits(v, spec.dtype)


def _check_isclose_args(op_name, a, b, rtol, atol):
    _require_tensor(op_name, 1, "input", a)
    _require_tensor(op_name, 2, "other", b)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{scalar_name(a.dtype)} did not match {scalar_name(b.dtype)}")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if tol < 0:
            raise RuntimeError(f"{name} must be greater than or equal to zero, but got {tol:g}")


def _check_isclose(spec, a, b, rtol, atol, equal_nan):
    _check_isclose_args("isclose", a, b, rtol, atol)


# Formula helpers --------------------------------------------------------------------

def _dtype_of(a, b):
    """The compute dtype of a binary formula (one operand may be a Python number)."""
    return (a if a.__class__ is np.ndarray else b).dtype


def _nonzero_divisor(a, b):
    """torch raises for integer division by zero; NumPy would give 0 with a warning. An empty result divides
    nothing, and so raises nothing, whatever the divisor (broadcasting uses every element of a non-empty
    operand, so a zero anywhere in ``b`` is divided by where the result is not empty)."""
    if not (b.all() if b.__class__ is np.ndarray else b) and np.size(a) and np.size(b):
        raise RuntimeError("ZeroDivisionError")


def _alpha_times(b, alpha, like):
    """``alpha * b`` in the compute dtype; a number ``b`` (a NumPy scalar) multiplies as that dtype, wrapping, and
    so does ``alpha``, converted to it as torch converts it (`scalar_in`: a negative one wraps for an unsigned
    dtype)."""
    if b.__class__ is not np.ndarray:
        b = np.array(b, like.dtype)
    return np.multiply(b, scalar_in(alpha, b.dtype))


# Arithmetic -----------------------------------------------------------------------

def _add(a, b, alpha):
    return np.add(a, b) if alpha == 1 else np.add(a, _alpha_times(b, alpha, a))


def _sub(a, b, alpha):
    return np.subtract(a, b) if alpha == 1 else np.subtract(a, _alpha_times(b, alpha, a))


def _add_into(a, b, alpha, out):
    np.add(a, b if alpha == 1 else _alpha_times(b, alpha, a), out=out)


def _sub_into(a, b, alpha, out):
    np.subtract(a, b if alpha == 1 else _alpha_times(b, alpha, a), out=out)


# what `pointwise_base.write_into` calls for them on two arrays of one dtype, alpha converted once (`_alpha_times`)
_add_into.scaled, _sub_into.scaled = np.add, np.subtract
_add_into.factor_in = _sub_into.factor_in = scalar_in


def _rsub(a, b, alpha):
    return _sub(b, a, alpha)


def _floor_divide(a, b, dtype=None):
    if _dtype_of(a, b).kind in "iu":
        _nonzero_divisor(a, b)
    elif _rounds_in_half(dtype, b):
        return _floor_divide_in_half(a, b, dtype)
    return np.floor_divide(a, b)


def _rounds_in_half(dtype, b):
    """Whether torch's CPU division kernels round each step to the half type ``dtype``: by a divisor of several
    elements (by one divisor for every element they compute in float32)."""
    return (dtype is _dt.float16 or dtype is _dt.bfloat16) and np.size(b) != 1


def _floor_divide_in_half(a, b, dtype):
    """torch's CPU floor division of a half type by a tensor of several elements: c10's div_floor_floating in
    the half type, every step rounded to it (276 // 3.3125 is 82 in bfloat16: 276 - fmod rounds up to 276).
    By one divisor for every element (a number, a 0-d or one-element tensor) torch computes in float32 and
    rounds once (83), as NumPy's floor_divide on the float32 operands does."""
    def r(v):
        return _rounded(v, dtype)

    a, b = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        quotient = r(a / b)
        mod = np.fmod(a, b)  # exact
        div = r(r(a - mod) / b)
        div = np.where((mod != 0) & ((b < 0) != (mod < 0)), r(div - 1), div)
        down = np.floor(div)
        down = np.where(r(div - down) > 0.5, r(down + 1), down)
        result = np.where(div != 0, down, np.copysign(np.float32(0), quotient))
        return np.where(b == 0, quotient, result)


def _div_trunc(a, b, dtype=None):
    if _rounds_in_half(dtype, b):
        # torch's CPU kernel truncates the quotient rounded to the half type (as `_floor_divide_in_half`)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.trunc(_rounded(np.true_divide(a, b), dtype))
    if _dtype_of(a, b).kind in "iu":
        _nonzero_divisor(a, b)
        q = np.floor_divide(a, b)
        # floor and truncation differ by one when the signs differ and the division is inexact
        return q + ((np.remainder(a, b) != 0) & (np.less(a, 0) != np.less(b, 0)))
    return np.trunc(np.true_divide(a, b))


def _remainder(a, b):
    if _dtype_of(a, b).kind in "iu":
        _nonzero_divisor(a, b)
        return np.remainder(a, b)
    # torch adds the divisor to fmod's result; a zero keeps the dividend's sign (NumPy gives it the divisor's)
    m = np.fmod(a, b)
    return np.where((m != 0) & ((m < 0) != np.less(b, 0)), m + b, m)


def _fmod(a, b):
    if _dtype_of(a, b).kind in "iu":
        _nonzero_divisor(a, b)
    return np.fmod(a, b)


def _rounded(v, dtype):
    """``v`` (float32) rounded to ``dtype`` where that is a half type: an intermediate result torch keeps in it."""
    return convert(v, dtype.np).astype(v.dtype) if dtype.np != v.dtype else v


# Float powers by a number that torch's CPU kernel computes by other ops (PowKernel.cpp: squares and
# cubes as products, -2 as 1/(x*x), 0.5 as sqrt, -0.5 as rsqrt, -1 as reciprocal), not by pow; eager
# does the same, so x ** 3 gives torch's bits, and the IR's simplify pass rewrites such a pow into
# these ops. exponent -> (the dtypes where torch does so, NumPy's formula of the operand and the result
# dtype). Float16 computes the others by pow in float32, sqrt's and rsqrt's special values too.
_SQRT_DTYPES = frozenset({_dt.bfloat16, _dt.float32, _dt.float64})
_FLOATS = _SQRT_DTYPES | {_dt.float16}
POW_BY_OTHER_OPS = {
    2: (_FLOATS, lambda a, dtype: a * a),  # NumPy's power() too from 2.1 on; before, it is an ulp off
    3: (_SQRT_DTYPES, lambda a, dtype: _rounded(a * a, dtype) * a),
    -1: (_FLOATS, lambda a, dtype: np.reciprocal(a)),
    -2: (_SQRT_DTYPES, lambda a, dtype: np.reciprocal(_rounded(a * a, dtype))),
    0.5: (_SQRT_DTYPES, lambda a, dtype: np.sqrt(a)),
    -0.5: (_SQRT_DTYPES, lambda a, dtype: _rounded(_rsqrt(a), dtype)),
}


def _number_exponent(a, b):
    """``b`` as a Python number where ``a`` is a float array and ``b`` a number (not a bool, nor a 0-d
    tensor: torch's pow of two tensors is pow throughout), else None."""
    if a.__class__ is not np.ndarray or a.dtype.kind != "f" or not isinstance(b, (int, float, np.generic)) \
            or isinstance(b, (bool, np.bool_)):
        return None
    return b.item() if isinstance(b, np.generic) else b


def _pow(a, b, dtype=None):
    if a.__class__ is np.ndarray and a.dtype == np.bool_:
        # only by a number 0 or 1 (`_check_pow`), which NumPy's power() has no bool loop for
        return np.ones_like(a) if b == 0 else a.copy()
    if b.__class__ is np.ndarray and b.dtype.kind in "iu":
        negative = b < 0
        if negative.any():
            # an integer to a negative power is 0, except 1 and -1 (whose powers only need the parity)
            r = np.power(a, np.where(negative, b & 1, b))
            return np.where(negative & (np.abs(a) != 1), 0, r)
    if b.__class__ is np.ndarray and b.ndim == 0 and b.dtype.kind == "f" and a.__class__ is np.ndarray \
            and a.dtype.kind == "f" and b == 2:
        return a * a  # torch's pow by a 0-d tensor 2 gives the correctly rounded square, x * x's bits
    exponent = _number_exponent(a, b)
    if exponent is not None:
        dtype = dtype or _dt.from_numpy_dtype(a.dtype)  # the fast path's: the operand's own
        dtypes, formula = POW_BY_OTHER_OPS.get(exponent, ((), None))
        if dtype in dtypes:
            return formula(a, dtype)
        b = exponent
    floating = next(v.dtype for v in (a, b) if v.__class__ is np.ndarray)
    if floating.kind == "f":
        # jitorch's own pow (`powers`), not NumPy's: the same bits on every NumPy version and CPU, and the
        # compiled path's
        return powers.power(a, b, floating)
    return np.power(a, b)  # integers: exact (wrapping as torch's)


def _sign(x):
    if x.dtype == np.bool_:
        return x.copy()
    # torch's sign is (0 < x) - (x < 0): NaN and -0.0 give 0
    return np.subtract(x > 0, x < 0, dtype=x.dtype)


def _maximum(a, b):
    # On ties (-0.0 and 0.0) torch returns its first operand, NumPy its second.
    return np.maximum(b, a)


def _minimum(a, b):
    return np.minimum(b, a)


_ZEROS: dict = {}  # NumPy dtype -> its 0-d zero: NumPy compares an array with one twice as fast as with 0


def _relu(x):
    zero = _ZEROS.get(x.dtype)
    if zero is None:
        zero = _ZEROS[x.dtype] = np.zeros((), x.dtype)
    return np.maximum(zero, x)  # -0.0 stays -0.0, as in torch


_relu.ufunc_result = True  # (a ufunc's result on x: its shape and order, which `pointwise_base`'s shortcut then skips testing)
_relu.quiet = True  # (raises no floating-point error: checked as `pointwise_base._QUIET_UFUNCS` are)


def _clamp(x, lo, hi):
    # maximum/minimum propagate NaN from either side, as torch's clamp does
    if lo is not None:
        x = np.maximum(lo, x)
    if hi is not None:
        x = np.minimum(hi, x)
    return x


def _lerp(start, end, weight):
    diff = end - start
    # torch's two forms, each exact at its own end: start + w * d for |w| < 0.5, end - (1 - w) * d beyond
    if weight.__class__ is not np.ndarray:
        return start + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)
    return np.where(np.abs(weight) < 0.5, start + weight * diff, end - diff * (1 - weight))


# Arithmetic ops: (names, signature, formula, promotion, variants, check, doc)
_ALPHA = "(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
_ARITHMETIC = (
    ("add", _ALPHA, _add, DEFAULT, ALL, _check_alpha,
     "``self + alpha * other``, broadcasting, with torch's type promotion."),
    ("sub subtract", _ALPHA, _sub, DEFAULT, ALL, _check_sub,
     "``self - alpha * other``; bool tensors cannot be subtracted."),
    ("rsub", _ALPHA, _rsub, DEFAULT, ("function",), _check_sub,
     "``other - alpha * self``."),
    ("mul multiply", BINARY, np.multiply, DEFAULT, ALL, None, "Elementwise product."),
    ("true_divide", BINARY, np.true_divide, INT_TO_FLOAT, ALL, None,
     "True division; integers and bools give the default float dtype."),
    ("floor_divide", BINARY, _floor_divide, DEFAULT, ALL, _unsupported("div_floor_cpu", "b"),
     "Division rounded down (``//``); integer division by zero raises."),
    ("_div_trunc", BINARY, _div_trunc, DEFAULT, ("function",), _unsupported("div_trunc_cpu", "b"),
     "Division rounded toward zero (``div(..., rounding_mode='trunc')``)."),
    ("remainder", BINARY, _remainder, DEFAULT, ALL, _unsupported("remainder_cpu", "b"),
     "Python's modulus (``%``): the result takes the sign of the divisor."),
    ("fmod", BINARY, _fmod, DEFAULT, ALL, _unsupported("fmod_cpu", "b"),
     "C's fmod: the remainder takes the sign of the dividend."),
    ("pow", "(Tensor self, Tensor exponent) -> Tensor", _pow, DEFAULT, ALL, _check_pow,
     "``self ** exponent``; either may be a Python number. Integers to negative integer powers give 0 "
     "(1 and -1 excepted), but a negative Python int exponent of an integer tensor raises."),
    ("neg negative", UNARY, np.negative, DEFAULT, ALL, _check_neg, "Elementwise ``-x``."),
    ("abs absolute", UNARY, np.absolute, DEFAULT, ALL, _unsupported("abs_cpu", "b"), "Absolute value."),
    ("sign sgn", UNARY, _sign, DEFAULT, ALL, None, "-1, 0 or 1 by the sign of each element (0 for NaN)."),
    ("maximum", BINARY, _maximum, DEFAULT, NO_INPLACE, None, "Elementwise maximum; NaN propagates."),
    ("minimum", BINARY, _minimum, DEFAULT, NO_INPLACE, None, "Elementwise minimum; NaN propagates."),
    ("relu", UNARY, _relu, DEFAULT, ("function", "method", "inplace"), _check_relu, "``max(x, 0)``."),
    ("hypot", BINARY, np.hypot, DEFAULT, ALL, _unsupported("hypot_cpu", "biu"),
     "``sqrt(self**2 + other**2)`` without overflow; floating dtypes only."),
    ("logaddexp", BINARY, np.logaddexp, DEFAULT, NO_INPLACE, _unsupported("logaddexp_cpu", "biu"),
     "``log(exp(self) + exp(other))`` without overflow; floating dtypes only."),
    ("atan2 arctan2", BINARY, np.arctan2, INT_TO_FLOAT, ALL, None,
     "Angle of the point ``(other, self)``, in the quadrant of the signs."),
    ("lerp", "(Tensor self, Tensor end, Tensor weight) -> Tensor", _lerp, DEFAULT, ALL, _check_lerp,
     "``self + weight * (end - self)``; ``weight`` is a number or a tensor of the same dtype."),
    ("clamp clip", "(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor", _clamp, DEFAULT, ALL,
     _check_clamp, "``min(max(self, min), max)``; bounds are numbers or tensors, one of them may be None."),
    ("clamp_min", "(Tensor self, Tensor min) -> Tensor", lambda x, lo: _clamp(x, lo, None), DEFAULT, ALL,
     lambda spec, x, lo: _check_clamp(spec, x, lo, None), "``max(self, min)``."),
    ("clamp_max", "(Tensor self, Tensor max) -> Tensor", lambda x, hi: _clamp(x, None, hi), DEFAULT, ALL,
     lambda spec, x, hi: _check_clamp(spec, x, None, hi), "``min(self, max)``."),
)
# NumPy's ufunc for the ops whose formula reduces to it at the default alpha (the fast path calls it directly)
_PLAIN = {"add": np.add, "sub": np.subtract}
_INTO = {"add": _add_into, "sub": _sub_into}
_CHECKS_OTHERS_ONLY = {"add"}  # its check reads only alpha (`defpointwise`)
# torch's floor_divide has no derivative of its out= form: its autograd fallback serves it
_OUT_FALLBACK = {"floor_divide": {"out_autograd_fallback": lambda args: True}}
# torch's kernels that read a number multiplier, divisor or weight of half types unrounded (`defpointwise`)
_UNROUNDED = {"mul multiply": "scalars", "true_divide": "scalars", "floor_divide": "scalars",
              "_div_trunc": "scalars", "lerp": "numbers"}
for _names, _signature, _formula, _promotion, _variants, _check, _doc in _ARITHMETIC:
    _declare(_names, _signature, _formula, _promotion, _doc, variants=_variants, check=_check,
             plain=_PLAIN.get(_names.split()[0]), into=_INTO.get(_names.split()[0]),
             unrounded=_UNROUNDED.get(_names), typed=_names in ("pow", "floor_divide", "_div_trunc"),
             check_others_only=_names in _CHECKS_OTHERS_ONLY, **_OUT_FALLBACK.get(_names, {}))

# torch's lerp checks its dtypes before any cast, and its number weight takes no part in its dtype
del registry.OPS["lerp"].attrs["promoted_meta"]


def _contiguous_for_a_number_base(layout):
    """pow's layout rule, but contiguous where the base is a Python number: torch's ``pow(Scalar, Tensor)``
    kernel writes a new contiguous result, not one in the exponent's memory order (so do ``float_power``
    and ``ldexp``, which call it)."""
    def rule(spec, base, *rest):
        return None if isinstance(base, Number) else layout(spec, base, *rest)
    return rule


def _general_for_a_number_base(fast):
    """pow's fast path, leaving a number base of a tensor whose memory order is not row-major to the general
    path, which lays the result out contiguously (`_contiguous_for_a_number_base`)."""
    def call(args, record=True):
        base, exponent = args[0], args[1] if len(args) > 1 else None
        if isinstance(base, Number) and isinstance(exponent, registry.Tensor) and not exponent.is_contiguous():
            return None
        return fast(args, record)
    return call


registry.OPS["pow"].layout = _contiguous_for_a_number_base(registry.OPS["pow"].layout)
registry.OPS["pow"].fast = _general_for_a_number_base(registry.OPS["pow"].fast)


def _bounds_as_numbers(convert):
    """clamp's argument converter, then torch's overload resolution for one number bound and one tensor
    bound: its argument parser takes a 0-d tensor that does not require grad as a Number, so the call
    is the Number overload's (``clamp(int8, tensor(1.5), 3)`` is float32, as a number bound makes it);
    any other mix raises `_check_bound_kinds`' TypeError."""
    def converted(args):
        a = convert(args)
        lo, hi = a[1], a[2]
        if lo is not None and hi is not None and isinstance(lo, Number) != isinstance(hi, Number):
            i = 2 if isinstance(lo, Number) else 1
            if a[i].ndim == 0 and not a[i].requires_grad:
                a[i] = a[i].item()
        return a
    return converted


for _name in ("clamp", "clip"):
    registry.OPS[_name].convert = _bounds_as_numbers(registry.OPS[_name].convert)



def _numbers_as_self(convert):
    """An arithmetic op's argument converter, then torch's argument parser's leave for two Python numbers
    (its ``should_allow_numbers_as_tensors`` ops): ``torch.add(3.0, 2)`` is a 0-d tensor of the numbers'
    dtype (the default float, int64 or bool), as ``self`` made a 0-d tensor of its own kind gives it (a bool
    ``self`` of ``sub`` is refused as torch's)."""
    def converted(args):
        a = convert(args)
        if isinstance(a[0], Number) and isinstance(a[1], Number):
            a[0] = registry.Tensor._from_array(np.asarray(a[0], _dt.result_type(a[0]).np))
        return a
    return converted


for _name in ("add", "sub", "subtract", "mul", "multiply", "true_divide", "floor_divide", "_div_trunc"):
    registry.OPS[_name].convert = _numbers_as_self(registry.OPS[_name].convert)

_DIV_MODES = {None: "true_divide", "trunc": "_div_trunc", "floor": "floor_divide"}


def _div(self, other, rounding_mode):
    fn = _DIV_MODES.get(rounding_mode)
    if fn is None:
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                           f"'{rounding_mode}'")
    return registry.FUNCTIONS[fn](self, other)


for _name in ("div", "divide"):
    defop(f"{_name}(Tensor self, Tensor other, *, str? rounding_mode=None) -> Tensor", composite=_div,
          kind="pointwise", variants=ALL,
          doc="Division: true division (integers give floats), or rounded by ``rounding_mode`` "
              "('trunc' toward zero, 'floor' down) in the promoted dtype.")

defop("square(Tensor self) -> Tensor", composite=lambda x: registry.FUNCTIONS["pow"](x, 2), kind="pointwise",
      variants=ALL, doc="``self ** 2`` (bools square to int64, as ``pow(x, 2)``).")


# Math functions -----------------------------------------------------------------------

# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23 (1969),
# with the coefficients of his CALERF routine: erf(x) = x R1(x^2) for |x| <= 0.46875;
# erfc(x) = exp(-x^2) R2(x) up to 4 and exp(-x^2) (1/sqrt(pi) - R3(1/x^2)/x^2) / x beyond.
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_ERFC_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
           8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
           2.15311535474403846e-8)
_ERFC_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
           3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03)
_ERFC_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
           6.58749161529837803e-4, 1.63153871373020978e-2)
_ERFC_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
           2.33520497626869185e-3)
_ERF_SMALL = 0.46875
_ERFC_ZERO = 28.0  # erfc(x) is below the smallest float64 beyond this
_RSQRT_PI = 0.56418958354775628695


def _rational(z, num, den):
    """Cody's ratio of polynomials in ``z``: ``num[-1]`` leads, ``den`` is monic."""
    n = num[-1] * z
    d = z
    for a, b in zip(num[:len(den) - 1], den[:-1]):
        n = (n + a) * z
        d = (d + b) * z
    return (n + num[len(den) - 1]) / (d + den[-1])


def _cody(x):
    """``(|x| <= 0.46875, erf(x) there, erfc(|x|) elsewhere)``.

    float64 inputs are evaluated in extended precision where the platform has it
    (x86: within 1 ulp of the true value; 4-5 ulp in plain float64).
    """
    x = np.asarray(x, np.longdouble if x.dtype == np.float64 else np.float64)
    y = np.abs(x)
    small = y <= _ERF_SMALL
    erf_small = x * _rational(y * y, _ERF_A, _ERF_B)
    mid = _rational(y, _ERFC_C, _ERFC_D)
    inv = 1 / (y * y)
    far = (_RSQRT_PI - inv * _rational(inv, _ERFC_P, _ERFC_Q)) / y
    # exp(-y*y) as exp(-r*r) exp(-(y-r)(y+r)) with r = y cut to 1/16ths: r*r is exact and the rest is
    # small, so the rounding of y*y does not reach the result
    r = np.trunc(y * 16) / 16
    tail = np.exp(-r * r) * np.exp(-(y - r) * (y + r)) * np.where(y <= 4, mid, far)
    return small, erf_small, np.where(y >= _ERFC_ZERO, 0, tail)


def _erf(x):
    if x.dtype == np.float32:
        return erf_float32.erf(x)
    small, erf_small, tail = _cody(x)
    return np.where(small, erf_small, np.copysign(0.5 - tail + 0.5, x)).astype(x.dtype)


def _erfc(x):
    small, erf_small, tail = _cody(x)
    return np.where(small, 1 - erf_small, np.where(x < 0, 2 - tail, tail)).astype(x.dtype)


def _sigmoid(x):
    return np.reciprocal(np.exp(-x) + 1)  # exp overflows to inf for very negative x: 1/inf is the right 0


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _single_or(name, numpy_fn):
    """Op ``name``'s formula: jitorch's own float32 definition (`arc_functions`, the compiled kernels' too),
    NumPy's function in the other dtypes."""
    algorithm = arc_functions.ALGORITHMS[name]

    def formula(x):
        return powers.single(algorithm, name, x) if x.dtype == np.float32 else numpy_fn(x)
    return formula


_FLOAT_MATH = (
    ("exp", np.exp, "``e ** x``"),
    ("exp2", np.exp2, "``2 ** x``"),
    ("expm1", np.expm1, "``e ** x - 1``, accurate near 0"),
    ("log", np.log, "natural logarithm"),
    ("log2", np.log2, "base-2 logarithm"),
    ("log10", np.log10, "base-10 logarithm"),
    ("log1p", np.log1p, "``log(1 + x)``, accurate near 0"),
    ("sqrt", np.sqrt, "square root"),
    ("rsqrt", _rsqrt, "``1 / sqrt(x)``"),
    ("reciprocal", np.reciprocal, "``1 / x``"),
    ("sin", np.sin, "sine"),
    ("cos", np.cos, "cosine"),
    ("tan", np.tan, "tangent"),
    ("asin arcsin", _single_or("asin", np.arcsin), "inverse sine"),
    ("acos arccos", _single_or("acos", np.arccos), "inverse cosine"),
    ("atan arctan", _single_or("atan", np.arctan), "inverse tangent"),
    ("sinh", np.sinh, "hyperbolic sine"),
    ("cosh", np.cosh, "hyperbolic cosine"),
    ("tanh", np.tanh, "hyperbolic tangent"),
    ("asinh arcsinh", _single_or("asinh", np.arcsinh), "inverse hyperbolic sine"),
    ("acosh arccosh", _single_or("acosh", np.arccosh), "inverse hyperbolic cosine"),
    ("atanh arctanh", _single_or("atanh", np.arctanh), "inverse hyperbolic tangent"),
    ("sigmoid", _sigmoid, "logistic function ``1 / (1 + e ** -x)``"),
    ("erf", _erf, "error function"),
    ("erfc", _erfc, "complementary error function ``1 - erf(x)``, accurate where erf(x) is near 1"),
)
for _names, _formula, _what in _FLOAT_MATH:
    _declare(_names, UNARY, _formula, INT_TO_FLOAT, f"Elementwise {_what}; integers give the default float dtype.")


# Rounding ----------------------------------------------------------------------------

def _keeping_integers(fn):
    """A rounding formula that leaves integers as they are (as a copy: kernels never return inputs)."""
    def formula(x, *args):
        return x.copy() if x.dtype.kind in "iu" else fn(x, *args)
    return formula


def _round(x, decimals):
    if not decimals:
        return np.rint(x)  # halves to even, like torch
    # torch scales by 10**|decimals| in the compute dtype (so large scales overflow to inf as in torch)
    scale = x.dtype.type(10.0 ** abs(decimals))
    return np.rint(x * scale) / scale if decimals > 0 else np.rint(x / scale) * scale


def _frac(x):
    return x - np.trunc(x)


_ROUNDING = (
    ("floor", np.floor, "Round down; integers are returned unchanged."),
    ("ceil", np.ceil, "Round up; integers are returned unchanged."),
    ("trunc fix", np.trunc, "Round toward zero; integers are returned unchanged."),
)
for _names, _formula, _doc in _ROUNDING:
    _declare(_names, UNARY, _keeping_integers(_formula), DEFAULT, _doc,
             check=_unsupported(f"{_names.split()[0]}_vml_cpu", "b"))
defpointwise("round(Tensor self, *, int? decimals=None) -> Tensor", _keeping_integers(_round), DEFAULT,
             check=_check_round, doc="Round half to even, to ``decimals`` decimal places (negative: tens, "
                                     "hundreds...); integers are returned unchanged.")
defpointwise("frac" + UNARY, _frac, DEFAULT, check=_unsupported("frac_cpu", "biu"),
             doc="Fractional part ``x - trunc(x)``, with the sign of ``x``; floating dtypes only.")


# Comparisons, predicates and logic -------------------------------------------------------

_COMPARISONS = (
    ("eq", np.equal, "``==``"),
    ("ne not_equal", np.not_equal, "``!=``"),
    ("lt less", np.less, "``<``"),
    ("le less_equal", np.less_equal, "``<=``"),
    ("gt greater", np.greater, "``>``"),
    ("ge greater_equal", np.greater_equal, "``>=``"),
)
for _names, _formula, _what in _COMPARISONS:
    _declare(_names, BINARY, _formula, ALWAYS_BOOL, f"Elementwise {_what} in the promoted dtype, as a bool tensor.")

for _name, _formula, _what in (("logical_and", np.logical_and, "AND"), ("logical_or", np.logical_or, "OR"),
                               ("logical_xor", np.logical_xor, "XOR")):
    _declare(_name, BINARY, _formula, ALWAYS_BOOL,
             f"Elementwise logical {_what} of the truth values (nonzero is True), as a bool tensor.")
_declare("logical_not", UNARY, np.logical_not, ALWAYS_BOOL, "Elementwise logical NOT (zero is True).")

for _name, _formula, _what in (("isnan", np.isnan, "is NaN"), ("isinf", np.isinf, "is +inf or -inf"),
                               ("isfinite", np.isfinite, "is neither NaN nor infinite")):
    _declare(_name, UNARY, _formula, ALWAYS_BOOL, f"Whether each element {_what} (integers always finite).",
             variants=QUERY)


# Bitwise ---------------------------------------------------------------------------------

def _bits(a, b):
    d = _dtype_of(a, b)
    return d.itemsize * 8, d.kind == "i"


def _shift_count(b, limit, negative):
    """The count given to NumPy (which leaves counts past the width to the CPU): at most ``limit``,
    ``negative`` for negative counts."""
    if b.__class__ is not np.ndarray:  # (a number, as a NumPy scalar of the compute dtype)
        return negative if b < 0 else min(b, limit)
    return np.where(b < 0, negative, np.minimum(b, limit))


def _left_shift(a, b):
    bits, _ = _bits(a, b)
    # torch: counts that are negative or reach the width give 0
    return np.where(np.less(b, 0) | np.greater_equal(b, bits), 0, np.left_shift(a, _shift_count(b, bits - 1, 0)))


def _right_shift(a, b):
    bits, signed = _bits(a, b)
    if signed:
        # torch: negative or too-large counts shift by width - 1 (giving 0 or -1 by the sign)
        return np.right_shift(a, _shift_count(b, bits - 1, bits - 1))
    return np.where(np.greater_equal(b, bits), 0, np.right_shift(a, _shift_count(b, bits - 1, 0)))


for _name, _formula, _what in (("bitwise_and", np.bitwise_and, "AND"), ("bitwise_or", np.bitwise_or, "OR"),
                               ("bitwise_xor", np.bitwise_xor, "XOR")):
    _declare(_name, BINARY, _formula, KEEP_INT, f"Elementwise bitwise {_what} of integers or bools.")
_declare("bitwise_not", UNARY, np.invert, KEEP_INT, "Elementwise bitwise NOT (logical NOT for bools).")
_declare("bitwise_left_shift", BINARY, _left_shift, DEFAULT,
         "``self << other`` on integers; counts that are negative or reach the bit width give 0.",
         check=_unsupported("lshift_cpu", "bf"))
_declare("bitwise_right_shift", BINARY, _right_shift, DEFAULT,
         "``self >> other`` on integers, arithmetic for signed dtypes; counts outside the bit width "
         "shift everything out.", check=_unsupported("rshift_cpu", "bf"))


# Selection and closeness --------------------------------------------------------------------

def _where_formula(condition, a, b):
    cond = condition if condition.dtype == np.bool_ else condition != 0
    # a Python number (already in the compute dtype's range) takes the other operand's dtype: as a
    # 0-d array of its own dtype it would promote (where(y <= 0, 0, g) in float64, then a cast)
    if a.__class__ is not np.ndarray and b.__class__ is np.ndarray:
        a = np.asarray(a, b.dtype)
    elif b.__class__ is not np.ndarray and a.__class__ is np.ndarray:
        b = np.asarray(b, a.dtype)
    a, b = np.asarray(a), np.asarray(b)
    shape = np.broadcast_shapes(cond.shape, a.shape, b.shape)
    if a.dtype != b.dtype or a.dtype.itemsize not in (1, 2, 4, 8) or math.prod(shape) < _SELECT_MIN:
        return np.where(cond, a, b)
    # np.where branches per element, slow on an unpredictable mask (a ReLU's); select bits instead:
    # keep = all ones where cond is False, and out = a ^ ((a ^ b) & keep)
    u = np.dtype(f"u{a.dtype.itemsize}")
    keep = cond.astype(u)
    np.subtract(keep, u.type(1), out=keep)
    bits_a = a.view(u)
    if a.ndim == 0 and not bits_a:  # selecting zeros (ReLU's backward): out = b & keep
        return np.bitwise_and(b.view(u), keep).view(a.dtype)
    out = np.bitwise_and(np.bitwise_xor(bits_a, b.view(u)), keep)
    np.bitwise_xor(out, bits_a, out=out)
    return out.view(a.dtype)


_SELECT_MIN = 1024


_WHERE_DOC = "``self`` where ``condition`` (a bool tensor) is True, else ``other``; numbers broadcast too."
defpointwise("where.self(Tensor condition, Tensor self, Tensor other) -> Tensor", _where_formula, DEFAULT,
             variants=("function", "method", "out"), check=_check_where, uncast=("condition",),
             unpromoted=("condition",), doc=_WHERE_DOC)


def _isclose(a, b, rtol, atol, equal_nan):
    integral = a.dtype.kind in "biu"  # (bfloat16's NumPy kind is "V")
    close = np.equal(a, b)
    if equal_nan and not integral:
        close |= np.isnan(a) & np.isnan(b)
    if rtol == 0 and atol == 0:
        return close
    if integral:  # torch measures the error of integers and bools in the default float dtype
        default = _dt.get_default_dtype().np
        a, b = convert(a, default), convert(b, default)
    error = np.abs(a - b)
    return close | (np.isfinite(error) & (error <= atol + np.abs(rtol * b)))


_CLOSE = "(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False)"
defpointwise(f"isclose{_CLOSE} -> Tensor", _isclose, ALWAYS_BOOL, variants=QUERY, check=_check_isclose,
             doc="Whether ``|self - other| <= atol + rtol * |other|`` elementwise (or equal; NaNs equal with "
                 "``equal_nan``); both tensors of one dtype.")


def _allclose(a, b, rtol, atol, equal_nan):
    _check_isclose_args("allclose", a, b, rtol, atol)
    return bool(a.isclose(b, rtol, atol, equal_nan)._host_array().all())


def _equal(a, b):
    return a.shape == b.shape and bool(a.eq(b)._host_array().all())


defop(f"allclose{_CLOSE} -> bool", composite=_allclose,
      doc="Whether ``isclose`` holds for every element (shapes broadcast), as a Python bool.")
defop("equal(Tensor self, Tensor other) -> bool", composite=_equal,
      doc="Whether both tensors have the same shape and equal elements (in the promoted dtype).")


# More math: signs, extremes ignoring NaN, logarithms of products, angles --------------------------------

def _fmax(a, b):
    # torch's (C's) fmax: NaN only where both are; ties (-0.0 and 0.0) give the first operand
    return np.where((a >= b) | np.isnan(b), a, b)


def _fmin(a, b):
    return np.where((a <= b) | np.isnan(b), a, b)


def _heaviside(x, values):
    return np.where(x == 0, values, x > 0)


def _xlog(log):
    """torch's xlogy and xlog1py: NaN where ``y`` is NaN, else 0 where ``x`` is 0 (even beside an infinite
    log), else ``x * log(y)``."""
    def formula(x, y):
        with np.errstate(divide="ignore", invalid="ignore"):
            product = np.multiply(x, log(y))
        return np.where(np.isnan(y), np.nan, np.where(np.equal(x, 0), 0, product))
    return formula


_xlogy_by_numpy = _xlog(powers.log)


def _xlogy(x, y):
    """xlogy by jitorch's own log (`powers.log`, not NumPy's: the same bits on every NumPy version and CPU, and
    the compiled path's), through the compiled kernel when large."""
    dtype = next(v.dtype for v in (x, y) if v.__class__ is np.ndarray)
    # a number operand takes the array's dtype, as torch casts it: `powers.log` computes in its operand's dtype,
    # and of an int (a float64 call's fast path passes ``xlogy(x, 2)``'s 2 as it is) gave log(2) = 0
    x, y = (v if v.__class__ is np.ndarray else np.asarray(v, dtype) for v in (x, y))
    r = powers.through_kernel("xlogy", dtype, x, y)
    return _xlogy_by_numpy(x, y) if r is None else r


def _constant_times(c):
    """``x * c`` with ``c`` rounded to the compute dtype, as torch's ``deg2rad`` and ``rad2deg`` multiply."""
    return lambda x: np.multiply(x, x.dtype.type(c))


def _sinc(x):
    product = np.multiply(x, x.dtype.type(math.pi))  # torch rounds pi to the compute dtype first
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 1, np.sin(product) / product)


def _logit(x, eps):
    if eps is not None and eps >= 0:  # bounds in x's dtype: NumPy's clip would widen bfloat16 to float32
        lo = convert(np.array(eps), x.dtype)
        # torch's clamp: below lo gives lo, else above hi gives hi (an eps over 1/2 makes lo > hi)
        hi = np.subtract(x.dtype.type(1), lo)
        x = np.where(x < lo, lo, np.where(x > hi, hi, x))
    z = x
    with np.errstate(divide="ignore", invalid="ignore"):
        # 1 in z's dtype: NumPy 1.x takes a 0-d array and a Python 1 to float64 (bfloat16 a ulp off torch)
        return np.log(z / (z.dtype.type(1) - z))


def _logit_kernel(spec, x, eps):
    """torch's logit of the half types rounds each step to the half type (NumPy's half arithmetic does)."""
    return _logit(convert(x, spec.dtype.np), eps)


def _angle(x):
    # the argument of a real number: pi for negatives, 0 otherwise, NaN kept
    return np.where(np.isnan(x), x, np.where(x < 0, x.dtype.type(math.pi), 0))


def _signbit(x):
    return np.signbit(x) if x.dtype.kind == "f" or x.dtype.kind == "V" else np.less(x, 0)


def _check_same_dtype(op_name, message):
    def check(spec, a, b):
        if not isinstance(a, Number) and not isinstance(b, Number) and a.dtype is not b.dtype:
            raise RuntimeError(message)
    return check


def _nextafter_kernel(spec, a, b):
    """nextafter steps in the result dtype itself, the half types included (not in their float32 compute
    dtype, the generic kernel's)."""
    dtype = spec.dtype.np
    return np.nextafter(convert(a, dtype), convert(b, dtype))


_declare("copysign", BINARY, np.copysign, INT_TO_FLOAT,
         "``|self|`` with the sign bit of ``other`` (negative zeros and NaNs included).")
_declare("fmax", BINARY, _fmax, DEFAULT, "Elementwise maximum ignoring NaN (NaN only where both are).",
         variants=NO_INPLACE)
_declare("fmin", BINARY, _fmin, DEFAULT, "Elementwise minimum ignoring NaN (NaN only where both are).",
         variants=NO_INPLACE)
_declare("heaviside", "(Tensor self, Tensor values) -> Tensor", _heaviside, DEFAULT,
         "The step function: 0 below zero (and for NaN), ``values`` at zero, 1 above; both of one dtype.",
         check=_check_same_dtype("heaviside", "heaviside is not yet implemented for tensors with different dtypes."),
         autograd_fallback=lambda args: True)
def ldexp_power_dtype(other_dtype, other_ndim, compute):
    """The dtype torch's ldexp computes ``2 ** other`` in, for ``other`` of that dtype and ndim and a result
    computed in ``compute``. Its ldexp is ``mul(self, pow(2.0, other))``: a tensor ``other``'s power is in its
    floating dtype (rounded there: a bfloat16 exponent gives a bfloat16 power; fuzz seed 7300007), in the default
    float dtype for integers; a 0-d ``other``'s is not rounded so (measured with torch 2.13: ``ldexp`` of a float64
    tensor by a 0-d float16 is exact; fuzz seed 101): jitorch computes it in the result's compute dtype."""
    if other_ndim == 0:
        return compute
    return other_dtype if other_dtype.is_floating_point else _dt.get_default_dtype()


def _ldexp(x, other):
    other = np.asarray(other)
    power = ldexp_power_dtype(_dt.from_numpy_dtype(other.dtype), other.ndim, _dt.from_numpy_dtype(x.dtype))
    p = np.exp2(other.astype(opmath(power).np)).astype(power.np)
    return np.multiply(x, p.astype(x.dtype))


def _check_ldexp(spec, x, other):
    """torch's ldexp of a floating ``self`` runs its own kernel, which has no bool exponent (an integer or bool
    ``self`` goes through ``mul(self, pow(2.0, other))``, which takes one)."""
    if getattr(x, "dtype", _dt.bool).is_floating_point and getattr(other, "dtype", None) is _dt.bool:
        raise NotImplementedError("\"ldexp_cpu_exp\" not implemented for 'Bool'")


_declare("ldexp", BINARY, _ldexp, INT_TO_FLOAT, "``self * 2 ** other`` in the promoted dtype, the power in "
         "``other``'s dtype (integers: the default float dtype), as torch's ``mul(self, pow(2.0, other))``.",
         check=_check_ldexp, uncast=("other",), overlap={"self": "partial"},  # (torch's mul reads ``other``'s power, a new tensor)
         unrounded="scalars")  # (a 0-d exponent's power is mul's 0-d operand: a kernel must not round it to a half)


def _ldexp_multiplies_by_a_power(x, other):
    """Whether torch's ldexp of ``x`` by the tensor ``other`` is ``mul(x, pow(2.0, other))``, whose power is a
    new contiguous tensor (other's memory order takes no part), rather than its kernel on ``x`` and ``other``
    (TensorIterator's order of both). Measured with torch 2.13 (a transposed ``other``): an integer or bool
    ``x``, and a float32 ``x`` by a floating ``other``, take the power; other float ``x`` and an integer
    ``other`` beside a float32 ``x`` the kernel."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    return not dtype.is_floating_point or dtype is _dt.float32 and other.dtype.is_floating_point


def _ldexp_layout(by_power, by_kernel):
    def rule(spec, x, other, *rest):
        use = by_power if isinstance(other, registry.Tensor) and _ldexp_multiplies_by_a_power(x, other) \
            else by_kernel
        return use(spec, x, other, *rest)
    return rule


def _ldexp_fast(fast):
    """ldexp's fast path, leaving to the general path (`_ldexp_layout`) a call whose exponent's memory order
    torch's ``pow(2.0, other)`` drops."""
    def call(args, record=True):
        x, other = args[0], args[1] if len(args) > 1 else None
        if isinstance(other, registry.Tensor) and not other.is_contiguous() and \
                _ldexp_multiplies_by_a_power(x, other):
            return None
        return fast(args, record)
    return call


registry.OPS["ldexp"].layout = _ldexp_layout(memory_order((0, 1), frozenset({1}), fresh=frozenset({1})),
                                             registry.OPS["ldexp"].layout)
registry.OPS["ldexp"].fast = _ldexp_fast(registry.OPS["ldexp"].fast)
_declare("xlogy", BINARY, _xlogy, INT_TO_FLOAT,
         "``self * log(other)``, 0 where ``self`` is 0 (unless ``other`` is NaN).")
_declare("logaddexp2", BINARY, np.logaddexp2, DEFAULT,
         "``log2(2 ** self + 2 ** other)`` without overflow; floating dtypes only.",
         variants=NO_INPLACE, check=_unsupported("logaddexp2_cpu", "biu"))
_declare("deg2rad", UNARY, _constant_times(math.pi / 180), INT_TO_FLOAT, "Degrees to radians.")
_declare("rad2deg", UNARY, _constant_times(180 / math.pi), INT_TO_FLOAT, "Radians to degrees.")
_declare("sinc", UNARY, _sinc, INT_TO_FLOAT, "The normalised sinc ``sin(pi x) / (pi x)``, 1 at 0.")
_declare("logit", "(Tensor self, float? eps=None) -> Tensor", _logit, INT_TO_FLOAT,
         "``log(x / (1 - x))``, with ``x`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given.")
registry.OPS["logit"].kernels["cpu"] = _logit_kernel
_declare("angle", UNARY, _angle, INT_TO_FLOAT, "The argument of each (real) element: pi below 0, else 0; "
         "NaN stays NaN.", variants=NO_INPLACE)
for _name, _formula, _what in (("isposinf", lambda x: np.equal(x, np.inf), "is +inf"),
                               ("isneginf", lambda x: np.equal(x, -np.inf), "is -inf"),
                               ("signbit", _signbit, "has its sign bit set (-0.0 and negative NaNs included)")):
    _declare(_name, UNARY, _formula, ALWAYS_BOOL, f"Whether each element {_what}.", variants=NO_INPLACE)
_declare("nextafter", BINARY, np.nextafter, DEFAULT,
         "The next representable value after ``self`` towards ``other``, in the result dtype; floating dtypes only.",
         check=_unsupported("nextafter_cpu", "biu"))
registry.OPS["nextafter"].kernels["cpu"] = _nextafter_kernel
for _name, _formula in (("gcd", np.gcd), ("lcm", np.lcm)):
    _declare(_name, BINARY, _formula, KEEP_INT,
             f"Elementwise {'greatest common divisor' if _name == 'gcd' else 'least common multiple'} of "
             "integers (non-negative; the least common multiple wraps as torch's does).",
             check=_unsupported(f"{_name}_cpu", "b"))


def _nan_to_num(x, nan, posinf, neginf):
    if x.dtype.kind in "biu":
        return x.copy()
    info = _dt.finfo(_dt.from_numpy_dtype(x.dtype))
    fills = [convert(np.array(v), x.dtype) for v in (nan, info.max if posinf is None else posinf,
                                                    info.min if neginf is None else neginf)]
    return np.where(np.isnan(x), fills[0], np.where(x == np.inf, fills[1], np.where(x == -np.inf, fills[2], x)))


defpointwise("nan_to_num(Tensor self, float? nan=0.0, float? posinf=None, float? neginf=None) -> Tensor",
             _nan_to_num, DEFAULT, uncast=("self",),
             # torch's nan_to_num_ of integers or bools copies self into itself, which checks no overlap: it writes
             # through an expanded self (its values unchanged; fuzz seed 5701641, ``x0.nan_to_num_(0.5, 1.0)``)
             expanded_write=registry.write_all, expanded_write_if=lambda t: not t.dtype.is_floating_point,
             doc="NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (by default 0 and the dtype's "
                 "largest and lowest finite values), each converted to the dtype; integers are unchanged.")


# Special functions (jitorch/ops/special_math.py): computed in float64, rounded once ----------------------

def _in_float64(fn):
    """A formula computing ``fn`` in float64 on flat arrays (the special functions index them) and giving it
    back in the shape and compute dtype of its operands."""
    def formula(*args):
        dtype = next(a.dtype for a in args if a.__class__ is np.ndarray)
        shape = np.broadcast_shapes(*(np.shape(a) for a in args))
        wide = [np.broadcast_to(convert(np.asarray(a), np.float64), shape).ravel() for a in args]
        with np.errstate(all="ignore"):
            return convert(fn(*wide).reshape(shape), dtype)
    return formula


def _erfinv(y):
    # float64 takes a Newton step; the first guess rounds right to float32 and the half types
    return _in_float64(special_math.erfinv if y.dtype == np.float64 else
                       lambda v: special_math.erfinv(v, newton=False))(y)


# (declared in this order: the registry's order is the fuzz generator's op table, which its seeds name)
_SPECIAL = (
    ("lgamma", _in_float64(special_math.lgamma), "``log |Gamma(x)|``: +inf at 0 and the negative integers"),
    ("erfinv", _erfinv, "inverse error function (NaN outside [-1, 1])"),
    ("i0", _in_float64(special_math.i0), "modified Bessel function of the first kind of order 0"),
)
for _name, _fn, _what in _SPECIAL:
    _declare(_name, UNARY, _fn, INT_TO_FLOAT, f"Elementwise {_what}; integers give the default float dtype.")


def _digamma(x):
    if x.dtype != np.float64:  # torch computes digamma in float32 for float32 and the half types
        return convert(special_math.digamma(convert(x, np.float32).ravel(), np.float32).reshape(x.shape), x.dtype)
    return _in_float64(special_math.digamma)(x)


_declare("digamma", UNARY, _digamma, INT_TO_FLOAT, "Elementwise digamma ``Gamma'(x) / Gamma(x)``: -inf at +0, NaN "
         "at negative integers; integers give the default float dtype.")

# torch.special's own (`jitorch.special`): public names special_*, as torch's ATen ops are named
for _name, _fn, _what in (("i0e", special_math.i0e, "``exp(-|x|) I0(x)``"),
                          ("i1", special_math.i1, "the modified Bessel function of the first kind of order 1"),
                          ("i1e", special_math.i1e, "``exp(-|x|) I1(x)``")):
    _declare(f"special_{_name}", UNARY, _in_float64(_fn), INT_TO_FLOAT, f"Elementwise {_what}.",
             variants=("function", "out"))
_declare("special_xlog1py", BINARY, _xlog(np.log1p), INT_TO_FLOAT,
         "``self * log1p(other)``, 0 where ``self`` is 0 (unless ``other`` is NaN).", variants=("function", "out"))
_declare("special_zeta", BINARY, _in_float64(special_math.zeta), INT_TO_FLOAT,
         "The Hurwitz zeta function ``sum((k + other) ** -self for k >= 0)``; not for the half types.",
         variants=("function", "out"), check=_unsupported("zeta_cpu", "h"))


def _check_polygamma(spec, x, n):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")


# x.polygamma(n) and x.polygamma_(n) take self first; the function torch.polygamma(n, x) is below
def _polygamma(x, n):
    if n == 1 and x.dtype != np.float64:
        # torch computes trigamma in float32 for float32 and the half types (its values at the poles show it)
        return convert(special_math.trigamma(convert(x, np.float32), np.float32), x.dtype)
    return _in_float64(lambda v: special_math.polygamma(n, v))(x)


defpointwise("_polygamma(Tensor self, int n) -> Tensor", _polygamma, INT_TO_FLOAT, variants=("function", "method", "inplace"), method_name="polygamma",
    check=_check_polygamma, doc="The ``n``-th derivative of digamma (``n >= 0``).")
defop("polygamma(int n, Tensor self) -> Tensor", composite=lambda n, x: registry.METHODS["polygamma"](x, n),
      variants=("function", "out"), doc="The ``n``-th derivative of digamma (``n >= 0``).")


def _frexp_meta(x):
    if not x.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    return (registry.TensorSpec(x.shape, x.dtype, x.device), registry.TensorSpec(x.shape, _dt.int32, x.device))


def _frexp_cpu(spec, x):
    # half types split exactly in float32: their mantissas fit
    mantissa, exponent = np.frexp(convert(x, np.float32) if x.dtype.itemsize == 2 else x)
    return mantissa, exponent.astype(np.int32)


defop("frexp(Tensor self) -> (Tensor mantissa, Tensor exponent)", meta=_frexp_meta, cpu=_frexp_cpu,
      variants=("function", "method", "out"), layout=memory_order((0,), frozenset({0})),
      doc="``self = mantissa * 2 ** exponent`` with ``|mantissa|`` in [0.5, 1) (0, inf and NaN kept, exponent "
          "0); the exponent is int32.")


def _float_power(x, exponent):
    def wide(v):
        return float(v) if isinstance(v, Number) else v.to(_dt.float64)
    return registry.FUNCTIONS["pow"](wide(x), wide(exponent))


def _float_power_target(what):
    """float_power's check of the tensor it writes (``x.float_power_(e)``'s ``x``, an ``out=``): float64 only."""
    def check(target, *args):
        if isinstance(target, registry.Tensor) and target.dtype is not _dt.float64:
            raise RuntimeError(f"the {what} has dtype {scalar_name(target.dtype)} but the operation's result "
                               "requires dtype Double")
    return check


def _mvlgamma(x, p):
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    f = registry.FUNCTIONS
    if not x.dtype.is_floating_point:
        x = x.to(_dt.get_default_dtype())
    return f["sum"](f["lgamma"](x.unsqueeze(-1) + mvlgamma_shifts(x, p)), -1) + p * (p - 1) * math.log(math.pi) / 4


def mvlgamma_shifts(x, p):
    """``-j / 2`` for ``j < p``, in ``x``'s dtype and device: the arguments of mvlgamma's gamma functions."""
    return registry.FUNCTIONS["arange"](-p / 2 + 0.5, 0.5, 0.5, dtype=x.dtype, device=x.device)


_WIDENED = frozenset({_dt.float16, _dt.bfloat16, _dt.float32})


def _float_power_fast(args, record=True):
    """float_power's eager fast path where it pays: C-contiguous CPU tensors of a narrower float dtype (whose
    widening to float64 is exact) and Python numbers, none requiring grad in grad mode. The composite's bits
    (`_pow` of the operands widened to float64, as its ``pow`` runs it) without its casts' two tensors (each
    ~20 us of dispatch, and a pass over memory); None for anything else, which the composite serves."""
    Tensor = registry.Tensor
    operands, grad, shape = [], False, None
    for v in args:
        if isinstance(v, Tensor):
            if v.dtype not in _WIDENED or v.device.type != "cpu" or not v.is_contiguous():
                return None
            grad = grad or v._requires_grad
            a = v._arr if v._arr is not None else v._array()
            operands.append(a.astype(np.float64))
            shape = a.shape if shape is None else np.broadcast_shapes(shape, a.shape)
        elif v.__class__ is float or v.__class__ is int:
            operands.append(float(v))
        else:
            return None
    if shape is None or grad and registry.records_grad():
        return None
    token = fp_errors.enter()
    try:
        r = np.asarray(_pow(*operands))
    finally:
        fp_errors.leave(token)
    if r.shape != shape or not r.flags.c_contiguous:
        r = np.array(np.broadcast_to(r, shape), order="C")
    return Tensor._fresh(r, _dt.float64)


_FLOAT_POWER = defop(
    "float_power(Tensor self, Tensor exponent) -> Tensor", composite=_float_power, kind="pointwise",
    variants=ALL, inplace_check=_float_power_target("base given to float_power_"),
    out_check=_float_power_target("output given to float_power"),
    doc="``self ** exponent`` in float64 (either may be a number); the in-place form needs a float64 ``self``.")
_FLOAT_POWER.fast = _float_power_fast
defop("mvlgamma(Tensor self, int p) -> Tensor", composite=_mvlgamma, kind="pointwise", variants=ALL,
      doc="The multivariate log-gamma function of dimension ``p``: ``sum(lgamma(self - j / 2) for j < p)`` plus "
          "``p (p - 1) / 4 log(pi)``.")
defop("isreal(Tensor self) -> Tensor", composite=lambda x: registry.FUNCTIONS["ones_like"](x, dtype=_dt.bool),
      kind="pointwise", doc="Whether each element is real: always True (jitorch has no complex dtypes).")


def _entr(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, -x * np.log(x), np.where(x == 0, 0, np.where(np.isnan(x), x, -np.inf)))


def _ndtr(x):
    # torch's composite (each step rounded to a half type as it is stored), which underflows to 0 below -8
    return (registry.FUNCTIONS["erf"](x * math.sqrt(0.5)) + 1) * 0.5


_SQRT_HALF_WIDE = np.longdouble(1) / np.sqrt(np.longdouble(2))


def _normal_cdf(x):
    # float32: the kernels' formula (`normal_cdf`) in float64, rounded once. float64: in the tail (0 < y < 28; erfc is 0 beyond)
    # erfc(y + dy) = erfc(y) (1 - 2 y dy) takes back the rounding of y = -x / sqrt(2) (2 y**2 ulp), dy from the
    # product in long double (as mathlib's from an fma)
    if x.dtype == np.float32:
        return normal_cdf.float32(x)
    y = x * -math.sqrt(0.5)
    with np.errstate(invalid="ignore"):  # (inf - inf)
        dy = np.nan_to_num((x.astype(np.longdouble) * -_SQRT_HALF_WIDE - y).astype(x.dtype))
    r = _erfc(y) * 0.5
    return np.where((y > 0) & (y < 28), r * (1 - 2 * y * dy), r)


def _normal_pdf(x):
    # float64: exp(-y*y / 2) as exp(-r*r / 2) exp(-(y-r)(y+r) / 2), r = y cut to 1/16ths (as `_cody`): r*r is
    # exact and the rest is small, so the rounding of y*y does not reach the result
    if x.dtype == np.float32:
        return normal_cdf.pdf_float32(x)
    y = np.abs(x)
    r = np.trunc(y * 16) / 16
    with np.errstate(invalid="ignore"):  # (inf - inf: y infinite, where the result is 0)
        rest = np.nan_to_num(np.exp(-(y - r) * (y + r) / 2), nan=0.0)
    pdf = np.exp(-r * r / 2) * rest / math.sqrt(2 * math.pi)
    return np.where(np.isnan(y), y, pdf).astype(x.dtype)


_declare("special_entr", UNARY, _entr, INT_TO_FLOAT, "Elementwise entropy ``-x log(x)``: 0 at 0, -inf below 0.",
         variants=("function", "out"))
_declare("_normal_cdf", UNARY, _normal_cdf, INT_TO_FLOAT, "The standard normal distribution function Phi(x) "
         "``erfc(-x / sqrt(2)) / 2``, accurate relative to its value where it is small (`F.gelu`'s ``x Phi(x)``; "
         "torch's ``special.ndtr`` is the composition with erf that cancels there).", variants=("function",))
_declare("_normal_pdf", UNARY, _normal_pdf, INT_TO_FLOAT, "The standard normal density ``exp(-x**2 / 2) / sqrt(2 pi)``"
         " (`_normal_cdf`'s derivative), accurate where x**2 does not round exactly.", variants=("function",))
defop("special_ndtr(Tensor self) -> Tensor", composite=_ndtr, variants=("function", "out"),
      out_copies=lambda args: True,  # (torch's out= form: the result copy_-ed, differentiable)
      doc="The standard normal distribution function ``(1 + erf(x / sqrt(2))) / 2``.")
