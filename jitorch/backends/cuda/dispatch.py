"""Eager ops on CUDA tensors: where each runs.

The registry sends an op here (`execute`, through the backend registered in ``runtime.device.DEVICE_BACKENDS``)
when its result or an input lives on a CUDA device. It runs, in order of preference:

1. **the op's CUDA implementation**, its "cuda" piece in the registry (a `CudaKernel`), where it covers the
   arguments: transfers (``_to_copy`` across devices, ``copy_`` from or to the host, ``clone``: host-device
   copies on the current stream, or device copies, copies.py), constant factories (zeros, full, ..., their
   ``_like`` and ``new_`` forms, filled on the device) and formula factories (factories.py), the tiled matmul
   family (products.py), indexing, scatter_reduce and the data-dependent selections (indexing.py), scans,
   arg-reductions and sorts (lines.py), joins, copies and reductions made of other ops (composites.py);
2. **a kernel generated from the op's one-op graph**, else **on the host** (generated.py).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ...ops.registry import attach, spec_device, tensors_of
from ...ops.views import format_strides, preserve_format
from ...runtime import cuda_memory
from ...runtime.casts import copy_into
from ...runtime.cuda_memory import asynchronous, canonical, download, empty_storage, host_values, non_blocking
from ...runtime.storage import Storage
from ...runtime.strided import contiguous_strides, is_contiguous, like_strides
from ...tensor import Tensor
from . import composites, factories, indexing, lines, products
from .copies import copy_values, empty, host_array, upload, write
from .generated import run



class CudaKernel(NamedTuple):
    """An op's CUDA implementation, its "cuda" piece in the registry: ``run(op, args, spec)`` gives the result,
    or NotImplemented where it does not cover the arguments (the op then runs as a kernel generated for it, or
    on the host). ``placed``: it receives 0-d CPU tensors moved to the op's CUDA device, as torch lets them
    join CUDA operands; transfers and factories are run as called."""

    run: Callable
    placed: bool = True


def _to_copy(op, args, spec):
    """``x.to(dtype, device)`` with a CUDA tensor on either side, laid out as torch's preserve_format."""
    x, dtype, device = args
    target = spec.device
    if x.device.type == "cuda" and target.type == "cuda" and canonical(target) == x.device:
        return _cast(x, spec)
    strides = _preserved_strides(x)
    n = int(np.prod(x._shape, dtype=np.int64))
    if x.device.type == "cpu" and x.dtype is spec.dtype and is_contiguous(x._shape, x._stride) and n:
        # straight from the tensor's memory, with no host copy first: from page-locked memory (pin_memory) a
        # non_blocking copy is then queued on the stream and returns at once, as in torch
        out = Tensor._make(empty_storage(n, spec.dtype, target), x._shape, strides, 0)
        cuda_memory.upload(out._storage.data_ptr(), x._storage.data[x._offset:x._offset + n], spec.dtype)
        return out
    flat = np.empty(n, spec.dtype.np)
    item = flat.itemsize
    copy_into(np.lib.stride_tricks.as_strided(flat, x._shape, tuple(s * item for s in strides)), host_array(x))
    if target.type != "cuda":
        return Tensor._make(Storage(flat, spec.dtype), x._shape, strides, 0)
    out = Tensor._make(empty_storage(n, spec.dtype, target), x._shape, strides, 0)
    if n:
        cuda_memory.upload(out._storage.data_ptr(), flat, spec.dtype)
    return out


def _copy(op, args, spec):
    """The value ``self.copy_(src)`` writes: ``src`` broadcast and cast, on ``self``'s device."""
    self, src, flag = args
    with non_blocking(flag or asynchronous()):
        if self.device.type == "cpu":
            values = host_values(np.broadcast_to(download(src), spec.shape), spec.dtype)
            return Tensor._from_array(values, spec.dtype)
        if src.device.type != "cuda" or src.device != self.device:
            return upload(np.broadcast_to(host_array(src), spec.shape), spec.dtype, self.device)
    return _cast(src.expand(spec.shape), spec)


