"""The device a CUDA tensor lives on, behind one small interface.

Everything CUDA tensors need from a device goes through a *backend*:

- ``available()``, ``require()`` (RuntimeError saying why CUDA cannot be used),
  ``device_count()``, ``device_name(index)``;
- ``allocator(index)``: the device's caching allocator (blocks of device memory);
- ``upload(address, host, non_blocking)`` / ``download(host, address, non_blocking)``:
  copies between a C-contiguous NumPy array and device memory on the current stream;
- ``device_copy(dst, src, nbytes)``: a copy within device memory;
- ``launch(kernel, pointers, index)``: a generated kernel (`PtxKernel` or
  `MatmulKernel`) on device pointers, asynchronously on the current stream;
- ``synchronize()``: wait for the current stream; ``synchronize_device(index)``: for all of a device's work;
- ``ipc_get_handle(base, index)`` / ``ipc_open_handle(handle, index) -> (address, nbytes)`` /
  ``ipc_close_handle(address, index)``: CUDA IPC (an allocation's 64-byte handle, mapped in another process,
  unmapped);
- ``host_alloc(nbytes)`` / ``host_free(address)``: page-locked host memory.

`DriverBackend` is the real one (cuda-python, see cuda_driver); tests install a
`jitorch.backends.cuda.fake.FakeBackend` (host memory) with `use_backend`, so the
logic above the interface runs on machines without a GPU. A kernel comes to
``launch`` already built (by jitorch.codegen.nvptx): nothing here generates code.
"""

from __future__ import annotations

import contextlib
import threading

from . import cuda_driver
from .device import current_cuda_index, set_current_cuda_index

_lock = threading.Lock()
_local = threading.local()


def streams():
    """This thread's stack of current streams (`jitorch.cuda.stream` pushes and pops them): work is queued on
    the innermost one, on the default stream when it is empty."""
    if not hasattr(_local, "streams"):
        _local.streams = []
    return _local.streams


class DriverBackend:
    """CUDA devices through the driver API; allocators are made on first use per device."""

    name = "driver"

    def __init__(self):
        self._allocators = {}

    def available(self):
        return cuda_driver.available()

    def require(self):
        cuda_driver.require()

    def device_count(self):
        return cuda_driver.device_count()

    def device_name(self, index=0):
        return cuda_driver.device_name(index)

    def allocator(self, index=0):
        alloc = self._allocators.get(index)
        if alloc is None:
            from .cuda_allocator import CachingAllocator
            with _lock:
                alloc = self._allocators.setdefault(index, CachingAllocator(cuda_driver.DriverMemory(index)))
        return alloc

    def stream(self):
        current = streams()
        if current:
            return current[-1].handle
        cuda_driver.require()
        return 0  # the legacy default stream

    def upload(self, address, host, non_blocking=False):
        # always queued on the current stream, so it stays ordered with the kernels there (a synchronous
        # cuMemcpyHtoD would not wait for a non-blocking stream's work); from pageable memory the driver
        # stages the bytes before returning, so ``host`` may go at once; from page-locked memory it reads them
        # when the copy runs (freeing that memory waits for the copy)
        if host.nbytes:
            stream = self.stream()
            cuda_driver.copy_to_device(address, host, stream, non_blocking=True)
            if not non_blocking:
                cuda_driver.synchronize_stream(stream)

    def download(self, host, address, non_blocking=False):
        if host.nbytes:
            cuda_driver.copy_to_host(host, address, self.stream(), non_blocking)

    def device_copy(self, dst, src, nbytes):
        if nbytes:
            cuda_driver.copy_on_device(dst, src, nbytes, self.stream())

    def launch(self, kernel, pointers, index=0):
        fn = cuda_driver.function(kernel.asm, kernel.name, index)
        blocks, threads = kernel.grid(cuda_driver.attribute("MULTIPROCESSOR_COUNT", index))
        # the function belongs to device ``index``'s context, which must be current here (another device's
        # may be, after an allocation there)
        cuda_driver.activate(index)
        cuda_driver.launch(fn, blocks, threads, pointers, self.stream())

    def synchronize(self):
        cuda_driver.synchronize_stream(self.stream())

    def synchronize_device(self, index=0):
        cuda_driver.activate(index)
        cuda_driver.synchronize()

    def ipc_get_handle(self, base, index=0):
        return cuda_driver.ipc_get_handle(base, index)

    def ipc_open_handle(self, handle, index=0):
        return cuda_driver.ipc_open_handle(handle, index)

    def ipc_close_handle(self, address, index=0):
        cuda_driver.ipc_close_handle(address, index)

    def host_alloc(self, nbytes):
        return cuda_driver.host_alloc(nbytes)

    def host_free(self, address):
        cuda_driver.host_free(address)


_driver_backend = DriverBackend()
_installed: list = []


def current():
    """The backend in use: the innermost `use_backend`'s, else the driver."""
    return _installed[-1] if _installed else _driver_backend


@contextlib.contextmanager
def use_backend(backend):
    """Run CUDA tensors on ``backend`` inside the block (tests: a fake device in host memory). The block starts
    on device 0, and the current device is restored after it: the outer backend may not have the inner one's."""
    _installed.append(backend)
    outer = current_cuda_index()
    set_current_cuda_index(0)
    try:
        yield backend
    finally:
        _installed.remove(backend)
        set_current_cuda_index(outer)
