"""jitorch.cuda: devices, streams, events and memory statistics, as ``torch.cuda``.

Importing this package loads nothing of CUDA: the driver is initialised by the
first query that needs it. Without a driver or a device, `is_available()` is
False, `device_count()` is 0, the memory statistics are 0 (as torch reports
them then), and everything that needs a device raises a RuntimeError saying
CUDA is unavailable.
"""

from __future__ import annotations

import contextlib

from ..legacy import types as _legacy_types


class _LazyDriver:
    """jitorch.runtime.cuda_driver, imported by the first CUDA call rather than by ``import jitorch``."""

    def __getattr__(self, name):
        from ..runtime import cuda_driver
        return getattr(cuda_driver, name)


_driver = _LazyDriver()


def _backend():
    from ..runtime import cuda_backend
    return cuda_backend.current()


def is_available() -> bool:
    """Whether a CUDA driver and at least one device can be used (always inside `emulated`)."""
    return _backend().available()


def device_count() -> int:
    """Number of usable CUDA devices."""
    return _backend().device_count()


@contextlib.contextmanager
def emulated(devices=1):
    """Inside the block, CUDA tensors live in host memory and every kernel launch runs the generated kernel's
    own code (its NVPTX IR, retargeted to the host, a cooperative thread per CUDA thread): CUDA programs run,
    slowly, on a machine without a GPU, with the results a GPU would give. Streams and events still need the
    driver.

    >>> with jitorch.cuda.emulated():
    ...     y = jitorch.ones(3, device="cuda").cumsum(0).cpu()
    """
    from ..runtime.cuda_backend import use_backend
    from ..backends.cuda.fake import FakeBackend
    with use_backend(FakeBackend(devices)):
        yield


def _index(device):
    """``device``'s index; None (or ``"cuda"``) is the current device."""
    from ..runtime.device import current_cuda_index, device as _device
    if isinstance(device, int):
        return device
    index = None if device is None else _device(device).index
    return current_cuda_index() if index is None else index


def current_device() -> int:
    """The index of the current device, `set_device`'s (raises without CUDA, as torch's does)."""
    _backend().require()
    from ..runtime.device import current_cuda_index
    return current_cuda_index()


def _cuda_index(device):
    """``device``'s index for `set_device` and `device`: ValueError for a device of another type, -1 for None."""
    if device is None:
        return -1
    if isinstance(device, int):
        return device
    from ..runtime.device import device as _device
    found = _device(device)
    if found.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {found}")
    return _index(found)


def set_device(device) -> None:
    """Make ``device`` (an index, ``"cuda:N"`` or a device) the current one in this thread: ``device="cuda"``,
    ``.cuda()`` and the per-device queries given no device then mean it. A negative index changes nothing, as
    in torch; a device that is not there raises."""
    index = _cuda_index(device)
    if index < 0:
        return
    from ..runtime.cuda_memory import canonical
    from ..runtime.device import device as _device, set_current_cuda_index
    canonical(_device("cuda", index))  # raises without CUDA, or for a device that is not there
    set_current_cuda_index(index)


class device:
    """Context manager that makes ``device`` the current CUDA device inside the block (None or a negative
    index: no change); see `set_device`."""

    def __init__(self, device):
        self.idx = _cuda_index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        set_device(self.prev_idx)
        return False


def is_bf16_supported(including_emulation=True) -> bool:
    """Whether bfloat16 works on CUDA: wherever CUDA is available, as jitorch's kernels target sm_80 and newer,
    which compute bfloat16 natively (so ``including_emulation`` changes nothing)."""
    return is_available()


def _device_generator(index):
    from ..ops.random_ops import device_generator
    from ..runtime.device import device as _device
    return device_generator(_device("cuda", index))


def manual_seed(seed) -> None:
    """Seed the current device's generator, which random ops on it draw from (without CUDA too: it is seeded
    for when there is a device, as torch's lazy seeding does)."""
    _device_generator(None).manual_seed(int(seed))


def manual_seed_all(seed) -> None:
    """Seed every device's generator."""
    from ..ops.random_ops import seed_devices
    seed_devices(int(seed))


def seed() -> None:
    """Seed the current device's generator from entropy."""
    _device_generator(None).seed()


def seed_all() -> None:
    """Seed every device's generator with one seed from entropy."""
    from ..ops.random_ops import fresh_seed, seed_devices
    seed_devices(fresh_seed())


def initial_seed() -> int:
    """The seed of the current device's generator (raises without CUDA, as torch's does)."""
    _backend().require()
    return _device_generator(None).initial_seed()


def get_device_name(device=None) -> str:
    """The name of a device (default device 0)."""
    return _backend().device_name(_index(device))


def synchronize(device=None) -> None:
    """Wait for all work queued on the device; raises the error a kernel reported (an index out of range)."""
    from ..runtime import cuda_backend, cuda_errors
    cuda_backend.current().synchronize_device(_index(device))
    cuda_errors.check(_index(device))


