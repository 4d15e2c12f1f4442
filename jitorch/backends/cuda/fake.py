"""A fake CUDA device in host memory, behind the device interface of runtime/cuda_backend.py.

`FakeBackend` lets everything above the interface (storage, caching allocator,
transfers, writes, dispatch, compiled CUDA steps, autograd on CUDA tensors) run
on a machine without a GPU:

- device memory is host memory in segments the allocator asks for; every copy
  and launch checks that the addresses it touches lie inside live segments, so
  an out-of-bounds access is an error rather than silent corruption;
- each copy and launch is recorded (``copies``, ``launches``: which kernel, on
  which pointers, with which grid), for tests of the dispatch decisions;
- a launch runs the kernel's own code: its optimised NVPTX IR, retargeted to the
  host by the kernel emulator (`jitorch.backends.cuda.emulator`), with a
  cooperative thread per CUDA thread, so grid-stride loops, shuffles, shared
  memory and barriers are exercised as on a device. Where the host cannot
  emulate (not Linux on x86-64 or AArch64), the kernel's graph values are
  evaluated with the CPU kernels instead, as the generated code would compute
  them (``emulate="graph"``).
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass

import numpy as np

from ...codegen.nvptx.ptx import PtxKernel
from ...codegen.nvptx.indexing import FORMS
from ...ir.graph import Value
from ...ops import registry
from ...runtime.casts import convert
from ...runtime.cuda_allocator import CachingAllocator
from ...runtime.cuda_errors import error_code
from ...runtime.device import CPU
from ...tensor import Tensor
from . import emulator


class FakeMemory:
    """Host buffers handed out as device segments (``malloc(n) -> address``, ``free(address)``)."""

    def __init__(self, capacity=1 << 34):
        self.capacity = capacity
        self.segments = {}   # address -> uint8 buffer
        self._starts = []

    def malloc(self, nbytes):
        if sum(b.nbytes for b in self.segments.values()) + nbytes > self.capacity:
            raise MemoryError(f"fake device out of memory ({nbytes} bytes requested)")
        buf = np.zeros(max(nbytes, 1), np.uint8)
        address = buf.__array_interface__["data"][0]
        self.segments[address] = buf
        bisect.insort(self._starts, address)
        return address

    def free(self, address):
        del self.segments[address]
        self._starts.remove(address)

    def check(self, address, nbytes):
        """ValueError unless ``[address, address + nbytes)`` lies in one live segment."""
        if not nbytes:
            return
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0 or address + nbytes > self._starts[i] + self.segments[self._starts[i]].nbytes:
            raise ValueError(f"fake device: {nbytes} bytes at {address:#x} are outside device memory")

    def array(self, address, shape, dtype):
        """A NumPy view of device memory holding a C-contiguous array."""
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self.check(address, n)
        if not n:
            return np.empty(shape, dtype)
        return np.frombuffer((ctypes.c_char * n).from_address(address), dtype).reshape(shape)


@dataclass
class Launch:
    """One recorded kernel launch."""

    name: str
    ops: list
    pointers: list
    grid: tuple
    device: int


class FakeBackend:
    """A fake device (``devices`` of them) with host memory; see the module docstring.

    ``emulate``: ``"ptx"`` runs each launched kernel's code on the host emulator (the default where the host
    has one), ``"graph"`` computes its outputs with the CPU kernels, ``None`` only records launches."""

    name = "fake"
    multiprocessors = 132

    def __init__(self, devices=1, emulate="default"):
        self.memory = FakeMemory()
        self.devices = devices
        if emulate == "default":
            emulate = "ptx" if emulator.available() else "graph"
        self.emulate = emulate
        self.launches: list = []
        self.copies: list = []   # (kind "htod" | "dtoh" | "dtod", bytes, non_blocking)
        self._allocators = {}
        self.pinned = {}         # address -> buffer of each live host_alloc

    def available(self):
        return True

    def require(self):
        return None

    def device_count(self):
        return self.devices

    def device_name(self, index=0):
        return "jitorch kernel emulator" if self.emulate == "ptx" else "jitorch fake device"

    def allocator(self, index=0):
        if index not in self._allocators:
            self._allocators[index] = CachingAllocator(self.memory)
        return self._allocators[index]

    def stream(self):
        return 0

    def upload(self, address, host, non_blocking=False):
        self.memory.check(address, host.nbytes)
        ctypes.memmove(address, host.__array_interface__["data"][0], host.nbytes)
        self.copies.append(("htod", host.nbytes, non_blocking))

    def download(self, host, address, non_blocking=False):
        self.memory.check(address, host.nbytes)
        ctypes.memmove(host.__array_interface__["data"][0], address, host.nbytes)
        self.copies.append(("dtoh", host.nbytes, non_blocking))

    def device_copy(self, dst, src, nbytes):
        self.memory.check(src, nbytes)
        self.memory.check(dst, nbytes)
        ctypes.memmove(dst, src, nbytes)
        self.copies.append(("dtod", nbytes, False))

    def launch(self, kernel, pointers, index=0):
        self.launches.append(Launch(kernel.name, list(kernel.ops), list(pointers),
                                    kernel.grid(self.multiprocessors), index))
        if self.emulate == "ptx":
            for p in pointers:
                self.memory.check(p, 1)
            emulator.launch(kernel, pointers, self.multiprocessors)
        elif self.emulate == "graph":
            _evaluator(kernel)(self.memory, kernel, pointers)

    def synchronize(self):
        return None

    def synchronize_device(self, index=0):
        return None

    def ipc_get_handle(self, base, index=0):
        # its memory is this process's heap: there is nothing another process could map
        raise RuntimeError("CUDA IPC cannot export memory of the fake device (host memory of this process): "
                           "copy the tensor to the CPU (tensor.cpu()) and send that instead")

    def ipc_open_handle(self, handle, index=0):
        raise RuntimeError("the fake device cannot open CUDA IPC memory handles")

    def ipc_close_handle(self, address, index=0):
        raise RuntimeError("the fake device cannot open CUDA IPC memory handles")

    def host_alloc(self, nbytes):
        """Host memory standing in for page-locked memory (kept in ``pinned`` until `host_free`)."""
        buf = np.zeros(max(nbytes, 1), np.uint8)
        address = buf.__array_interface__["data"][0]
        self.pinned[address] = buf
        return address

    def host_free(self, address):
        del self.pinned[address]


def _evaluator(kernel):
    """How the graph mode computes a launch of ``kernel`` with NumPy: fused graph kernels, matmuls, strided
    copies and indexing kernels; the other directly written kernels (scans, sorts, merges, factories) only
    run on the emulator."""
    if isinstance(kernel, PtxKernel):
        return _graph_kernel
    if kernel.ops in (["matmul"], ["copy"]):
        return _matmul if kernel.ops == ["matmul"] else _strided_copy
    if getattr(kernel, "spec", (None,))[0] in FORMS:
        return _indexing
    raise RuntimeError(f"the fake device's graph mode cannot run kernel {kernel.name}: it runs on the kernel "
                       "emulator only, which needs Linux on x86-64 or AArch64")


def _matmul(memory, kernel, pointers):
    a = memory.array(pointers[0], kernel.a_shape, kernel.dtype.np)
    b = memory.array(pointers[1], kernel.b_shape, kernel.dtype.np)
    out = memory.array(pointers[2], kernel.out_shape, kernel.dtype.np)
    out[...] = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(kernel.dtype.np)


def _strided(memory, address, dtype, shape, strides):
    """A NumPy view of device memory from ``address`` with element ``strides`` (negative ones read backwards)
    over ``shape``."""
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    item = np.dtype(dtype.np).itemsize
    flat = memory.array(address + low * item, (high - low + 1,), dtype.np)
    return np.lib.stride_tricks.as_strided(flat[-low:], shape, [s * item for s in strides])


def _strided_copy(memory, kernel, pointers):
    (dst_dtype, dst_strides), (src_dtype, src_strides) = kernel.spec
    values = convert(_strided(memory, pointers[0], src_dtype, kernel.space, src_strides), dst_dtype.np)
    np.copyto(_strided(memory, pointers[1], dst_dtype, kernel.space, dst_strides), values)


def _indexing(memory, kernel, pointers):
    """An indexing kernel's reads, stores or adds with NumPy over strided views of device memory; an index
    out of range is skipped (read as zero) and, as the kernel does, claims the error word (its last pointer)
    unless an earlier error holds it, so that it is raised at the next synchronisation."""
    spec = kernel.spec
    op, space, dim, size, index, target = spec.op, spec.space, spec.dim, spec.size, spec.index, spec.target
    form = FORMS[op]
    reads = form.mode == "read"

    def strided(address, dtype, strides):
        return _strided(memory, address, dtype, space, strides)

    given = strided(pointers[1 if reads else 0], index[0], index[1]).astype(np.int64)
    at = np.where(given < 0, given + size, given) if form.wraps else given
    inside = (at >= 0) & (at < size)
    word = memory.array(pointers[-1], (2,), np.int64)
    if not inside.all() and not word[0]:
        word[...] = error_code(op, dim, size), given[~inside][0]  # the first bad index in the loop's order
    points = list(np.indices(space))
    points[dim] = np.where(inside, at, 0)
    offsets = sum(p * s for p, s in zip(points, target[1]))
    followed = memory.array(pointers[0 if reads else -2], (int(offsets.max()) + 1,), target[0].np)
    if reads:
        memory.array(pointers[2], space, target[0].np)[...] = np.where(inside, followed[offsets], 0)
        return
    values = np.broadcast_to(np.array(spec.value, target[0].np), space) if spec.value is not None else \
        strided(pointers[1], *spec.source)
    if form.mode == "store":
        followed[offsets[inside]] = values[inside]
    else:
        np.add.at(followed, offsets[inside], (values * spec.alpha)[inside])


def _graph_kernel(memory, kernel, pointers):
    """Evaluate the kernel's output values from its input buffers (compact, or laid out as the kernel's
    ``layouts`` say) with the CPU kernels."""
    source = kernel.source

    def buffer(v, p):
        strides = source.layouts.get(v)
        if strides is None:
            return memory.array(p, v.type.shape, v.type.dtype.np)
        return _strided(memory, p, v.type.dtype, v.type.shape, strides)
    env = {v: Tensor._from_array(buffer(v, p).copy(), v.type.dtype) for v, p in zip(source.inputs, pointers)}

    def value(v):
        if v not in env:
            node = v.node
            # the host computes what the kernel would: a device argument (a cast's ``_to_copy``) is the host's
            args = [CPU if arg.type == "Device" and a is not None else _substitute(a, value)
                    for a, arg in zip(node.args, node.op.schema.args)]
            result = registry.execute(node.op, args)
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            for out, r in zip(node.outputs, results):
                env[out] = r
        return env[v]

    outs = pointers[len(source.inputs):]
    if source.split is not None:
        (out,) = source.outputs
        parts, name, count, acc_dtype = source.split
        partial = memory.array(outs[0], (parts,), acc_dtype.np)
        partial[...] = _partials(value(out.node.args[0])._array().reshape(-1), parts, name, acc_dtype.np)
        return
    for v, p in zip(source.outputs, outs):
        buffer(v, p)[...] = value(v)._array()


def _substitute(arg, value):
    if isinstance(arg, Value):
        return value(arg)
    if isinstance(arg, (list, tuple)) and any(isinstance(a, Value) for a in arg):
        return type(arg)(_substitute(a, value) for a in arg)
    return arg


_PARTS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "max": np.maximum,
          "amin": np.minimum, "min": np.minimum}


def _partials(flat, parts, name, acc):
    """Each of ``parts`` equal slices of ``flat`` reduced in the accumulator dtype, as the split kernel does."""
    ufunc = _PARTS[name]
    step = -(-flat.size // parts)
    values = flat.astype(acc)
    return np.array([ufunc.reduce(values[p * step:(p + 1) * step]) if p * step < flat.size else _identity(name, acc)
                     for p in range(parts)], acc)


def _identity(name, acc):
    if name in ("sum", "mean"):
        return 0
    if name == "prod":
        return 1
    if np.dtype(acc).kind == "f":
        lowest, highest = -np.inf, np.inf
    else:
        lowest, highest = np.iinfo(acc).min, np.iinfo(acc).max
    return lowest if name in ("amax", "max") else highest
