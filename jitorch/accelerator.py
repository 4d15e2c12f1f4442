"""``jitorch.accelerator``: the device-neutral API of torch.accelerator, over jitorch's one accelerator, CUDA.

As in a CUDA build of torch, `current_accelerator` is ``device("cuda")`` even with no GPU (None with
``check_available=True`` then), and what needs a device raises a RuntimeError when none is available.
"""

from __future__ import annotations

from jitorch import cuda as _cuda
from jitorch.runtime.device import device as _device

__all__ = ["current_accelerator", "current_device_index", "device_count", "device_index", "empty_cache",
           "is_available", "max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved",
           "memory_stats", "reset_peak_memory_stats", "set_device_index", "synchronize"]


def current_accelerator(check_available=False):
    """The accelerator's device type as a device without index, ``device("cuda")``; with ``check_available``,
    None when no CUDA device can be used."""
    if check_available and not is_available():
        return None
    return _device("cuda")


def is_available():
    """Whether a CUDA device can be used."""
    return _cuda.is_available()


def device_count():
    """How many CUDA devices can be used (0 without CUDA)."""
    return _cuda.device_count()


def _require():
    if not is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")


def current_device_index():
    """The index of the current device."""
    _require()
    return _cuda.current_device()


def set_device_index(device, /):
    """Make ``device`` (an index, a string or a device of the accelerator's type) the current device; a negative
    index changes nothing."""
    _require()
    _cuda.set_device(device)


class device_index:
    """Context manager that makes device ``device`` the current one inside the block (None: no change)."""

    def __init__(self, device, /):
        self.idx = device
        self.prev_idx = None

    def __enter__(self):
        if self.idx is not None:
            self.prev_idx = current_device_index()
            set_device_index(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev_idx is not None:
            set_device_index(self.prev_idx)
        return False


def synchronize(device=None, /):
    """Wait for all work queued on ``device`` (default: the current device)."""
    _require()
    _cuda.synchronize(device)


def _memory(name, doc):
    def query(device_index=None, /):
        _require()
        return getattr(_cuda, name)(device_index)
    query.__name__ = query.__qualname__ = name
    query.__doc__ = doc
    return query


memory_allocated = _memory("memory_allocated", "Bytes of device memory held by tensors.")
max_memory_allocated = _memory("max_memory_allocated", "The peak of `memory_allocated`.")
memory_reserved = _memory("memory_reserved", "Bytes the caching allocator holds from the driver.")
max_memory_reserved = _memory("max_memory_reserved", "The peak of `memory_reserved`.")
memory_stats = _memory("memory_stats", "The caching allocator's counters.")
reset_peak_memory_stats = _memory("reset_peak_memory_stats", "Restart the peaks from the current values.")


def empty_cache():
    """Give cached, unused device memory back to the driver."""
    _require()
    _cuda.empty_cache()
