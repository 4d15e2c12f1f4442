"""Factories on CUDA: constant ones (zeros, ones, empty, full, sized, ``_like`` and ``new_``) made in device
memory and filled there, never on the host; arange, eye, linspace and logspace computed on the device by the
factory kernels (codegen/nvptx/factories.py) from a few parameters the host works out as the CPU does.
"""

from __future__ import annotations

import math

import numpy as np

from ...codegen.nvptx.factories import PARAMETERS, factory_kernel, step_types
from ...ops import registry
from ...ops.creation import arange_plan, full_value
from ...runtime import cuda_backend, dtypes
from ...runtime.cuda_memory import empty_storage, non_blocking
from ...runtime.storage import Storage
from ...runtime.strided import contiguous_strides, span
from ...tensor import Tensor
from .copies import address, empty, upload
from .kernels import cached

_FORMULAS: dict = {}    # (factory op, dtype) -> its FactoryKernel (sizes and bounds are launch parameters)
# zeros, ones, empty and full, sized, ``_like`` and ``new_``: made in device memory, never on the host
FACTORIES = frozenset(f"{prefix}{name}{suffix}" for name in ("zeros", "ones", "empty", "full")
                      for prefix, suffix in (("", ""), ("", "_like"), ("new_", "")))
_FILL = {"zeros": 0, "ones": 1, "empty": None}


def create(op, args, spec):
    """A constant factory's result: device memory from the allocator, then filled on the device; on the CPU
    when asked (``zeros_like(cuda_tensor, device="cpu")``: only the input's layout is used)."""
    names = [a.name for a in op.schema.args]
    source = args[0] if isinstance(args[0], Tensor) else None  # a _like or new_ op's tensor: its layout
    if spec.device.type != "cuda":
        stand_in = Tensor._make(Storage(np.empty(span(source._shape, source._stride), source.dtype.np), source.dtype),
                                source._shape, source._stride, 0)
        return registry.execute(op, [stand_in] + list(args[1:]), spec)
    base = op.name.removeprefix("new_").removesuffix("_like")
    value = args[names.index("fill_value")] if base == "full" else _FILL[base]
    # (a _like op's input's layout or its memory format's, `empty`'s memory format: the op's layout rule)
    strides = registry.result_strides(op, spec, args) or contiguous_strides(spec.shape)
    t = Tensor._make(empty_storage(int(np.prod(spec.shape, dtype=np.int64)), spec.dtype, spec.device),
                     tuple(spec.shape), tuple(strides), 0)
    if value is not None:
        fill(t, full_value(spec, value.item() if isinstance(value, Tensor) else value))
    return t


def fill(t, element):
    """Write ``element`` (a NumPy scalar of ``t``'s dtype) over all of compact CUDA tensor ``t``'s storage:
    one element goes up, then device copies double the filled prefix (log2(n) copies, all on the stream)."""
    backend = cuda_backend.current()
    n, item, start = t._storage.size, t.dtype.itemsize, t._storage.data_ptr()
    if not n:
        return
    backend.upload(start, np.full(1, element, t.dtype.np), True)
    done = 1
    while done < n:
        count = min(done, n - done)
        backend.device_copy(start + done * item, start, count * item)
        done += count


def _formula_factory(op, args, spec):
    """arange, eye, linspace and logspace computed on the device (codegen/nvptx/factories.py) from a few
    parameters the host works out as the CPU does; NotImplemented for integer bounds beyond int64."""
    base = op.name.split(".")[0]
    named = dict(zip((a.name for a in op.schema.args), args))
    count = int(np.prod(spec.shape, dtype=np.int64))
    words = _factory_parameters(base, named, spec, count)
    if words is None:
        return NotImplemented
    out = empty(spec.shape, spec.dtype, spec.device)
    if count:
        kernel = cached(_FORMULAS, (base, spec.dtype), lambda: factory_kernel(base, spec.dtype))
        with non_blocking():
            parameters = upload(np.array(words + [0] * (PARAMETERS - len(words)), np.int64), dtypes.int64, spec.device)
        cuda_backend.current().launch(kernel.sized(count), [address(parameters), address(out)], out.device.index)
    return out


def _factory_parameters(base, named, spec, count):
    """The parameter words of ``base``'s factory kernel (see factories.py), floats as float64 bits."""
    dtype = spec.dtype

    def bits(v):
        return int(np.float64(v).view(np.int64))
    if base == "eye":
        return [count, spec.shape[1]]
    if base == "arange":
        start, end = (0, named["start"]) if named["end"] is None else (named["start"], named["end"])
        _, first, step = arange_plan(start, end, named["step"], dtype)
        if dtype.is_floating_point:
            return [count, 0, bits(first), bits(step)]
        return [count, 0, first, step] if all(-2 ** 63 <= v < 2 ** 63 for v in (first, step)) else None
    step_t = step_types(base, dtype)[0]
    t = step_t.np.type
    start, end, steps = named["start"], named["end"], named["steps"]
    if not dtype.is_floating_point:  # the bounds cast to the dtype first, as the CPU does
        start, end = (int(np.array(math.trunc(v)).astype(dtype.np)) for v in (start, end))
    first, last = t(start), t(end)
    with np.errstate(all="ignore"):
        step = (last - first) / t(steps - 1) if steps > 1 else t(-0.0)  # one point: first + -0.0 is first
    words = [count, steps // 2 if steps > 1 else 1, bits(first), bits(last), bits(step)]
    if base == "logspace":
        words.append(bits(np.float64(named["base"]) if step_types(base, dtype)[1] is dtypes.float64 else
                          np.float32(named["base"])))
    return words


IMPLEMENTATIONS = dict.fromkeys(("arange", "eye", "eye.m", "linspace", "logspace"), _formula_factory)
