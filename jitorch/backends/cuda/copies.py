"""CUDA tensors' memory and copies: new tensors, uploads, writes through any strides, copies of values.

A write between two compact runs of one dtype is one device copy; any other (a broadcast, a cast, strided
operands, a read backwards) is the strided copy kernel (codegen/nvptx/copy.py), which reads the source and
writes the destination in place. Host values go up first, at their own size.
"""

from __future__ import annotations

import numpy as np

from ...codegen.nvptx.copy import copy_kernel
from ...runtime import cuda_backend, cuda_memory
from ...runtime.cuda_memory import download, empty_storage
from ...runtime.strided import contiguous_strides, is_contiguous
from ...tensor import Tensor
from .kernels import cached

_COPIES: dict = {}      # (shape, dst dtype and strides, src dtype and strides) -> strided copy LoopKernel


def empty(shape, dtype, device, strides=None):
    """An uninitialised CUDA tensor filling its own storage: compact, or with dense ``strides``."""
    shape = tuple(shape)
    storage = empty_storage(int(np.prod(shape, dtype=np.int64)), dtype, device)
    return Tensor._make(storage, shape, contiguous_strides(shape) if strides is None else tuple(strides), 0)


def address(t):
    """The device address of ``t``'s first element."""
    return t._storage.data_ptr() + t._offset * t.dtype.itemsize


def upload(array, dtype, device):
    """A CUDA tensor holding a NumPy array's values (cast to ``dtype``)."""
    array = np.asarray(array)
    t = empty(array.shape, dtype, device)
    cuda_memory.upload(t._storage.data_ptr(), array, dtype)
    return t


def host_array(t):
    """``t``'s values on the host: its own NumPy view on CPU, a copy of a CUDA tensor's."""
    return download(t) if t._storage.on_device else t._array()


def write(dst, src):
    """Write ``src`` (a tensor on any device, or a NumPy array) into CUDA tensor ``dst``, broadcast to its
    shape and cast to its dtype, on the device: one device copy where both are the same compact run,
    else the strided copy kernel, which reads ``src`` and writes ``dst`` in place (host values go up
    first, at their own size)."""
    if not dst.numel():
        return
    backend = cuda_backend.current()
    if not (isinstance(src, Tensor) and src._storage.on_device):
        values = np.asarray(src._array() if isinstance(src, Tensor) else src)
        if values.shape == dst._shape and is_contiguous(dst._shape, dst._stride):
            return cuda_memory.upload(address(dst), values, dst.dtype)
        src = upload(values, dst.dtype, dst.device)
    elif src.device != dst.device:
        src = upload(download(src), src.dtype, dst.device)
    elif src._storage is dst._storage:
        src = copy_values(src)  # the same memory: read all of it before writing any
    if src.dtype is dst.dtype and src._shape == dst._shape and is_contiguous(dst._shape, dst._stride) and \
            is_contiguous(src._shape, src._stride):
        return backend.device_copy(address(dst), address(src), dst.numel() * dst.dtype.itemsize)
    copy_into(dst, address(src), src.dtype, _broadcast_strides(src, dst._shape))


def copy_into(dst, src_address, src_dtype, src_strides):
    """The strided copy kernel: ``dst[p] = src[p]`` where ``src`` starts at ``src_address`` with element
    ``src_strides`` over ``dst``'s shape (0 to broadcast, negative to read backwards)."""
    key = (dst._shape, (dst.dtype, dst._stride), (src_dtype, tuple(src_strides)))
    kernel = cached(_COPIES, key, lambda: copy_kernel(*key))
    cuda_backend.current().launch(kernel, [src_address, address(dst)], dst.device.index)


def _broadcast_strides(t, shape):
    """``t``'s element strides over ``shape``, which it broadcasts to (0 along the dims it repeats)."""
    pad = len(shape) - t.ndim
    return (0,) * pad + tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(t._shape, shape[pad:], t._stride))


def copy_values(t, strides=None):
    """A copy of CUDA tensor ``t``'s values, with no autograd history: compact, or with dense ``strides``."""
    out = empty(t._shape, t.dtype, t.device, strides)
    write(out, t)
    return out
