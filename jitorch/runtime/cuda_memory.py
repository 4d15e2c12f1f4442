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
import ctypes
import threading
import weakref

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


# Sharing device memory with other processes (CUDA IPC) ----------------------------------------------------------
#
# The driver exports whole allocations, so a storage travels as its allocation's 64-byte handle plus its offset in
# it. Lifetime, a simpler rule than torch's reference-counting file: the producer must keep the tensor alive while
# consumers use it (torch documents the same obligation). Its segment is never returned to the driver once
# exported (`CachingAllocator.export`), so a consumer that outlives the tensor reads reused memory of the
# producer's allocator, never unmapped memory.

_ipc_lock = threading.Lock()
_OPENED: dict = {}      # (device index, handle) -> [address of the mapping here, its bytes, storages using it]
_IMPORTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # storage -> (handle, offset): to resend
# (device index, handle, offset) -> the storage here, sent or received: a storage that comes back (or comes
# twice) is the same object, as torch's shared_cache makes it, and a process never opens its own handle
_BY_HANDLE: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def ipc_export(storage):
    """What another process needs to map CUDA ``storage``: (handle bytes, byte offset of its first element in
    the allocation, device index). The device is synchronised first, so the consumer sees every write queued
    before the send (torch sends an event for this; a blocking wait is the simpler equivalent)."""
    root = getattr(storage, "root", storage)
    index = root.device.index
    backend = cuda_backend.current()
    sent = _IMPORTED.get(root)
    if sent is not None:  # a storage that came from another process goes on with its owner's handle
        return sent[0], sent[1], index
    address = root.data_ptr()
    base = backend.allocator(index).export(address)
    handle = backend.ipc_get_handle(base, index)
    backend.synchronize_device(index)
    with _ipc_lock:
        _BY_HANDLE[(index, handle, address - base)] = root
    return handle, address - base, index


def ipc_import(handle, offset, count, dtype, index):
    """A storage of ``count`` elements of ``dtype`` at byte ``offset`` in the allocation another process
    exported as ``handle`` on device ``index``. A handle is opened once per process and device; the mapping is
    closed when the last storage on it dies. A storage reaching past the allocation is a RuntimeError."""
    if not (isinstance(offset, int) and isinstance(count, int) and offset >= 0 and count >= 0):
        raise RuntimeError(f"a CUDA IPC storage needs a non-negative offset and size, got {offset!r}, {count!r}")
    device = canonical(to_device(f"cuda:{index}"))
    backend = cuda_backend.current()
    key = (device.index, handle)
    with _ipc_lock:
        known = _BY_HANDLE.get((device.index, handle, offset))
        if known is not None and known.dtype == dtype and known.size == count:
            return known
        entry = _OPENED.get(key)
        if entry is None:
            entry = _OPENED[key] = [*backend.ipc_open_handle(handle, device.index), 0]
        if offset + count * dtype.itemsize > entry[1]:
            if not entry[2]:
                del _OPENED[key]
                backend.ipc_close_handle(entry[0], device.index)
            raise RuntimeError(f"a CUDA IPC storage of {count * dtype.itemsize} bytes at offset {offset} does not "
                               f"fit the {entry[1]} bytes of the allocation it names")
        entry[2] += 1
    storage = CudaStorage(None, dtype, device, count)
    storage._ptr = entry[0] + offset
    _IMPORTED[storage] = (handle, offset)
    with _ipc_lock:
        _BY_HANDLE[(device.index, handle, offset)] = storage
    weakref.finalize(storage, _ipc_release, backend, key)
    return storage


def _ipc_release(backend, key):
    with _ipc_lock:
        entry = _OPENED[key]
        entry[2] -= 1
        if entry[2]:
            return
        del _OPENED[key]
    backend.ipc_close_handle(entry[0], key[0])


def ipc_open_count():
    """How many IPC handles this process has open (mapped allocations of other processes)."""
    return len(_OPENED)


# Page-locked host memory ----------------------------------------------------------------------------------------

class _PinnedBuffer:
    """``nbytes`` of page-locked host memory, freed when the last NumPy view of it is gone (a view may outlive
    the storage it was made for)."""

    def __init__(self, backend, nbytes):
        self.backend = backend
        self.address = backend.host_alloc(nbytes)
        self.nbytes = nbytes
        with _pin_lock:
            _PINNED[self.address] = nbytes

    def __del__(self):
        with _pin_lock:
            _PINNED.pop(self.address, None)
        self.backend.host_free(self.address)


_PINNED: dict = {}      # address -> byte size of each live page-locked buffer
_pin_lock = threading.RLock()  # re-entrant: a buffer may die (and deregister) while the lock is held


def pinned_array(count, dtype):
    """A 1-D NumPy array of ``count`` elements of ``dtype`` in page-locked host memory (RuntimeError, torch's
    words, without a CUDA device)."""
    backend = cuda_backend.current()
    if not backend.available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    nbytes = count * dtype.itemsize
    owner = _PinnedBuffer(backend, nbytes)
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(owner.address)
    raw._owner = owner  # the array's base keeps the memory alive
    return np.frombuffer(raw, dtype.np, count=count)


def is_pinned_address(address):
    """Whether host ``address`` lies in page-locked memory from `pinned_array`."""
    with _pin_lock:
        return any(base <= address < base + max(n, 1) for base, n in _PINNED.items())
