"""Derivative rules of torch.special's Cephes-family functions (jitorch/ops/special_ops.py), after PyTorch's
derivatives.yaml: erfcx, log_ndtr and ndtri have derivatives; igamma/igammac only in their second argument
(``x``; the first raises torch's "not implemented" when its gradient is asked for); the Bessel functions,
Airy's Ai and the orthogonal polynomials are not differentiable (their results never require grad)."""

from __future__ import annotations

import math

from ...ops import functions as jt
from ...ops import orthogonal_polynomials

from ..rule import defgrad, nondifferentiable, not_implemented, reads
from .common import per_input, zeros

_SQRT_2PI = math.sqrt(2 * math.pi)


def _igamma_density(a, x):
    """``x^(a - 1) exp(-x) / Gamma(a)``: the derivative of igamma in ``x`` (torch's formula)."""
    return jt.exp((a - 1) * jt.log(x) - x - jt.lgamma(a))


def _first_argument(name):
    """torch's not_implemented for igamma's ``self`` (an empty gradient has nothing to miss)."""
    return reads("", lambda g, a, out: zeros(g.shape, g) if 0 in g.shape else not_implemented(f"{name}: input"))


defgrad("special_erfcx", per_input(self=reads("self result", lambda g, a, out: (2.0 * a.self * out
                                                                                - 2.0 / math.sqrt(math.pi)) * g)))
defgrad("special_log_ndtr", per_input(self=reads("self result", lambda g, a, out: g / _SQRT_2PI * jt.exp(
    -(out + a.self.pow(2) / 2)))))
defgrad("special_ndtri", per_input(self=reads("result", lambda g, a, out: g * _SQRT_2PI * jt.exp(out.square() / 2))))
defgrad("igamma", per_input(self=_first_argument("igamma"),
                            other=reads("self other", lambda g, a, out: g * _igamma_density(a.self, a.other))))
defgrad("igammac", per_input(self=_first_argument("igammac"),
                             other=reads("self other", lambda g, a, out: -g * _igamma_density(a.self, a.other))))
nondifferentiable(*(f"special_{name}" for name in (
    "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
    "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai",
    *orthogonal_polynomials.NAMES)))
