"""A stand-in for ``cuda.bindings.driver``: the calls jitorch makes, with the real ones' signatures.

Installed in place of the bindings (``cuda_driver._bindings``), it lets the code that talks to the driver
(`jitorch.runtime.cuda_driver`, `DriverBackend`, `jitorch.cuda` streams and events, the selftest's GPU
checks, benchmarks/cuda.py) run on a machine without a GPU. What it holds to:

- only the functions jitorch uses exist (a new call is an AttributeError until it is added here); enums and
  handle types are the installed bindings' own classes, so a misspelt enum member or a handle of the wrong
  kind fails as it would on the device;
- arguments are converted as the Cython bindings convert them: handles through their real class
  (``CUstream(x)``), C integers refuse strings and negative unsigned values, ``char *`` takes only bytes,
  host pointers are ints or buffers, and ``kernelParams`` is read in the forms cuda-python accepts (a
  ``(values, ctypes types)`` pair of tuples, a buffer or address of ``void *`` pointers) with its type
  checks (a NumPy integer as a ``c_void_p`` value is a TypeError there too);
- results are ``(CUresult, *values)`` tuples; an error the driver would report is returned, not raised;
- a CUDA context is current per thread (`cuCtxSetCurrent`); calls that need one without it get
  CUDA_ERROR_INVALID_CONTEXT, and anything before `cuInit` CUDA_ERROR_NOT_INITIALIZED;
- device memory is host buffers (so the kernel emulator can run on it); copies and launches must name
  addresses inside live allocations, and a host pointer must not be device memory (swapped arguments);
- work is queued per stream and runs only when something waits for it: launches, device copies, event
  records and the device side of host-to-device copies (pageable memory is staged at the call, as the driver
  may do). Synchronous copies are on the legacy default stream, which does not wait for non-blocking streams,
  so a missing stream synchronisation reads stale bytes here as it may on a GPU;
- a launch runs the kernel's own code on the host emulator, with the grid and block it was given; the PTX
  given to `cuModuleLoadData` is mapped back to the live jitorch kernel object that carries it;
- events take their time from a virtual clock that each executed operation advances, so
  `cuEventElapsedTime` gives positive milliseconds between recorded, completed events.

- device memory lives in anonymous memory files (``memfd_create``) mapped into this process, so CUDA IPC is
  real across processes: ``cuIpcGetMemHandle`` of an allocation's base gives 64 bytes naming this process, the
  file's descriptor and the size; ``cuIpcOpenMemHandle`` in another process's fake driver opens the file
  through ``/proc/PID/fd`` and maps it at an address of its own (counted per handle, as the driver counts
  opens per context), ``cuIpcCloseMemHandle`` unmaps it at the last close. A handle opened by the driver
  that exported it, a pointer inside an allocation, or a driver made with ``ipc=False`` (standing for memory
  IPC cannot export) are refused with an error code;
- page-locked host memory (``cuMemHostAlloc``): asynchronous copies from it are not staged but read when the
  stream runs them, and asynchronous copies into it are queued, so a missing synchronisation shows;
  ``cuMemFreeHost`` waits for the context's work first.

Not modelled: blocking streams' implicit synchronisation with the legacy stream beyond whole
flushes, peer access between devices, kernel faults as sticky errors (an emulator error raises), and the
driver's own checks of the PTX (ptxas tests cover those).
"""

from __future__ import annotations

import bisect
import ctypes
import gc
import itertools
import mmap
import os
import re
import struct
import threading
import weakref
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from cuda.bindings import driver as _real

from jitorch.backends.cuda import emulator
from jitorch.codegen.nvptx.ptx import GeneratedKernel

CUresult = _real.CUresult
CUdevice_attribute = _real.CUdevice_attribute
CUstream_flags = _real.CUstream_flags
CUevent_flags = _real.CUevent_flags
CUdevice = _real.CUdevice
CUdeviceptr = _real.CUdeviceptr
CUcontext = _real.CUcontext
CUmodule = _real.CUmodule
CUfunction = _real.CUfunction
CUstream = _real.CUstream
CUevent = _real.CUevent
CUipcMemHandle = _real.CUipcMemHandle
CUipcMem_flags = _real.CUipcMem_flags
CU_MEMHOSTALLOC_PORTABLE = _real.CU_MEMHOSTALLOC_PORTABLE
IPC_MAGIC = b"JTFAKIPC"

