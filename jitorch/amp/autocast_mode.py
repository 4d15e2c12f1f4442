"""``jitorch.autocast``: regions where ops run in a lower precision dtype, by torch's op lists (which ops
cast to the lower precision dtype, which to float32, which to the widest input: `jitorch.ops.autocast`)."""

from __future__ import annotations

import collections.abc
import copy
import functools
import warnings

import numpy as np

import jitorch
from jitorch.runtime import autocast_mode as _state
from jitorch.runtime import dtypes as _dt
from jitorch.runtime.autocast_mode import is_autocast_available

__all__ = ["autocast", "is_autocast_available", "custom_fwd", "custom_bwd"]

_SUPPORTED_DTYPES = (_dt.bfloat16, _dt.float16)


class autocast:
    """Ops in the region run in an op-specific dtype: matrix products and convolutions in ``dtype``
    (default: bfloat16 on CPU, float16 on CUDA), ops that need the range (losses, softmax on CUDA,
    linear algebra on CPU) in float32, and ops like ``cat`` in the widest dtype of their inputs. A
    context manager (``with jitorch.autocast("cpu"):``) or a decorator. ``enabled=False`` turns autocast
    off inside an enclosing region; ``cache_enabled`` keeps the casts of parameters for reuse within the
    region. The state is thread-local; compiled functions trace the casts and guard on the state."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.fast_dtype = _state.get_autocast_dtype(device_type) if dtype is None else dtype
        if not is_autocast_available(device_type):
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self.device = device_type
        self._cache_enabled = _state.is_autocast_cache_enabled() if cache_enabled is None else cache_enabled
        if enabled and device_type == "cuda" and not jitorch.cuda.is_available():
            warnings.warn("CUDA is not available. Disabling autocast.", stacklevel=2)
            enabled = False
        elif enabled and device_type != "cuda" and self.fast_dtype not in _SUPPORTED_DTYPES:
            name = device_type.upper()
            warnings.warn(f"In {name} autocast, but the target dtype is not supported. Disabling autocast.\n"
                          f"{name} Autocast only supports dtypes of "
                          f"{', '.join(map(str, _SUPPORTED_DTYPES))} currently.", stacklevel=2)
            enabled = False
        self._enabled = enabled

    def __enter__(self):
        self.prev_cache_enabled = _state.is_autocast_cache_enabled()
        self.prev = _state.is_autocast_enabled(self.device)
        self.prev_fastdtype = _state.get_autocast_dtype(self.device)
        _state.set_autocast_enabled(self.device, self._enabled)
        _state.set_autocast_dtype(self.device, self.fast_dtype)
        _state.autocast_increment_nesting()
        _state.set_autocast_cache_enabled(self._cache_enabled)
        return self

    def __exit__(self, *exc):
        # the outermost region drops the cached casts, which must not outlive it
        if _state.autocast_decrement_nesting() == 0:
            _state.clear_autocast_cache()
        _state.set_autocast_enabled(self.device, self.prev)
        _state.set_autocast_dtype(self.device, self.prev_fastdtype)
        _state.set_autocast_cache_enabled(self.prev_cache_enabled)
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"autocast()(func) requires a callable, but got {type(func).__name__}. "
                            "Did you mean to use autocast as a context manager? For example:\n"
                            "    with torch.autocast(device_type=...):\n"
                            "        output = model(input)")

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            # a copy per call: a recursive call must not overwrite the state its caller restores
            with copy.copy(self):
                return func(*args, **kwargs)
        return decorate_autocast


def _cast(value, device_type, dtype):
    """``value`` with its floating tensors on ``device_type`` (not float64 ones) cast to ``dtype``, through
    lists, tuples, dicts and other iterables (strings and arrays are left alone)."""
    if isinstance(value, jitorch.Tensor):
        eligible = value.is_floating_point() and value.device.type == device_type and value.dtype is not _dt.float64
        return value.to(dtype) if eligible else value
    if isinstance(value, (str, bytes, np.ndarray)):
        return value
    if isinstance(value, collections.abc.Mapping):
        return {_cast(k, device_type, dtype): _cast(v, device_type, dtype) for k, v in value.items()}
    if isinstance(value, collections.abc.Iterable):
        iterable = (_cast(v, device_type, dtype) for v in value)
        return type(value)(iterable) if isinstance(value, (list, tuple)) else iterable
    return value


def _check_device_type(device_type):
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")


def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
    """Decorate the ``forward`` of a custom ``autograd.Function`` for autocast: with ``cast_inputs``, inside
    an autocast region its floating inputs are cast to that dtype and it runs with autocast off; without,
    it runs in the region's state, which `custom_bwd` gives its ``backward`` too."""
    _check_device_type(device_type)
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = _state.get_autocast_dtype(device_type)
        enabled = _state.is_autocast_enabled(device_type)
        ctx._fwd_used_autocast = enabled and cast_inputs is None
        if cast_inputs is None or not enabled:
            return fwd(*args, **kwargs)
        with autocast(device_type=device_type, enabled=False):
            return fwd(*_cast(args, device_type, cast_inputs), **_cast(kwargs, device_type, cast_inputs))
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type):
    """Decorate the ``backward`` of a custom ``autograd.Function``: it runs in the autocast state its
    `custom_fwd` ``forward`` ran in."""
    _check_device_type(device_type)
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        with autocast(device_type=device_type, enabled=ctx._fwd_used_autocast, dtype=ctx._dtype):
            return bwd(*args, **kwargs)
    return decorate_bwd
