"""Running one smoke call on torch and on jitorch, and comparing what came back."""

from __future__ import annotations

import dataclasses
import math
import numbers

import ml_dtypes
import numpy as np
import torch


class SkipSample(Exception):
    """A sample that does not apply (complex values, a layout jitorch does not have): not run."""


@dataclasses.dataclass
class Tensorish:
    """A tensor result, as compared: dtype name, shape and values (NumPy)."""

    dtype: str
    shape: tuple
    values: np.ndarray


def dtype_name(dtype):
    """``float32`` for torch.float32 or jitorch.float32."""
    return str(dtype).rsplit(".", 1)[-1]


def torch_to_numpy(t):
    """A NumPy copy of a torch tensor; bfloat16 as ml_dtypes.bfloat16. Complex and sparse are skipped."""
    if t.is_complex() or t.layout != torch.strided or t.is_quantized:
        raise SkipSample("complex, sparse or quantized sample")
    if t.device.type == "meta":  # (jitorch's meta tensors are its own: a sample of torch's holds no values)
        raise SkipSample("meta tensor")
    t = t.detach().resolve_neg()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().copy().view(ml_dtypes.bfloat16)
    if dtype_name(t.dtype) not in np.sctypeDict and t.dtype not in (torch.bool, torch.float16):
        raise SkipSample(f"dtype {t.dtype}")
    return t.numpy().copy()


class Lib:
    """torch or jitorch, with the conversion of torch sample arguments into its own objects."""

    def __init__(self, root):
        self.root = root
        self.is_torch = root is torch

    def tensor(self, array, requires_grad=False):
        """A fresh tensor of this library holding ``array`` (copied)."""
        array = np.array(array, copy=True)
        if self.is_torch:
            t = (torch.from_numpy(array.view(np.int16)).view(torch.bfloat16) if array.dtype == ml_dtypes.bfloat16
                 else torch.from_numpy(array))
        else:
            t = self.root.from_numpy(array)
        return t.requires_grad_() if requires_grad else t

    def convert(self, obj):
        """A torch sample argument as this library's object: tensors copied through NumPy (so no two calls
        share memory), dtypes, devices, layouts and memory formats by name, containers element by element."""
        if isinstance(obj, torch.Tensor):
            return self.tensor(torch_to_numpy(obj), obj.requires_grad and obj.is_leaf)
        if isinstance(obj, torch.Size):
            return self.root.Size(obj) if not self.is_torch else obj
        if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)):
            name = dtype_name(obj)
            if name.startswith("complex") or name.startswith("sparse"):
                raise SkipSample(f"{name} sample")
            return getattr(self.root, name)
        if isinstance(obj, torch.device):
            return self.root.device(str(obj))
        if isinstance(obj, torch.Generator):
            raise SkipSample("explicit generator")
        if isinstance(obj, complex):
            raise SkipSample("complex scalar")
        if isinstance(obj, torch.nn.Module) and not self.is_torch:
            return self._module(obj)
        if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
            return type(obj)(self.convert(o) for o in obj)
        if isinstance(obj, dict):
            return {k: self.convert(v) for k, v in obj.items()}
        return obj


    def _module(self, module):
        """A torch module without parameters or buffers given as an argument (``distance_function=
        nn.PairwiseDistance()``) as this library's module of that name, with its plain settings."""
        cls = getattr(self.root.nn, type(module).__name__, None)
        if cls is None or any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
            raise SkipSample(f"a torch module argument ({type(module).__name__})")
        own = cls()
        for name, value in vars(module).items():
            if not name.startswith("_") and isinstance(value, (bool, int, float, str, type(None))):
                setattr(own, name, value)
        return own


def _is_tensor(obj):
    return isinstance(obj, torch.Tensor) or type(obj).__name__ in ("Tensor", "Parameter")


def _tensor_values(t):
    """A NumPy copy of a torch or jitorch tensor's values (torch's bfloat16 widened to float32)."""
    t = t.detach()
    if isinstance(t, torch.Tensor):
        t = t.resolve_neg()
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy().copy()
    return np.array(t.numpy(), copy=True)


