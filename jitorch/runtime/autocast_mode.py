"""Autocast state: per device type, whether ops cast their inputs to a lower precision, and to which
dtype (thread-local, as torch's). The op registry reads `STATE.key` on every call; the policy that
decides the casts is in `jitorch.ops.autocast`, the context manager in `jitorch.amp`."""

from __future__ import annotations

import threading
import warnings
import weakref

from . import dtypes as _dt
from .device import device as _device

DEVICE_TYPES = ("cpu", "cuda")
DEFAULT_DTYPES = {"cpu": _dt.bfloat16, "cuda": _dt.float16}


class _State(threading.local):
    # ``key``: None while no device type autocasts, else the (device type, dtype) pairs that do. It is
    # what the op registry tests on every call and what a compiled function's guards compare.
    key = None
    cache_enabled = True
    nesting = 0

    def __init__(self):
        self.enabled = dict.fromkeys(DEVICE_TYPES, False)
        self.dtypes = dict(DEFAULT_DTYPES)
        self.casts = {}  # id(source) -> (weakref to the source, its version then, its cast): see `cached_cast`


STATE = _State()


def _refresh():
    STATE.key = tuple((t, STATE.dtypes[t]) for t in DEVICE_TYPES if STATE.enabled[t]) or None


def _device_type(device_type):
    """``device_type`` checked: a device type autocast knows, else torch's errors."""
    if not isinstance(device_type, str):
        raise TypeError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    kind = _device(device_type).type  # an unknown name raises as torch.device does
    if kind not in DEVICE_TYPES:
        raise RuntimeError(f"unknown device type for autocast: '{kind}'")
    return kind


def is_autocast_available(device_type) -> bool:
    """Whether autocast supports ``device_type`` ("cpu" and "cuda")."""
    return device_type in DEVICE_TYPES


def is_autocast_enabled(device_type=None) -> bool:
    """Whether autocast is on for ``device_type`` in this thread (no argument: "cuda", as torch's)."""
    return STATE.enabled[_device_type("cuda" if device_type is None else device_type)]


def set_autocast_enabled(device_type, enabled=None):
    """Turn autocast on or off for ``device_type`` (``set_autocast_enabled(flag)``: for "cuda")."""
    if enabled is None:
        device_type, enabled = "cuda", device_type
    STATE.enabled[_device_type(device_type)] = bool(enabled)
    _refresh()


def get_autocast_dtype(device_type):
    """The lower precision dtype autocast uses on ``device_type`` (bfloat16 on CPU, float16 on CUDA by default)."""
    return STATE.dtypes[_device_type(device_type)]


def set_autocast_dtype(device_type, dtype):
    """Set the lower precision dtype autocast uses on ``device_type``."""
    if not isinstance(dtype, _dt.dtype):
        raise TypeError(f"set_autocast_dtype(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")
    STATE.dtypes[_device_type(device_type)] = dtype
    _refresh()


def is_autocast_cache_enabled() -> bool:
    """Whether autocast keeps the lower precision casts of parameters for reuse within its region."""
    return STATE.cache_enabled


def set_autocast_cache_enabled(enabled):
    """Turn the cache of autocast's casts of parameters on or off."""
    STATE.cache_enabled = bool(enabled)


def clear_autocast_cache():
    """Forget the casts autocast cached (the outermost autocast region does so when it exits)."""
    STATE.casts.clear()


def autocast_increment_nesting() -> int:
    """One autocast region more; returns how many are open."""
    STATE.nesting += 1
    return STATE.nesting


def autocast_decrement_nesting() -> int:
    """One autocast region less; returns how many are open."""
    STATE.nesting -= 1
    return STATE.nesting


def cached_cast(source, cast):
    """``source``'s cast from this region's cache, made by ``cast()`` and kept if not there: torch's
    heuristic for the parameters a forward pass reuses. A cast made before ``source`` was written to
    is made again (torch would give the stale one)."""
    entry = STATE.casts.get(id(source))
    if entry is not None and entry[0]() is source and entry[1] == source._version:
        return entry[2]
    result = cast()
    STATE.casts[id(source)] = (weakref.ref(source), source._version, result)
    return result


class excluded:
    """Autocast off in this thread for the block, whatever regions are open: the ops an autocast op runs
    (its casts, its body) are not autocast again, as torch's ``ExcludeDispatchKeyGuard``; graphs already
    hold the casts their trace recorded."""

    __slots__ = ("_saved",)

    def __enter__(self):
        self._saved = STATE.enabled
        STATE.enabled = dict.fromkeys(DEVICE_TYPES, False)
        STATE.key = None
        return self

    def __exit__(self, *exc):
        STATE.enabled = self._saved
        _refresh()


class restored:
    """The block runs with the autocast state ``key`` gave (a `STATE.key` saved before): a compiled
    backward recomputes its forward as the forward ran."""

    __slots__ = ("_key", "_saved")

    def __init__(self, key):
        self._key = key

    def __enter__(self):
        self._saved = STATE.enabled, STATE.dtypes
        STATE.enabled = dict.fromkeys(DEVICE_TYPES, False)
        STATE.dtypes = dict(STATE.dtypes)
        for device_type, dtype in self._key or ():
            STATE.enabled[device_type] = True
            STATE.dtypes[device_type] = dtype
        _refresh()
        return self

    def __exit__(self, *exc):
        STATE.enabled, STATE.dtypes = self._saved
        _refresh()


def _deprecated(old, new):
    warnings.warn(f"jitorch.{old} is deprecated. Please use jitorch.{new} instead.", DeprecationWarning, stacklevel=3)


def get_autocast_cpu_dtype():
    """Deprecated: ``get_autocast_dtype("cpu")``."""
    _deprecated("get_autocast_cpu_dtype()", "get_autocast_dtype('cpu')")
    return get_autocast_dtype("cpu")


def get_autocast_gpu_dtype():
    """Deprecated: ``get_autocast_dtype("cuda")``."""
    _deprecated("get_autocast_gpu_dtype()", "get_autocast_dtype('cuda')")
    return get_autocast_dtype("cuda")


def set_autocast_cpu_dtype(dtype):
    """Deprecated: ``set_autocast_dtype("cpu", dtype)``."""
    _deprecated("set_autocast_cpu_dtype(dtype)", "set_autocast_dtype('cpu', dtype)")
    set_autocast_dtype("cpu", dtype)


def set_autocast_gpu_dtype(dtype):
    """Deprecated: ``set_autocast_dtype("cuda", dtype)``."""
    _deprecated("set_autocast_gpu_dtype(dtype)", "set_autocast_dtype('cuda', dtype)")
    set_autocast_dtype("cuda", dtype)


def is_autocast_cpu_enabled():
    """Deprecated: ``is_autocast_enabled("cpu")``."""
    _deprecated("is_autocast_cpu_enabled()", "is_autocast_enabled('cpu')")
    return is_autocast_enabled("cpu")


def set_autocast_cpu_enabled(enabled):
    """Deprecated: ``set_autocast_enabled("cpu", enabled)``."""
    _deprecated("set_autocast_cpu_enabled(enabled)", "set_autocast_enabled('cpu', enabled)")
    set_autocast_enabled("cpu", enabled)
