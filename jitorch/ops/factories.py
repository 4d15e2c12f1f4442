"""Factories that are compositions of the op library, not registry ops of their own: ``empty_strided``,
``scalar_tensor``, ``asarray``, the deprecated ``range`` and ``Tensor.new_empty_strided``."""

from __future__ import annotations

import math
import warnings

import numpy as np

from . import registry
from .creation import from_numpy, pinned, tensor
from ..runtime import dtypes as _dt
from ..runtime.device import to_device
from ..runtime.storage import Storage

__all__ = ["empty", "empty_strided", "scalar_tensor", "asarray", "range"]

_F = registry.FUNCTIONS


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """An uninitialised tensor of ``size`` with the given element ``stride``, over a fresh storage just large
    enough for it (its own memory: no view of another tensor)."""
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(f"dimensionality of sizes ({len(size)}) must match dimensionality of strides "
                           f"({len(stride)})")
    if any(n < 0 for n in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: "
                           f"{list(stride)}")
    dtype = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    extent = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    t = pinned(registry.Tensor._make(Storage.empty(extent, dtype, to_device(device)), size, stride, 0), pin_memory)
    return t._require_grad(True, "factory") if requires_grad else t


def empty(*size, pin_memory=False, **options):
    """A tensor of uninitialised values of the given size (the registry's ``empty``), in page-locked host
    memory when ``pin_memory`` (for asynchronous copies to a CUDA device)."""
    if not pin_memory:
        return _F["empty"](*size, **options)
    requires_grad = options.pop("requires_grad", False)
    return pinned(_F["empty"](*size, **options), True)._require_grad(requires_grad, "factory")


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A 0-d tensor holding the number ``s``, of the default float dtype unless ``dtype`` is given."""
    dtype = _dt.get_default_dtype() if dtype is None else dtype
    return _F["full"]((), s, dtype=dtype, device=device, requires_grad=requires_grad)


def _alias_error(have, want):
    return ValueError(f"can't alias tensor with dtype '{registry.scalar_name(have)}' into dtype "
                      f"'{registry.scalar_name(want)}'.")


def _shared(obj):
    """``obj`` as a tensor sharing its memory (a tensor, or a NumPy array from_numpy accepts), or None."""
    if isinstance(obj, registry.Tensor):
        return obj
    if isinstance(obj, np.ndarray) and obj.dtype.isnative and obj.dtype != object and \
            all(s >= 0 and s % obj.itemsize == 0 for s in obj.strides):
        try:
            _dt.from_numpy_dtype(obj.dtype)
        except TypeError:
            return None
        return from_numpy(obj)
    return None


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """``obj`` as a tensor, as torch's: shares the memory of a tensor or NumPy array when dtype and device
    allow and ``copy`` is not True (``copy=False`` makes a needed copy a ValueError); copies Python data.
    ``requires_grad`` applies to the result, which is ``obj`` itself when it is a tensor kept as is."""
    dtype = None if dtype is None else _dt.to_dtype(dtype)
    device = None if device is None else to_device(device)
    shared = _shared(obj)
    if shared is not None:
        want_dtype, want_device = dtype or shared.dtype, device or shared.device
        if copy is not True and want_dtype is shared.dtype and want_device == shared.device:
            out = shared
        elif copy is False:
            raise _alias_error(shared.dtype, want_dtype) if want_dtype is not shared.dtype else \
                ValueError(f"can't alias tensor from device '{shared.device}' to '{want_device}'.")
        else:
            out = shared.to(want_dtype, want_device, copy=True)
    elif copy is False:
        raise ValueError(f"can't alias {type(obj).__name__} into a tensor: it must be copied")
    else:
        out = tensor(obj, dtype=dtype, device=device)
    return out._require_grad(True, "factory") if requires_grad else out


_RANGE_DEPRECATION = ("torch.range is deprecated and will be removed in a future release because its behavior is "
                      "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values "
                      "in [start, end).")


def range(start, end, step=1, *, dtype=None, device=None, requires_grad=False):
    """Deprecated (warns as torch): ``start, start + step, ...`` up to and including ``end``, of the default
    float dtype unless ``dtype`` is given. Use ``arange``, which excludes ``end``."""
    warnings.warn(_RANGE_DEPRECATION, UserWarning, stacklevel=2)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    dtype = _dt.get_default_dtype() if dtype is None else _dt.to_dtype(dtype)
    n = int(math.floor((end - start) / step)) + 1
    # each value start + i * step computed in double (integers in int64), as torch's CPU kernel
    compute = _dt.float64 if dtype.is_floating_point else _dt.int64
    values = (_F["arange"](n, dtype=compute, device=device) * step + start).to(dtype)
    return values._require_grad(True, "factory") if requires_grad else values


def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """``empty_strided`` with ``self``'s dtype and device unless given."""
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)
