"""pow and log of floats as jitorch defines them: one algorithm over IEEE operations, run by NumPy and by LLVM.

NumPy's ``np.power`` and ``np.log`` are whatever its build and version pick (libm, SVML, its own SIMD loops):
between NumPy 1.26 and 2.x, ``np.power`` of identical float64 operands differed in 3,408 of 25,200 elements.
Eager ``pow`` (``**``, ``float_power``) and ``xlogy`` compute here instead, by an algorithm written once against a
small arithmetic interface ``m``: `Arrays` (NumPy arrays) and `Floats` (Python floats; `on_floats` traces an
algorithm through it once into a Python function, for small tensors) here, and `jitorch.codegen.mathlib`'s LLVM
builder for compiled kernels, so eager and compiled results are the same bits, on every NumPy version and CPU.

Only operations IEEE 754 rounds exactly are used: ``+ - * /`` of float64 (each correctly rounded, the same in
NumPy's loops, Python's floats and LLVM's instructions without fast-math flags), ``trunc``, ``rint``, comparisons,
selection and scaling by powers of two. No fused multiply-add: NumPy has none, so the double-word products are
Dekker's (Veltkamp's split), exact as an FMA's would be. float64 (`pow_double`, `log_double`) is SLEEF's ``xpow``
(``logk``, ``expk``: log as a double word, ``y log|x|`` as a double word, exp of it), Naoki Shibata and
contributors, Boost Software License 1.0, in those FMA-free forms. float32 (and float16/bfloat16, which compute
in float32) needs no double word (`pow_single`, `log_single`): plain float64 with polynomials fitted here, a
third of the operations, rounded once to float32, so correctly rounded but about once in a million random
operands. Measured against torch (glibc's pow and log, SLEEF's powf) and mpmath in `benchmarks/pow_accuracy.py`;
see docs/differences-from-torch.md.
"""

from __future__ import annotations

import functools
import math
import operator
import struct

import numpy as np

__all__ = ["Arrays", "Floats", "MAX_PRODUCT_POWER", "by_products", "horner", "log", "log2_plain", "log_double",
           "log_single", "on_floats", "pow_by_products", "pow_double", "pow_single", "power", "single",
           "through_kernel"]

_INF = math.inf
_NAN = math.nan

# ln 2 split so that q * _L2U is exact for |q| < 2**12 (41 significant bits), and 1 / ln 2
_L2U = 0.69314718055966295651160180568695068359375
_L2L = 0.28235290563031577122588448175013436025525412068e-12
_R_LN2 = 1.442695040888963407359924681001892137426645954152985934135449406931
_TWO_THIRDS = (0.666666666666666629659233, 3.80554962542412056336616e-17)
# log(m) = 2x + x**3 (2/3 + x**2 P(x**2)) with x = (m - 1) / (m + 1) (SLEEF logk), highest power first
_LOGK = (0.116255524079935043668677, 0.103239680901072952701192, 0.117754809412463995466069,
         0.13332981086846273921509, 0.153846227114512262845736, 0.181818180850050775676507,
         0.222222222230083560345903, 0.285714285714249172087875, 0.400000000000000077715612)
# exp(s) = 1 + s + s**2 P(s) on |s| <= ln2 / 2 (SLEEF expk), highest power first
_EXPK = (2.51069683420950419527139e-08, 2.76286166770270649116855e-07, 2.75572496725023574143864e-06,
         2.48014973989819794114153e-05, 0.000198412698809069797676111, 0.0013888888939977128960529,
         0.00833333333332371417601081, 0.0416666666665409524128449, 0.166666666666666740681535,
         0.500000000000000999200722)
_SPLITTER = 134217729.0  # 2**27 + 1: Veltkamp's split of a double into two 26-bit halves
# |y| beyond this is clamped: y log|x| is then beyond the range of exp (|log x| >= 2**-53 for x != 1), and the
# clamped y keeps Veltkamp's split from overflowing
_Y_CLAMP = 2.0 ** 60


# Double words (an unevaluated sum hi + lo), FMA-free ----------------------------------------------------

