"""torch.special's Cephes-family functions and orthogonal polynomials as registry ops (``special_<name>``, as
torch's ATen ops are named; ``igamma``/``igammac`` also as torch's top-level functions and Tensor methods),
computed by `special_cephes` and `orthogonal_polynomials` in the operands' float dtype as torch's kernels.

Integers and bools give the default float dtype; the half types are refused as torch refuses them (its CPU
kernels have none), but for igamma/igammac, which compute them in float32 and take no integers. No op here
has a kernel form: a compiled graph runs each as an eager step, so compiled and eager give the same bits.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from . import orthogonal_polynomials, registry, special_cephes
from .meta import DEFAULT, INT_TO_FLOAT
from .pointwise_base import defpointwise
from .registry import scalar_name

SPECIAL_ONLY = ("function", "out")


def _refuse(kernel, kinds):
    """torch's NotImplementedError for result dtypes it has no ``kernel`` for: the half types ("h"), integers
    and bools ("biu")."""
    def check(spec, *args):
        if spec.dtype in (_dt.float16, _dt.bfloat16) and "h" in kinds or spec.dtype.kind in kinds:
            raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(spec.dtype)}'")
    check.reads_dtype_only = True  # (the eager shortcut runs it once per dtype)
    return check


def _tensors_only(op_name):
    """torch's TypeError for a Python number where it takes only tensors (igamma's two operands)."""
    def check(spec, *args):
        for position, (name, value) in enumerate(zip(("input", "other"), args), 1):
            if not isinstance(value, registry.Tensor):
                raise TypeError(f"{op_name}(): argument '{name}' (position {position}) must be Tensor, "
                                f"not {type(value).__name__}")
    return check


def _checks(*checks):
    def check(spec, *args):
        for c in checks:
            c(spec, *args)
    return check


def _flat(fn):
    """A formula running ``fn(*flat operands, dtype)`` over the broadcast operands, in their (compute) dtype."""
    def formula(*args):
        dtype = np.result_type(*args).type
        shape = np.broadcast_shapes(*(np.shape(a) for a in args))
        flat = [np.broadcast_to(np.asarray(a, dtype), shape).ravel() for a in args]
        with np.errstate(all="ignore"):
            return fn(*flat, dtype).reshape(shape)
    return formula


_UNARY = {
    "erfcx": ("self", "The scaled complementary error function ``exp(x^2) erfc(x)``."),
    "log_ndtr": ("self", "``log(ndtr(x))``, the logarithm of the standard normal distribution function."),
    "ndtri": ("self", "The inverse of the standard normal distribution function: -inf at 0, inf at 1, NaN "
                      "outside [0, 1]."),
    "bessel_j0": ("self", "The Bessel function of the first kind of order 0."),
    "bessel_j1": ("self", "The Bessel function of the first kind of order 1."),
    "bessel_y0": ("self", "The Bessel function of the second kind of order 0 (-inf at 0, NaN below)."),
    "bessel_y1": ("self", "The Bessel function of the second kind of order 1 (-inf at 0, NaN below)."),
    "modified_bessel_k0": ("self", "The modified Bessel function of the second kind of order 0 (inf at 0, NaN "
                                   "below)."),
    "modified_bessel_k1": ("self", "The modified Bessel function of the second kind of order 1 (inf at 0, NaN "
                                   "below)."),
    "scaled_modified_bessel_k0": ("x", "``exp(x) K0(x)`` (inf at 0, NaN below)."),
    "scaled_modified_bessel_k1": ("x", "``exp(x) K1(x)`` (inf at 0, NaN below)."),
    "spherical_bessel_j0": ("x", "The spherical Bessel function of the first kind of order 0, ``sin(x) / x``."),
    "airy_ai": ("x", "The Airy function Ai (NaN at +-inf)."),
}
CEPHES = tuple(_UNARY)  # torch.special's names of the one-operand functions here
for _name, (_arg, _doc) in _UNARY.items():
    defpointwise(f"special_{_name}(Tensor {_arg}) -> Tensor", _flat(getattr(special_cephes, _name)), INT_TO_FLOAT,
                 variants=SPECIAL_ONLY, check=_refuse(f"{_name}_cpu", "h"),
                 doc=_doc + " Computed in the operand's float dtype as torch's kernel (integers: the default).")

for _name in orthogonal_polynomials.NAMES:
    defpointwise(f"special_{_name}(Tensor x, Tensor n) -> Tensor",
                 _flat(lambda x, n, f, name=_name: orthogonal_polynomials.polynomial(name, x, n, f)), INT_TO_FLOAT,
                 variants=SPECIAL_ONLY, check=_refuse(f"{_name}_cpu", "h"),
                 doc=f"The {_name.replace('_', ' ')} of degree ``n`` (cut to an integer; a negative, NaN or "
                     "infinite degree gives 0) at ``x``, in the operands' float dtype as torch computes it.")

for _name, _fn, _what in (("igamma", special_cephes.igamma, "lower"), ("igammac", special_cephes.igammac, "upper")):
    defpointwise(f"{_name}(Tensor self, Tensor other) -> Tensor", _flat(_fn), DEFAULT,
                 check=_checks(_tensors_only(_name), _refuse(f"{_name}_cpu", "biu")),
                 doc=f"The regularized {_what} incomplete gamma function of ``self`` (a) at ``other`` (x); "
                     "NaN for negative arguments; float32 and float64 (half types computed in float32).")
