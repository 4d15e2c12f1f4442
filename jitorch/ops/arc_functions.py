"""float32 asin, acos, atan, asinh, acosh and atanh as jitorch defines them: one algorithm each in plain
float64, run by NumPy, by Python floats and by LLVM, rounded once to float32.

Eager float32 math was NumPy's float32 loops (SIMD code whose last bit is NumPy's build's and CPU's), 1 ulp
from torch's SLEEF on 17-36% of elements and from the compiled kernels' SLEEF-style float arithmetic on as
many. These functions are computed instead from the float32 argument widened to double (exact), in double by
the IEEE operations that every backend rounds alike (``+ - * /`` and ``sqrt``, no FMA: `jitorch.ops.powers`
explains why), within about 2**-50 of the exact value, and rounded once: the correctly rounded float32 but
where the exact value lies that close to a midpoint between two floats. Eager (`powers.single`: Python floats,
NumPy arrays or the compiled kernel by size) and compiled (`jitorch.codegen.mathlib`, float arguments) run
these same definitions, so they give the same bits on every CPU and NumPy version; torch's SLEEF is 1 ulp off
the correctly rounded value on a few percent of elements (docs/differences-from-torch.md).

The polynomials are fitted here (mpmath's chebyfit, 50 digits, of the named function of ``z``; the largest
error with the coefficients rounded to double, over 2001 points of the interval, in brackets): `_ASIN` of
``(asin(sqrt z) / sqrt z - 1) / z`` on [0, 1/4] (2**-56.5), `_ASINH` of ``(asinh(sqrt z) / sqrt z - 1) / z``
on [0, 1/4] (2**-56.4), `_ATAN` of ``(atan(sqrt w) / sqrt w - 1) / w`` on [0, tan(pi/8)**2] (2**-55.6).
Highest power first.
"""

from __future__ import annotations

import math

from .powers import horner, log2_plain

__all__ = ["ALGORITHMS", "acos", "acosh", "asin", "asinh", "atan", "atanh"]

_ASIN = (0.02961201126495512, -0.01924167174674304, 0.019554513336123378, 0.0030448799094556773,
         0.009319560794767446, 0.009621842970100282, 0.011566459612121669, 0.01396378001220357,
         0.017352816540325496, 0.02237215744350722, 0.03038194447553234, 0.044642857142551895,
         0.07500000000000118, 0.16666666666666666)
_ASINH = (-0.0014988358499957474, 0.00413835813140252, -0.0064746008466359025, 0.00818236764637779,
          -0.009725716144151688, 0.011547475926257406, -0.013964483323351326, 0.0173527441556904,
          -0.022372158355736263, 0.030381944428513684, -0.044642857142677225, 0.0749999999999992,
          -0.16666666666666666)
_ATAN = (0.016284375050043393, -0.03456931506332609, 0.045515447340221615, -0.05230443640686948,
         0.05878927554473807, -0.0666642476020052, 0.07692296368042296, -0.09090908753259112,
         0.11111111105150588, -0.14285714285659779, 0.19999999999999804, -0.3333333333333333)
# pi/2, pi/4 and pi as double words (hi + lo)
_PIO2 = (1.5707963267948966, 6.123233995736766e-17)
_PIO4 = (0.7853981633974483, 3.061616997868383e-17)
_PI = (3.141592653589793, 1.2246467991473532e-16)
_TAN_PI_8, _TAN_3PI_8 = 0.41421356237309503, 2.414213562373095
_LN2 = 0.6931471805599453
_NAN, _INF = math.nan, math.inf


def _odd(m, a, z, coeffs):
    """``a + a z P(z)``: an odd function of ``a`` (``z = a**2``) whose series starts with ``a``."""
    return m.add(a, m.mul(a, m.mul(z, horner(m, z, coeffs))))


def _asin_half(m, a):
    """(t, small): ``asin(a) = t`` where ``small`` (a < 1/2), else ``asin(a) = pi/2 - 2 t`` with
    ``t = asin(sqrt((1 - a) / 2))`` (1 - a and the halving are exact: a has float32's 24 bits)."""
    small = m.lt(a, 0.5)
    z = m.sel(small, m.mul(a, a), m.mul(m.sub(1.0, a), 0.5))
    s = m.sel(small, a, m.sqrt(z))
    return _odd(m, s, z, _ASIN), small


def _minus_from(m, c, t):
    """``c - t`` for the double word ``c``: its low part added to ``t`` first."""
    return m.sub(c[0], m.sub(t, c[1]))


def asin(m, x):
    """``asin(x)`` of a float32 value widened to double, as a double to be rounded once (NaN beyond 1)."""
    t, small = _asin_half(m, m.abs(x))
    return m.mulsign(m.sel(small, t, _minus_from(m, _PIO2, m.add(t, t))), x)