SUCCESS = CUresult.CUDA_SUCCESS
ALIGN = 512                      # cuMemAlloc's alignment
KERNEL_PARAM_TYPES = {ctypes.c_bool, ctypes.c_char, ctypes.c_wchar, ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short,
                      ctypes.c_ushort, ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_ulong,
                      ctypes.c_longlong, ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_float, ctypes.c_double}
ATTRIBUTES = {"MULTIPROCESSOR_COUNT": 132, "WARP_SIZE": 32, "MAX_THREADS_PER_BLOCK": 1024,
              "MAX_SHARED_MEMORY_PER_BLOCK": 48 << 10, "COMPUTE_CAPABILITY_MAJOR": 9,
              "COMPUTE_CAPABILITY_MINOR": 0, "UNIFIED_ADDRESSING": 1}


class DriverError(Exception):
    """A call the driver would refuse: carries the CUresult returned for it."""

    def __init__(self, result):
        super().__init__(result.name)
        self.result = result


def _c_int(value, bits, signed=False):
    """``value`` converted as Cython converts an argument typed as a C integer."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError("an integer is required")
    value = int(value)
    lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        raise OverflowError(f"can't convert {value} to {'' if signed else 'unsigned '}{bits}-bit int")
    return value


def _handle(cls, value):
    """A handle argument's value, converted as the bindings do: None is 0, else through the real class."""
    if value is None:
        return 0
    return int(value if isinstance(value, cls) else cls(value))


def _host_pointer(value):
    """A ``void *`` host argument ("Any" in the bindings): None, an integer address, or a buffer."""
    if value is None:
        return 0
    try:
        return _c_int(value, 64)
    except (TypeError, OverflowError):
        pass
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"Provided argument is of type {type(value)} but expected Type {type(None)}, {type(int)} "
                        "or object with Buffer Protocol") from None
    return np.frombuffer(view.cast("B"), np.uint8).__array_interface__["data"][0] if view.nbytes else 0


def _kernel_params(params, count):
    """The ``count`` 64-bit parameter values of a launch, read from ``kernelParams`` as cuda-python reads it."""
    if params is None:
        return []
    if isinstance(params, tuple) and len(params) == 2 and all(isinstance(p, tuple) for p in params):
        values, types = params
        if len(values) != len(types):
            raise TypeError("Argument 'kernelParams' has tuples with different length")
        out = []
        for value, ctype in zip(values, types):
            if ctype is ctypes.c_void_p:
                if not isinstance(value, (int, ctypes.c_void_p)):
                    raise TypeError(f"Provided argument is of type {type(value)} but expected Type {type(int)}, "
                                    f"{type(ctypes.c_void_p)} or CUDA Binding structure with getPtr() attribute")
                out.append((value.value or 0) if isinstance(value, ctypes.c_void_p) else value)
            elif ctype in KERNEL_PARAM_TYPES:
                out.append(ctype(value).value if not isinstance(value, ctype) else value.value)
            elif ctype is None and callable(getattr(value, "getPtr", None)):
                out.append(value.getPtr())  # the address of the object's storage: a host pointer
            else:
                raise TypeError(f"Unsupported type: {type(ctype)}")
        return out
    if isinstance(params, int):
        base = params
    else:
        base = _host_pointer(params)
    pointers = (ctypes.c_void_p * count).from_address(base)
    return [ctypes.c_uint64.from_address(p).value for p in pointers]


@dataclass
class Stream:
    ctx: int
    flags: int
    queue: deque = field(default_factory=deque)


@dataclass
class Event:
    flags: int
    stream: Stream | None = None
    time_ns: int | None = None     # when its record ran (None: recorded and pending, or never recorded)
    recorded: bool = False


class _Module:
    def __init__(self, ptx):
        self.ptx = ptx
        self.entries = set(re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx))


