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
i0 = _jt.i0
sinc = _jt.sinc
softmax = _jt.softmax
log_softmax = _jt.log_softmax
logsumexp = _jt.logsumexp
xlogy = _jt.xlogy

gammainc = _jt.igamma
gammaincc = _jt.igammac

_OWN = ("i0e", "i1", "i1e", "xlog1py", "zeta", "entr", "ndtr")
globals().update({name: _registry.FUNCTIONS[f"special_{name}"] for name in _OWN + _CEPHES + _POLYNOMIALS})


def _full_precision_only(name, fn):
    """``fn`` under torch's name for a kernel that has no half-type forms (torch's i0 and i1 have them)."""
    def function(input, *, out=None):
        if input.dtype in (_jt.float16, _jt.bfloat16):
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_registry.scalar_name(input.dtype)}'")
        return fn(input, out=out)
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``{fn.__name__}`` of a float32 or float64 (or integer) tensor: torch's ``{name}``."
    return function


modified_bessel_i0 = _full_precision_only("modified_bessel_i0", _jt.i0)
modified_bessel_i1 = _full_precision_only("modified_bessel_i1", i1)  # noqa: F821  (one of _OWN)


def round(input, *, decimals=0, out=None):  # noqa: A001  (torch's name)
    """``jitorch.round`` with ``decimals`` always given, as torch.special's: integer tensors are refused."""
    return _jt.round(input, decimals=decimals, out=out)

__all__ = ["expit", "logit", "erf", "erfc", "erfinv", "exp2", "expm1", "log1p", "gammaln", "digamma", "psi",
           "polygamma", "multigammaln", "i0", "modified_bessel_i0", "modified_bessel_i1", "sinc", "round", "softmax", "log_softmax", "logsumexp", "xlogy",
           "gammainc", "gammaincc", *_OWN, *_CEPHES, *_POLYNOMIALS]
