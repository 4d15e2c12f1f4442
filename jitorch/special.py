"""torch.special: special functions, most of them the ops of the same meaning elsewhere.

An alias is the op itself (``special.expit is jitorch.sigmoid``); the functions only torch.special has are
registry ops named ``special_<name>`` (torch's ATen names), which the top-level namespace leaves out.

Not provided (their accurate evaluation is not implemented): ``erfcx``, ``log_ndtr``, ``ndtri``,
``gammainc``/``gammaincc``, the Bessel functions ``bessel_j0/j1/y0/y1``, ``modified_bessel_k0/k1``,
``scaled_modified_bessel_*``, ``spherical_bessel_j0``, ``airy_ai`` and the orthogonal polynomials.
"""

from __future__ import annotations

import jitorch as _jt
from jitorch.ops import registry as _registry

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

_OWN = ("i0e", "i1", "i1e", "xlog1py", "zeta", "entr", "ndtr")
globals().update({name: _registry.FUNCTIONS[f"special_{name}"] for name in _OWN})
modified_bessel_i1 = i1  # noqa: F821  (one of _OWN)

__all__ = ["expit", "logit", "erf", "erfc", "erfinv", "exp2", "expm1", "log1p", "gammaln", "digamma", "psi",
           "polygamma", "multigammaln", "i0", "modified_bessel_i0", "modified_bessel_i1", "sinc", "round", "softmax", "log_softmax", "logsumexp", "xlogy",
           *_OWN]
