"""The deprecated device forms ``jitorch.cpu.amp`` and ``jitorch.cuda.amp``: `autocast` and `GradScaler`
with the device type fixed."""

from __future__ import annotations

import warnings

from .autocast_mode import autocast as _autocast
from .grad_scaler import GradScaler as _GradScaler


def _warn(old, new):
    warnings.warn(f"`jitorch.{old}(args...)` is deprecated. Please use `jitorch.{new}(args...)` instead.",
                  FutureWarning, stacklevel=3)


def device_forms(device_type, default_dtype, module):
    """``(autocast, GradScaler)`` for ``device_type``, as module ``module`` ("jitorch.cuda.amp") has them."""

    class autocast(_autocast):
        __doc__ = f"``jitorch.amp.autocast({device_type!r}, ...)`` (deprecated spelling)."

        def __init__(self, enabled=True, dtype=default_dtype, cache_enabled=True):
            _warn(f"{device_type}.amp.autocast", f"amp.autocast('{device_type}', ")
            super().__init__(device_type, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    class GradScaler(_GradScaler):
        __doc__ = f"``jitorch.amp.GradScaler({device_type!r}, ...)`` (deprecated spelling)."

        def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                     enabled=True):
            _warn(f"{device_type}.amp.GradScaler", f"amp.GradScaler('{device_type}', ")
            super().__init__(device_type, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    for cls in (autocast, GradScaler):
        cls.__module__ = module
        cls.__qualname__ = cls.__name__
    return autocast, GradScaler