def _clone(op, args, spec):
    """``x.clone(memory_format=)``: preserve_format by default, else laid out in the format asked (compact for
    contiguous_format)."""
    x, memory_format = args
    if memory_format is None or memory_format is preserve_format:
        return _cast(x, spec)
    return copy_values(x, format_strides(memory_format, x._shape))


def _cast(x, spec):
    """A copy of CUDA tensor ``x`` in ``spec``'s dtype, laid out as torch's preserve_format (dense strides in
    ``x``'s order), by `write`."""
    out = Tensor._make(empty_storage(int(np.prod(x._shape, dtype=np.int64)), spec.dtype, x.device), x._shape,
                       _preserved_strides(x), 0)
    write(out, x)
    return out


def _preserved_strides(t):
    return like_strides(t._shape, t._stride) or contiguous_strides(t._shape)


for _name, _run in (("_to_copy", _to_copy), ("copy", _copy), ("clone", _clone)):
    attach("cuda", _name, CudaKernel(_run, placed=False))
attach("cuda", " ".join(factories.FACTORIES), CudaKernel(factories.create, placed=False))
for _table in (factories.IMPLEMENTATIONS, products.IMPLEMENTATIONS, indexing.IMPLEMENTATIONS, lines.IMPLEMENTATIONS,
               composites.IMPLEMENTATIONS):
    for _name, _run in _table.items():
        attach("cuda", _name, CudaKernel(_run))


def execute(op, args, spec, strides=None):
    """Run ``op`` eagerly where its CUDA tensors live (see the module docstring for how); a kernel generated
    for it writes its result with ``strides`` (dense; None: contiguous), the layout the caller wants (see
    `laid_out`)."""
    kernel = op.pieces.get("cuda")
    if kernel is not None and not kernel.placed:
        return kernel.run(op, args, spec)
    device = _device_of(op, args, spec)
    args = _lift_cpu_scalars(op, args, device)
    if kernel is not None:
        result = kernel.run(op, args, spec)
        if result is not NotImplemented:
            return result
    return run(op, args, spec, device, strides)


def laid_out(t, strides):
    """CUDA tensor ``t`` addressing its elements with ``strides`` (dense; None: contiguous) from its storage's
    start: ``t`` itself, or, where only the strides of its size-1 dims differ (they address nothing) or it
    is empty, ``t`` with those, else its values copied into new memory laid out so. A tensor on the host is
    returned as it is."""
    if not t._storage.on_device:
        return t
    strides = contiguous_strides(t._shape) if strides is None else tuple(strides)
    if t._stride == strides and not t._offset:
        return t
    if not t._offset and (not t.numel() or all(n == 1 or a == b for n, a, b in zip(t._shape, t._stride, strides))):
        return type(t)._make(t._storage, t._shape, strides, 0)
    out = empty(t._shape, t.dtype, t.device, strides)
    write(out, t)
    return out


def _device_of(op, args, spec):
    device = spec_device(spec) if spec is not None else None
    if device is None or device.type != "cuda":
        device = next(t.device for t in tensors_of(op, args) if t.device.type == "cuda")
    return canonical(device)


def _lift_cpu_scalars(op, args, device):
    """0-dim CPU tensors (which torch lets join CUDA operands) as 0-dim tensors on ``device`` (queued: the
    driver has staged the element when the copy returns)."""
    with non_blocking():
        return _lifted(op, args, device)


def _lifted(op, args, device):
    out = list(args)
    for i, is_list in op.tensor_args:
        v = out[i]
        if isinstance(v, Tensor) and v.device.type == "cpu" and not v._shape:
            out[i] = upload(v._array(), v.dtype, device)
        elif is_list and v is not None:
            out[i] = [upload(t._array(), t.dtype, device) if isinstance(t, Tensor) and t.device.type == "cpu"
                      and not t._shape else t for t in v]
    return out
