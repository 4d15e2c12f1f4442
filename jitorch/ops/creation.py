"""Creation ops: tensors from Python data, from NumPy, and filled or ranged tensors."""

from __future__ import annotations

import builtins
import math

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.device import to_device
from . import registry
from .registry import TensorSpec, defop

_OPTIONS = "ScalarType? dtype=None, Device? device=None, bool requires_grad=False"


def _infer_dtype(arr, data):
    if arr.dtype == np.bool_:
        return _dt.bool
    if arr.dtype.kind in "iu":
        if isinstance(data, np.ndarray):
            return _dt.from_numpy_dtype(arr.dtype)
        return _dt.int64
    if arr.dtype.kind == "f":
        if isinstance(data, np.ndarray) or isinstance(data, np.generic):
            return _dt.from_numpy_dtype(arr.dtype)
        return _dt.get_default_dtype()
    if arr.dtype.kind == "O":
        raise TypeError(f"Could not infer dtype of {type(data).__name__}: nested sequences must be rectangular "
                        "and hold only numbers")
    return _dt.from_numpy_dtype(arr.dtype)


def _to_numpy(data):
    Tensor = registry.Tensor
    if isinstance(data, Tensor):
        return data._array(), data.dtype
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat_first(data)):
        data = _tensors_to_lists(data)
    if isinstance(data, (str, bytes, dict, set)) or data is None:
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    try:
        arr = np.asarray(data)
    except ValueError as e:
        raise ValueError(f"expected sequence of equal-length sequences ({e})") from None
    if arr.dtype.kind == "c":
        raise TypeError("complex tensors are not supported by jitorch")
    return arr, _infer_dtype(arr, data)


def _flat_first(data):
    while isinstance(data, (list, tuple)) and data:
        yield from data
        return


def _tensors_to_lists(data):
    Tensor = registry.Tensor
    if isinstance(data, Tensor):
        return data.tolist()
    if isinstance(data, (list, tuple)):
        return [_tensors_to_lists(x) for x in data]
    return data


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of ``data`` (nested lists, numbers, NumPy arrays, tensors)."""
    arr, inferred = _to_numpy(data)
    dtype = inferred if dtype is None else _dt.to_dtype(dtype)
    device = to_device(device)
    arr = np.array(arr, dtype=dtype.np, copy=True, order="C")
    t = registry.Tensor._from_array(arr, dtype)
    if device.type != "cpu":
        t = t.to(device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def as_tensor(data, dtype=None, device=None):
    """Like ``tensor`` but shares memory with a tensor or NumPy array when it can."""
    Tensor = registry.Tensor
    if isinstance(data, Tensor):
        return data.to(dtype=dtype if dtype is not None else data.dtype, device=device or data.device)
    if isinstance(data, np.ndarray) and (dtype is None or _dt.to_dtype(dtype).np == data.dtype) and \
            to_device(device).type == "cpu":
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(ndarray):
    """A tensor sharing memory with ``ndarray`` (writes show in both)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    dtype = _dt.from_numpy_dtype(ndarray.dtype)
    if any(s < 0 for s in ndarray.strides):
        raise ValueError("At least one stride in the given numpy array is negative, and tensors with negative "
                         "strides are not currently supported. (You can probably work around this by making a "
                         "copy of your array  with array.copy().) ")
    if any(s % ndarray.itemsize for s in ndarray.strides):
        raise ValueError("given numpy array strides not a multiple of the element byte size. "
                         "Copy the numpy array to reallocate the memory.")
    return registry.Tensor._from_array(ndarray, dtype)


def _size_meta(size, dtype, device, default=None):
    for n in size:
        if n < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {list(size)}")
    return TensorSpec(tuple(size), dtype or default or _dt.get_default_dtype(), to_device(device))


def _fill_value_dtype(value):
    return _dt.scalar_dtype(value)


defop(f"zeros(int... size, *, {_OPTIONS}) -> Tensor",
      meta=lambda size, dtype, device, rg: _size_meta(size, dtype, device),
      cpu=lambda spec, *a: np.zeros(spec.shape, spec.dtype.np), kind="creation", variants=("function",),
      doc="A tensor of zeros of the given size.")
defop(f"ones(int... size, *, {_OPTIONS}) -> Tensor",
      meta=lambda size, dtype, device, rg: _size_meta(size, dtype, device),
      cpu=lambda spec, *a: np.ones(spec.shape, spec.dtype.np), kind="creation", variants=("function",),
      doc="A tensor of ones of the given size.")
defop(f"empty(int... size, *, {_OPTIONS}) -> Tensor",
      meta=lambda size, dtype, device, rg: _size_meta(size, dtype, device),
      cpu=lambda spec, *a: np.empty(spec.shape, spec.dtype.np), kind="creation", variants=("function",),
      doc="An uninitialised tensor of the given size.")
defop(f"full(int[] size, Scalar fill_value, *, {_OPTIONS}) -> Tensor",
      meta=lambda size, v, dtype, device, rg: _size_meta(size, dtype, device, _fill_value_dtype(v)),
      cpu=lambda spec, size, v, *a: np.full(spec.shape, v, spec.dtype.np), kind="creation",
      variants=("function",), doc="A tensor of the given size filled with ``fill_value``.")


def _like_meta(default_fill=None):
    def meta(x, *rest):
        dtype, device = rest[-3], rest[-2]
        return TensorSpec(x.shape, dtype or x.dtype, to_device(device) if device is not None else x.device)
    return meta


_LIKE = "ScalarType? dtype=None, Device? device=None, bool requires_grad=False"
defop(f"zeros_like(Tensor input, *, {_LIKE}) -> Tensor", meta=_like_meta(),
      cpu=lambda spec, x, *a: np.zeros(spec.shape, spec.dtype.np), kind="creation", variants=("function",),
      doc="Zeros with the shape (and by default dtype and device) of ``input``.")
defop(f"ones_like(Tensor input, *, {_LIKE}) -> Tensor", meta=_like_meta(),
      cpu=lambda spec, x, *a: np.ones(spec.shape, spec.dtype.np), kind="creation", variants=("function",),
      doc="Ones with the shape (and by default dtype and device) of ``input``.")
defop(f"empty_like(Tensor input, *, {_LIKE}) -> Tensor", meta=_like_meta(),
      cpu=lambda spec, x, *a: np.empty(spec.shape, spec.dtype.np), kind="creation", variants=("function",),
      doc="An uninitialised tensor with the shape of ``input``.")
defop(f"full_like(Tensor input, Scalar fill_value, *, {_LIKE}) -> Tensor", meta=_like_meta(),
      cpu=lambda spec, x, v, *a: np.full(spec.shape, v, spec.dtype.np), kind="creation", variants=("function",),
      doc="A tensor with the shape of ``input`` filled with ``fill_value``.")