class Stream:
    """A CUDA stream: kernels and copies queued on it run in order."""

    def __init__(self, device=None, priority=0, _handle=None):
        self.device_index = _index(device)
        if _handle is None:
            drv = _driver.require()
            _driver.activate(self.device_index)
            _handle = _driver.check(drv.cuStreamCreateWithPriority(drv.CUstream_flags.CU_STREAM_NON_BLOCKING,
                                                                   priority))
        self.handle = _handle

    def synchronize(self):
        """Wait for the work queued on this stream."""
        _driver.synchronize_stream(self.handle)

    def query(self):
        """Whether the stream's work has finished."""
        return _done(_driver.require().cuStreamQuery(self.handle))

    def wait_event(self, event):
        _driver.check(_driver.require().cuStreamWaitEvent(self.handle, event.handle, 0))

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and int(self.handle) == int(other.handle)

    def __hash__(self):
        return hash(int(self.handle))

    def __repr__(self):
        return f"<jitorch.cuda.Stream device=cuda:{self.device_index} cuda_stream={int(self.handle):#x}>"


def _done(result):
    """A stream or event query's answer: NOT_READY is False; any other error (a kernel that failed, a bad
    handle) raises rather than reading as work still running."""
    drv = _driver.require()
    if result[0] == drv.CUresult.CUDA_ERROR_NOT_READY:
        return False
    _driver.check(result)
    return True


def _stack():
    from ..runtime.cuda_backend import streams
    return streams()


def default_stream(device=None) -> Stream:
    """The device's legacy default stream."""
    _driver.require()
    return Stream(device, _handle=0)


def current_stream(device=None) -> Stream:
    """The stream launches go to: the innermost `stream()` context's, else the default stream."""
    streams = _stack()
    return streams[-1] if streams else default_stream(device)


@contextlib.contextmanager
def stream(s):
    """Queue work on ``s`` inside the block (``None`` leaves the current stream)."""
    if s is None:
        yield
        return
    streams = _stack()
    streams.append(s)
    try:
        yield
    finally:
        streams.pop()


class Event:
    """A marker in a stream; ``enable_timing=True`` lets `elapsed_time` measure between two. As in torch, the
    driver's event is made at the first `record`, on the recording stream's device."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        _driver.require()  # without CUDA, making one raises at once, as in torch
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.handle = None
        self.device_index = None

    def record(self, stream=None):
        """Mark the current point of ``stream`` (default: the current stream)."""
        stream = stream or current_stream()
        drv = _driver.require()
        if self.handle is None:
            _driver.activate(stream.device_index)
            flags = 0 if self.enable_timing else int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
            if self.blocking:
                flags |= int(drv.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
            self.handle = _driver.check(drv.cuEventCreate(flags))
            self.device_index = stream.device_index
        elif stream.device_index != self.device_index:
            raise RuntimeError(f"Event device cuda:{self.device_index} does not match recording stream's device "
                               f"cuda:{stream.device_index}.")
        _driver.check(drv.cuEventRecord(self.handle, stream.handle))

    def synchronize(self):
        """Wait for the work before the event's record (nothing to wait for before one)."""
        if self.handle is not None:
            _driver.check(_driver.require().cuEventSynchronize(self.handle))

    def query(self):
        """Whether the work before the event's record has finished (True before a record, as in torch)."""
        return self.handle is None or _done(_driver.require().cuEventQuery(self.handle))

    def elapsed_time(self, end):
        """Milliseconds from this event to ``end`` (both recorded, both with timing)."""
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.handle is None or end.handle is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return _driver.check(_driver.require().cuEventElapsedTime(self.handle, end.handle))


def _allocator(device=None):
    """The device's caching allocator, or None without CUDA (statistics then read 0)."""
    from ..runtime import cuda_backend
    backend = cuda_backend.current()
    if not backend.available():
        return None
    return backend.allocator(_index(device))


def memory_allocated(device=None) -> int:
    """Bytes of device memory held by tensors (block sizes, rounded to 512)."""
    a = _allocator(device)
    return 0 if a is None else a.memory_allocated()


def max_memory_allocated(device=None) -> int:
    """The peak of `memory_allocated`."""
    a = _allocator(device)
    return 0 if a is None else a.max_memory_allocated()


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds from the driver."""
    a = _allocator(device)
    return 0 if a is None else a.memory_reserved()


def max_memory_reserved(device=None) -> int:
    a = _allocator(device)
    return 0 if a is None else a.max_memory_reserved()


def reset_peak_memory_stats(device=None) -> None:
    a = _allocator(device)
    if a is not None:
        a.reset_peak_memory_stats()


def empty_cache() -> None:
    """Give cached, unused device memory back to the driver."""
    a = _allocator()
    if a is not None:
        a.empty_cache()


def memory_stats(device=None) -> dict:
    """The allocator's counters (``"allocated_bytes.all.current"``, ...); empty without CUDA."""
    a = _allocator(device)
    return {} if a is None else a.memory_stats()


_LEGACY = _legacy_types("jitorch.cuda", is_cuda=True)
globals().update(_LEGACY)  # FloatTensor, LongTensor, ...: CUDA tensors' legacy types

__all__ = [*_LEGACY, "Event", "Stream", "current_device", "current_stream", "default_stream", "device",
           "device_count", "empty_cache", "get_device_name", "initial_seed", "is_available", "is_bf16_supported",
           "manual_seed", "manual_seed_all", "max_memory_allocated", "max_memory_reserved", "memory_allocated",
           "memory_reserved", "memory_stats", "reset_peak_memory_stats", "seed", "seed_all", "set_device", "stream",
           "synchronize"]