class DoubleWordSums:
    """Sums of double words (SLEEF dd.h / df.h) for an arithmetic interface's ``add``, ``sub``, ``mul`` and
    ``neg``: no FMA, so every backend (`Arrays`, `Floats`, `jitorch.codegen.mathlib`'s LLVM builder) computes
    them alike. Suffixes say the operand kinds: f = one value, d = a double word. The plain forms assume
    |first| >= |second|; the "2" forms do not."""

    def dsum(self, x):
        return self.add(x[0], x[1])

    def dneg(self, x):
        return self.neg(x[0]), self.neg(x[1])

    def dnorm(self, x):
        s = self.add(x[0], x[1])
        return s, self.add(self.sub(x[0], s), x[1])

    def dscale(self, x, s):
        return self.mul(x[0], s), self.mul(x[1], s)

    def dadd_ff(self, x, y):
        s = self.add(x, y)
        return s, self.add(self.sub(x, s), y)

    def dadd2_ff(self, x, y):
        s = self.add(x, y)
        v = self.sub(s, x)
        return s, self.add(self.sub(x, self.sub(s, v)), self.sub(y, v))

    def dadd_df(self, x, y):
        s = self.add(x[0], y)
        return s, self.add(self.add(self.sub(x[0], s), y), x[1])

    def dadd2_df(self, x, y):
        s = self.add(x[0], y)
        v = self.sub(s, x[0])
        w = self.add(self.sub(x[0], self.sub(s, v)), self.sub(y, v))
        return s, self.add(w, x[1])

    def dsub_df(self, x, y):
        s = self.sub(x[0], y)
        return s, self.add(self.sub(self.sub(x[0], s), y), x[1])

    def dadd_fd(self, x, y):
        s = self.add(x, y[0])
        return s, self.add(self.add(self.sub(x, s), y[0]), y[1])

    def dadd2_fd(self, x, y):
        s = self.add(x, y[0])
        v = self.sub(s, x)
        return s, self.add(self.add(self.sub(x, self.sub(s, v)), self.sub(y[0], v)), y[1])

    def dadd_dd(self, x, y):
        s = self.add(x[0], y[0])
        return s, self.add(self.add(self.add(self.sub(x[0], s), y[0]), x[1]), y[1])

    def dadd2_dd(self, x, y):
        s = self.add(x[0], y[0])
        v = self.sub(s, x[0])
        t = self.add(self.sub(x[0], self.sub(s, v)), self.sub(y[0], v))
        return s, self.add(t, self.add(x[1], y[1]))

    def dsub_dd(self, x, y):
        s = self.sub(x[0], y[0])
        t = self.add(self.sub(self.sub(x[0], s), y[0]), x[1])
        return s, self.sub(t, y[1])


def _split(m, a, splitter=_SPLITTER):
    """(hi, lo) with ``a = hi + lo`` exactly and ``hi`` ``a`` rounded to 53 - k bits, for ``splitter`` 2**k + 1
    (Veltkamp)."""
    c = m.mul(a, splitter)
    hi = m.sub(c, m.sub(c, a))
    return hi, m.sub(a, hi)


def two_prod_dekker(m, a, b):
    """``a * b`` exactly, as (product, error), by Dekker's products of Veltkamp's halves: the backends' ``two_prod``
    without an FMA (`Arrays`, `Floats`). Exact while the halves neither overflow (``|a|, |b| < 2**996``, which
    the algorithm's operands are) nor their products underflow (an error below 2**-969, where the product is
    itself far below what the algorithm adds it to: `pow_double`'s result is 1 there whichever error is taken).
    The code generator's ``fma(a, b, -p)`` is the same exact error, in fewer instructions."""
    p = m.mul(a, b)
    ah, al = _split(m, a)
    bh, bl = _split(m, b)
    err = m.add(m.add(m.add(m.sub(m.mul(ah, bh), p), m.mul(ah, bl)), m.mul(al, bh)), m.mul(al, bl))
    return p, err


def _mul_df(m, x, y):
    p, e = m.two_prod(x[0], y)
    return p, m.add(e, m.mul(x[1], y))


def _mul_dd(m, x, y):
    p, e = m.two_prod(x[0], y[0])
    return p, m.add(e, m.add(m.mul(x[0], y[1]), m.mul(x[1], y[0])))


