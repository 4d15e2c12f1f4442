"""Activation modules, each a thin wrapper over its ``jitorch.nn.functional`` function."""

from __future__ import annotations

import warnings

from .. import init as nn_init
from ..parameter import Parameter
from ._functional import F
from .attention import MultiheadAttention  # noqa: F401  (torch.nn.modules.activation holds it)
from .module import Module
from .utils import factory


class _InplaceActivation(Module):
    """``F.<_function>(input, inplace=self.inplace)``; ``_shows_inplace`` is False for the modules
    whose torch repr never mentions ``inplace`` (Hardsigmoid, Hardswish)."""

    _function = None
    _shows_inplace = True

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return getattr(F, self._function)(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace and self._shows_inplace else ""


class ReLU(_InplaceActivation):
    """``max(x, 0)``."""

    _function = "relu"


class SiLU(_InplaceActivation):
    """``x * sigmoid(x)``."""

    _function = "silu"


class Mish(_InplaceActivation):
    """``x * tanh(softplus(x))``."""

    _function = "mish"


class Hardsigmoid(_InplaceActivation):
    """``relu6(x + 3) / 6``."""

    _function = "hardsigmoid"
    _shows_inplace = False


class Hardswish(_InplaceActivation):
    """``x * relu6(x + 3) / 6``."""

    _function = "hardswish"
    _shows_inplace = False


class GELU(Module):
    """Gaussian error linear unit, exact (``approximate='none'``) or with the tanh approximation."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    """``x`` where positive, ``negative_slope * x`` elsewhere."""

    def __init__(self, negative_slope=1e-2, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


def _renamed(old, new, value, default):
    """torch's FutureWarning for Hardtanh's deprecated ``min_value``/``max_value`` keywords."""
    if value is None:
        return default
    warnings.warn(f"keyword argument `{old}` is deprecated and renamed to `{new}`", FutureWarning, stacklevel=3)
    return value


class Hardtanh(Module):
    """``x`` clamped to ``[min_val, max_val]``."""

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None, max_value=None):
        super().__init__()
        self.min_val = _renamed("min_value", "min_val", min_value, min_val)
        self.max_val = _renamed("max_value", "max_val", max_value, max_val)
        self.inplace = inplace
        if self.max_val <= self.min_val:
            raise AssertionError(f"max_val ({self.max_val}) must be greater than min_val ({self.min_val})")

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)``: a Hardtanh over ``[0, 6]``, as in torch."""

    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Softplus(Module):
    """``log(1 + exp(beta x)) / beta``, linear where ``beta x > threshold``."""

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Tanh(Module):
    """Hyperbolic tangent."""

    def forward(self, input):
        return input.tanh()


class Sigmoid(Module):
    """Logistic sigmoid."""

    def forward(self, input):
        return input.sigmoid()


class LogSigmoid(Module):
    """``log(sigmoid(x))``, computed without overflow."""

    def forward(self, input):
        return F.logsigmoid(input)


class Softsign(Module):
    """``x / (1 + |x|)``."""

    def forward(self, input):
        return F.softsign(input)


class _DimActivation(Module):
    """``F.<_function>(input, self.dim)``, printed as ``dim=...``."""

    _function = None

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return getattr(F, self._function)(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax(_DimActivation):
    """Softmax along ``dim``."""

    _function = "softmax"


class Softmin(_DimActivation):
    """``softmax(-x)`` along ``dim``."""

    _function = "softmin"


class LogSoftmax(_DimActivation):
    """Log of the softmax along ``dim``, computed stably."""

    _function = "log_softmax"


class GLU(_DimActivation):
    """Gated linear unit ``a * sigmoid(b)`` of the halves ``a, b`` of the input along ``dim``."""

    _function = "glu"

    def __init__(self, dim=-1):
        super().__init__(dim)


def _inplace_suffix(inplace):
    return ", inplace=True" if inplace else ""


class CELU(Module):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + _inplace_suffix(self.inplace)


class SELU(_InplaceActivation):
    """``scale * (max(0, x) + min(0, alpha * (exp(x) - 1)))`` with the self-normalising constants."""

    _function = "selu"


class _Shrink(Module):
    """``F.<_function>(input, self.lambd)``, printed as the bare ``lambd``."""

    _function = None

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return getattr(F, self._function)(input, self.lambd)

    def extra_repr(self):
        return str(self.lambd)


class Softshrink(_Shrink):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between."""

    _function = "softshrink"


class Hardshrink(_Shrink):
    """``x`` where ``|x| > lambd``, 0 elsewhere."""

    _function = "hardshrink"


class Tanhshrink(Module):
    """``x - tanh(x)``."""

    def forward(self, input):
        return F.tanhshrink(input)


class Threshold(Module):
    """``x`` where ``x > threshold``, ``value`` elsewhere."""

    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}" + _inplace_suffix(self.inplace)


class RReLU(Module):
    """Randomized leaky relu: random negative slopes from ``U(lower, upper)`` in training, their mean in eval."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower = lower
        self.upper = upper
        self.inplace = inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}" + _inplace_suffix(self.inplace)


class PReLU(Module):
    """``x`` where positive, ``a * x`` elsewhere, with ``a`` learned: one slope, or one per channel (dim 1)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(factory("empty", (num_parameters,), device, dtype))
        self.reset_parameters()

    def reset_parameters(self):
        """Every slope ``init``."""
        nn_init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of ``(N, C, H, W)`` or ``(C, H, W)`` input."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)
