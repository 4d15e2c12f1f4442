"""``jitorch.cuda.amp``: the deprecated CUDA spellings of `jitorch.amp`'s autocast, GradScaler,
custom_fwd and custom_bwd."""

from __future__ import annotations

import warnings

from jitorch import amp as _amp
from jitorch.amp.device_forms import device_forms
from jitorch.runtime import dtypes as _dt

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]

autocast, GradScaler = device_forms("cuda", _dt.float16, __name__)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """``jitorch.amp.custom_fwd(..., device_type="cuda")`` (deprecated spelling)."""
    warnings.warn("`jitorch.cuda.amp.custom_fwd(args...)` is deprecated. "
                  "Please use `jitorch.amp.custom_fwd(args..., device_type='cuda')` instead.", FutureWarning,
                  stacklevel=2)
    return _amp.custom_fwd(fwd, device_type="cuda", cast_inputs=cast_inputs)


def custom_bwd(bwd):
    """``jitorch.amp.custom_bwd(..., device_type="cuda")`` (deprecated spelling)."""
    warnings.warn("`jitorch.cuda.amp.custom_bwd(args...)` is deprecated. "
                  "Please use `jitorch.amp.custom_bwd(args..., device_type='cuda')` instead.", FutureWarning,
                  stacklevel=2)
    return _amp.custom_bwd(bwd, device_type="cuda")
