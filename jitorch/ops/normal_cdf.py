"""The float32 normal distribution function Phi's formula, which the code generator's kernels evaluate in float
(`jitorch.codegen.mathlib._normal_cdf_single`) and eager evaluates in float64, rounded once.

``Phi(-z) = exp(-z**2 / 2) t R(w)``, ``t = 1 / (1 + p z)``, ``w = p z t``, ``z = |x|`` (``Phi(x) = 1 - Phi(-z)``
for x > 0): R (degree 9) fitted to ``erfcx(z / sqrt(2)) / (2 t)`` over z in [0, 14.5] (Phi(-z) and GELU underflow
to 0 in float32 from -14.1 on) by Lawson's weighted least squares towards minimax in relative error, highest
power first, each rounded to float32 before the lower ones were fitted again: approximation error 1.12e-8
relative (0.19 float32 ulp), so Phi(-z) keeps its relative accuracy all the way down, where
``1 + erf(x / sqrt(2))`` (torch's GELU) cancels. R is in w, not in t: near 0, t sits on float32's coarse grid
below 1 (the rounding of 1 + p z moves z by up to 2**-24 / p: 5 ulp of GELU near 0 with a polynomial in t);
w is relative-accurate, and ``R(w) = 1/2 + w (...)`` rounds little there.
"""

from __future__ import annotations

import numpy as np

P = 0.29499998688697815
R = (0.01990383490920067, -0.06515694409608841, 0.05075579881668091, 0.02473727986216545, 0.031479816883802414,
     -0.14106617867946625, -0.11865304410457611, 0.6680419445037842, -0.8523468375205994, 0.5)
_RSQRT_TWO_PI = 0.3989422804014327


def float32(x):
    """Phi of a float32 array by the formula in float64 arithmetic, rounded once (within 0.7 ulp: the
    approximation's 0.19 and the rounding); float64's w = 1 - t is exact enough, and keeps +-inf finite."""
    x = x.astype(np.float64)
    t = 1 / (1 + P * np.abs(x))
    w = 1 - t
    r = np.full_like(x, R[0])
    for c in R[1:]:
        r *= w
        r += c
    q = np.exp(-0.5 * x * x) * t * r  # (x * x exact: a float32's square has 48 bits)
    return np.where(x > 0, 1 - q, q).astype(np.float32)


def pdf_float32(x):
    """phi of a float32 array in float64, rounded once (x * x exact)."""
    x = x.astype(np.float64)
    return (np.exp(-0.5 * x * x) * _RSQRT_TWO_PI).astype(np.float32)
