"""Devices: ``cpu``, ``cuda[:N]`` and ``meta`` (shapes and dtypes with no data)."""

from __future__ import annotations

import builtins
import threading

_TYPES = ("cpu", "cuda", "meta")

# The backends of the device types whose memory is not the host's, by device type ("cuda": jitorch.backends.cuda,
# which registers itself when imported, as ``import jitorch`` does). Each has ``empty_storage(n, dtype, device)``
# for `Storage.empty`; ``execute(op, args, spec, strides)`` and ``laid_out(t, strides)`` for the op registry's
# eager ops (see ``registry._execute_on_device``); ``write(dst, src)`` and ``copy_values(t)`` for Tensor's
# writes into and copies of its elements.
DEVICE_BACKENDS: dict = {}


class device:
    """A device, parsed and compared like ``torch.device``.

    ``device("cuda:1")``, ``device("cuda", 1)`` and ``device(other_device)`` all work.
    """

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device(): index must not be given with a device object")
            self.type, self.index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        if not isinstance(type, str):
            raise TypeError(f"device() expected a string or int, got {builtins.type(type).__name__}")
        text = type.strip()
        kind, sep, idx = text.partition(":")
        if kind not in _TYPES:
            raise RuntimeError(
                f"Expected one of {', '.join(_TYPES)} device type at start of device string: {type}"
            )
        if sep:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index was passed explicitly: {type}")
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}'")
            index = int(idx)
        if index is not None:
            if not isinstance(index, int) or index < 0:
                raise RuntimeError(f"Device index must not be negative, got {index}")
            if kind == "cpu" and index != 0:
                raise RuntimeError(f"CPU device index must be -1 or zero, got {index}")
        self.type, self.index = kind, index

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except RuntimeError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __reduce__(self):
        return (device, (self.type, self.index))


CPU = device("cpu")
META = device("meta")

_cache: dict = {}
_default = [CPU]  # where factories given no device= put their tensors (set_default_device)


def get_default_device() -> device:
    """The device factories (``zeros``, ``tensor``, ``arange``, ...) use when given no ``device=``."""
    return _default[0]


def set_default_device(d) -> None:
    """Make ``d`` the device of factories given no ``device=`` (None: back to cpu). Tensors made from other
    tensors (``zeros_like``, ``x.new_zeros``, ops) stay on their inputs' device, as in torch."""
    _default[0] = CPU if d is None else to_device(d)


class _CurrentCuda(threading.local):
    index = 0


# Per thread, as the CUDA runtime's current device is: the index ``device="cuda"`` means.
_current_cuda = _CurrentCuda()


def current_cuda_index() -> int:
    """The current CUDA device's index (`jitorch.cuda.set_device`): where ``device="cuda"`` places tensors."""
    return _current_cuda.index


def set_current_cuda_index(index: int) -> None:
    """Make CUDA device ``index`` the current one in this thread (the caller checked that it exists)."""
    _current_cuda.index = index


def to_device(d) -> device:
    """Normalise ``None`` (the default device: cpu unless `set_default_device` said otherwise), strings, ints
    and devices to the one canonical device object of each kind, so hot paths may compare devices with
    ``is``."""
    if d is None:
        return _default[0]
    key = (d.type, d.index) if d.__class__ is device else d
    found = _cache.get(key)
    if found is None:
        found = device(d)
        found = _cache.setdefault((found.type, found.index), found)
        _cache[key] = found
    return found


_cache[("cpu", None)] = CPU
_cache[("meta", None)] = META
