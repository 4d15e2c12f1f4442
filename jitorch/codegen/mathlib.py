"""Vectorisable elementary functions written as plain LLVM IR.

``emit(builder, name, *args)`` returns the value of ``name`` (``exp``, ``log``, ``sin``,
``tanh``, ``erf``, ``pow``, ...) at ``args``, which are all float or double, scalars or
vectors of one type. Each function is defined once per (name, type) in the builder's
module as an internal ``alwaysinline`` function and called there, so after inlining the
loop vectoriser sees only arithmetic, ``select``, bit casts and the intrinsics in
``ALLOWED_INTRINSICS`` (all of which vectorise on x86 and exist on NVPTX). Nothing here
calls libm: a call stops vectorisation and does not link on NVPTX.

The algorithms and their minimax coefficients are those of SLEEF's 1-ulp functions
(sleefsimdsp.c, sleefsimddp.c, dd.h, df.h, commonfuncs.h; Naoki Shibata and contributors,
Boost Software License 1.0), in their FMA forms: Cody-Waite range reduction, polynomials
in Horner form, and double-word ("dd": an unevaluated sum ``hi + lo`` of two values of the
working precision) arithmetic where one rounding would cost more than an ulp. Where this
file departs from SLEEF it says why (mostly to keep results finite and correct up to the
very edge of the range, where SLEEF saturates early). float32 exp, log, tanh and erf are one-word
float arithmetic instead, shaped for the vector units (`_exp_single`, `_log_single`, `_tanh_single`,
`_erf_single`: no double words, no float-to-integer conversion, no division but tanh's one), as are the normal
distribution's Phi and phi (`_normal_cdf_single`, one division; GELU's x Phi(x) and its derivative), with
polynomials fitted here against mpmath where SLEEF's did not fit the reduction. float32 asin, acos, atan, asinh,
acosh and atanh are `jitorch.ops.arc_functions`' double arithmetic, which eager runs too. The Payne-Hanek table for
huge trig arguments is computed here from pi (Machin's formula), as SLEEF's mkrempitab.c does.

Accuracy, measured against float64 NumPy (float32) and 100-bit mpmath (float64) on random
arguments over the whole range and, in float32, every 256th bit pattern: under 1 ulp for every
function but erfc (1.05 ulp in float32), erf (1.12 in float32), tanh (1.5 in float64), sigmoid (2.2; 2.4
in float32 over every input) and rsqrt (1.5: it is 1/sqrt(x), exactly as the eager op computes it); sqrt
is correctly rounded.
Over every float32 input (tools/float32_exhaustive.py against NumPy's float64): exp 0.988 ulp,
log 0.882, tanh 0.949, erf 1.123, sigmoid 2.40. Special values
follow C99: NaN in gives NaN out, signed zeros are kept, results overflow to infinity and
underflow gradually through the denormals, and denormal arguments are exact inputs.

The double-word tricks depend on every add and multiply being rounded as written: the
instructions emitted here carry no fast-math flags, and callers must not add any.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from functools import lru_cache

import numpy as np
from llvmlite import ir

from ..ops import arc_functions, normal_cdf, powers

# The intrinsics this module may emit (it needs only some of them).
ALLOWED_INTRINSICS = frozenset({
    "llvm.fma", "llvm.fabs", "llvm.floor", "llvm.ceil", "llvm.trunc", "llvm.rint", "llvm.nearbyint",
    "llvm.copysign", "llvm.sqrt", "llvm.minnum", "llvm.maxnum",
})

_INF = float("inf")
_NAN = float("nan")


class _Splat(ir.Constant):
    """``x`` in every lane of the vector type ``t``, spelled ``splat (float x)`` (``zeroinitializer`` for 0):
    llvmlite writes a vector constant lane by lane, and with 16 lanes those were most of a vectorised kernel's
    IR text, which every process builds and hashes for its cache key."""

    def __init__(self, t, x):  # (not Constant.__init__: it would take the text for lane values)
        self.type = t
        zero = x == 0 and not str(x).startswith("-")
        self.constant = "zeroinitializer" if zero else f"splat ({t.element} {t.element.format_constant(x)})"

    def _get_reference(self):
        return self.constant


def splat(t, x):
    """The constant ``x`` (a Python number of ``t``'s element type) in every lane of vector type ``t``: spelled
    short where the LLVM that llvmlite carries reads ``splat (...)`` (LLVM 19 on; llvmlite 0.44's LLVM 15 does
    not), else lane by lane."""
    if _reads_splat():
        return _Splat(t, x)
    return ir.Constant(t, [x] * t.count)


@lru_cache(maxsize=None)
def _reads_splat():
    """Whether LLVM's IR parser takes the ``splat (ty x)`` constant syntax (asked once: parsing a line)."""
    from llvmlite import binding
    try:
        binding.parse_assembly("define <2 x float> @f(<2 x float> %x) {\n"
                               "  %y = fadd <2 x float> %x, splat (float 1.0)\n  ret <2 x float> %y\n}\n")
    except RuntimeError:
        return False
    return True


def _f32(v):
    return float(np.float32(v))


def _type_suffix(t):
    """The overload suffix LLVM gives ``t`` in intrinsic names (``f32``, ``v8f64``)."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{t.element.intrinsic_name}"
    return t.intrinsic_name


class _Math(powers.DoubleWordSums):
    """Arithmetic on values of one float type (scalar or vector) through an IRBuilder.

    Methods accept Python numbers wherever a value is expected (they become splatted
    constants rounded to the working precision). Double-word values are ``(hi, lo)`` tuples.
    """

    def __init__(self, builder, t):
        self.b = builder
        self.t = t
        scalar = t.element if isinstance(t, ir.VectorType) else t
        self.lanes = t.count if isinstance(t, ir.VectorType) else None
        self.double = isinstance(scalar, ir.DoubleType)
        self.mant = 52 if self.double else 23
        self.bias = 1023 if self.double else 127
        self.it = self._shaped(ir.IntType(64 if self.double else 32))

    def _shaped(self, scalar):
        return ir.VectorType(scalar, self.lanes) if self.lanes else scalar

    # Constants and conversions ---------------------------------------------------------

    def pick(self, single, double):
        """The single- or double-precision variant of a constant (or table) for this type."""
        return double if self.double else single

    def c(self, v):
        v = float(v) if self.double else _f32(v)
        return splat(self.t, v) if self.lanes else ir.Constant(self.t, v)

    def ic(self, v):
        return splat(self.it, int(v)) if self.lanes else ir.Constant(self.it, int(v))

    def cd(self, pair):
        """A double-word constant from its (hi, lo) parts."""
        return self.c(pair[0]), self.c(pair[1])

    def _v(self, x):
        return self.c(x) if isinstance(x, (int, float)) else x

    def bits(self, x):
        return self.b.bitcast(self._v(x), self.it)

    def from_bits(self, i):
        return self.b.bitcast(i, self.t)

    def f2i(self, x):
        """``x`` (integral) as an integer; out-of-range and NaN lanes give 0 instead of poison."""
        limit = 2.0 ** (62 if self.double else 30)
        x = self.sel(self.lt(self.abs(x), limit), x, 0.0)
        return self.b.fptosi(x, self.it)

    def i2f(self, i):
        return self.b.sitofp(i, self.t)

    # Float arithmetic ------------------------------------------------------------------

    def add(self, a, b):
        return self.b.fadd(self._v(a), self._v(b))

    def sub(self, a, b):
        return self.b.fsub(self._v(a), self._v(b))

    def mul(self, a, b):
        return self.b.fmul(self._v(a), self._v(b))

    def div(self, a, b):
        return self.b.fdiv(self._v(a), self._v(b))

    def neg(self, a):
        return self.b.fneg(self._v(a))

    def _intrinsic(self, name, *args):
        module = self.b.module
        full = f"{name}.{_type_suffix(self.t)}"
        fn = module.globals.get(full)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(self.t, [self.t] * len(args)), full)
        return self.b.call(fn, [self._v(a) for a in args])

    def fma(self, a, b, c):
        return self._intrinsic("llvm.fma", a, b, c)

    def two_prod(self, a, b):
        """``a * b`` exactly, as (product, error): `jitorch.ops.powers.two_prod_dekker`'s exact value."""
        p = self.mul(a, b)
        return p, self.fma(a, b, self.neg(p))

    def abs(self, a):
        return self._intrinsic("llvm.fabs", a)

    def rint(self, a):
        return self._intrinsic("llvm.rint", a)

    def trunc(self, a):
        return self._intrinsic("llvm.trunc", a)

    def sqrt(self, a):
        return self._intrinsic("llvm.sqrt", a)

    def min(self, a, b):
        """The smaller of ``a`` and ``b``; ``b`` where ``a`` is NaN."""
        return self._intrinsic("llvm.minnum", a, b)

    def copysign(self, a, b):
        return self._intrinsic("llvm.copysign", a, b)

    def mulsign(self, a, b):
        """``a`` with its sign flipped where ``b`` is negative (sign bit set)."""
        sign = self.b.and_(self.bits(b), self.ic(1 << (63 if self.double else 31)))
        return self.from_bits(self.b.xor(self.bits(a), sign))

    def poly(self, x, coeffs):
        """Horner's rule, highest power first."""
        u = self._v(coeffs[0])
        for k in coeffs[1:]:
            u = self.fma(u, x, k)
        return u

    # Comparisons and selection ---------------------------------------------------------

    def lt(self, a, b):
        return self.b.fcmp_ordered("<", self._v(a), self._v(b))

    def le(self, a, b):
        return self.b.fcmp_ordered("<=", self._v(a), self._v(b))

    def gt(self, a, b):
        return self.b.fcmp_ordered(">", self._v(a), self._v(b))

    def ge(self, a, b):
        return self.b.fcmp_ordered(">=", self._v(a), self._v(b))

    def eq(self, a, b):
        return self.b.fcmp_ordered("==", self._v(a), self._v(b))

    def isnan(self, a):
        return self.b.fcmp_unordered("uno", a, a)

    def isinf(self, a):
        return self.eq(self.abs(a), _INF)

    def signbit(self, a):
        return self.b.icmp_signed("<", self.bits(a), self.ic(0))

    def any(self, *conds):
        out = conds[0]
        for c in conds[1:]:
            out = self.b.or_(out, c)
        return out

    def all(self, *conds):
        out = conds[0]
        for c in conds[1:]:
            out = self.b.and_(out, c)
        return out

    def sel(self, cond, a, b):
        return self.b.select(cond, self._v(a), self._v(b))

    def dsel(self, cond, x, y):
        return self.sel(cond, x[0], y[0]), self.sel(cond, x[1], y[1])

    # Integers and the exponent field ---------------------------------------------------

    def iadd(self, a, b):
        return self.b.add(a, b if isinstance(b, ir.Value) else self.ic(b))

    def isub(self, a, b):
        return self.b.sub(a, b if isinstance(b, ir.Value) else self.ic(b))

    def ishl(self, a, n):
        return self.b.shl(a, self.ic(n))

    def iand(self, a, b):
        return self.b.and_(a, b if isinstance(b, ir.Value) else self.ic(b))

    def ieq(self, a, b):
        return self.b.icmp_signed("==", a, b if isinstance(b, ir.Value) else self.ic(b))

    def ilogb2k(self, d):
        """The unbiased exponent field of ``d`` (normal numbers only)."""
        e = self.b.lshr(self.bits(d), self.ic(self.mant))
        return self.isub(self.iand(e, 2 * self.bias + 1), self.bias)

    def pow2i(self, q):
        """2**q for q in the normal exponent range."""
        return self.from_bits(self.ishl(self.iadd(q, self.bias), self.mant))

    def ldexp2k(self, d, e):
        """d * 2**e in two exact steps, so the result may be denormal or overflow (|e| <= 2 * bias)."""
        half = self.b.ashr(e, self.ic(1))
        return self.mul(self.mul(d, self.pow2i(half)), self.pow2i(self.isub(e, half)))

    def ldexp3k(self, d, q):
        """d * 2**q by adding to the exponent field (d and the result normal)."""
        return self.from_bits(self.iadd(self.bits(d), self.ishl(q, self.mant)))

    def split_exponent(self, d):
        """(e, m) with d = m * 2**e and m in [0.75, 1.5), for finite d > 0 (denormals too).

        SLEEF takes the exponent of d / 0.75, which overflows for d near the largest float;
        the exponent of d * (2/3), plus one, is the same number and never overflows."""
        tiny = self.lt(d, 2.0 ** (-1000 if self.double else -120))
        d = self.sel(tiny, self.mul(d, 2.0 ** 64), d)
        e = self.iadd(self.ilogb2k(self.mul(d, 2.0 / 3.0)), 1)
        m = self.ldexp3k(d, self.isub(self.ic(0), e))
        return self.sel(tiny, self.isub(e, 64), e), m

    # Double-word products (SLEEF dd.h / df.h, FMA forms; the sums are `powers.DoubleWordSums`') ----------

    def dmul_ff(self, x, y):
        s = self.mul(x, y)
        return s, self.fma(x, y, self.neg(s))

    def dmul_df(self, x, y):
        s = self.mul(x[0], y)
        return s, self.fma(x[1], y, self.fma(x[0], y, self.neg(s)))

    def dmul_dd(self, x, y):
        s = self.mul(x[0], y[0])
        return s, self.fma(x[0], y[1], self.fma(x[1], y[0], self.fma(x[0], y[0], self.neg(s))))

    def dsqu(self, x):
        s = self.mul(x[0], x[0])
        return s, self.fma(self.add(x[0], x[0]), x[1], self.fma(x[0], x[0], self.neg(s)))

    def dsqu1(self, x):
        """The square of a double word rounded to one value."""
        xy = self.mul(x[0], x[1])
        return self.fma(x[0], x[0], self.add(xy, xy))

    def ddiv(self, n, d):
        t = self.div(1.0, d[0])
        s = self.mul(n[0], t)
        u = self.fma(t, n[0], self.neg(s))
        v = self.fma(self.neg(d[1]), t, self.fma(self.neg(d[0]), t, 1.0))
        return s, self.fma(s, v, self.fma(n[1], t, u))

    def drec_f(self, d):
        s = self.div(1.0, d)
        return s, self.mul(s, self.fma(self.neg(d), s, 1.0))

    def drec_d(self, d):
        s = self.div(1.0, d[0])
        return s, self.mul(s, self.fma(self.neg(d[1]), s, self.fma(self.neg(d[0]), s, 1.0)))

    def dsqrt_d(self, d):
        t = self.sqrt(self.dsum(d))
        return self.dscale(self.dmul_dd(self.dadd2_dd(d, self.dmul_ff(t, t)), self.drec_f(t)), 0.5)

    def dsqrt_f(self, d):
        t = self.sqrt(d)
        return self.dscale(self.dmul_dd(self.dadd2_fd(d, self.dmul_ff(t, t)), self.drec_f(t)), 0.5)

    # Constant tables --------------------------------------------------------------------

    def table_load(self, table, index):
        """``table[index]`` for an integer (vector) index, from an internal constant array."""
        g = self.b.module.globals[table]
        zero = ir.Constant(ir.IntType(32), 0)
        if not self.lanes:
            return self.b.load(self.b.gep(g, [zero, index], inbounds=True))
        out = ir.Constant(self.t, ir.Undefined)
        for k in range(self.lanes):
            lane = ir.Constant(ir.IntType(32), k)
            i = self.b.extract_element(index, lane)
            out = self.b.insert_element(out, self.b.load(self.b.gep(g, [zero, i], inbounds=True)), lane)
        return out


# Shared constants (SLEEF misc.h; single-precision ones are rounded to float) -------------------

_R_LN2 = 1.442695040888963407359924681001892137426645954152985934135449406931
_L2U = (0.693145751953125, 0.69314718055966295651160180568695068359375)
_L2L = (1.428606765330187045e-06, 0.28235290563031577122588448175013436025525412068e-12)
_LN2 = ((0.69314718246459960938, -1.904654323148236017e-09),
        (0.693147180559945286226764, 2.319046813846299558417771e-17))
_PI = ((3.1415927410125732422, -8.7422776573475857731e-08), (3.141592653589793116, 1.2246467991473532072e-16))


# Exponentials -----------------------------------------------------------------------------------

_EXP = (
    (0.000198527617612853646278381, 0.00139304355252534151077271, 0.00833336077630519866943359,
     0.0416664853692054748535156, 0.166666671633720397949219, 0.5),
    (+0.2081276378237164457e-8, +0.2511210703042288022e-7, +0.2755762628169491192e-6,
     +0.2755723402025388239e-5, +0.2480158687479686264e-4, +0.1984126989855865850e-3,
     +0.1388888888914497797e-2, +0.8333333333314938210e-2, +0.4166666666666602598e-1,
     +0.1666666666666669072e+0, 0.5, 1.0),
)


def _reduce_ln2(m, d):
    """(q, s) with d = q * ln2 + s, |s| <= ln2 / 2 (Cody-Waite: q * L2U is exact)."""
    q = m.rint(m.mul(d, _R_LN2))
    s = m.fma(q, -m.pick(*_L2U), d)
    return q, m.fma(q, -m.pick(*_L2L), s)


# (float, double): exp of anything below is +0 (the float one is also `_exp_single`'s clamp; callers that
# know many of their arguments lie there, -inf of a mask, may select those out: computing them rounds an
# underflowing product, a microcode assist of ~100 cycles per vector on Intel cores)
EXP_ZERO_BELOW = (-104.0, -1000.0)
_ROUNDING_SHIFT = 12582912.0  # 1.5 * 2**23: adding it rounds a float of magnitude below 2**22 to an integer


def _exp_single(m, d):
    """Float e**d in 24 vector operations (SLEEF's xexpf, which this replaced, took 33 here; the results differ
    at 17 of the 2**32 float32 inputs, where d / ln2 rounds the other way at a tie): d clamped to [-104, 100] (a
    ``select`` on ``<``/``>`` that keeps NaN, so no selects are needed at the end: e**-104 * 2**150 < 1/2 so
    the two-step scaling rounds it to +0, and 2**144 overflows to infinity), q = rint(d / ln2) read from the
    bits of ``fma(d, 1/ln2, 1.5 * 2**23)`` (no float-to-integer conversion and its out-of-range guard), SLEEF's
    polynomial, and the scaling by 2**q in two products (an exponent-field add would turn a NaN with some
    payloads into a number: q is garbage there)."""
    d = m.sel(m.lt(d, EXP_ZERO_BELOW[0]), EXP_ZERO_BELOW[0], d)
    d = m.sel(m.gt(d, 100.0), 100.0, d)
    z = m.fma(d, _R_LN2, _ROUNDING_SHIFT)
    q = m.sub(z, _ROUNDING_SHIFT)
    s = m.fma(q, -_L2U[0], d)
    s = m.fma(q, -_L2L[0], s)
    u = m.add(1.0, m.fma(m.mul(s, s), m.poly(s, _EXP[0]), s))
    return m.ldexp2k(u, m.isub(m.bits(z), m.bits(_ROUNDING_SHIFT)))


def _exp(m, d):
    if not m.double:
        return _exp_single(m, d)
    q, s = _reduce_ln2(m, d)
    u = m.poly(s, m.pick(*_EXP))
    if m.double:
        u = m.fma(u, s, 1.0)
    else:
        u = m.add(1.0, m.fma(m.mul(s, s), u, s))
    u = m.ldexp2k(u, m.f2i(q))
    u = m.sel(m.gt(d, m.pick(100.0, 709.79)), _INF, u)  # below these, 2**q overflows by itself
    return m.sel(m.lt(d, m.pick(*EXP_ZERO_BELOW)), 0.0, u)


_EXP2 = (
    (+0.1535920892e-3, +0.1339262701e-2, +0.9618384764e-2, +0.5550347269e-1, +0.2402264476e+0,
     +0.6931471825e+0, 1.0),
    (+0.4434359082926529454e-9, +0.7073164598085707425e-8, +0.1017819260921760451e-6,
     +0.1321543872511327615e-5, +0.1525273353517584730e-4, +0.1540353045101147808e-3,
     +0.1333355814670499073e-2, +0.9618129107597600536e-2, +0.5550410866482046596e-1,
     +0.2402265069591012214e+0, +0.6931471805599452862e+0, 1.0),
)


def _exp2(m, d):
    q = m.rint(d)
    u = m.ldexp2k(m.poly(m.sub(d, q), m.pick(*_EXP2)), m.f2i(q))
    u = m.sel(m.ge(d, m.pick(128.0, 1024.0)), _INF, u)
    return m.sel(m.lt(d, m.pick(-150.0, -2000.0)), 0.0, u)


_EXPK2 = (
    (+0.1980960224e-3, +0.1394256484e-2, +0.8333456703e-2, +0.4166637361e-1),
    (+0.1602472219709932072e-9, +0.2092255183563157007e-8, +0.2505230023782644465e-7,
     +0.2755724800902135303e-6, +0.2755731892386044373e-5, +0.2480158735605815065e-4,
     +0.1984126984148071858e-3, +0.1388888888886763255e-2, +0.8333333333333347095e-2,
     +0.4166666666666669905e-1),
)


def _expk2_core(m, d):
    """(t, q) with exp(d) = t * 2**q, t a double word near 1 (SLEEF expk2 / expk2f before scaling)."""
    q = m.rint(m.mul(m.dsum(d), _R_LN2))
    s = m.dadd2_df(d, m.mul(q, -m.pick(*_L2U)))
    s = m.dadd2_df(s, m.mul(q, -m.pick(*_L2L)))
    if m.double:
        s4 = m.dsqu(m.dsqu(s))
        u = m.poly(s[0], _EXPK2[1])
        t = m.dadd_fd(0.5, m.dmul_df(s, 0.1666666666666666574))
        t = m.dadd_fd(1.0, m.dmul_dd(t, s))
        t = m.dadd_fd(1.0, m.dmul_dd(t, s))
        t = m.dadd_dd(t, m.dmul_df(s4, u))
    else:
        u = m.poly(s[0], _EXPK2[0])
        t = m.dadd2_df(m.dmul_df(s, u), 0.166666659414234244790680580464)
        t = m.dadd2_df(m.dmul_dd(s, t), 0.5)
        t = m.dadd2_dd(s, m.dmul_dd(m.dsqu(s), t))
        t = m.dadd_fd(1.0, t)
    return t, m.f2i(q)


def _underflows(m, d):
    return m.lt(d[0], m.pick(*EXP_ZERO_BELOW))


def _expk2(m, d, shift=0):
    """exp of a double word, as a double word, times 2**shift."""
    t, q = _expk2_core(m, d)
    e = m.iadd(q, shift)
    under = _underflows(m, d)
    return m.sel(under, 0.0, m.ldexp2k(t[0], e)), m.sel(under, 0.0, m.ldexp2k(t[1], e))


_EXPK = (
    (0.00136324646882712841033936, 0.00836596917361021041870117, 0.0416710823774337768554688,
     0.166665524244308471679688, 0.499999850988388061523438),
    (2.51069683420950419527139e-08, 2.76286166770270649116855e-07, 2.75572496725023574143864e-06,
     2.48014973989819794114153e-05, 0.000198412698809069797676111, 0.0013888888939977128960529,
     0.00833333333332371417601081, 0.0416666666665409524128449, 0.166666666666666740681535,
     0.500000000000000999200722),
)


def _expk(m, d):
    """exp of a double word, rounded to one value (SLEEF expk / expkf)."""
    q = m.rint(m.mul(m.dsum(d), _R_LN2))
    s = m.dadd2_df(d, m.mul(q, -m.pick(*_L2U)))
    s = m.dnorm(m.dadd2_df(s, m.mul(q, -m.pick(*_L2L))))
    u = m.poly(s[0], m.pick(*_EXPK))
    if m.double:
        t = m.dadd_dd(m.dadd_fd(1.0, s), m.dmul_df(m.dsqu(s), u))
    else:
        t = m.dadd_fd(1.0, m.dadd_dd(s, m.dmul_df(m.dsqu(s), u)))
    u = m.ldexp2k(m.dsum(t), m.f2i(q))
    return m.sel(m.lt(d[0], m.pick(*EXP_ZERO_BELOW)), 0.0, u)


def _expm1(m, a):
    d = m.dadd2_df(_expk2(m, (a, m.c(0.0))), -1.0)
    x = m.dsum(d)
    x = m.sel(m.gt(a, m.pick(88.72283172607421875, 709.782712893383996732223)), _INF, x)
    # below -(p + 2) ln 2, e**a is under half an ulp of 1 (SLEEF's bound, -p ln 2, is an ulp early)
    x = m.sel(m.lt(a, m.pick(-18.0, -38.0)), -1.0, x)
    return m.sel(m.eq(a, 0.0), a, x)


def _expm1_moderate(m, x):
    """Double e**x - 1 for 0 <= x <= 40 (NaN passes through) in one-word arithmetic, for tanh:
    2**q p + (2**q - 1) with p = e**s - 1, s = x - q ln2 kept as a double word."""
    q = m.rint(m.mul(x, _R_LN2))
    s = m.dadd2_ff(m.fma(q, -_L2U[1], x), m.mul(q, -_L2L[1]))
    u = m.poly(s[0], _EXP[1][:-1])  # (e**s - 1 - s) / s**2
    p = m.add(s[0], m.fma(m.mul(s[0], s[0]), u, s[1]))
    scale = m.pow2i(m.f2i(q))
    return m.fma(scale, p, m.sub(scale, 1.0))


# double tanh x = x + x**3 P(x**2) / Q(x**2) for |x| < 0.625 (Cephes tanh.c), highest power first.
_TANH = ((-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3),
         (1.0, 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3))


# float tanh in float: |x| < 1: x + x**3 P(x**2), P fitted to (tanh x - x) / x**3 on [0, 1] as _LOG_SINGLE's Q
# (weight x**3 / tanh x; approximation error 0.008 of a float ulp); from 1 on, 1 - 2 / (e**2|x| + 1), where
# 2 / (e**2|x| + 1) < 0.24 keeps the cancellation's carry of exp's error under an ulp. Over every float32: at
# most 0.949 ulp (at 1.0103085, past the switch), where the t / (t + 2) form it replaces reached 1.48 (torch's
# 0.569, eager NumPy's 1.37). Highest power first.
_TANH_SINGLE = (0.00011620864097494632, -0.0008212039829231799, 0.0030481235589832067, -0.008571074344217777,
                0.021774355322122574, -0.0539507158100605, 0.13333174586296082, -0.333333283662796)


def _tanh_single(m, x):
    """Float tanh in float arithmetic on |x|, the sign copied last (so -0.0 stays -0.0). Past 9 the result
    is exactly 1 (from 44.4 e**2|x| is infinite); NaN fails ``|x| < 1`` and passes through exp."""
    a = m.abs(x)
    z = m.mul(a, a)
    small = m.fma(m.mul(a, z), m.poly(z, _TANH_SINGLE), a)
    big = m.sub(1.0, m.div(2.0, m.add(_exp_single(m, m.add(a, a)), 1.0)))
    return m.copysign(m.sel(m.lt(a, 1.0), small, big), x)


def _tanh(m, x):
    if not m.double:
        return _tanh_single(m, x)
    # Beyond |x| = 0.625, tanh |x| = t / (t + 2) with t = e**2|x| - 1 (one word); past 20 it is 1 to the
    # last bit.
    a = m.abs(x)
    a = m.sel(m.gt(a, 20.0), 20.0, a)
    t = _expm1_moderate(m, m.mul(a, 2.0))
    big = m.copysign(m.div(t, m.add(t, 2.0)), x)
    z = m.mul(x, x)
    small = m.fma(m.mul(m.div(m.poly(z, _TANH[0]), m.poly(z, _TANH[1])), z), x, x)
    return m.sel(m.eq(x, 0.0), x, m.sel(m.lt(a, 0.625), small, big))


def _sigmoid(m, x):
    # e**-|x| never overflows; for x < 0 the result is e / (1 + e), one division either way.
    e = _exp(m, m.neg(m.abs(x)))
    return m.div(m.sel(m.lt(x, 0.0), e, 1.0), m.add(e, 1.0))


def _sinh_cosh(m, x, sign):
    # e**|x| / 2 (the halving folded into the exponent) stays finite up to the true overflow
    # point, where SLEEF's e**|x| saturates early.
    h = _expk2(m, (m.abs(x), m.c(0.0)), shift=-1)
    r = m.dscale(m.drec_d(h), 0.25)
    y = m.dsum(m.dadd_dd(h, r) if sign > 0 else m.dsub_dd(h, r))
    return m.sel(m.any(m.gt(m.abs(x), m.pick(89.5, 710.5)), m.isnan(y)), _INF, y)


def _odd_tiny(m, x, y, order):
    """y, or x itself where |x| < 2**(-p/order): there f(x) = x + O(x**(order+1)) is x to
    working precision p, and the double-word paths would lose its last bit."""
    return m.sel(m.lt(m.abs(x), m.pick(2.0 ** (-24 // order), 2.0 ** (-53 // order))), x, y)


def _sinh(m, x):
    return _odd_tiny(m, x, m.sel(m.isnan(x), x, m.mulsign(_sinh_cosh(m, x, -1), x)), 2)


def _cosh(m, x):
    return m.sel(m.isnan(x), x, _sinh_cosh(m, x, +1))


# Logarithms -------------------------------------------------------------------------------------

_LOG = (
    (+0.3027294874e+0, +0.3996108174e+0, +0.6666694880e+0),
    (0.1532076988502701353e+0, 0.1525629051003428716e+0, 0.1818605932937785996e+0,
     0.2222214519839380009e+0, 0.2857142932794299317e+0, 0.3999999999635251990e+0,
     0.6666666666667333541e+0),
)
# base -> (log_base(2) and 2 / ln(base) as double words, polynomial), single then double precision
_LOG_BASES = {
    "log": (((_LN2[0], (2.0, 0.0)), _LOG[0]), ((_LN2[1], (2.0, 0.0)), _LOG[1])),
    "log2": ((((1.0, 0.0), (2.8853900432586669922, 3.2734474483568488616e-08)),
              (+0.4374550283e+0, +0.5764790177e+0, +0.9618012905120)),
             (((1.0, 0.0), (2.885390081777926774, 6.0561604995516736434e-18)),
              (+0.2211941750456081490e+0, +0.2200768693152277689e+0, +0.2623708057488514656e+0,
               +0.3205977477944495502e+0, +0.4121985945485324709e+0, +0.5770780162997058982e+0,
               +0.96179669392608091449))),
    "log10": ((((0.30103001, -1.432098889e-08), (0.868588984, -2.170757285e-08)),
               (+0.1314289868e+0, +0.1735493541e+0, +0.2895309627e+0)),
              (((0.30102999566398119802, -2.803728127785170339e-18),
                (0.86858896380650363334, 1.1430059694096389311e-17)),
               (+0.6653725819576758460e-1, +0.6625722782820833712e-1, +0.7898105214313944078e-1,
                +0.9650955035715275132e-1, +0.1240841409721444993e+0, +0.1737177927454605086e+0,
                +0.2895296546021972617e+0))),
}


def _log_series(m, e, x, base):
    """e * log_base(2) + log_base((1 + x) / (1 - x)) for the reduced x (a double word)."""
    (k, c), coeffs = m.pick(*_LOG_BASES[base])
    x2 = m.mul(x[0], x[0])
    t = m.poly(x2, coeffs)
    s = m.dadd2_dd(m.dmul_df(m.cd(k), m.i2f(e)), m.dmul_dd(x, m.cd(c)))
    return m.dsum(m.dadd2_df(s, m.mul(m.mul(x2, x[0]), t)))


def _log_any(base):
    def log(m, d):
        if base == "log" and not m.double:
            return _log_single(m, d)
        e, mant = m.split_exponent(d)
        x = m.ddiv(m.dadd2_ff(-1.0, mant), m.dadd2_ff(1.0, mant))
        r = _log_series(m, e, x, base)
        r = m.sel(m.eq(d, _INF), _INF, r)
        r = m.sel(m.any(m.lt(d, 0.0), m.isnan(d)), _NAN, r)
        return m.sel(m.eq(d, 0.0), -_INF, r)
    return log


# float log in float: x = 2**n * m with m in [2/3, 4/3) (the exponent read from the bits of x over 2/3's),
# r = m - 1 (exact), log x = n ln2 + r + r**2 Q(r). Q fitted to (log1p(r) - r) / r**2 on [-1/3, 1/3] by Lawson's
# weighted least squares towards minimax against 40-digit mpmath, weighted by r**2 / log1p(r) (how far an error
# of Q moves the result, relatively), lowest power first, each rounded to float before the higher ones were
# fitted again: approximation error 0.08 of a float ulp. Over every float32: at most 0.882 ulp (at 1.2749931),
# 0.1% of results not correctly rounded; SLEEF's double-word evaluation it replaces was within 0.51 ulp at 2.2x
# the time (torch's: 0.549 ulp, eager NumPy's float32 log: 3.83). Highest power first.
_LOG_SINGLE = (-0.12882249057292938, 0.1398494690656662, -0.12186885625123978, 0.14005668461322784,
               -0.16680248081684113, 0.20010429620742798, -0.2499980479478836, 0.3333321511745453, -0.5)
_TWO_THIRDS_BITS = 0x3F2AAAAB


def _log_single(m, d):
    """Float log in float arithmetic with no division: n ln2 + r is summed exactly (n * L2U is exact
    and the rounding error of adding r is recovered, Fast2Sum), so only the last addition rounds a value
    near the result. Denormal arguments are scaled by 2**23 first; zero, negatives, NaN and infinity are
    selected at the end (their exponent arithmetic gives finite garbage, never poison)."""
    tiny = m.lt(d, 2.0 ** -126)
    x = m.sel(tiny, m.mul(d, 2.0 ** 23), d)
    u = m.isub(m.bits(x), _TWO_THIRDS_BITS)
    n = m.b.ashr(u, m.ic(23))
    r = m.sub(m.from_bits(m.iadd(m.iand(u, 0x7FFFFF), _TWO_THIRDS_BITS)), 1.0)
    n = m.i2f(m.sel(tiny, m.isub(n, 23), n))
    big = m.mul(n, _L2U[0])
    hi = m.add(big, r)
    lo = m.fma(n, _L2L[0], m.add(m.sub(big, hi), r))
    r2 = m.mul(r, r)
    y = m.add(hi, m.fma(r2, m.poly(r, _LOG_SINGLE), lo))
    y = m.sel(m.eq(d, _INF), _INF, y)
    y = m.sel(m.b.fcmp_unordered("<", d, m.c(0.0)), _NAN, y)
    return m.sel(m.eq(d, 0.0), -_INF, y)


def _log1p(m, d):
    # log1p(d) = e * ln2 + log(m) with m = (1 + d) / 2**e, and m - 1 = d * 2**-e + (2**-e - 1)
    # computed in one rounding (SLEEF xlog1p).
    e, _ = m.split_exponent(m.add(d, 1.0))
    t = m.ldexp2k(m.c(1.0), m.isub(m.ic(0), e))
    f = m.fma(d, t, m.sub(t, 1.0))
    x = m.ddiv((f, m.c(0.0)), m.dadd_ff(2.0, f))
    r = _log_series(m, e, x, "log")
    r = m.sel(m.eq(d, _INF), _INF, r)
    r = m.sel(m.any(m.lt(d, -1.0), m.isnan(d)), _NAN, r)
    r = m.sel(m.eq(d, -1.0), -_INF, r)
    return _odd_tiny(m, d, r, 1)  # log1p(d) = d - d**2/2 + ...: d itself when that is below half an ulp


_LOGK2 = (
    (0.2392828464508056640625, 0.28518211841583251953125, 0.400005877017974853515625,
     0.666666686534881591796875),
    (0.13860436390467167910856, 0.131699838841615374240845, 0.153914168346271945653214,
     0.181816523941564611721589, 0.22222224632662035403996, 0.285714285511134091777308,
     0.400000000000914013309483, 0.666666666666664853302393),
)


def _logk2(m, d):
    """log of a double word >= 1 as a double word (SLEEF logk2 / logk2f)."""
    e, _ = m.split_exponent(d[0])
    neg_e = m.isub(m.ic(0), e)
    mant = m.ldexp2k(d[0], neg_e), m.ldexp2k(d[1], neg_e)
    x = m.ddiv(m.dadd2_df(mant, -1.0), m.dadd2_df(mant, 1.0))
    x2 = m.dsqu(x)
    t = m.poly(x2[0], m.pick(*_LOGK2))
    s = m.dadd_dd(m.dmul_df(m.cd(m.pick(*_LN2)), m.i2f(e)), m.dscale(x, 2.0))
    return m.dadd_dd(s, m.dmul_df(m.dmul_dd(x2, x), t))


def _in_double(double, single):
    """A definition of `jitorch.ops.powers` (written for doubles against this module's `_Math` interface, and
    run by eager NumPy too) for this type: ``double`` for doubles; float arguments are widened exactly, computed
    by ``single`` and rounded once, as the eager op computes them."""
    def impl(m, *args):
        if m.double:
            return double(m, *args)
        wide = _Math(m.b, m._shaped(ir.DoubleType()))
        return m.b.fptrunc(single(wide, *[m.b.fpext(a, wide.t) for a in args]), m.t)
    return impl


# Trigonometric functions ------------------------------------------------------------------------

def _pi_scaled(bits):
    """floor(pi * 2**bits) (within a unit), by Machin's formula 16 atan(1/5) - 4 atan(1/239)."""
    guard = bits + 64
    one = 1 << guard

    def atan_inv(n):
        total, term, k, sign = 0, one // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total

    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 64


def _clear_lsb(v):
    return struct.unpack("<d", struct.pack("<q", struct.unpack("<q", struct.pack("<d", v))[0] & ~1))[0]


@lru_cache(maxsize=None)
def _rempi_table(double):
    """SLEEF's Payne-Hanek table: row i (for exponent i + 55 in double, i + 25 in float) holds
    1/(2 pi) without the leading bits that only add whole turns for such arguments, as four
    parts summing to about 4 * 53 (4 * 24) bits, scaled by 2**64 for exponents above 700 (90)
    so that no part underflows."""
    bits = 1400
    pi_bits = bits + 64
    inv_2pi = (1 << (bits + pi_bits)) // (2 * _pi_scaled(pi_bits))  # 2**bits / (2 pi)
    out = []
    first, last, big, mant = (55, 1023, 700, 53) if double else (25, 127, 90, 23)
    for i in range(first, last + 1):
        ex = i - mant
        rest = Fraction((inv_2pi % (1 << (bits - ex))) << (64 if i > big else 0), 1 << bits)
        for k in range(4):
            v = float(rest)
            if double:
                v = _clear_lsb(v) if k < 3 else v
            else:
                v = _f32(_clear_lsb(v)) if k == 3 else _f32(v)
            out.append(v)
            rest -= Fraction(v)
    return tuple(out)


def _table_name(m):
    return "jitorch.math.rempi." + ("f64" if m.double else "f32")


def _ensure_table(m):
    name = _table_name(m)
    module = m.b.module
    if name not in module.globals:
        scalar = ir.DoubleType() if m.double else ir.FloatType()
        values = _rempi_table(m.double)
        array = ir.ArrayType(scalar, len(values))
        g = ir.GlobalVariable(module, array, name)
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(array, list(values))


def _rempisub(m, x):
    """(x - rint(4x) / 4, rint(4x) - 4 rint(x)): the fraction of a turn within a quadrant."""
    y = m.rint(m.mul(x, 4.0))
    q = m.f2i(m.sub(y, m.mul(m.rint(x), 4.0)))
    return m.sub(x, m.mul(y, 0.25)), q


def _rempi(m, a):
    """(q, r) with a = q * pi/2 + r, |r| <= pi/4, r a double word, for any finite a (SLEEF rempi).

    a times 1/(2 pi) is summed in double words from table parts chosen by a's exponent, so the
    whole turns (which a huge a times the leading bits of 1/(2 pi) would give) never appear.
    SLEEF uses it only for huge arguments, after Cody-Waite paths for small ones; in vector
    code every path runs for every lane, so this one path serves all arguments."""
    _ensure_table(m)
    first, big, rows = m.pick((25, 90, 103), (55, 700, 969))
    ex = m.isub(m.ilogb2k(a), first)
    a = m.ldexp3k(a, m.b.select(m.b.icmp_signed(">", ex, m.ic(big - first)), m.ic(-64), m.ic(0)))
    ex = m.b.select(m.b.icmp_signed("<", ex, m.ic(0)), m.ic(0), ex)
    ex = m.b.select(m.b.icmp_signed(">", ex, m.ic(rows - 1)), m.ic(rows - 1), ex)
    index = m.ishl(ex, 2)
    name = _table_name(m)

    def part(k):
        return m.table_load(name, m.iadd(index, k))

    x = m.dmul_ff(a, part(0))
    hi, q = _rempisub(m, x[0])
    x = m.dnorm((hi, x[1]))
    x = m.dadd2_dd(x, m.dmul_ff(a, part(1)))
    hi, q2 = _rempisub(m, x[0])
    q = m.b.add(q, q2)
    x = m.dnorm((hi, x[1]))
    x = m.dnorm(m.dadd2_dd(x, m.dmul_df((part(2), part(3)), a)))
    x = m.dmul_dd(x, m.cd((_PI[m.double][0] * 2, _PI[m.double][1] * 2)))
    small = m.lt(m.abs(a), 0.7)
    return q, (m.sel(small, a, x[0]), m.sel(small, 0.0, x[1]))


_SIN = (
    (-0.000195169282960705459117889, 0.00833215750753879547119141, -0.166666537523269653320312),
    (1.58938307283228937328511e-10, -2.50506943502539773349318e-08, 2.75573131776846360512547e-06,
     -0.000198412698278911770864914, 0.0083333333333191845961746, -0.166666666666666130709393),
)
_COS = (
    (-2.71811842367242206819355e-07, 2.47990446951007470488548e-05, -0.00138888787478208541870117,
     0.0416666641831398010253906, -0.5),
    (-1.13615350239097429531523e-11, 2.08757471207040055479366e-09, -2.75573144028847567498567e-07,
     2.48015872890001867311915e-05, -0.00138888888888714019282329, 0.0416666666666665519592062, -0.5),
)


def _sincos(m, d, which):
    """sin or cos (SLEEF sincos_u1 polynomials on the Payne-Hanek reduction)."""
    q, t = _rempi(m, d)
    s = m.dsqu1(t)
    u = m.mul(m.poly(s, m.pick(*_SIN)), m.mul(s, t[0]))
    rs = m.dsum(m.dadd_df(t, u))
    rc = m.dsum(m.dadd_fd(1.0, m.dmul_ff(s, m.poly(s, m.pick(*_COS)))))
    odd = m.ieq(m.iand(q, 1), 1)
    if which == "sin":
        r = m.b.select(odd, rc, rs)
        negate = m.ieq(m.iand(q, 2), 2)
    else:
        r = m.b.select(odd, rs, rc)
        negate = m.ieq(m.iand(m.iadd(q, 1), 2), 2)
    r = m.sel(negate, m.neg(r), r)
    r = m.sel(m.any(m.isinf(d), m.isnan(d)), _NAN, r)
    return m.sel(m.eq(d, 0.0), d, r) if which == "sin" else r


def _sin(m, d):
    return _sincos(m, d, "sin")


def _cos(m, d):
    return _sincos(m, d, "cos")


_TAN = (
    (0.00446636462584137916564941, -8.3920182078145444393158e-05, 0.0109639242291450500488281,
     0.0212360303848981857299805, 0.0540687143802642822265625),
    (+0.3245098826639276316e-3, +0.5619219738114323735e-3, +0.1460781502402784494e-2,
     +0.3591611540792499519e-2, +0.8863268409563113126e-2, +0.2186948728185535498e-1,
     +0.5396825399517272970e-1, +0.1333333333330500581e+0, +0.3333333333333343695e+0),
)


def _tan(m, d):
    q, s = _rempi(m, d)
    odd = m.ieq(m.iand(q, 1), 1)
    if m.double:
        # tan r from t = tan(r/2): 2t / (1 - t**2), or -(1 - t**2) / 2t in odd quadrants.
        t = m.dscale(s, 0.5)
        s2 = m.dsqu(t)
        u = m.poly(s2[0], _TAN[1])
        x = m.dadd_dd(t, m.dmul_df(m.dmul_dd(s2, t), u))
        y = m.dadd_fd(-1.0, m.dsqu(x))
        x = m.dscale(x, -2.0)
        x = m.ddiv(m.dsel(odd, m.dneg(y), x), m.dsel(odd, x, y))
    else:
        s = m.dsel(odd, m.dneg(s), s)
        t = s
        s = m.dnorm(m.dsqu(s))
        u = m.poly(s[0], _TAN[0])
        x = m.dadd_ff(0.133325666189193725585938, m.mul(u, s[0]))
        x = m.dadd_fd(1.0, m.dmul_dd(m.dadd_fd(0.33333361148834228515625, m.dmul_dd(s, x)), s))
        x = m.dmul_dd(t, x)
        x = m.dsel(odd, m.drec_d(x), x)
    r = m.sel(m.any(m.isinf(d), m.isnan(d)), _NAN, m.dsum(x))
    return m.sel(m.eq(d, 0.0), d, r)


# Inverse trigonometric functions ----------------------------------------------------------------

_ASIN = (
    (+0.4197454825e-1, +0.2424046025e-1, +0.4547423869e-1, +0.7495029271e-1, +0.1666677296e+0),
    (+0.3161587650653934628e-1, -0.1581918243329996643e-1, +0.1929045477267910674e-1,
     +0.6606077476277170610e-2, +0.1215360525577377331e-1, +0.1388715184501609218e-1,
     +0.1735956991223614604e-1, +0.2237176181932048341e-1, +0.3038195928038132237e-1,
     +0.4464285681377102438e-1, +0.7500000000378581611e-1, +0.1666666666666497543e+0),
)


def _asin_parts(m, d):
    """(o, x, u): asin |d| = x + u where |d| < 1/2 (o), else pi/2 - 2 (x + u), x = sqrt((1-|d|)/2)."""
    a = m.abs(d)
    o = m.lt(a, 0.5)
    x2 = m.sel(o, m.mul(d, d), m.mul(m.sub(1.0, a), 0.5))
    x = m.dsel(o, (a, m.c(0.0)), m.dsqrt_f(x2))
    x = m.dsel(m.eq(a, 1.0), (m.c(0.0), m.c(0.0)), x)
    u = m.mul(m.poly(x2, m.pick(*_ASIN)), m.mul(x2, x[0]))
    return o, x, u


def _asin(m, d):
    o, x, u = _asin_parts(m, d)
    pi = _PI[m.double]
    y = m.dsub_df(m.dsub_dd(m.cd((pi[0] / 4, pi[1] / 4)), x), u)
    r = m.sel(o, m.add(u, x[0]), m.mul(m.dsum(y), 2.0))
    return m.mulsign(r, d)


def _acos(m, d):
    o, x, u = _asin_parts(m, d)
    pi = _PI[m.double]
    y = m.dsub_dd(m.cd((pi[0] / 2, pi[1] / 2)), m.dadd_ff(m.mulsign(x[0], d), m.mulsign(u, d)))
    x = m.dadd_df(x, u)
    y = m.dsel(o, y, m.dscale(x, 2.0))
    y = m.dsel(m.all(m.b.not_(o), m.lt(d, 0.0)), m.dsub_dd(m.cd(pi), y), y)
    return m.dsum(y)


_ATAN = (
    (-0.00176397908944636583328247, 0.0107900900766253471374512, -0.0309564601629972457885742,
     0.0577365085482597351074219, -0.0838950723409652709960938, 0.109463557600975036621094,
     -0.142626821994781494140625, 0.199983194470405578613281),
    (1.06298484191448746607415e-05, -0.000125620649967286867384336, 0.00070557664296393412389774,
     -0.00251865614498713360352999, 0.00646262899036991172313504, -0.0128281333663399031014274,
     0.0208024799924145797902497, -0.0289002344784740315686289, 0.0359785005035104590853656,
     -0.041848579703592507506027, 0.0470843011653283988193763, -0.0524914210588448421068719,
     0.0587946590969581003860434, -0.0666620884778795497194182, 0.0769225330296203768654095,
     -0.0909090442773387574781907, 0.111111108376896236538123, -0.142857142756268568062339,
     0.199999999997977351284817),
)


def _atan2k(m, y, x):
    """atan2 of double words, y >= 0, as a double word (SLEEF atan2k_u1)."""
    xneg = m.lt(x[0], 0.0)
    q = m.sel(xneg, -2.0, 0.0)
    x = m.dsel(xneg, m.dneg(x), x)
    p = m.lt(x[0], y[0])
    q = m.sel(p, m.add(q, 1.0), q)
    s = m.ddiv(m.dsel(p, m.dneg(x), y), m.dsel(p, y, x))
    t = m.dnorm(m.dsqu(s))
    u = m.poly(t[0], m.pick(*_ATAN))
    if m.double:
        u = m.fma(u, t[0], -0.333333333333317605173818)
        t = m.dadd_dd(s, m.dmul_df(m.dmul_dd(s, t), u))
    else:
        t = m.dmul_dd(t, m.dadd_ff(-0.333332866430282592773438, m.mul(u, t[0])))
        t = m.dmul_dd(s, m.dadd_fd(1.0, t))
    pi = _PI[m.double]
    return m.dadd_dd(m.dmul_df(m.cd((pi[0] / 2, pi[1] / 2)), q), t)


def _atan(m, d):
    r = m.dsum(_atan2k(m, (m.abs(d), m.c(0.0)), (m.c(1.0), m.c(0.0))))
    r = m.sel(m.isinf(d), _PI[m.double][0] / 2, r)
    return m.mulsign(r, d)


def _atan2(m, y, x):
    tiny = m.lt(m.abs(x), m.pick(2.9387372783541830947e-39, 5.5626846462680083984e-309))
    scale = m.pick(2.0 ** 24, 2.0 ** 53)
    x = m.sel(tiny, m.mul(x, scale), x)
    y = m.sel(tiny, m.mul(y, scale), y)
    r = m.mulsign(m.dsum(_atan2k(m, (m.abs(y), m.c(0.0)), (x, m.c(0.0)))), x)
    half_pi = _PI[m.double][0] / 2

    def inf_x(v):  # v with x's sign where x is infinite, else 0
        return m.sel(m.isinf(x), m.mulsign(m.c(v), x), 0.0)

    r = m.sel(m.any(m.isinf(x), m.eq(x, 0.0)), m.sub(half_pi, inf_x(half_pi)), r)
    r = m.sel(m.isinf(y), m.sub(half_pi, inf_x(half_pi / 2)), r)
    r = m.sel(m.eq(y, 0.0), m.sel(m.signbit(x), _PI[m.double][0], 0.0), r)
    return m.sel(m.any(m.isnan(x), m.isnan(y)), _NAN, m.mulsign(r, y))


def _asinh(m, x):
    # SLEEF adds the signed x, which cancels for large negative x, and saturates above
    # sqrt(max): use |x| and the odd symmetry, and log(2|x|) where x**2 + 1 rounds to x**2.
    a = m.abs(x)
    big = m.gt(a, m.pick(2.0 ** 13, 2.0 ** 28))
    o = m.gt(a, 1.0)
    d = m.dsel(o, m.drec_f(a), (a, m.c(0.0)))
    d = m.dsqrt_d(m.dadd2_df(m.dsqu(d), 1.0))
    d = m.dsel(o, m.dmul_df(d, a), d)
    d = m.dsel(big, (a, m.c(0.0)), m.dnorm(m.dadd2_df(d, a)))
    y = _logk2(m, d)
    y = m.dsum(m.dsel(big, m.dadd_dd(y, m.cd(m.pick(*_LN2))), y))
    y = m.sel(m.isinf(x), _INF, y)
    return _odd_tiny(m, x, m.sel(m.isnan(x), x, m.mulsign(y, x)), 2)


def _acosh(m, x):
    # log(x + sqrt(x**2 - 1)), and log(2x) where x**2 - 1 rounds to x**2 (SLEEF saturates there).
    big = m.gt(x, m.pick(2.0 ** 13, 2.0 ** 28))
    d = m.dmul_dd(m.dsqrt_d(m.dadd2_ff(x, 1.0)), m.dsqrt_d(m.dadd2_ff(x, -1.0)))
    d = m.dsel(big, (x, m.c(0.0)), m.dadd2_df(d, x))
    y = _logk2(m, d)
    y = m.dsum(m.dsel(big, m.dadd_dd(y, m.cd(m.pick(*_LN2))), y))
    y = m.sel(m.eq(x, _INF), _INF, y)
    y = m.sel(m.eq(x, 1.0), 0.0, y)
    return m.sel(m.b.not_(m.ge(x, 1.0)), _NAN, y)


def _atanh(m, x):
    a = m.abs(x)
    d = _logk2(m, m.ddiv(m.dadd2_ff(1.0, a), m.dadd2_ff(1.0, m.neg(a))))
    y = m.sel(m.eq(a, 1.0), _INF, m.mul(m.dsum(d), 0.5))
    y = m.sel(m.b.not_(m.le(a, 1.0)), _NAN, y)
    return _odd_tiny(m, x, m.sel(m.isnan(x), x, m.mulsign(y, x)), 2)


# Error functions --------------------------------------------------------------------------------

# |x| <= 2.5: erf = 1 - (1 + x P(x))**-16; beyond: erf = 1 - exp(x Q(x)). Each entry holds the
# <= 2.5 coefficient then the > 2.5 one, highest power first; the last three are double words.
_ERF = (
    ((-0.4360447008e-6, -0.1130012848e-6), (+0.6867515367e-5, +0.4115272986e-5),
     (-0.3045156700e-4, -0.6928304356e-4), (+0.9808536561e-4, +0.7172692567e-3),
     (+0.2395523916e-3, -0.5131045356e-2), (+0.1459901541e-3, +0.2708637156e-1),
     ((0.0092883445322513580322, -2.7863745897025330755e-11),
      (-0.11064319312572479248, 3.7050452777225283007e-09)),
     ((0.042275499552488327026, 1.3461399289988106057e-09),
      (-0.63192230463027954102, -2.0200432585073177859e-08)),
     ((0.070523701608180999756, -3.6616309318707365163e-09),
      (-1.1296638250350952148, 2.5515120196453259252e-08))),
    ((-0.2083271002525222097e-14, -0.4024015130752621932e-18),
     (+0.7151909970790897009e-13, +0.3847193332817048172e-16),
     (-0.1162238220110999364e-11, -0.1749316241455644088e-14),
     (+0.1186474230821585259e-10, +0.5029618322872872715e-13),
     (-0.8499973178354613440e-10, -0.1025221466851463164e-11),
     (+0.4507647462598841629e-9, +0.1573695559331945583e-10),
     (-0.1808044474288848915e-8, -0.1884658558040203709e-9),
     (+0.5435081826716212389e-8, +0.1798167853032159309e-8),
     (-0.1143939895758628484e-7, -0.1380745342355033142e-7),
     (+0.1215442362680889243e-7, +0.8525705726469103499e-7),
     (+0.1669878756181250355e-7, -0.4160448058101303405e-6),
     (-0.9808074602255194288e-7, +0.1517272660008588485e-5),
     (+0.1389000557865837204e-6, -0.3341634127317201697e-5),
     (+0.2945514529987331866e-6, -0.2515023395879724513e-5),
     (-0.1842918273003998283e-5, +0.6539731269664907554e-4),
     (+0.3417987836115362136e-5, -0.3551065097428388658e-3),
     (+0.3860236356493129101e-5, +0.1210736097958368864e-2),
     (-0.3309403072749947546e-4, -0.2605566912579998680e-2),
     (+0.1060862922597579532e-3, +0.1252823202436093193e-2),
     (+0.2323253155213076174e-3, +0.1820191395263313222e-1),
     (+0.1490149719145544729e-3, -0.1021557155453465954e+0),
     ((0.0092877958392275604405, 7.9287559463961107493e-19),
      (-0.63691044383641748361, -2.4249477526539431839e-17)),
     ((0.042275531758784692937, 1.3785226620501016138e-19),
      (-1.1282926061803961737, -6.2970338860410996505e-17)),
     ((0.07052369794346953491, 9.5846628070792092842e-19),
      (-1.2261313785184804967e-05, -5.5329707514490107044e-22))),
)


# float erf in float: |x| <= 0.921875: x + x P(x**2); beyond: 1 - exp(R(|x|)), R fitted to log(erfc) on
# (0.921875, 4] (erf is 1 in float from 3.92 on: there exp(R) < 2**-25 and 1 - exp(R) rounds to 1). Lawson's
# weighted least squares towards minimax against 40-digit mpmath, P for absolute error (erf's relative error),
# R weighted by erfc / erf (how far an absolute error of R moves erf, relatively); highest power first, each
# rounded to float before the lower ones were fitted again. Approximation errors 0.014 (P) and 0.027 (R) of a
# float ulp of erf; what shows is the float arithmetic's rounding. Measured against float64 erf over every
# float in [0, 4.5) (1.08e9 of them; erf is odd and computed so): at most 1.123 ulp (at 0.9342826, just past
# the switch, where exp(R) ~ 0.19 carries R's rounding into erf), 0.2504 ulp on average (a correctly rounded
# function's 0.25); torch's SLEEF erff (u10) is within 1 ulp, eager's float32 erf (ops/erf_float32.py) 1.83.
_ERF_NEAR = (8.178545976988971e-05, -0.0008089356706477702, 0.00519530801102519, -0.026856442913413048,
             0.11283621191978455, -0.3761262595653534, 0.12837916612625122)
_ERF_FAR = (0.0001957208733074367, -0.0030410948675125837, 0.022218458354473114, -0.1039140373468399,
            -0.637202262878418, -1.1276637315750122, -0.0001985582639463246)
_ERF_SPLIT = 0.921875


def _erf_single(m, a):
    """Float erf in float arithmetic (both branches run, a ``select`` picks one: the loop vectorises at the
    full float width). The double evaluation this replaces rounded once (0.5005 ulp) but ran at half the
    vector width with a double exp: a compiled erf took 2.9x torch's CPU time, GPT's GELU forward 0.90 ms
    per 393k elements where this takes 0.41 (with the CPU target's 512-bit vectors). NaN takes the near branch
    (its comparison is false) and stays NaN; -0.0 gives -0.0 (``fma(P, -0, -0)``); infinities clamp to 4."""
    t = m.abs(a)
    near = m.fma(m.poly(m.mul(a, a), _ERF_NEAR), a, a)
    far = m.sub(1.0, _exp(m, m.poly(m.min(t, 4.0), _ERF_FAR)))
    return m.sel(m.gt(t, _ERF_SPLIT), m.copysign(far, a), near)


def _erf(m, a):
    if not m.double:
        return _erf_single(m, a)
    x = m.abs(a)
    near = m.le(x, 2.5)
    table = m.pick(*_ERF)
    t = m.poly(x, [m.sel(near, c0, c1) for c0, c1 in table[:-3]])
    c2, c1, c0 = ((m.sel(near, lo[0], hi[0]), m.sel(near, lo[1], hi[1])) for lo, hi in table[-3:])
    # c0 + c1 x + (c2 + t x) x**2 in double words (SLEEF poly4df)
    t2 = m.dadd_dd(m.dadd_dd(c0, m.dmul_df(c1, x)),
                   m.dmul_df(m.dadd_dd(c2, m.dmul_df((t, m.c(0.0)), x)), m.mul(x, x)))
    xt2 = m.dmul_df(t2, x)
    s2 = m.dadd_fd(1.0, xt2)
    for _ in range(4):
        s2 = m.dsqu(s2)
    # the far polynomial is the exponent itself in double precision, times x in single
    t2 = m.dsel(near, m.drec_d(s2), (_expk(m, m.pick(xt2, t2)), m.c(0.0)))
    z = m.neg(m.dsum(m.dadd2_df(t2, -1.0)))
    two_over_sqrt_pi = m.pick((1.1283792257308959961, -5.8635383422197591097e-08),
                              (1.1283791670955125586, 1.5335459613165822674e-17))
    z = m.sel(m.lt(x, m.pick(1e-4, 1e-9)), m.dsum(m.dmul_df(m.cd(two_over_sqrt_pi), x)), z)
    z = m.sel(m.any(m.ge(x, 6.0), m.isinf(a)), 1.0, z)
    z = m.sel(m.eq(a, 0.0), 0.0, z)
    return m.sel(m.isnan(a), a, m.mulsign(z, a))


# Four intervals of |x| (bounds), a polynomial in u (x**2, x or 1/x by interval; each coefficient
# lists its value per interval, highest power first), then three double-word coefficients.
_ERFC = (
    ((1.0, 2.2, 4.3, 10.1),
     ((-0.8638041618e-4, -0.6236977242e-5, -0.3869504035e+0, +0.1115344167e+1),
      (+0.6000166177e-3, +0.5749821503e-4, +0.1288077235e+1, -0.9454904199e+0),
      (-0.1665703603e-2, +0.6002851478e-5, -0.1816803217e+1, -0.3667259514e+0),
      (+0.1795156277e-3, -0.2851036377e-2, +0.1249150872e+1, +0.7155663371e+0),
      (+0.1914106123e-1, +0.2260518074e-1, -0.1328857988e+0, -0.1262947265e-1)),
     ((-0.102775359343930288081655368891e+0, -0.105247583459338632253369014063e+0,
       -0.482365310333045318680618892669e+0, -0.498961546254537647970305302739e+0),
      (-0.636619483208481931303752546439e+0, -0.635609463574589034216723775292e+0,
       -0.134450203224533979217859332703e-2, -0.471199543422848492080722832666e-4),
      (-0.112837917790537404939545770596e+1, -0.112855987376668622084547028949e+1,
       -0.572319781150472949561786101080e+0, -0.572364030327966044425932623525e+0))),
    ((1.0, 2.2, 4.2, 27.3),
     ((+0.6801072401395386139e-20, +0.3438010341362585303e-12, -0.5757819536420710449e+2,
       +0.2334249729638701319e+5),
      (-0.2161766247570055669e-18, -0.1237021188160598264e-10, +0.4669289654498104483e+3,
       -0.4695661044933107769e+5),
      (+0.4695919173301595670e-17, +0.2117985839877627852e-09, -0.1796329879461355858e+4,
       +0.3173403108748643353e+5),
      (-0.9049140419888007122e-16, -0.2290560929177369506e-08, +0.4355892193699575728e+4,
       +0.3242982786959573787e+4),
      (+0.1634018903557410728e-14, +0.1748931621698149538e-07, -0.7456258884965764992e+4,
       -0.2014717999760347811e+5),
      (-0.2783485786333451745e-13, -0.9956602606623249195e-07, +0.9553977358167021521e+4,
       +0.1554006970967118286e+5),
      (+0.4463221276786415752e-12, +0.4330010240640327080e-06, -0.9470019905444229153e+4,
       -0.6150874190563554293e+4),
      (-0.6711366622850136563e-11, -0.1435050600991763331e-05, +0.7387344321849855078e+4,
       +0.1240047765634815732e+4),
      (+0.9422759050232662223e-10, +0.3460139479650695662e-05, -0.4557713054166382790e+4,
       -0.8210325475752699731e+2),
      (-0.1229055530100229098e-08, -0.4988908180632898173e-05, +0.2207866967354055305e+4,
       +0.3242443880839930870e+2),
      (+0.1480719281585086512e-07, -0.1308775976326352012e-05, -0.8217975658621754746e+3,
       -0.2923418863833160586e+2),
      (-0.1636584469123399803e-06, +0.2825086540850310103e-04, +0.2268659483507917400e+3,
       +0.3457461732814383071e+0),
      (+0.1646211436588923575e-05, -0.6393913713069986071e-04, -0.4633361260318560682e+2,
       +0.5489730155952392998e+1),
      (-0.1492565035840623511e-04, -0.2566436514695078926e-04, +0.9557380123733945965e+1,
       +0.1559934132251294134e-2),
      (+0.1205533298178967851e-03, +0.5895792375659440364e-03, -0.2958429331939661289e+1,
       -0.1541741566831520638e+1),
      (-0.8548327023450850081e-03, -0.1695715579163588598e-02, +0.1670329508092765480e+0,
       +0.2823152230558364186e-5),
      (+0.5223977625442187932e-02, +0.2089116434918055149e-03, +0.6096615680115419211e+0,
       +0.6249999184195342838e+0),
      (-0.2686617064513125222e-01, +0.1912855949584917753e-01, +0.1059212443193543585e-2,
       +0.1741749416408701288e-8)),
     (((0.11283791670955126141, -4.0175691625932118483e-18),
       (-0.10277263343147646779, -6.2338714083404900225e-18),
       (-0.50005180473999022439, 2.6362140569041995803e-17),
       (-0.5000000000258444377, -4.0074044712386992281e-17)),
      ((-0.37612638903183753802, 1.3391897206042552387e-17),
       (-0.63661976742916359662, 7.6321019159085724662e-18),
       (1.601106273924963368e-06, 1.1974001857764476775e-23),
       (2.3761973137523364792e-13, -1.1670076950531026582e-29)),
      ((1.1283791670955125586, 1.5335459613165822674e-17),
       (-1.1283791674717296161, 8.0896847755965377194e-17),
       (-0.57236496645145429341, 3.0704553245872027258e-17),
       (-0.57236494292470108114, -2.3984352208056898003e-17)))),
)


def _float_pair(v):
    """A double constant as a single-precision double word."""
    hi = _f32(v)
    return hi, _f32(v - hi)


def _erfc(m, s):
    a = m.abs(s)
    bounds, poly_coeffs, dd_coeffs = m.pick(*_ERFC)
    o = [m.lt(a, b) for b in bounds]

    def by_interval(values):
        v = m.c(values[3])
        for cond, value in zip(o[2::-1], values[2::-1]):
            v = m.sel(cond, value, v)
        return v

    u = m.dsel(o[1], (a, m.c(0.0)), m.ddiv((m.c(1.0), m.c(0.0)), (a, m.c(0.0))))
    if m.double:
        u = m.dsel(o[0], m.dmul_ff(a, a), u)
    d = m.dmul_df(u, m.poly(u[0], [by_interval(c) for c in poly_coeffs]))
    for k, coeff in enumerate(dd_coeffs):
        pairs = coeff if m.double else [_float_pair(v) for v in coeff]
        d = m.dadd2_dd(d, (by_interval([p[0] for p in pairs]), by_interval([p[1] for p in pairs])))
        if k < 2:
            d = m.dmul_dd(d, u)
    x = m.dmul_df(m.dsel(o[1], d, (m.neg(a), m.c(0.0))), a)
    x = m.dsel(o[1], x, m.dadd2_dd(x, d))
    # exp(x), times u beyond 2.2, rounded once before the scaling that may make it denormal
    t, q = _expk2_core(m, x)
    e = m.ldexp2k(m.dsum(m.dmul_dd(t, m.dsel(o[1], (m.c(1.0), m.c(0.0)), u))), q)
    e = m.sel(_underflows(m, x), 0.0, e)
    r = m.sel(o[0], m.dsum(m.dsub_dd((m.c(1.0), m.c(0.0)), x)), e) if m.double else e
    r = m.sel(o[3], r, 0.0)
    r = m.sel(m.signbit(s), m.sub(2.0, r), r)
    return m.sel(m.isnan(s), s, r)


# The normal distribution: Phi(x) = erfc(-x / sqrt(2)) / 2 and phi(x) = exp(-x**2 / 2) / sqrt(2 pi), GELU's
# x Phi(x) and its derivative Phi(x) + x phi(x) ----------------------------------------------------------------

# float: `jitorch.ops.normal_cdf`'s formula (which eager evaluates in double), its coefficients times 2**-24
# (exactly: see `_scaled_half_square_exp`). Accuracy: docs/codegen-design.md (tools/gelu_ulp.py).
_NORMAL_CDF = tuple(c * 2.0 ** -24 for c in normal_cdf.R)
_RSQRT_TWO_PI = 0.3989422804014327
_HALF_SQUARE_CLAMP = 14.4  # exp(-14.4**2 / 2) t R(w) < 2**-150 and phi(14.4) < 2**-150: both round to 0 beyond


def _clamped_abs(m, x):
    """|x|, at most 14.4; NaN stays NaN (a ``select`` on ``>``: one ``minps`` on x86)."""
    z = m.abs(x)
    return m.sel(m.gt(z, _HALF_SQUARE_CLAMP), _HALF_SQUARE_CLAMP, z)


def _scaled_half_square_exp(m, x):
    """``2**24 exp(-x * x / 2)`` (|x| clamped to 14.4) in float: the scaling keeps it a normal float (2**q
    takes one product, not exp's two), so Phi's and phi's last product is the one rounding into the denormals.
    The rounding of x * x is put back in the reduced argument (lo = x*x - hi, exact by fma). Phi and phi
    evaluate the same instructions, so a kernel of both (GELU's backward) computes it once."""
    z = _clamped_abs(m, x)
    hi = m.mul(z, z)
    d = m.mul(hi, -0.5)
    k = m.fma(d, _R_LN2, _ROUNDING_SHIFT)
    q = m.sub(k, _ROUNDING_SHIFT)
    s = m.fma(q, -_L2U[0], d)
    s = m.fma(q, -_L2L[0], s)
    s = m.fma(m.fma(m.neg(z), z, hi), 0.5, s)
    u = m.add(1.0, m.fma(m.mul(s, s), m.poly(s, _EXP[0]), s))
    return m.mul(u, m.pow2i(m.iadd(m.isub(m.bits(k), m.bits(_ROUNDING_SHIFT)), 24)))


def _normal_cdf_single(m, x):
    """Float Phi(x) in float arithmetic: one division, one exp, no select but the last (and the clamp). NaN
    stays NaN; -inf gives 0, +inf gives 1 (|x| clamped to 14.4, where Phi(-|x|) rounds to 0)."""
    t = m.div(1.0, m.fma(m.abs(x), normal_cdf.P, 1.0))
    w = m.mul(m.mul(_clamped_abs(m, x), normal_cdf.P), t)  # (beyond the clamp t and exp(...) make q 0)
    q = m.mul(_scaled_half_square_exp(m, x), m.mul(t, m.poly(w, _NORMAL_CDF)))
    return m.sel(m.gt(x, 0.0), m.sub(1.0, q), q)


_SQRT_HALF = (0.7071067811865476, -4.833646656726457e-17)  # a double word


def _normal_cdf(m, x):
    if not m.double:
        return _normal_cdf_single(m, x)
    # erfc(y) / 2, y = -x / sqrt(2) rounded: where 0 < y < 28 (the tail; erfc is 0 beyond)
    # erfc(y + dy) = erfc(y) (1 - 2 y dy) to well under an ulp, which takes back the rounding's 2 y**2 ulp;
    # where y < 0 erfc is near 2 and the rounding reaches no bit
    y = m.mul(x, -_SQRT_HALF[0])
    dy = m.fma(x, -_SQRT_HALF[1], m.fma(x, -_SQRT_HALF[0], m.neg(y)))
    r = m.mul(_erfc(m, y), 0.5)
    return m.sel(m.all(m.gt(y, 0.0), m.lt(y, 28.0)), m.fma(r, m.mul(m.mul(y, dy), -2.0), r), r)  # (0 beyond)


def _normal_pdf(m, x):
    if not m.double:
        return m.mul(_scaled_half_square_exp(m, x), _RSQRT_TWO_PI * 2.0 ** -24)
    # exp(-hi / 2) (1 - lo / 2), lo = x*x - hi; |x| clamped to 40 (phi is 0 from 38.6 on) so hi stays finite
    z = m.min(m.abs(x), 40.0)
    hi = m.mul(z, z)
    e = _exp(m, m.mul(hi, -0.5))
    e = m.fma(e, m.mul(m.fma(m.neg(z), z, hi), 0.5), e)
    return m.sel(m.isnan(x), x, m.mul(e, _RSQRT_TWO_PI))


# Square roots -----------------------------------------------------------------------------------

def _sqrt(m, x):
    return m.sqrt(x)


def _rsqrt(m, x):
    return m.div(1.0, m.sqrt(x))


# name -> (number of arguments, implementation)
_FUNCTIONS = {
    "exp": (1, _exp), "exp2": (1, _exp2), "expm1": (1, _expm1),
    "log": (1, _log_any("log")), "log2": (1, _log_any("log2")), "log10": (1, _log_any("log10")),
    "log1p": (1, _log1p), "sqrt": (1, _sqrt), "rsqrt": (1, _rsqrt),
    "sin": (1, _sin), "cos": (1, _cos), "tan": (1, _tan),
    "atan2": (2, _atan2), "sinh": (1, _sinh), "cosh": (1, _cosh), "tanh": (1, _tanh), "sigmoid": (1, _sigmoid),
    # float: jitorch's own float32 definitions (`jitorch.ops.arc_functions`), which eager runs too
    **{name: (1, _in_double(double, arc_functions.ALGORITHMS[name])) for name, double in (
        ("asin", _asin), ("acos", _acos), ("atan", _atan), ("asinh", _asinh), ("acosh", _acosh), ("atanh", _atanh))},
    "erf": (1, _erf), "erfc": (1, _erfc), "normal_cdf": (1, _normal_cdf), "normal_pdf": (1, _normal_pdf),
    # jitorch's own definitions (`jitorch.ops.powers`): eager pow and xlogy compute the same bits
    "pow": (2, _in_double(powers.pow_double, powers.pow_single)),
    "log_defined": (1, _in_double(powers.log_double, powers.log_single)),
}
FUNCTIONS = {name: arity for name, (arity, _) in _FUNCTIONS.items()}


def _function(module, name, t):
    arity, impl = _FUNCTIONS[name]
    fname = f"jitorch.math.{name}.{_type_suffix(t)}"
    fn = module.globals.get(fname)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(t, [t] * arity), fname)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        builder.ret(impl(_Math(builder, t), *fn.args))
    return fn


def emit(builder, name, *args):
    """``name(*args)`` through ``builder``: a call of this module's internal always-inline
    definition of ``name`` for the arguments' type (float or double, scalar or vector)."""
    if name not in _FUNCTIONS:
        raise ValueError(f"mathlib has no function {name!r} (it has {', '.join(sorted(_FUNCTIONS))})")
    arity = FUNCTIONS[name]
    if len(args) != arity:
        raise TypeError(f"mathlib.{name} takes {arity} argument(s), got {len(args)}")
    t = args[0].type
    if any(a.type != t for a in args):
        raise TypeError(f"mathlib.{name}: arguments must share one type, got {', '.join(str(a.type) for a in args)}")
    scalar = t.element if isinstance(t, ir.VectorType) else t
    if not isinstance(scalar, (ir.FloatType, ir.DoubleType)):
        raise TypeError(f"mathlib.{name}: arguments must be float or double (or vectors of them), got {t}")
    return builder.call(_function(builder.module, name, t), list(args))


def run(builder, algorithm, *args):
    """``algorithm(m, *args)`` emitted inline through ``builder``, ``m`` a `_Math` of the first argument's type:
    for a `jitorch.ops.powers` algorithm that takes constants besides values (`powers.pow_by_products`)."""
    return algorithm(_Math(builder, args[0].type), *args)


__all__ = ["ALLOWED_INTRINSICS", "FUNCTIONS", "emit", "run"]