def _square_d(m, x):
    p, e = m.two_prod(x[0], x[0])
    return p, m.add(e, m.mul(m.add(x[0], x[0]), x[1]))


def _div_fd(m, n, d):
    """A value over a double word, as a double word: the quotient and its remainder's quotient."""
    q = m.div(n, d[0])
    p, e = m.two_prod(q, d[0])
    r = m.sub(m.sub(m.sub(n, p), e), m.mul(q, d[1]))
    return q, m.div(r, d[0])


def horner(m, x, coeffs):
    """Horner's rule, highest power first (a multiply and an add each step: no FMA)."""
    u = coeffs[0]
    for k in coeffs[1:]:
        u = m.add(m.mul(u, x), k)
    return u


# log and exp of double words ---------------------------------------------------------------------------

def _logk(m, d):
    """log of finite d > 0 as a double word (SLEEF logk): d = mant * 2**e, mant in [0.75, 1.5)."""
    e, mant = m.split_exponent(d)
    x = _div_fd(m, m.sub(mant, 1.0), m.dadd2_ff(mant, 1.0))  # (mant - 1 is exact)
    x2 = _square_d(m, x)
    t = horner(m, x2[0], _LOGK)
    ef = m.i2f(e)
    s = m.dadd_dd((m.mul(ef, _L2U), m.mul(ef, _L2L)), m.dscale(x, 2.0))  # (exact e * _L2U)
    return m.dadd_dd(s, _mul_dd(m, _mul_dd(m, x2, x), m.dadd2_dd((m.mul(x2[0], t), 0.0), _TWO_THIRDS)))


def _expk(m, d):
    """exp of a double word, rounded to one value (SLEEF expk); 0 below e**-1000."""
    q = m.rint(m.mul(m.add(d[0], d[1]), _R_LN2))
    s = m.dadd2_df(d, m.mul(q, -_L2U))  # (exact product)
    s = m.dnorm(m.dadd2_df(s, m.mul(q, -_L2L)))
    u = horner(m, s[0], _EXPK)
    t = m.dadd_dd(m.dadd_fd(1.0, s), _mul_df(m, _square_d(m, s), u))
    r = m.ldexp2k(m.dsum(t), m.f2i(q))
    return m.sel(m.lt(d[0], -1000.0), 0.0, r)


def pow_double(m, x, y):
    """``x ** y`` of doubles with C99's special values (``pow(x, 0) = pow(1, y) = 1``, even for NaN)."""
    yc = m.sel(m.gt(m.abs(y), _Y_CLAMP), m.mulsign(_Y_CLAMP, y), y)
    d = _mul_df(m, _logk(m, m.abs(x)), yc)
    r = _expk(m, d)
    # above the overflow threshold the exponent would leave ldexp's range: saturate first
    return _signs_and_specials(m, x, y, m.sel(m.any(m.gt(d[0], 709.79), m.isnan(r)), _INF, r))


def _signs_and_specials(m, x, y, r):
    """``x ** y`` from ``r``, ``|x| ** y`` where x is finite and not 0 (any value elsewhere): ``x``'s sign for an
    odd integer ``y``, NaN for a negative ``x`` to a non-integer, and C99's values where ``x`` or ``y`` is 0,
    infinite or NaN."""
    yisint = m.eq(m.trunc(y), y)
    half = m.mul(y, 0.5)
    yisodd = m.all(yisint, m.any(m.lt(m.trunc(half), half), m.gt(m.trunc(half), half)))
    r = m.mul(r, m.sel(m.gt(x, 0.0), 1.0, m.sel(yisint, m.sel(yisodd, -1.0, 1.0), _NAN)))
    efx = m.mulsign(m.sub(m.abs(x), 1.0), y)
    r = m.sel(m.isinf(y), m.sel(m.lt(efx, 0.0), 0.0, m.sel(m.eq(efx, 0.0), 1.0, _INF)), r)
    zero_x = m.eq(x, 0.0)
    # 0 ** y: inf for y < 0, else 0; inf ** y: the other way round; -0 and -inf keep their sign for odd y
    edge = m.sel(m.signbit(y), m.sel(zero_x, _INF, 0.0), m.sel(zero_x, 0.0, _INF))
    r = m.sel(m.any(m.isinf(x), zero_x), m.mulsign(edge, m.sel(yisodd, x, 1.0)), r)
    r = m.sel(m.any(m.isnan(x), m.isnan(y)), _NAN, r)
    return m.sel(m.any(m.eq(y, 0.0), m.eq(x, 1.0)), 1.0, r)