def plain(obj):
    """A result as plain, comparable data: tensors and arrays as Tensorish, sequences as lists, dtypes and
    devices by name, strings with the library's name replaced by ``torch``."""
    if _is_tensor(obj):
        return Tensorish(dtype_name(obj.dtype), tuple(obj.shape), _tensor_values(obj))
    if isinstance(obj, np.ndarray):
        return Tensorish(f"numpy.{obj.dtype}", obj.shape, obj.copy())
    if isinstance(obj, (str, bytes)):
        return obj.replace("jitorch", "torch") if isinstance(obj, str) else obj
    if isinstance(obj, (bool, numbers.Number)) or obj is None:
        return obj
    if type(obj).__name__ in ("dtype", "device", "layout", "memory_format"):
        return f"{type(obj).__name__}:{str(obj).replace('jitorch', 'torch')}"
    if isinstance(obj, (list, tuple)) or type(obj).__name__ in ("Size",) or hasattr(obj, "_fields"):
        return [plain(o) for o in obj]
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    return f"object:{type(obj).__name__}"


def _tolerance(dtype):
    if dtype in ("float16", "bfloat16"):
        return 1e-2, 1e-2
    return 1e-4, 1e-5


def _values_differ(a, b, mode, dtype):
    """Why two arrays of the same shape and of ``dtype`` (a name) differ, or None."""
    x = np.asarray(a, dtype=np.float64) if a.dtype.kind != "b" else a
    y = np.asarray(b, dtype=np.float64) if b.dtype.kind != "b" else b
    if mode == "abs":
        x, y = np.abs(x), np.abs(y)
    if x.dtype.kind == "b" or y.dtype.kind == "b":
        return None if np.array_equal(x, y) else "values differ"
    rtol, atol = _tolerance(dtype)
    if np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
        return None
    finite = np.isfinite(x) & np.isfinite(y)
    if not np.array_equal(np.isnan(x), np.isnan(y)) or not np.array_equal(x[~finite & ~np.isnan(x)],
                                                                          y[~finite & ~np.isnan(y)]):
        return "NaN/inf positions differ"
    err = float(np.max(np.abs(x - y)[finite])) if finite.any() else math.nan
    return f"values differ (max abs err {err:.3g})"


def difference(expected, got, mode="values"):
    """Why ``got`` (plain jitorch result) differs from ``expected`` (plain torch result), or None.
    ``mode``: "values" compares everything, "meta" only the types, shapes and dtypes (random results),
    "abs" compares magnitudes (results unique up to sign), "ties" compares a (values, indices) result's
    values and only the type of its indices (which torch leaves unspecified among equal values), "ok" only
    that both calls returned."""
    if mode == "ok":
        return None
    if mode == "ties" and isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got) == 2:
        return difference(expected[0], got[0]) or difference(expected[1], got[1], "meta")
    if isinstance(expected, Tensorish):
        if not isinstance(got, Tensorish):
            return f"returns {type(got).__name__}, not a Tensor"
        if expected.shape != got.shape:
            return f"shape {list(got.shape)}, torch {list(expected.shape)}"
        if expected.dtype != got.dtype:
            return f"dtype {got.dtype}, torch {expected.dtype}"
        return None if mode == "meta" else _values_differ(expected.values, got.values, mode, expected.dtype)
    if isinstance(expected, list):
        if not isinstance(got, list):
            return f"returns {type(got).__name__}, torch a sequence"
        if len(expected) != len(got):
            return f"{len(got)} results, torch {len(expected)}"
        for e, g in zip(expected, got):
            why = difference(e, g, mode)
            if why:
                return why
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(expected) != set(got):
            return "different keys"
        return next((w for w in (difference(expected[k], got[k], mode) for k in expected) if w), None)
    if isinstance(expected, float) and isinstance(got, numbers.Number) and not isinstance(got, bool):
        same = math.isclose(expected, got, rel_tol=1e-4, abs_tol=1e-6) or (math.isnan(expected) and math.isnan(got))
        return None if mode == "meta" or same else f"value {got!r}, torch {expected!r}"
    if isinstance(got, Tensorish):
        return f"returns a Tensor, torch {type(expected).__name__}"
    if type(expected) is not type(got) and not (isinstance(expected, numbers.Number)
                                                and isinstance(got, numbers.Number)):
        return f"returns {type(got).__name__}, torch {type(expected).__name__}"
    if mode == "meta":
        return None
    return None if expected == got else f"{_short(got)}, torch {_short(expected)}"


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
