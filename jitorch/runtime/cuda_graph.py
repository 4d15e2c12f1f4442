"""Running compiled CUDA kernels: device memory for outputs, launches on the current stream.

A CUDA storage is a `Storage` with no host array whose address (``_ptr``) is a
block of the process's caching allocator; the block goes back to its pool when
the storage dies.
"""

from __future__ import annotations

import numpy as np

from . import cuda_driver
from .cuda_allocator import CachingAllocator, track
from .storage import Storage
from .strided import contiguous_strides

_allocators: dict = {}


def allocator(index=0):
    """The caching allocator of device ``index`` (created on first use; needs the driver)."""
    alloc = _allocators.get(index)
    if alloc is None:
        cuda_driver.activate(index)
        alloc = _allocators.setdefault(index, CachingAllocator(cuda_driver.DriverMemory()))
    return alloc


def device_storage(numel, dtype, device, stream=0):
    """A storage of ``numel`` elements on a CUDA ``device``, from the caching allocator."""
    alloc = allocator(device.index or 0)
    block = alloc.malloc(numel * dtype.itemsize, stream)
    storage = Storage(None, dtype, device, numel)
    storage._ptr = block.address
    track(storage, alloc, block)
    return storage


def _fresh(value, device):
    from ..tensor import Tensor
    shape = value.type.shape
    storage = device_storage(int(np.prod(shape, dtype=np.int64)), value.type.dtype, device)
    return Tensor._make(storage, shape, contiguous_strides(shape), 0, None)


class CudaKernelStep:
    """One PTX kernel of a compiled graph: fresh device outputs, one launch on the current stream."""

    def __init__(self, kernel, nodes):
        self.kernel = kernel
        self.nodes = nodes
        self.inputs = kernel.source.inputs
        self.outputs = kernel.source.outputs

    def reads(self):
        return self.inputs

    def writes(self):
        return self.outputs

    def run(self, env, arena, inplace):
        from ..cuda import current_stream
        device = env[self.inputs[0]].device if self.inputs else self.outputs[0].type.device
        index = device.index or 0
        fn = cuda_driver.function(self.kernel.asm, self.kernel.name, index)
        stream = current_stream().handle
        split = self.kernel.source.split
        outs = [_fresh(v, device) for v in self.outputs] if split is None else []
        pointers = [env[v]._storage.data_ptr() for v in self.inputs]
        if split is not None:
            parts, name, count, acc_dtype = split
            partial = device_storage(parts, acc_dtype, device)
            pointers.append(partial.data_ptr())
        else:
            pointers += [t._storage.data_ptr() for t in outs]
        blocks, threads = self.kernel.grid(cuda_driver.attribute("MULTIPROCESSOR_COUNT", index))
        cuda_driver.launch(fn, blocks, threads, pointers, stream)
        if split is not None:
            self._combine(env, split, partial, device, stream)
            return
        for v, t in zip(self.outputs, outs):
            env[v] = t

    def _combine(self, env, split, partial, device, stream):
        """A full reduction's per-block partial results, combined on the host (a few hundred values)."""
        from ..codegen.executor import _COMBINE
        parts, name, count, acc_dtype = split
        host = np.empty(parts, acc_dtype.np)
        cuda_driver.copy_to_host(host, partial.data_ptr(), stream)
        total = _COMBINE[name](host)
        if name == "mean":
            total = total / acc_dtype.np.type(count)
        (out,) = self.outputs
        value = np.ascontiguousarray(np.asarray(total).astype(out.type.dtype.np).reshape(out.type.shape))
        t = env[out] = _fresh(out, device)
        cuda_driver.copy_to_device(t._storage.data_ptr(), value, stream)

    def __repr__(self):
        return repr(self.kernel)
