"""torch.special: special functions, most of them the ops of the same meaning elsewhere.

An alias is the op itself (``special.expit is jitorch.sigmoid``, ``special.gammainc is jitorch.igamma``); the
functions only torch.special has are registry ops named ``special_<name>`` (torch's ATen names), which the
top-level namespace leaves out.

The Cephes-family functions (erfcx, log_ndtr, ndtri, the incomplete gamma functions, the Bessel functions J0,
J1, Y0, Y1, K0, K1 and K's scaled forms, the spherical J0, Airy's Ai) and the orthogonal polynomials are
computed as torch's CPU kernels compute them, in the operand's dtype (`jitorch.ops.special_cephes`,
`jitorch.ops.orthogonal_polynomials`): float64 bit for bit as torch's with the same C library, float32 within
a few ulp (where a polynomial's trigonometric form multiplies an ulp of the float C library's ``acosf`` by
the degree, further: docs/differences-from-torch.md).
"""

from __future__ import annotations

import jitorch as _jt
from jitorch.ops import registry as _registry
from jitorch.ops.orthogonal_polynomials import NAMES as _POLYNOMIALS
from jitorch.ops.special_ops import CEPHES as _CEPHES

expit = _jt.sigmoid
logit = _jt.logit
erf = _jt.erf
erfc = _jt.erfc
erfinv = _jt.erfinv
exp2 = _jt.exp2
expm1 = _jt.expm1
log1p = _jt.log1p
gammaln = _jt.lgamma
digamma = psi = _jt.digamma
polygamma = _jt.polygamma
multigammaln = _jt.mvlgamma
i0 = modified_bessel_i0 = _jt.i0
sinc = _jt.sinc
round = _jt.round
softmax = _jt.softmax
log_softmax = _jt.log_softmax
logsumexp = _jt.logsumexp
xlogy = _jt.xlogy

gammainc = _jt.igamma
gammaincc = _jt.igammac

_OWN = ("i0e", "i1", "i1e", "xlog1py", "zeta", "entr", "ndtr")
globals().update({name: _registry.FUNCTIONS[f"special_{name}"] for name in _OWN + _CEPHES + _POLYNOMIALS})
modified_bessel_i1 = i1  # noqa: F821  (one of _OWN)

__all__ = ["expit", "logit", "erf", "erfc", "erfinv", "exp2", "expm1", "log1p", "gammaln", "digamma", "psi",
           "polygamma", "multigammaln", "i0", "modified_bessel_i0", "modified_bessel_i1", "sinc", "round", "softmax", "log_softmax", "logsumexp", "xlogy",
           "gammainc", "gammaincc", *_OWN, *_CEPHES, *_POLYNOMIALS]
