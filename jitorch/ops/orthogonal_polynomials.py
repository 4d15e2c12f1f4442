"""torch.special's orthogonal polynomials of degree ``n`` at ``x`` (Chebyshev T, U, V, W and their shifted
forms, Hermite H and He, Laguerre L, Legendre P), step by step as torch's CPU kernels (ATen/native/Math.h)
compute them, in the operands' float dtype.

``n`` comes as a float of that dtype and is cut to an integer as C's cast does: towards zero, and a NaN, an
infinity or a value beyond int64 (x86's cast gives INT64_MIN there) counts as negative, whose polynomial is 0.
Torch's special values (``x = +-1`` or the shifted forms' 0 and 1), its trigonometric forms for ``|x| < 1``
and large ``n``, Hermite's NaN beyond degree 128 (float32) or 512 (float64), and its three-term recurrences,
which stop early once a value is NaN (an overflow to inf turns into NaN a step later) -- Hermite's excepted.
"""

from __future__ import annotations

import numpy as np

from .special_cephes import _by_case, fma, libm

_HERMITE_LIMIT = {np.float32: 128, np.float64: 512}


def degrees(n):
    """``n`` (floats) cut to int64 as C's ``static_cast<int64_t>`` on x86: -1 standing for INT64_MIN."""
    with np.errstate(invalid="ignore"):
        fits = np.isfinite(n) & (np.abs(n) < 2.0 ** 63)
        return np.where(fits, np.trunc(np.where(fits, n, 0)), -1).astype(np.int64)


def _recurrence(x, p, q, steps, step, nan_stops=True):
    """Run ``r = step(x, q, p, j)`` for ``j`` in ``1 .. steps`` per element (``steps`` an int64 array), moving
    ``p, q = q, r``, stopping early where ``q`` is NaN (``nan_stops``); ``q`` at the end."""
    p, q = p.copy(), q.copy()
    idx = np.flatnonzero(steps > 0)
    j = 0
    while idx.size:
        j += 1
        if nan_stops:
            idx = idx[~np.isnan(q[idx])]
        r = step(x[idx], q[idx], p[idx], j)
        p[idx] = q[idx]
        q[idx] = r
        idx = idx[steps[idx] > j]
    return q


def _three_terms(name, f):
    """``(first(x), step(x, q, p, j))`` of the three-term recurrence run for ``k = j + 1`` (Chebyshev's from
    k = 2) or ``k = j`` (Laguerre, Legendre, He from k = 1); Hermite's H steps ``k = 2j``."""
    one = f(1)

    def cheb(x, q, p, j):
        return fma(x + x, q, -p, f)

    shifted = {"t": lambda x: x + x - one, "u": lambda x: (x + x - one) + (x + x - one),
               "v": lambda x: (x + x - one) + (x + x - one) - one, "w": lambda x: (x + x - one) + (x + x - one) + one}
    plain = {"t": lambda x: x, "u": lambda x: x + x, "v": lambda x: x + x - one, "w": lambda x: x + x + one}
    if name.startswith("shifted_"):
        def step(x, q, p, j):
            s = x + x - one
            return fma(s + s, q, -p, f)
        return shifted[name[-1]], step
    if name.startswith("chebyshev_"):
        return plain[name[-1]], cheb
    return {
        "hermite_polynomial_h": (lambda x: x + x, lambda x, q, p, j: fma(x + x, q, -(f(2 * j) * p), f)),
        "hermite_polynomial_he": (lambda x: x, lambda x, q, p, j: fma(x, q, -(f(j) * p), f)),
        "laguerre_polynomial_l": (lambda x: one - x,
                                  lambda x, q, p, j: fma(f(j + j) + (one - x), q, -(f(j) * p), f) / f(j + 1)),
        "legendre_polynomial_p": (lambda x: x, lambda x, q, p, j: fma(f(j + j + 1) * x, q, -(f(j) * p), f) / f(j + 1)),
    }[name]


def _run(name, x, k, f):
    """The recurrence from degree 0 (1) and 1 (``first``) up to ``k >= 2``."""
    first, step = _three_terms(name, f)
    q = first(x)
    hermite = name.startswith("hermite")
    steps = k - 1
    return _recurrence(x, np.ones_like(x), q, steps, step, nan_stops=not hermite)


