"""The legacy tensor types: ``jitorch.FloatTensor``, ``jitorch.cuda.LongTensor``, ... as torch has them.

Each is a class of its own (not a subclass of `Tensor`: ``issubclass(FloatTensor, Tensor)`` is False in torch
too) that stands for a dtype on a device type. ``isinstance(x, FloatTensor)`` asks whether ``x`` is a float32
tensor on the CPU (a `Parameter` too), and calling the type makes a tensor the legacy way: from sizes
(uninitialised), from data, or as an alias of a tensor of that dtype.
"""

from __future__ import annotations

import jitorch
from jitorch.runtime import dtypes as _dt
from jitorch.runtime.device import to_device

# Legacy type name -> dtype, in torch's order.
NAMES = {
    "DoubleTensor": _dt.float64, "FloatTensor": _dt.float32, "BFloat16Tensor": _dt.bfloat16,
    "HalfTensor": _dt.float16, "ByteTensor": _dt.uint8, "CharTensor": _dt.int8, "ShortTensor": _dt.int16,
    "IntTensor": _dt.int32, "LongTensor": _dt.int64, "BoolTensor": _dt.bool,
}


class tensortype(type):
    """The metaclass of the legacy types: instance checks by dtype and device type, construction by `new`."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, jitorch.Tensor) and obj.dtype is cls.dtype and obj.is_cuda == cls.is_cuda

    def __call__(cls, *args, device=None, size=None):
        """A tensor made as torch's legacy constructor makes it (see `new`)."""
        return new(cls.dtype, "cuda" if cls.is_cuda else "cpu", args if size is None else tuple(size), device)

    def __repr__(cls):
        return f"<class '{cls.__module__}.{cls.__name__}'>"


def _is_size(args):
    return all(isinstance(a, int) and not isinstance(a, bool) for a in args)


def new(dtype, device_type, args, device=None):
    """A ``dtype`` tensor on a ``device_type`` device, from ``args`` as torch's legacy constructors take them:
    nothing (an empty tensor), sizes or a `Size` (uninitialised), a tensor of ``dtype`` (an alias of it), or a
    sequence of data."""
    where = to_device(device_type if device is None else device)
    if where.type != device_type:
        raise RuntimeError(f"legacy constructor expects device type: {device_type} but device type: {where.type} "
                           "was passed")
    if len(args) == 1 and isinstance(args[0], jitorch.Size):
        args = tuple(args[0])
    if _is_size(args):
        return jitorch.empty(args if args else (0,), dtype=dtype, device=where)
    if len(args) != 1:
        raise TypeError(f"new(): expected sizes (ints), a tensor or a sequence of data, got "
                        f"({', '.join(type(a).__name__ for a in args)})")
    return _from_one(args[0], dtype, where)


def _from_one(data, dtype, where):
    if isinstance(data, jitorch.Tensor):
        if data.dtype is not dtype or data.device.type != where.type:
            raise TypeError(f"expected a {_dt.CPP_NAMES[dtype.name]} tensor on {where.type} (got a "
                            f"{_dt.CPP_NAMES[data.dtype.name]} tensor on {data.device.type})")
        return data.view_as(data)
    if isinstance(data, str) or not hasattr(data, "__len__"):
        raise TypeError(f"new(): data must be a sequence (got {_type_name(data)})")
    return jitorch.tensor(data, dtype=dtype, device=where)


def _type_name(obj):
    kind = type(obj)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def types(module, is_cuda):
    """{name: legacy type} for the CPU's (``is_cuda`` False) or CUDA's types, their ``__module__`` ``module``."""
    return {name: tensortype(name, (), {"dtype": dtype, "is_cuda": is_cuda, "is_sparse": False,
                                         "__module__": module, "__doc__": _doc(dtype, is_cuda)})
            for name, dtype in NAMES.items()}


def _doc(dtype, is_cuda):
    return (f"The legacy type of {dtype} tensors on {'CUDA devices' if is_cuda else 'the CPU'}: an instance check, "
            "and a constructor from sizes, data or a tensor.")