def log_double(m, d):
    """``log(d)`` of doubles: the double word of `_logk` rounded; -inf at 0, NaN below, inf at inf."""
    # (a negative d's NaN is selected below: its mantissa must not divide by 0)
    return _log_specials(m, d, m.dsum(_logk(m, m.abs(d))))


def _log_specials(m, d, r):
    """``log(d)`` from ``r``, ``log|d|`` where d is finite and not 0: -inf at 0, NaN below 0 and at NaN, inf at
    inf."""
    r = m.sel(m.eq(d, _INF), _INF, r)
    r = m.sel(m.any(m.lt(d, 0.0), m.isnan(d)), _NAN, r)
    return m.sel(m.eq(d, 0.0), -_INF, r)


# float32 (and the half types, which compute in float32) -------------------------------------------------
# A float32 pow or log needs no double word: computed in plain double, exp2(y log2|x|) and log2|x| ln 2 are
# within ~2**-44 and ~2**-51 (relatively) of the exact values, where float32's half ulp is 2**-24 or more; the
# rounding to float32 then gives the correctly rounded result but where the exact one lies that close to a
# midpoint between two floats (measured in benchmarks/pow_accuracy.py --exact). Plain IEEE operations as above,
# so NumPy, Python floats and LLVM compute the same bits. A third of `pow_double`'s operations.

# log2(m) = s P(s**2), s = (m - 1) / (m + 1) for m in [0.75, 1.5) (|s| <= 0.2), highest power first: fitted here
# (mpmath's chebyfit of 2 atanh(s) / (s ln 2)), relative error 2**-56 with the coefficients rounded to double
_LOG2_SINGLE = (0.22198752919751308, 0.2199728043635776, 0.2623761241235996, 0.32059761439629403,
                0.4121985962411068, 0.5770780162897531, 0.9617966939261012, 2.8853900817779268)
# 2**f = 1 + f Q(f) for |f| <= 1/2, highest power first (chebyfit of (2**f - 1) / f): relative error 2**-55.5;
# the constant 1 is exact, so an integer y log2|x| gives an exact power of two
_EXP2_SINGLE = (4.4549605981865186e-10, 7.072585949269223e-09, 1.0178062445845774e-07, 1.321544258792169e-06,
                1.525273382983612e-05, 0.0001540353044173605, 0.0013333558146416936, 0.009618129107606888,
                0.0555041086648216, 0.24022650695910097, 0.6931471805599453, 1.0)
_LN2 = 0.6931471805599453
# y log2|x| clamped to this: 2**300 and 2**-300 are beyond float32's range (they round to inf and 0), and
# 2**rint(t) stays a normal double
_T_CLAMP = 300.0
# `pow_single`'s relative error is below (|t| + 1) times this, t = y log2|x| (its rounding and log2's, 2**-53 and
# ~2**-51 relatively, for all but 2**-52 of it; largest measured: 0.23 of this bound), and Veltkamp's splitter
# that rounds a double to 25 bits: a float32's and its midpoints
_POW_SINGLE_ERROR = 2.0 ** -50
_SPLITTER_25 = 268435457.0  # 2**28 + 1


def log2_plain(m, a):
    """log2 of ``a`` > 0, a finite float32 widened to double, within 3 roundings (~2**-51, relatively); of any
    finite double > 0 within 4 (``mant + 1`` rounds too: `jitorch.ops.arc_functions`)."""
    e, mant = m.split_exponent(a)
    # (mant - 1 and mant + 1 are exact: mant has a float32's 24 bits)
    s = m.div(m.sub(mant, 1.0), m.add(mant, 1.0))
    return m.add(m.i2f(e), m.mul(s, horner(m, m.mul(s, s), _LOG2_SINGLE)))


