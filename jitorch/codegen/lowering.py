"""Which graph nodes the code generator can lower, and how: scalar lowerings per op.

The fusion pass asks `can_lower(node)`; the kernel builder asks `POINTWISE`
and `REDUCTIONS` for each node's scalar expression. Each lowering mirrors the
eager formula of its op in jitorch/ops/pointwise.py (NumPy's semantics for
NaN, signed zeros and ties), since compiled results are checked against eager.
"""

from __future__ import annotations

from ..runtime import dtypes as _dt

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
    # can_lower admits decimals == 0 only; rint rounds half to even, as NumPy and torch do
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


# op name -> lowering(e, *operands in compute dtype, *other args) -> Scalar in the compute dtype
POINTWISE = {
    "add": _add, "sub": _sub, "subtract": _sub, "rsub": lambda e, a, b, alpha: _sub(e, b, a, alpha),
    "mul": lambda e, a, b: e.mul(a, b), "multiply": lambda e, a, b: e.mul(a, b),
    "true_divide": lambda e, a, b: e.div(a, b),
    "neg": lambda e, a: e.neg(a), "negative": lambda e, a: e.neg(a),
    "abs": _abs, "absolute": _abs, "sign": _sign, "sgn": _sign, "relu": _relu,
    "reciprocal": lambda e, a: e.div(e.const(1, a.dtype), a),
    "maximum": lambda e, a, b: _maximum(e, b, a), "minimum": lambda e, a, b: _minimum(e, b, a),
    "clamp": _clamp, "clip": _clamp, "clamp_min": lambda e, x, lo: _clamp(e, x, lo, None),
    "clamp_max": lambda e, x, hi: _clamp(e, x, None, hi),
    "sqrt": lambda e, x: e.intrinsic("llvm.sqrt", x),
    "rsqrt": lambda e, x: e.div(e.const(1, x.dtype), e.intrinsic("llvm.sqrt", x)),
    "floor": _rounding("llvm.floor"), "ceil": _rounding("llvm.ceil"), "trunc": _rounding("llvm.trunc"),
    "fix": _rounding("llvm.trunc"), "round": _round, "frac": _frac, "lerp": _lerp,
    "where.self": lambda e, c, a, b: e.select(_truthy(e, c), a, b),
    "eq": _compare("=="), "ne": _compare("!="), "not_equal": _compare("!="), "lt": _compare("<"),
    "less": _compare("<"), "le": _compare("<="), "less_equal": _compare("<="), "gt": _compare(">"),
    "greater": _compare(">"), "ge": _compare(">="), "greater_equal": _compare(">="),
    "logical_and": _logical("and_"), "logical_or": _logical("or_"), "logical_xor": _logical("xor"),
    "logical_not": _logical_not,
    "bitwise_and": _bitwise("and_"), "bitwise_or": _bitwise("or_"), "bitwise_xor": _bitwise("xor"),
    "bitwise_not": _bitwise_not,
    "isnan": lambda e, x: e.isnan(x), "isinf": _isinf, "isfinite": _isfinite,
}
for _name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh", "erf",
              "erfc", "sigmoid", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"):
    POINTWISE[_name] = _math(_name)
for _alias, _name in (("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"), ("arcsinh", "asinh"),
                      ("arccosh", "acosh"), ("arctanh", "atanh")):
    POINTWISE[_alias] = _math(_name)
POINTWISE["pow"] = lambda e, a, b: e.math("pow", a, b)
POINTWISE["atan2"] = POINTWISE["arctan2"] = lambda e, a, b: e.math("atan2", a, b)
POINTWISE_OPS = frozenset(POINTWISE)

# Ops whose lowering needs the math library (only lowered once it provides them).
MATH_OPS = frozenset({"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh",
                      "erf", "erfc", "pow", "sigmoid", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                      "atanh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "atan2", "arctan2"})

# reduction -> (identity, combine(e, acc, x), finish(e, acc, count) or None). Sums and products may
# reassociate, as every other library's do: the order of a float sum is not part of its meaning.
REDUCTIONS = {
    "sum": (0, lambda e, acc, x: e.add(acc, x, reassociate=True), None),
    "mean": (0, lambda e, acc, x: e.add(acc, x, reassociate=True),
             lambda e, acc, n: e.div(acc, e.const(n, acc.dtype))),
    "prod": (1, lambda e, acc, x: e.mul(acc, x, reassociate=True), None),
    "amax": (float("-inf"), lambda e, acc, x: _maximum(e, x, acc), None),
    "amin": (float("inf"), lambda e, acc, x: _minimum(e, x, acc), None),
    "max": (float("-inf"), lambda e, acc, x: _maximum(e, x, acc), None),
    "min": (float("inf"), lambda e, acc, x: _minimum(e, x, acc), None),
}
REDUCTION_OPS = frozenset(REDUCTIONS)

# Casts lower to a conversion.
CAST_OPS = frozenset({"_to_copy"})


def _tensor_dtypes(node):
    from ..ir.graph import iter_values
    return [v.type.dtype for v in iter_values(node.args)] + [o.type.dtype for o in node.outputs]


def _math_available():
    try:
        from . import mathlib  # noqa: F401
    except ImportError:
        return False
    return True


def can_lower(node):
    """Whether the code generator can put ``node`` in a kernel (else it runs as an external op)."""
    name = node.op.name
    if not all(d in DTYPES for d in _tensor_dtypes(node)):
        return False
    if name in CAST_OPS:
        return node.args[2] is None or node.args[2] == node.args[0].type.device
    if name in REDUCTION_OPS:
        dtype = node.outputs[0].type.dtype
        return dtype.is_floating_point or name in ("sum", "prod", "amax", "amin", "max", "min")
    if name not in POINTWISE_OPS:
        return False
    if name in MATH_OPS and not _math_available():
        return False
    if name == "round" and node.args[1] != 0:
        return False
    if name == "pow" and not node.outputs[0].type.dtype.is_floating_point:
        return False
    return True


def kind_of(node):
    """"pointwise", "reduction", "view" or "external": how fusion treats a node."""
    if node.op.view is not None:
        return "view"
    if not can_lower(node):
        return "external"
    return "reduction" if node.op.name in REDUCTION_OPS else "pointwise"
