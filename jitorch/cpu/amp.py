"""``jitorch.cpu.amp``: the deprecated CPU spellings of `jitorch.amp`'s autocast and GradScaler."""

from jitorch.amp.device_forms import device_forms
from jitorch.runtime import dtypes as _dt

__all__ = ["autocast", "GradScaler"]

autocast, GradScaler = device_forms("cpu", _dt.bfloat16, __name__)