def pow_single(m, x, y):
    """``x ** y`` of float32 values widened to double, as a double to be rounded once to float32: exp2 of
    ``y log2|x|`` (its rounding, ~2**-53 of it, is the largest error: ~2**-44 relatively where the result is
    near float32's range ends), C99's special values as `pow_double`'s."""
    t = m.mul(y, log2_plain(m, m.abs(x)))
    t = m.sel(m.gt(t, _T_CLAMP), _T_CLAMP, m.sel(m.lt(t, -_T_CLAMP), -_T_CLAMP, t))
    q = m.rint(t)
    r = m.mul(horner(m, m.sub(t, q), _EXP2_SINGLE), m.pow2i(m.f2i(q)))  # (t - q is exact)
    # An exact power halfway between two floats (4097 ** 2, 257 ** 3, 66049 ** 1.5) is a number of 25 bits: r is
    # within the error bound of it, and is taken as it, so that it rounds to float32 as the exact power does
    # (ties to even). Other results that close to a midpoint round either way (they would anyway).
    hi, lo = _split(m, r, _SPLITTER_25)
    near = m.lt(m.abs(lo), m.mul(m.mul(m.add(m.abs(t), 1.0), r), _POW_SINGLE_ERROR))
    return _signs_and_specials(m, x, y, m.sel(near, hi, r))


def log_single(m, d):
    """``log(d)`` of a float32 value widened to double, as a double to be rounded once to float32."""
    return _log_specials(m, d, m.mul(log2_plain(m, m.abs(d)), _LN2))


# float32 powers by a number n that is an integer, or an odd half, with |n| up to this are products and a square
# root, not pow
MAX_PRODUCT_POWER = 16


def by_products(n):
    """Whether a float32 ``x ** n`` for the Python number ``n`` is `pow_by_products` (the simplification pass
    already wrote eager's own formulas for 2, 3, -1, -2 and +-0.5, `ops.pointwise.POW_BY_OTHER_OPS`)."""
    twice = 2 * n
    return math.isfinite(n) and twice == int(twice) and 0 < abs(twice) <= 2 * MAX_PRODUCT_POWER and n not in (0, 1)


def pow_by_products(m, x, n):
    """A float32 ``x ** n`` (``x`` widened to double, `by_products` ``n``) as double, to be rounded to float32.

    ``x`` is exact in double, and squaring and multiplying up to ``x**16`` (and ``sqrt``) add a relative error
    under 2**-49, so the float32 result is within 0.5 ulp of the exact power but for that (torch's ``pow`` by
    such numbers is SLEEF's 1-ulp powf; `pow_double` takes 4-5x the time). The double range holds every power of
    a float32 up to the 16th that float32 can hold, and reaches the true overflow to infinity or underflow to
    zero exactly where float32 does (an intermediate power lies between 1 and the result). C's special values: a
    negative base (-inf included) to an odd half is NaN, but -0.0 and -inf give pow of 0 and inf (+0.0 or
    +inf); an integer power keeps the base's sign for odd n."""
    odd_half = (2 * n) % 2 == 1
    base = m.abs(x) if odd_half else x
    r = m.sqrt(base) if odd_half else None
    power = None
    for bit in bin(int(abs(n)))[2:] if abs(n) >= 1 else "":  # base**k by squaring, highest bit first
        power = base if power is None else m.mul(power, power)
        if bit == "1" and power is not base:
            power = m.mul(power, base)
    if power is not None:
        r = power if r is None else m.mul(r, power)
    if n < 0:
        r = m.div(1.0, r)
    if odd_half:  # a negative finite base: NaN (fabs and sqrt gave -0.0 and -inf pow's values already)
        r = m.sel(m.all(m.lt(x, 0.0), m.gt(x, -_INF)), _NAN, r)
    return r


# Backends ------------------------------------------------------------------------------------------------

class _Host(DoubleWordSums):
    """What the NumPy and Python-float interfaces share: Dekker's exact products, and the exponent steps of
    `jitorch.codegen.mathlib._Math` by a backend's ``frexp`` and ``ldexp`` (both exact) and ``pow2i``."""

    def two_prod(self, a, b):
        return two_prod_dekker(self, a, b)

    def ldexp2k(self, d, e):
        """``d * 2**e`` in two exact steps (|e| <= 2046): at most the second rounds, as `mathlib`'s."""
        half = e >> 1
        return self.mul(self.mul(d, self.pow2i(half)), self.pow2i(e - half))

    def split_exponent(self, d):
        """(e, m) with d = m * 2**e, m in [0.75, 1.5), for finite d > 0 (`mathlib._Math.split_exponent`)."""
        tiny = self.lt(d, 2.0 ** -1000)
        d = self.sel(tiny, self.mul(d, 2.0 ** 64), d)
        e = self.frexp_exponent(self.mul(d, 2.0 / 3.0))  # (frexp's exponent is ilogb's plus one)
        return self.sel(tiny, e - 64, e), self.ldexp(d, -e)


