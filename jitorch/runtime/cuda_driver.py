"""The CUDA driver API through cuda-python, loaded and initialised on first use.

Nothing here runs at ``import jitorch``: the first CUDA query imports
``cuda.bindings.driver`` and calls ``cuInit``. With no driver library
(cuda-pathfinder's ``DynamicLibNotFoundError``), no bindings, or no device,
`available()` is False and `require()` raises the RuntimeError CUDA tensor
creation gives. Modules are loaded from PTX once per device and kept; launches
and asynchronous copies go to a stream (the current one by default).

A CUDA context is current per thread: every call here that needs one makes
device 0's primary context current on a thread that has none yet, so CUDA work
from a new thread (or a script that allocates before anything else) does not
fail with CUDA_ERROR_INVALID_CONTEXT.
"""

from __future__ import annotations

import ctypes
import threading

_lock = threading.RLock()
_state: dict = {}
_local = threading.local()   # .ctx: the primary context this thread made current


def _bindings():
    """The ``cuda.bindings.driver`` module (ImportError without cuda-python). The one place the bindings are
    obtained: tests put a fake driver (tests/cuda/fake_driver.py) in its place."""
    from cuda.bindings import driver
    return driver


def _driver():
    """The initialised ``cuda.bindings.driver`` module, or None (reason kept in _state)."""
    if "ok" not in _state:
        with _lock:
            if "ok" not in _state:
                _state.update(_initialise())
    return _state.get("driver") if _state["ok"] else None


def _initialise():
    try:
        driver = _bindings()
    except ImportError as e:
        return {"ok": False, "reason": f"cuda-python is not installed ({e})"}
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # DynamicLibNotFoundError from cuda.pathfinder: no libcuda on this machine
        return {"ok": False, "reason": f"no CUDA driver ({type(e).__name__}: {e})"}
    if err != driver.CUresult.CUDA_SUCCESS:
        return {"ok": False, "reason": f"cuInit failed: {err.name}"}
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return {"ok": False, "reason": "no CUDA device"}
    return {"ok": True, "driver": driver, "count": count, "contexts": {}, "modules": {}, "attributes": {}}


def available():
    """Whether a driver and at least one device are present."""
    return _driver() is not None


def unavailable_reason():
    _driver()
    return _state.get("reason", "")


def require():
    """The driver module, or the RuntimeError saying CUDA is unavailable."""
    drv = _driver()
    if drv is None:
        no_cuda()
    return drv


def no_cuda():
    """Raise the RuntimeError that says CUDA is unavailable (and why, when the driver says)."""
    reason = unavailable_reason()
    raise RuntimeError(
        "CUDA is not available: jitorch found no CUDA GPU or driver on this machine "
        f"(jitorch.cuda.is_available() is False{': ' + reason if reason else ''})"
    )


def check(result):
    """Unpack a cuda-python ``(CUresult, *values)`` tuple, raising RuntimeError on an error."""
    drv = require()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, text = drv.cuGetErrorString(err)
        raise RuntimeError(f"CUDA error: {err.name}: {text.decode() if isinstance(text, bytes) else text}")
    return values[0] if len(values) == 1 else tuple(values) if values else None


def device_count():
    return _state["count"] if available() else 0


def _device(index):
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} (device_count() is {count})")
    return check(require().cuDeviceGet(index))


def device_name(index=0):
    name = check(require().cuDeviceGetName(256, _device(index)))
    return name.split(b"\0", 1)[0].decode()


def attribute(name, index=0):
    """A device attribute by its CU_DEVICE_ATTRIBUTE_ suffix (``"MULTIPROCESSOR_COUNT"``), asked once: every
    launch needs the multiprocessor count, and attributes do not change."""
    drv = require()
    key = (name, index)
    value = _state["attributes"].get(key)
    if value is None:
        attr = getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        value = _state["attributes"][key] = check(drv.cuDeviceGetAttribute(attr, _device(index)))
    return value


def activate(index=0):
    """Make device ``index``'s primary context current on this thread (retained once per process); a call
    for the device already current on this thread costs no driver call."""
    drv = require()
    ctx = _state["contexts"].get(index)
    if ctx is None:
        with _lock:
            ctx = _state["contexts"].get(index)
            if ctx is None:
                ctx = _state["contexts"][index] = check(drv.cuDevicePrimaryCtxRetain(_device(index)))
    if getattr(_local, "ctx", None) is not ctx:
        check(drv.cuCtxSetCurrent(ctx))
        _local.ctx = ctx
    return ctx


def _context():
    """The driver module, with a context current on this thread (device 0's if the thread had none)."""
    drv = require()
    current = getattr(_local, "ctx", None)
    if not any(current is ctx for ctx in _state["contexts"].values()):
        activate(0)
    return drv


def function(ptx, name, index=0):
    """The kernel ``name`` of a PTX module, loaded on device ``index`` once and kept."""
    key = (index, ptx, name)
    fn = _state["modules"].get(key) if available() else None
    if fn is None:
        drv = require()
        activate(index)
        with _lock:
            module = check(drv.cuModuleLoadData(ptx.encode() + b"\0"))
            fn = _state["modules"][key] = check(drv.cuModuleGetFunction(module, name.encode()))
    return fn