def _trig(name, x, k, f):
    """torch's closed forms for ``|s| < 1`` and large degree (``s = x``, or ``2x - 1`` shifted)."""
    s = x + x - f(1) if name.startswith("shifted_") else x
    kind = name[-1]
    theta = libm("acos", s, f)
    kf = k.astype(f)
    if kind == "t":
        return libm("cos", kf * theta, f)
    if kind == "u":
        sin = libm("sin", theta, f)
        k1 = (k + 1).astype(f)
        with np.errstate(all="ignore"):
            return np.where(sin != 0, libm("sin", k1 * theta, f) / sin, k1 * libm("cos", k1 * theta, f) / s)
    half = theta / f(2)
    odd = (k % 2).astype(bool)
    kh = kf + f(0.5)
    with np.errstate(all="ignore"):
        if kind == "v":
            edge = np.where(odd, -(2 * k + 1), 2 * k + 1).astype(f)
            return np.where(libm("sin", half, f) != f(1), libm("cos", kh * theta, f) / libm("cos", half, f), edge)
        if name.startswith("shifted_"):
            edge = np.where(odd, f(-1), f(1))
        else:
            edge = np.where(s > 0, (2 * k + 1).astype(f), np.where(odd, f(-1), f(1)))
        return np.where(libm("cos", half, f) != f(1), libm("sin", kh * theta, f) / libm("sin", half, f), edge)


# the degree beyond which |s| < 1 takes the closed form
_TRIG_FROM = {"chebyshev_polynomial_t": 6, "chebyshev_polynomial_u": 8, "chebyshev_polynomial_v": 8,
              "chebyshev_polynomial_w": 8, "shifted_chebyshev_polynomial_t": 6, "shifted_chebyshev_polynomial_u": 6,
              "shifted_chebyshev_polynomial_v": 6, "shifted_chebyshev_polynomial_w": 4}


def _edges(name, x, k, f):
    """torch's values at the ends (``|x| = 1``, or the shifted forms' 0 and 1) as (mask, value array) rows."""
    odd = (k % 2).astype(bool)
    n1, n21 = (k + 1).astype(f), (2 * k + 1).astype(f)
    sign = np.where(odd, f(-1), f(1))
    if name.startswith("shifted_"):
        top = {"t": f(1), "u": n1, "v": f(1), "w": n21}[name[-1]]
        bottom = {"t": sign, "u": sign * n1, "v": sign * n21, "w": sign}[name[-1]]
        return [(x == 1, top), (x == 0, bottom)]
    if name.startswith("chebyshev_"):
        top = {"t": f(1), "u": n1, "v": f(1), "w": n21}[name[-1]]
        bottom = {"t": sign, "u": sign * n1, "v": sign * n21, "w": sign}[name[-1]]
        return [(x == 1, top), (x == -1, bottom)]
    if name == "legendre_polynomial_p":
        return [(x == 1, f(1)), (x == -1, sign)]
    if name == "laguerre_polynomial_l":
        return [(x == 0, f(1))]
    return []


def polynomial(name, x, n, f):
    """The polynomial ``name`` (torch.special's name) of degree ``n`` at ``x``, both arrays of dtype ``f``
    and one shape."""
    k = degrees(n)
    hermite = name.startswith("hermite")
    cases = [(k < 0, 0.0)]
    if hermite:
        cases += [(k == 0, 1.0), (k == 1, None), (k > _HERMITE_LIMIT[f], np.nan)]
    else:
        cases += [(mask, (lambda m, v=v: np.broadcast_to(v, x.shape)[m])) for mask, v in _edges(name, x, k, f)]
        if name in _TRIG_FROM:
            s = x + x - f(1) if name.startswith("shifted_") else x
            cases.append(((k > _TRIG_FROM[name]) & (np.abs(s) < 1), lambda m: _trig(name, x[m], k[m], f)))
        cases += [(k == 0, 1.0), (k == 1, None)]
    first, _ = _three_terms(name, f)
    cases = [(mask, (lambda m: first(x[m])) if value is None else value) for mask, value in cases]
    cases.append((np.ones(x.shape, bool), lambda m: _run(name, x[m], k[m], f)))
    return _by_case(x, f, cases, 0.0)


NAMES = ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
         "legendre_polynomial_p")