class Arrays(_Host):
    """The arithmetic interface over float64 NumPy arrays (of one shape, or broadcasting with numbers):
    exponents are int64 arrays, conditions bool arrays."""

    add, sub, mul, div, neg = np.add, np.subtract, np.multiply, np.true_divide, np.negative
    abs, trunc, rint, isnan, sqrt = np.abs, np.trunc, np.rint, np.isnan, np.sqrt
    lt, gt, eq = np.less, np.greater, np.equal
    signbit, isinf = np.signbit, np.isinf
    any, all = np.logical_or, np.logical_and
    sel, ldexp = staticmethod(np.where), np.ldexp

    @staticmethod
    def mulsign(a, b):
        """``a`` with its sign flipped where ``b``'s sign bit is set."""
        return np.where(np.signbit(b), np.negative(a), a)

    @staticmethod
    def i2f(i):
        return i.astype(np.float64)

    @staticmethod
    def f2i(x):
        """``x`` (integral) as int64; out-of-range and NaN elements give 0 (as `mathlib`'s)."""
        return np.where(np.abs(x) < 2.0 ** 62, x, 0.0).astype(np.int64)

    @staticmethod
    def frexp_exponent(d):
        return np.frexp(d)[1].astype(np.int64)

    @staticmethod
    def pow2i(q):
        """2**q of an int64 array as `mathlib`'s ``pow2i`` makes it: the exponent field of q + 1023, wrapping
        outside the normal range (where the callers' results are selected away)."""
        return ((q + 1023) << 52).view(np.float64)


class Floats(_Host):
    """The arithmetic interface over Python floats (one element: no array's per-call cost)."""

    # (truediv raises on a zero divisor: the algorithm divides only by a mantissa of |d| plus 1, never 0)
    add, sub, mul, div, neg = (staticmethod(f) for f in (operator.add, operator.sub, operator.mul, operator.truediv,
                                                         operator.neg))
    lt, gt, eq = (staticmethod(f) for f in (operator.lt, operator.gt, operator.eq))
    any, all = staticmethod(operator.or_), staticmethod(operator.and_)
    abs, isnan, isinf, ldexp = staticmethod(abs), staticmethod(math.isnan), staticmethod(math.isinf), \
        staticmethod(math.ldexp)

    @staticmethod
    def sqrt(a):
        return _NAN if a < 0 else math.sqrt(a)  # (math.sqrt raises below 0; IEEE's sqrt is NaN there)

    @staticmethod
    def trunc(a):
        return math.copysign(math.trunc(a), a) if math.isfinite(a) else a  # (-0.5 gives -0.0, as C's)

    @staticmethod
    def rint(a):
        return math.copysign(round(a), a) if math.isfinite(a) else a  # (round: ties to even, as rint)

    @staticmethod
    def sel(c, a, b):
        return a if c else b

    @staticmethod
    def signbit(a):
        return math.copysign(1.0, a) < 0

    @staticmethod
    def mulsign(a, b):
        return -a if math.copysign(1.0, b) < 0 else a

    @staticmethod
    def i2f(i):
        return float(i)

    @staticmethod
    def f2i(x):
        return int(x) if abs(x) < 2.0 ** 62 else 0

    @staticmethod
    def frexp_exponent(d):
        return math.frexp(d)[1]

    @staticmethod
    def pow2i(q):
        """`Arrays.pow2i` of a Python int."""
        return struct.unpack("<d", struct.pack("<Q", ((q + 1023) << 52) & 0xFFFFFFFFFFFFFFFF))[0]