def launch(fn, grid, block, pointers, stream=0, shared_bytes=0):
    """Launch ``fn`` asynchronously on ``stream`` with device pointers as its arguments."""
    grid = tuple(grid) + (1,) * (3 - len(grid)) if isinstance(grid, tuple) else (grid, 1, 1)
    # cuda-python packs a c_void_p parameter only from a Python int (a NumPy integer is a TypeError, and a
    # CUdeviceptr would pass the address of its own storage), so every pointer becomes an int here
    params = (tuple(int(p) for p in pointers), tuple(ctypes.c_void_p for _ in pointers))
    check(_context().cuLaunchKernel(fn, *grid, block, 1, 1, shared_bytes, stream, params, 0))


def malloc(nbytes):
    drv = _context()
    err, ptr = drv.cuMemAlloc(nbytes)
    if err == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        raise MemoryError(f"cuMemAlloc({nbytes}) is out of memory")
    check((err,))
    return int(ptr)


def free(address):
    check(_context().cuMemFree(address))


def copy_to_device(dst, host, stream=0, non_blocking=False):
    """Copy a C-contiguous NumPy array's bytes to device address ``dst``."""
    drv = _context()
    src = host.__array_interface__["data"][0]
    if non_blocking:
        check(drv.cuMemcpyHtoDAsync(dst, src, host.nbytes, stream))
    else:
        check(drv.cuMemcpyHtoD(dst, src, host.nbytes))


def copy_to_host(host, src, stream=0, non_blocking=False):
    """Copy ``host.nbytes`` bytes from device address ``src`` into a C-contiguous NumPy array."""
    drv = _context()
    dst = host.__array_interface__["data"][0]
    if non_blocking:
        check(drv.cuMemcpyDtoHAsync(dst, src, host.nbytes, stream))
    else:
        synchronize_stream(stream)
        check(drv.cuMemcpyDtoH(dst, src, host.nbytes))


def copy_on_device(dst, src, nbytes, stream=0):
    check(_context().cuMemcpyDtoDAsync(dst, src, nbytes, stream))


def synchronize_stream(stream=0):
    check(_context().cuStreamSynchronize(stream))


def synchronize():
    check(_context().cuCtxSynchronize())


class DriverMemory:
    """The caching allocator's backend on the real driver, for device ``index``: cuMemAlloc allocates on the
    device of the calling thread's current context, so that device's context is made current first."""

    def __init__(self, index=0):
        self.index = index

    def malloc(self, nbytes):
        activate(self.index)
        return malloc(nbytes)

    def free(self, address):
        free(address)


# Interprocess memory (CUDA IPC) ---------------------------------------------------------------------------------

IPC_HANDLE_BYTES = 64   # sizeof(CUipcMemHandle): an opaque, plain-data handle


def ipc_get_handle(base, index=0):
    """The 64 bytes of the IPC handle of the allocation that starts at device address ``base`` (the pointer
    cuMemAlloc returned: the driver exports whole allocations, never a pointer inside one). A driver that
    cannot export it (a device without unified addressing, memory from a stream-ordered pool or from
    cuMemCreate) raises RuntimeError naming the driver's error, so nothing unusable is ever sent."""
    drv = require()
    activate(index)
    err, handle = drv.cuIpcGetMemHandle(base)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, text = drv.cuGetErrorString(err)
        raise RuntimeError(f"CUDA IPC cannot export the allocation at {base:#x} on cuda:{index} "
                           f"(cuIpcGetMemHandle: {err.name}: {text.decode() if isinstance(text, bytes) else text}): "
                           "this memory cannot be shared with another process; copy the tensor to the CPU "
                           "(tensor.cpu()) and send that instead")
    return ctypes.string_at(handle.getPtr(), IPC_HANDLE_BYTES)


def ipc_open_handle(data, index=0):
    """(device address in this process, byte size) of the allocation exported as IPC handle ``data`` (64
    bytes), mapped on device ``index``. Peer access is enabled lazily if the allocation is on another device.
    The driver counts the opens of a handle per context; each needs one `ipc_close_handle`. The size, asked
    of the driver (cuMemGetAddressRange), lets the receiver check what the sender said lies inside."""
    if not isinstance(data, bytes) or len(data) != IPC_HANDLE_BYTES:
        raise RuntimeError(f"a CUDA IPC memory handle is {IPC_HANDLE_BYTES} bytes, got "
                           f"{len(data) if isinstance(data, bytes) else type(data).__name__}")
    drv = require()
    activate(index)
    handle = drv.CUipcMemHandle()
    ctypes.memmove(handle.getPtr(), data, IPC_HANDLE_BYTES)
    flags = int(drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)  # the only flag the driver defines
    address = int(check(drv.cuIpcOpenMemHandle(handle, flags)))
    _, size = check(drv.cuMemGetAddressRange(address))
    return address, int(size)


def ipc_close_handle(address, index=0):
    """Unmap an allocation opened with `ipc_open_handle` (once per open)."""
    activate(index)
    check(require().cuIpcCloseMemHandle(address))


# Page-locked host memory ----------------------------------------------------------------------------------------

def host_alloc(nbytes):
    """The address of ``nbytes`` of page-locked host memory (cuMemHostAlloc, PORTABLE: pinned for every
    context, so copies to any device run asynchronously from it)."""
    drv = _context()
    err, ptr = drv.cuMemHostAlloc(max(nbytes, 1), drv.CU_MEMHOSTALLOC_PORTABLE)
    if err == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        raise MemoryError(f"cuMemHostAlloc({nbytes}) is out of memory")
    check((err,))
    return int(ptr)


def host_free(address):
    """Free page-locked host memory from `host_alloc` (the driver waits for no copy: callers keep it alive
    until their copies have run)."""
    check(_context().cuMemFreeHost(address))