def acos(m, x):
    """``acos(x)``, as `asin`: ``pi/2 - asin(x)`` below 1/2 in magnitude, ``2 t`` or ``pi - 2 t`` beyond."""
    t, small = _asin_half(m, m.abs(x))
    twice = m.add(t, t)
    beyond = m.sel(m.signbit(x), _minus_from(m, _PI, twice), twice)
    return m.sel(small, _minus_from(m, _PIO2, m.mulsign(t, x)), beyond)


def atan(m, x):
    """``atan(x)``: ``u + u w Q(w)`` (w = u**2) of ``u = |x|`` up to tan(pi/8), of ``(|x| - 1) / (|x| + 1)``
    (plus pi/4) up to tan(3 pi/8), else of ``-1 / |x|`` (plus pi/2); the sign of x. (|x| - 1 and |x| + 1 are
    exact; only the quotient rounds.)"""
    a = m.abs(x)
    high, low = m.gt(a, _TAN_3PI_8), m.gt(a, _TAN_PI_8)  # (NaN: neither, and u is NaN)
    middle = m.sel(low, m.div(m.sub(a, 1.0), m.add(a, 1.0)), a)
    u = m.sel(high, m.div(-1.0, m.sel(high, a, 1.0)), middle)
    base = [m.sel(high, c2, m.sel(low, c4, 0.0)) for c2, c4 in zip(_PIO2, _PIO4)]
    w = m.mul(u, u)
    r = m.add(base[0], m.add(u, m.add(m.mul(u, m.mul(w, horner(m, w, _ATAN))), base[1])))
    return m.mulsign(r, x)


def _log(m, w):
    """``log(w)`` of a finite double ``w`` > 0 (not only a float32's): within ~2**-50 relatively."""
    return m.mul(log2_plain(m, w), _LN2)


def _log1p(m, u):
    """``log(1 + u)`` of a double ``u`` >= 0 (finite): ``log(w) u / (w - 1)`` with ``w = 1 + u`` rounded, whose
    ``w - 1`` is exact, so the quotient corrects w's rounding (Goldberg's); ``u`` where w is 1."""
    w = m.add(1.0, u)
    one = m.eq(w, 1.0)
    return m.sel(one, u, m.mul(_log(m, w), m.div(u, m.sel(one, 1.0, m.sub(w, 1.0)))))


def _specials(m, x, r):
    """NaN for NaN, as given (the algorithms may not carry one through the exponent split)."""
    return m.sel(m.isnan(x), x, r)


def asinh(m, x):
    """``asinh(x)``: a polynomial below 1/2 in magnitude, else ``log(|x| + sqrt(x**2 + 1))`` (x**2 is exact);
    infinities kept; the sign of x."""
    a = m.abs(x)
    z = m.mul(a, a)
    small = m.lt(a, 0.5)
    big = m.any(small, m.isinf(a))  # (no log of these: their values are selected)
    r = m.sel(small, _odd(m, a, z, _ASINH), _log(m, m.sel(big, 1.0, m.add(a, m.sqrt(m.add(z, 1.0))))))
    return _specials(m, x, m.mulsign(m.sel(m.isinf(a), a, r), x))


def acosh(m, x):
    """``acosh(x) = log1p(t + sqrt(2 t + t**2))``, ``t = x - 1`` (exact near 1, where the result is
    ``sqrt(2 t)``-like and a log of ``x + sqrt(x**2 - 1)`` would lose it); NaN below 1, inf at inf."""
    t = m.sub(x, 1.0)
    valid = m.all(m.gt(t, 0.0), m.lt(t, _INF))
    t = m.sel(valid, t, 0.0)
    r = _log1p(m, m.add(t, m.sqrt(m.add(m.add(t, t), m.mul(t, t)))))
    r = m.sel(m.lt(x, 1.0), _NAN, m.sel(m.eq(x, _INF), _INF, r))
    return _specials(m, x, r)


def atanh(m, x):
    """``atanh(x) = log1p(2 |x| / (1 - |x|)) / 2`` (2 |x| and 1 - |x| exact) with the sign of x; inf at 1, NaN
    beyond."""
    a = m.abs(x)
    inside = m.lt(a, 1.0)
    q = m.div(m.add(a, a), m.sub(1.0, m.sel(inside, a, 0.0)))
    r = m.mul(_log1p(m, m.sel(inside, q, 0.0)), 0.5)
    r = m.sel(inside, r, m.sel(m.eq(a, 1.0), _INF, _NAN))
    return _specials(m, x, m.mulsign(r, x))


# op name -> its float32 algorithm
ALGORITHMS = {"asin": asin, "acos": acos, "atan": atan, "asinh": asinh, "acosh": acosh, "atanh": atanh}