class _Value:
    """A value of an algorithm traced by `_Source`: a local name of the function written; exponents (integers)
    take ``-`` and ``>>`` as `_Host`'s steps apply them."""

    __slots__ = ("source", "name")

    def __init__(self, source, name):
        self.source, self.name = source, name

    def __sub__(self, other):
        return self.source.line("{} - {}", self, other)

    def __rshift__(self, other):
        return self.source.line("{} >> {}", self, other)

    def __neg__(self):
        return self.source.line("-{}", self)


class _Source(_Host):
    """The arithmetic interface of `Floats` written out as the lines of a Python function (`on_floats`): each
    operation one line, Python's own operator where `Floats` takes it, else a call of `Floats`' function.
    Python runs such lines several times faster than one method call per operation."""

    _OPERATORS = {"add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "div": "{} / {}", "neg": "-{}",
                  "lt": "{} < {}", "gt": "{} > {}", "eq": "{} == {}", "any": "{} | {}", "all": "{} & {}",
                  "sel": "{1} if {0} else {2}", "abs": "abs({})", "i2f": "float({})"}
    _CALLED = ("trunc", "rint", "isnan", "isinf", "ldexp", "signbit", "mulsign", "f2i", "frexp_exponent", "pow2i",
               "sqrt")

    def __init__(self):
        self.lines = []
        self.written = {}  # a line's right-hand side -> its value (operations are pure: each is written once)
        self.names = {f"_{name}": getattr(Floats, name) for name in self._CALLED}
        self.names.update(_inf=_INF, _nan=_NAN)

    def operand(self, v):
        if isinstance(v, _Value):
            return v.name
        if isinstance(v, float) and not math.isfinite(v):
            return "_nan" if math.isnan(v) else "_inf" if v > 0 else "(-_inf)"
        return f"({v!r})" if v < 0 or v == 0 and math.copysign(1.0, v) < 0 else repr(v)

    def line(self, template, *args):
        """The local name of ``template`` of ``args``' operands."""
        text = template.format(*map(self.operand, args))
        if text not in self.written:
            self.written[text] = _Value(self, f"v{len(self.lines)}")
            self.lines.append(f"{self.written[text].name} = {text}")
        return self.written[text]


def _writes(template):
    return lambda self, *args: self.line(template, *args)


def _calls(name):
    return lambda self, *args: self.line(f"_{name}({', '.join(['{}'] * len(args))})", *args)


for _name, _template in _Source._OPERATORS.items():
    setattr(_Source, _name, _writes(_template))
for _name in _Source._CALLED:
    setattr(_Source, _name, _calls(_name))


@functools.lru_cache(maxsize=None)
def on_floats(algorithm, arity):
    """``algorithm`` (of ``arity`` doubles) as a Python function of Python floats: the bits of
    ``algorithm(Floats(), *args)``, traced once through `_Source` into straight-line code."""
    source = _Source()
    args = [_Value(source, f"a{i}") for i in range(arity)]
    result = source.operand(algorithm(source, *args))
    text = f"def {algorithm.__name__}({', '.join(a.name for a in args)}):\n" \
        + "".join(f"    {line}\n" for line in source.lines) + f"    return {result}\n"
    exec(compile(text, f"<jitorch.ops.powers.on_floats {algorithm.__name__}>", "exec"), source.names)
    return source.names[algorithm.__name__]


_ARRAYS = Arrays()


# Eager entry points --------------------------------------------------------------------------------------

# (op name: "pow" or "xlogy", NumPy dtype name) -> the compiled path's flat kernel of that op over two C-contiguous
# arrays of one size (`jitorch.codegen.flat.FlatKernel`), or None; set by the package (`jitorch.__init__`), which
# loads the code generator at the first call that needs it: the ops layer cannot import it, and a program of
# small tensors need not load LLVM.
KERNEL = None
# From this many elements an eager pow or xlogy runs that kernel (the same bits), where the call takes ~10-20 us;
# but the first such call loads the code generator and builds the kernel (~0.2 s, then read from the kernel
# cache), which a program of tiny tensors need not pay.
KERNEL_MIN = 64
# Up to this many elements pow and log compute each element on Python floats (`on_floats`: ~2.5 us of CPU per
# element for `pow_single`, ~6 for `pow_double`), above it on NumPy arrays (~100 and ~290 NumPy calls: ~70 and
# ~150 us whatever the size up to `KERNEL_MIN`); measured in benchmarks/pow_accuracy.py's timing.
EACH_MAX = 24


