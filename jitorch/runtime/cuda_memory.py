"""CUDA memory: device storage from the caching allocator, and copies of bytes between host and device.

A CUDA tensor is an ordinary `Tensor` over a `CudaStorage`: a storage with no host array whose address is a
block of the device's caching allocator. The block goes back to its pool when the storage dies, that is when
the last tensor (or view) using it is gone.

This module only holds and moves the bytes; what runs kernels on CUDA tensors (writes through strides, eager
ops) is the CUDA backend above (`jitorch.backends.cuda`). Everything device-specific goes through the current
device interface (cuda_backend), so it runs on a fake device in tests.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from . import cuda_backend, cuda_errors, profiling
from .casts import convert
from .cuda_allocator import track
from .device import current_cuda_index, to_device
from .storage import Storage
from .strided import is_contiguous, span

_local = threading.local()


class CudaStorage(Storage):
    """Device memory: ``size`` elements at ``data_ptr()``, a block of ``allocator``."""

    __slots__ = ()
    on_device = True

    def no_data_error(self, tensor):
        return RuntimeError(f"the elements of a tensor on {tensor.device} are in device memory: copy them to the "
                            "host with .cpu() first")


def canonical(device):
    """``device`` with its index (``cuda`` is the current device, `set_device`'s), checked against the devices
    present."""
    backend = cuda_backend.current()
    backend.require()
    index = current_cuda_index() if device.index is None else device.index
    count = backend.device_count()
    if index >= count:
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {index} requested, device_count() is "
                           f"{count})")
    return to_device(f"cuda:{index}")


def empty_storage(n, dtype, device):
    """A storage of ``n`` elements on a CUDA device, from its caching allocator (on the current stream's pool)."""
    device = canonical(device)
    backend = cuda_backend.current()
    alloc = backend.allocator(device.index)
    block = alloc.malloc(n * dtype.itemsize, int(backend.stream()))
    storage = CudaStorage(None, dtype, device, n)
    storage._ptr = block.address
    track(storage, alloc, block)
    if profiling.RECORDER is not None:
        profiling.RECORDER.allocated(storage)
    return storage


@contextlib.contextmanager
def non_blocking(flag=True):
    """Copies between host and device inside the block are queued on the stream without waiting."""
    before = getattr(_local, "non_blocking", False)
    _local.non_blocking = flag
    try:
        yield
    finally:
        _local.non_blocking = before


def asynchronous():
    """Whether copies are queued without waiting here (inside `non_blocking`)."""
    return getattr(_local, "non_blocking", False)


def host_values(array, dtype):
    """``array`` as a C-contiguous host array of ``dtype`` (converted by the cast table)."""
    array = np.asarray(array)
    return np.asarray(array if array.dtype == dtype.np else convert(array, dtype.np), order="C")


def upload(address, array, dtype):
    """Copy ``array``'s values, cast to ``dtype`` and in C order, to device memory at ``address`` on the current
    stream (waiting for the copy unless inside `non_blocking`)."""
    cuda_backend.current().upload(address, host_values(array, dtype), asynchronous())


def download(t):
    """A NumPy array with the values of CUDA tensor ``t`` (any strides): its span comes to the host,
    then NumPy takes the view. Waits for the copy unless inside `non_blocking`."""
    host = download_span(t)
    if is_contiguous(t._shape, t._stride):
        return host[:t.numel()].reshape(t._shape)
    item = t.dtype.itemsize
    return np.lib.stride_tricks.as_strided(host, t._shape, tuple(s * item for s in t._stride)).copy()


def download_span(t):
    """The elements from CUDA tensor ``t``'s first to its last, in a host array (see `download`); a blocking
    copy raises the error a kernel reported on the device."""
    count = span(t._shape, t._stride)
    host = np.empty(count, t.dtype.np)
    if count:
        cuda_backend.current().download(host, t._storage.data_ptr() + t._offset * t.dtype.itemsize, asynchronous())
        if not asynchronous():
            cuda_errors.check(t.device.index)
    return host