class FakeDriver:
    """One fake driver: ``devices`` devices sharing one host memory; see the module docstring. ``launches``
    records (kernel name, grid, block, stream handle) of each launch as it runs, ``calls`` each call's name."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUstream_flags = CUstream_flags
    CUevent_flags = CUevent_flags
    CUdevice, CUdeviceptr, CUcontext, CUmodule, CUfunction, CUstream, CUevent = (
        CUdevice, CUdeviceptr, CUcontext, CUmodule, CUfunction, CUstream, CUevent)
    CUipcMemHandle, CUipcMem_flags, CU_MEMHOSTALLOC_PORTABLE = CUipcMemHandle, CUipcMem_flags, CU_MEMHOSTALLOC_PORTABLE

    def __init__(self, devices=1, capacity=1 << 32, ipc=True):
        self.devices = devices
        self.capacity = capacity
        self.ipc = ipc
        self.token = int.from_bytes(os.urandom(8), "little")  # which fake "process" exported a handle
        self.files = {}             # address -> descriptor of the memory file of each allocation made here
        self.opened = {}            # address -> [handle bytes, opens] of each mapping of another's allocation
        self.pinned = {}            # address -> (buffer, size) of page-locked host memory
        weakref.finalize(self, _close_files, self.files)  # allocations never freed (cached segments)
        self.initialised = False
        self.segments = {}          # address -> (buffer, size)
        self._starts = []
        self._ids = itertools.count(0x1000, 0x10)
        self.contexts = {}          # context handle -> device ordinal
        self._primary = {}          # ordinal -> context handle
        self.streams = {}           # handle -> Stream (legacy streams under (ctx, 0))
        self.events = {}
        self.modules = {}
        self.functions = {}         # handle -> (kernel object, name)
        self.clock_ns = 0
        self.launches = []
        self.calls = []
        self.pinned_copies = []     # ("htod" | "dtoh", bytes) of each asynchronous copy that was not staged
        self._local = threading.local()
        self._lock = threading.RLock()

    # plumbing ---------------------------------------------------------------------------------------

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if name.startswith("cu") and callable(attr):
            return _api(self, name, attr)
        return attr

    def _ctx(self):
        if not self.initialised:
            raise DriverError(CUresult.CUDA_ERROR_NOT_INITIALIZED)
        ctx = getattr(self._local, "ctx", 0)
        if not ctx:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT)
        return ctx

    def _stream(self, handle):
        """The queue of stream ``handle`` (0 or CU_STREAM_LEGACY: the current context's legacy stream)."""
        ctx = self._ctx()
        h = _handle(CUstream, handle)
        if h in (0, 1):
            return self.streams.setdefault((ctx, 0), Stream(ctx, 0))
        stream = self.streams.get(h)
        if stream is None or stream.ctx != ctx:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE)
        return stream

    def _enqueue(self, stream, op):
        # the legacy stream and blocking streams wait for each other; non-blocking streams wait for neither
        if not stream.flags & CUstream_flags.CU_STREAM_NON_BLOCKING:
            for other in list(self.streams.values()):
                if other is not stream and other.ctx == stream.ctx and \
                        not other.flags & CUstream_flags.CU_STREAM_NON_BLOCKING:
                    self._run(other)
        stream.queue.append(op)

    def _run(self, stream, until=None):
        """Run ``stream``'s queued work in order (up to the point where ``until()`` holds)."""
        with self._lock:
            while stream.queue and not (until and until()):
                stream.queue.popleft()()

    def _run_context(self, ctx):
        for stream in list(self.streams.values()):
            if stream.ctx == ctx:
                self._run(stream)

    def _tick(self, nbytes=0, launch=False):
        self.clock_ns += (5000 if launch else 1000) + nbytes // 1000  # ~1 TB/s

    def _device_range(self, address, nbytes):
        """DriverError unless ``[address, address + nbytes)`` lies in one live allocation."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0 or address + max(nbytes, 1) > self._starts[i] + self.segments[self._starts[i]][1]:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)

    def _host_range(self, address, nbytes):
        """A host pointer must be host memory: device memory there means swapped arguments."""
        if not address and nbytes:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and address < self._starts[i] + self.segments[self._starts[i]][1]:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)

    # initialisation, devices, contexts --------------------------------------------------------------

    def cuInit(self, Flags):
        if _c_int(Flags, 32) != 0:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.initialised = True
        return (SUCCESS,)

    def cuGetErrorString(self, error):
        if not isinstance(error, CUresult):
            error = CUresult(error)
        return SUCCESS, f"fake driver: {error.name}".encode()

    def cuDeviceGetCount(self):
        if not self.initialised:
            return CUresult.CUDA_ERROR_NOT_INITIALIZED, 0
        return SUCCESS, self.devices

    def _ordinal(self, dev):
        if not self.initialised:
            raise DriverError(CUresult.CUDA_ERROR_NOT_INITIALIZED)
        ordinal = _handle(CUdevice, dev)
        if not 0 <= ordinal < self.devices:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_DEVICE)
        return ordinal

    def cuDeviceGet(self, ordinal):
        return SUCCESS, CUdevice(self._ordinal(_c_int(ordinal, 32, signed=True)))

    def cuDeviceGetName(self, length, dev):
        name = f"Fake H200 {self._ordinal(dev)}".encode()[:_c_int(length, 32, signed=True) - 1]
        return SUCCESS, name + b"\0" * (length - len(name))

    def cuDeviceGetAttribute(self, attrib, dev):
        self._ordinal(dev)
        attrib = CUdevice_attribute(_c_int(attrib, 32))
        value = ATTRIBUTES.get(attrib.name.removeprefix("CU_DEVICE_ATTRIBUTE_"))
        if value is None:
            return CUresult.CUDA_ERROR_INVALID_VALUE, 0
        return SUCCESS, value

    def cuDevicePrimaryCtxRetain(self, dev):
        ordinal = self._ordinal(dev)
        if ordinal not in self._primary:
            ctx = next(self._ids)
            self._primary[ordinal], self.contexts[ctx] = ctx, ordinal
        return SUCCESS, CUcontext(self._primary[ordinal])

    def cuCtxSetCurrent(self, ctx):
        if not self.initialised:
            return (CUresult.CUDA_ERROR_NOT_INITIALIZED,)
        h = _handle(CUcontext, ctx)
        if h and h not in self.contexts:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        self._local.ctx = h
        return (SUCCESS,)

    def cuCtxSynchronize(self):
        self._run_context(self._ctx())
        return (SUCCESS,)

    # modules and launches ---------------------------------------------------------------------------

    def cuModuleLoadData(self, image):
        self._ctx()
        if isinstance(image, (bytes, bytearray, memoryview)):
            text = bytes(image).split(b"\0", 1)[0]
        else:
            text = ctypes.string_at(_host_pointer(image))
        module = _Module(text.decode())
        if not module.entries:
            return CUresult.CUDA_ERROR_INVALID_IMAGE, CUmodule(0)
        handle = next(self._ids)
        self.modules[handle] = module
        return SUCCESS, CUmodule(handle)

    def cuModuleGetFunction(self, hmod, name):
        if not isinstance(name, bytes):
            raise TypeError(f"expected bytes, {type(name).__name__} found")
        module = self.modules.get(_handle(CUmodule, hmod))
        if module is None:
            return CUresult.CUDA_ERROR_INVALID_HANDLE, CUfunction(0)
        entry = name.decode()
        if entry not in module.entries:
            return CUresult.CUDA_ERROR_NOT_FOUND, CUfunction(0)
        kernel = _kernel_of(module.ptx, entry)
        handle = next(self._ids)
        self.functions[handle] = (kernel, entry)
        return SUCCESS, CUfunction(handle)

    def cuLaunchKernel(self, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                       hStream, kernelParams, extra):
        grid = tuple(_c_int(g, 32) for g in (gridDimX, gridDimY, gridDimZ))
        block = tuple(_c_int(b, 32) for b in (blockDimX, blockDimY, blockDimZ))
        shared = _c_int(sharedMemBytes, 32)
        _c_int(extra, 64)
        fn = self.functions.get(_handle(CUfunction, f))
        if fn is None:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        kernel, entry = fn
        program = emulator.emulated(kernel)
        values = _kernel_params(kernelParams, program.n_args)
        stream = self._stream(hStream)
        if 0 in grid or 0 in block or np.prod(block) > ATTRIBUTES["MAX_THREADS_PER_BLOCK"] or \
                shared > ATTRIBUTES["MAX_SHARED_MEMORY_PER_BLOCK"] or len(values) != program.n_args:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        if block[1:] != (1, 1):
            raise NotImplementedError("fake driver: the kernel emulator runs one-dimensional blocks")
        for p in values:
            self._device_range(p, 1)
        handle = _handle(CUstream, hStream)

        def run():
            emulator.emulated(kernel)(values, grid, block[0])
            self.launches.append((entry, grid, block, handle))
            self._tick(launch=True)
        self._enqueue(stream, run)
        return (SUCCESS,)

    # memory -----------------------------------------------------------------------------------------

    def cuMemAlloc(self, bytesize):
        self._ctx()
        n = _c_int(bytesize, 64)
        if n == 0:
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUdeviceptr(0)
        if sum(size for _, size in self.segments.values()) + n > self.capacity:
            return CUresult.CUDA_ERROR_OUT_OF_MEMORY, CUdeviceptr(0)
        fd = os.memfd_create("fake-cuda", os.MFD_CLOEXEC)
        os.ftruncate(fd, n)
        address = self._map(fd, n)   # page-aligned, so cuMemAlloc's 512 bytes hold
        self.files[address] = fd
        return SUCCESS, CUdeviceptr(address)

    def _map(self, fd, n):
        buf = np.frombuffer(mmap.mmap(fd, n), np.uint8)
        address = buf.__array_interface__["data"][0]
        self.segments[address] = (buf, n)
        bisect.insort(self._starts, address)
        return address

    def _unmap(self, address):
        del self.segments[address]
        self._starts.remove(address)

    def cuMemFree(self, dptr):
        ctx = self._ctx()
        address = _handle(CUdeviceptr, dptr)
        if address not in self.files:  # not an allocation of this process (an IPC mapping is closed instead)
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        self._run_context(ctx)  # the driver waits for work that may use the memory before it frees it
        self._unmap(address)
        os.close(self.files.pop(address))
        return (SUCCESS,)

    def cuMemGetAddressRange(self, dptr):
        self._ctx()
        address = _handle(CUdeviceptr, dptr)
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0 or address >= self._starts[i] + self.segments[self._starts[i]][1]:
            return CUresult.CUDA_ERROR_NOT_FOUND, CUdeviceptr(0), 0
        return SUCCESS, CUdeviceptr(self._starts[i]), self.segments[self._starts[i]][1]

    # interprocess memory ----------------------------------------------------------------------------

    def cuIpcGetMemHandle(self, dptr):
        self._ctx()
        address = _handle(CUdeviceptr, dptr)
        if not self.ipc:
            return CUresult.CUDA_ERROR_NOT_SUPPORTED, CUipcMemHandle()
        if address not in self.files:  # only an allocation's base, from cuMemAlloc, is exported
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUipcMemHandle()
        handle = CUipcMemHandle()
        data = IPC_MAGIC + struct.pack("<QQQQ", os.getpid(), self.files[address], self.segments[address][1],
                                       self.token)
        ctypes.memmove(handle.getPtr(), data.ljust(64, b"\0"), 64)
        return SUCCESS, handle

    def cuIpcOpenMemHandle(self, handle, Flags):
        self._ctx()
        if not isinstance(handle, CUipcMemHandle):
            raise TypeError(f"Argument 'handle' is not instance of type (expected {CUipcMemHandle}, "
                            f"found {type(handle)})")
        if _c_int(Flags, 32) != int(CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS):
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUdeviceptr(0)
        data = ctypes.string_at(handle.getPtr(), 64)
        if data[:8] != IPC_MAGIC:
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUdeviceptr(0)
        pid, fd, n, token = struct.unpack("<QQQQ", data[8:40])
        if token == self.token:  # the driver refuses handles exported by the calling process
            return CUresult.CUDA_ERROR_INVALID_CONTEXT, CUdeviceptr(0)
        for address, entry in self.opened.items():
            if entry[0] == data:    # opened already: the driver counts the open and returns the same pointer
                entry[1] += 1
                return SUCCESS, CUdeviceptr(address)
        try:
            own = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
        except OSError:            # the exporting process or its allocation is gone
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUdeviceptr(0)
        try:
            address = self._map(own, n)
        finally:
            os.close(own)          # the mapping keeps the memory
        self.opened[address] = [data, 1]
        return SUCCESS, CUdeviceptr(address)

    def cuIpcCloseMemHandle(self, dptr):
        self._ctx()
        address = _handle(CUdeviceptr, dptr)
        entry = self.opened.get(address)
        if entry is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        entry[1] -= 1
        if not entry[1]:
            self._run_context(self._ctx())
            del self.opened[address]
            self._unmap(address)
        return (SUCCESS,)

    # page-locked host memory ------------------------------------------------------------------------

    def cuMemHostAlloc(self, bytesize, Flags):
        self._ctx()
        n, flags = _c_int(bytesize, 64), _c_int(Flags, 32)
        if flags & ~0x7:           # PORTABLE | DEVICEMAP | WRITECOMBINED
            return CUresult.CUDA_ERROR_INVALID_VALUE, 0
        buf = np.zeros(max(n, 1), np.uint8)
        address = buf.__array_interface__["data"][0]
        self.pinned[address] = (buf, n)
        return SUCCESS, address

    def cuMemFreeHost(self, p):
        ctx = self._ctx()
        address = _host_pointer(p)
        if address not in self.pinned:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        self._run_context(ctx)     # copies still queued from or into it run first
        del self.pinned[address]
        return (SUCCESS,)

    def _is_pinned(self, address, n):
        return any(base <= address and address + n <= base + max(size, 1) for base, (_, size) in self.pinned.items())

    def _htod(self, dstDevice, srcHost, ByteCount, stream, asynchronous):
        dst, src, n = _handle(CUdeviceptr, dstDevice), _host_pointer(srcHost), _c_int(ByteCount, 64)
        self._device_range(dst, n)
        self._host_range(src, n)
        # pageable memory is staged at the call (the caller may reuse it); page-locked memory is read when the
        # copy runs, so the caller must keep it unchanged until then
        staged = None if asynchronous and self._is_pinned(src, n) else ctypes.string_at(src, n)
        if staged is None:
            self.pinned_copies.append(("htod", n))

        def run():
            ctypes.memmove(dst, src if staged is None else staged, n)
            self._tick(n)
        self._enqueue(stream, run)
        return (SUCCESS,)

    def _dtoh(self, dstHost, srcDevice, ByteCount, stream, asynchronous):
        dst, src, n = _host_pointer(dstHost), _handle(CUdeviceptr, srcDevice), _c_int(ByteCount, 64)
        self._device_range(src, n)
        self._host_range(dst, n)
        if asynchronous and self._is_pinned(dst, n):  # into page-locked memory the call returns at once
            self.pinned_copies.append(("dtoh", n))

            def run():
                ctypes.memmove(dst, src, n)
                self._tick(n)
            self._enqueue(stream, run)
            return (SUCCESS,)
        # into pageable memory the call returns once the copy is done: the stream's earlier work first
        self._run(stream)
        ctypes.memmove(dst, src, n)
        self._tick(n)
        return (SUCCESS,)

    def cuMemcpyHtoD(self, dstDevice, srcHost, ByteCount):
        return self._htod(dstDevice, srcHost, ByteCount, self._stream(0), False)

    def cuMemcpyHtoDAsync(self, dstDevice, srcHost, ByteCount, hStream):
        return self._htod(dstDevice, srcHost, ByteCount, self._stream(hStream), True)

    def cuMemcpyDtoH(self, dstHost, srcDevice, ByteCount):
        return self._dtoh(dstHost, srcDevice, ByteCount, self._stream(0), False)

    def cuMemcpyDtoHAsync(self, dstHost, srcDevice, ByteCount, hStream):
        return self._dtoh(dstHost, srcDevice, ByteCount, self._stream(hStream), True)

    def cuMemcpyDtoDAsync(self, dstDevice, srcDevice, ByteCount, hStream):
        dst, src, n = _handle(CUdeviceptr, dstDevice), _handle(CUdeviceptr, srcDevice), _c_int(ByteCount, 64)
        stream = self._stream(hStream)
        self._device_range(dst, n)
        self._device_range(src, n)

        def run():
            ctypes.memmove(dst, src, n)
            self._tick(2 * n)
        self._enqueue(stream, run)
        return (SUCCESS,)

    # streams and events -----------------------------------------------------------------------------

    def cuStreamCreateWithPriority(self, flags, priority):
        ctx = self._ctx()
        flags, _ = _c_int(flags, 32), _c_int(priority, 32, signed=True)
        if flags & ~int(CUstream_flags.CU_STREAM_NON_BLOCKING):
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUstream(0)
        handle = next(self._ids)
        self.streams[handle] = Stream(ctx, flags)
        return SUCCESS, CUstream(handle)

    def cuStreamSynchronize(self, hStream):
        self._run(self._stream(hStream))
        return (SUCCESS,)

    def cuStreamQuery(self, hStream):
        return (CUresult.CUDA_ERROR_NOT_READY if self._stream(hStream).queue else SUCCESS,)

    def _event(self, handle):
        event = self.events.get(_handle(CUevent, handle))
        if event is None:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE)
        return event

    def cuStreamWaitEvent(self, hStream, hEvent, Flags):
        stream, event = self._stream(hStream), self._event(hEvent)
        if _c_int(Flags, 32):
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        if event.stream is not None and event.time_ns is None:
            source = event.stream
            self._enqueue(stream, lambda: self._run(source, until=lambda: event.time_ns is not None))
        return (SUCCESS,)

    def cuEventCreate(self, Flags):
        self._ctx()
        flags = _c_int(Flags, 32)
        known = sum(int(f) for f in CUevent_flags)
        if flags & ~known:
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUevent(0)
        handle = next(self._ids)
        self.events[handle] = Event(flags)
        return SUCCESS, CUevent(handle)

    def cuEventRecord(self, hEvent, hStream):
        event, stream = self._event(hEvent), self._stream(hStream)
        event.stream, event.time_ns, event.recorded = stream, None, True

        def run():
            event.time_ns = self.clock_ns
        self._enqueue(stream, run)
        return (SUCCESS,)

    def cuEventSynchronize(self, hEvent):
        event = self._event(hEvent)
        if event.stream is not None:
            self._run(event.stream, until=lambda: event.time_ns is not None)
        return (SUCCESS,)

    def cuEventQuery(self, hEvent):
        event = self._event(hEvent)
        return (CUresult.CUDA_ERROR_NOT_READY if event.recorded and event.time_ns is None else SUCCESS,)

    def cuEventElapsedTime(self, hStart, hEnd):
        start, end = self._event(hStart), self._event(hEnd)
        if (start.flags | end.flags) & CUevent_flags.CU_EVENT_DISABLE_TIMING or not (start.recorded and end.recorded):
            return CUresult.CUDA_ERROR_INVALID_HANDLE, 0.0
        if start.time_ns is None or end.time_ns is None:
            return CUresult.CUDA_ERROR_NOT_READY, 0.0
        return SUCCESS, (end.time_ns - start.time_ns) / 1e6


def _api(driver, name, method):
    """``method`` as the bindings' function: the call recorded, a refused call's CUresult returned."""
    def call(*args):
        driver.calls.append(name)
        try:
            return method(*args)
        except DriverError as e:
            n_values = {"cuDeviceGet": 1, "cuDeviceGetName": 1, "cuDeviceGetAttribute": 1,
                        "cuDevicePrimaryCtxRetain": 1, "cuModuleLoadData": 1, "cuModuleGetFunction": 1,
                        "cuMemAlloc": 1, "cuStreamCreateWithPriority": 1, "cuEventCreate": 1,
                        "cuIpcGetMemHandle": 1, "cuIpcOpenMemHandle": 1, "cuMemHostAlloc": 1,
                        "cuMemGetAddressRange": 2,
                        "cuEventElapsedTime": 1}.get(name, 0)
            return (e.result,) + (None,) * n_values
    call.__name__ = name
    call.__doc__ = getattr(_real, name).__doc__
    return call


def _kernel_of(ptx, entry):
    """The live jitorch kernel object whose PTX is ``ptx`` with entry ``entry`` (what the emulator runs).
    gc.get_objects() leaves out objects frozen out of the collector (tests/conftest.py freezes the heap after
    collection and after a test that imported many modules): a kernel made before a freeze and loaded after it
    is found once they are unfrozen."""
    for search in range(2):
        if search:
            gc.unfreeze()
        for obj in gc.get_objects():
            if isinstance(obj, GeneratedKernel) and obj.name == entry and obj.asm.rstrip("\0") == ptx:
                return obj
    raise LookupError(f"fake driver: no live jitorch kernel has the PTX of entry {entry}")


def _close_files(files):
    for fd in files.values():
        os.close(fd)


def install(monkeypatch, devices=1, **options):
    """Put a new `FakeDriver` in place of the bindings for a test (``monkeypatch`` undoes it): cuda_driver
    starts uninitialised and the driver backend is a fresh `DriverBackend`, with no allocator or module kept
    from a previous driver. ``options`` go to `FakeDriver`."""
    return _install(monkeypatch.setattr, devices, **options)


def install_in_process(devices=1, **options):
    """`install` for the whole life of a process (a child started by a test): the child's own driver, as a
    real child process would load its own, with nothing of the parent's state."""
    return _install(setattr, devices, **options)


def _install(setattr, devices, **options):
    from jitorch.runtime import cuda_backend, cuda_driver
    if not emulator.available():
        raise RuntimeError("the fake driver runs launches on the kernel emulator, which this host lacks")
    fake = FakeDriver(devices, **options)
    setattr(cuda_driver, "_bindings", lambda: fake)
    setattr(cuda_driver, "_state", {})
    setattr(cuda_backend, "_driver_backend", cuda_backend.DriverBackend())
    return fake