def through_kernel(name, dtype, *operands, least=None):
    """Op ``name`` of ``operands`` (arrays of NumPy ``dtype``, or numbers, broadcast together) by its compiled
    kernel (`KERNEL`), or None where the result is smaller than ``least`` (`KERNEL_MIN`) or no kernel is
    built."""
    operands = [np.asarray(v, dtype) for v in operands]
    shape = operands[0].shape
    if any(v.shape != shape for v in operands):
        shape = np.broadcast_shapes(*(v.shape for v in operands))
    if KERNEL is None or math.prod(shape) < (KERNEL_MIN if least is None else least):
        return None
    kernel = KERNEL(name, dtype.type.__name__)
    if kernel is None:
        return None
    return kernel(*(v if v.shape == shape and v.flags.c_contiguous else np.ascontiguousarray(np.broadcast_to(v, shape))
                    for v in operands))[0]


def _each(algorithm, dtype, *operands):
    """``algorithm`` on each element of ``operands`` (arrays of NumPy ``dtype``, broadcast together) as Python
    floats (`on_floats`), as a new array of ``dtype``."""
    fn = on_floats(algorithm, len(operands))
    if all(v.size == 1 for v in operands):  # (one element: no broadcasting's cost; the longest shape of ones)
        return np.array(fn(*[v.item() for v in operands]), dtype).reshape(max((v.shape for v in operands), key=len))
    arrays = np.broadcast_arrays(*operands)
    values = [fn(*args) for args in zip(*(v.ravel().tolist() for v in arrays))]
    return np.array(values, dtype).reshape(arrays[0].shape)


def power(a, b, dtype):
    """``a ** b`` of float32 or float64 arrays (or numbers) broadcast together, as a new array of NumPy
    ``dtype`` (float32 or float64): a float32 power by a `by_products` number by `pow_by_products`, others by
    `pow_double`, or `pow_single` for float32 (whose operands are exact in double: the result is rounded once)."""
    dtype = np.dtype(dtype)
    if dtype == np.float32 and isinstance(b, (int, float)) and by_products(b):
        return pow_by_products(_ARRAYS, a.astype(np.float64), b).astype(dtype)
    a, b = np.asarray(a, dtype), np.asarray(b, dtype)
    algorithm = pow_double if dtype == np.float64 else pow_single
    size = a.size if b.size == 1 else b.size if a.size == 1 else math.prod(np.broadcast_shapes(a.shape, b.shape))
    if size <= EACH_MAX:
        return _each(algorithm, dtype, a, b)
    r = through_kernel("pow", dtype, a, b)
    if r is not None:
        return r
    a64, b64 = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
    return algorithm(_ARRAYS, a64, b64).astype(dtype)


# Up to this many elements a float32 arc function (`single`) computes on Python floats (~1 us of CPU per element),
# above it by the kernel (~10 us a call up to a thousand elements), which NumPy arrays (~25-45 us: ~60 calls) take
# over only where no kernel is built
SINGLE_EACH_MAX = 8


def single(algorithm, name, x):
    """A float32 array's op ``name`` by jitorch's ``algorithm`` of one double (`jitorch.ops.arc_functions`),
    rounded once to float32, as a new array: on Python floats up to `SINGLE_EACH_MAX` elements, else by the
    compiled kernel of the op, or on NumPy arrays where there is none (the same bits each way)."""
    if x.size <= SINGLE_EACH_MAX:
        return _each(algorithm, x.dtype, x)
    r = through_kernel(name, x.dtype, x, least=SINGLE_EACH_MAX + 1)
    if r is not None:
        return r.reshape(x.shape)
    return algorithm(_ARRAYS, x.astype(np.float64)).astype(x.dtype)


def log(x):
    """``log(x)`` of a float32 or float64 array by `log_double`, or `log_single` for float32 (computed in
    double, rounded once)."""
    x = np.asarray(x)
    algorithm = log_double if x.dtype == np.float64 else log_single
    if x.size <= EACH_MAX:
        return _each(algorithm, x.dtype, x)
    return algorithm(_ARRAYS, x.astype(np.float64)).astype(x.dtype)
