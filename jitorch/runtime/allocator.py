"""A caching allocator for large CPU buffers (compiled kernels' outputs).

Touching fresh memory is expensive on virtual machines: a new 64 MiB result
can cost tens of milliseconds in page faults, more than the kernel that fills
it. So, in the spirit of PyTorch's caching allocators, a large buffer whose
tensor has died goes back to a pool and the next request of the same size
reuses it, already mapped.

A buffer is reused only when nothing but the pool refers to it: a NumPy view
of it that outlived its tensor (``t.numpy()``) keeps it out of the pool, which
CPython's reference counts tell exactly.

Eager ops' results are NumPy's own allocations, which go through the C library's malloc. glibc's defaults
return large freed blocks to the system at once (``mmap``/``munmap`` above a threshold, and a trim of the
heap's top past another), so every eager step faults its temporaries in anew: 14,000 page faults and a fifth
of the CPU time of an eager GPT training step. `keep_freed_memory` raises both thresholds, as PyTorch's
caching allocator keeps its blocks.

The malloc behind NumPy aligns its blocks to 16 bytes, so a buffer's first byte lay 0, 16, 32 or 48 bytes past a
cache line; a kernel's 64-byte vectors then straddle two lines at every row of a tile (the attention kernels ran
4-9% slower on such arrays than on aligned ones). `aligned_bytes` and the pool's buffers start a cache line.
"""

from __future__ import annotations

import ctypes
import os
import sys
import weakref

import numpy as np
from .array_address import data_address
from .forks import module_lock

MIN_BYTES = 1 << 20          # smaller buffers are cheap to fault in: plain np.empty
MAX_CACHED_BYTES = 1 << 30   # beyond this the pool lets buffers go back to the system
ALIGNMENT = 64               # bytes: a cache line, and one 512-bit vector

_lock = module_lock(globals(), "_lock")
_pool: dict = {}             # nbytes -> [flat uint8 arrays, ALIGNMENT - 1 bytes longer]
_cached = [0]
_tracked: set = set()        # ids of the buffers `track` tied to a storage (each held once by its finalizer)


def aligned_bytes(nbytes):
    """An uninitialised flat uint8 array of ``nbytes`` whose first byte starts a cache line (`ALIGNMENT`); its
    base owns the memory, a few bytes longer."""
    return _aligned(np.empty(nbytes + ALIGNMENT - 1, np.uint8), nbytes)


def _aligned(raw, nbytes):
    """The ``nbytes`` of ``raw`` (a flat uint8 array ``ALIGNMENT - 1`` bytes longer) from its first aligned byte."""
    skip = -data_address(raw) % ALIGNMENT
    return raw[skip:skip + nbytes]


def empty(shape, dtype):
    """An uninitialised array of ``shape`` and NumPy ``dtype``, from the pool when one fits, and then aligned to
    `ALIGNMENT` (a small one is NumPy's own: an array that owns its memory, which the autograd engine takes as
    a gradient without a copy); returns (the array, the pool's buffer or None)."""
    dtype = np.dtype(dtype)
    count = 1
    for n in shape:
        count *= n
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype), None
    buf = None
    with _lock:
        free = _pool.get(nbytes)
        while free:
            candidate = free.pop()
            _cached[0] -= nbytes
            # the list held one reference and getrefcount's argument is another: 2 means no one else
            if sys.getrefcount(candidate) <= 2:
                buf = candidate
                break
    if buf is None:
        buf = np.empty(nbytes + ALIGNMENT - 1, np.uint8)
    return _aligned(buf, nbytes).view(dtype).reshape(shape), buf


def track(storage, buf):
    """Return ``buf`` to the pool when ``storage`` (the tensor memory built on it, or the array a tensor's
    storage holds as its data) dies."""
    if buf is not None:
        with _lock:
            _tracked.add(id(buf))
        weakref.finalize(storage, _release, buf)


def only_view(memory):
    """Whether ``memory`` (an array `empty` gave out, as a tensor's storage holds it) is the only NumPy array on
    its pool buffer: its buffer is one `track` tied to a storage, and nothing refers to the buffer but
    ``memory`` (as its base) and the finalizer (any other view of ``memory`` would have the buffer as its base
    too). The autograd engine then takes a gradient for ``.grad`` without a copy, as it takes one that owns its
    memory."""
    buf = memory.base
    # (the references: memory's base, the finalizer's, this frame's and getrefcount's argument)
    return buf is not None and id(buf) in _tracked and sys.getrefcount(buf) == 4


def _release(buf):
    nbytes = buf.nbytes - ALIGNMENT + 1
    with _lock:
        _tracked.discard(id(buf))
        if _cached[0] + nbytes > MAX_CACHED_BYTES:
            return
        _pool.setdefault(nbytes, []).append(buf)
        _cached[0] += nbytes


# glibc's mallopt parameters, and the values `keep_freed_memory` sets: blocks up to 32 MiB (the largest
# glibc's own adaptive threshold reaches) come from the heap, which keeps up to 256 MiB free at its top
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory():
    """Make glibc's malloc keep freed large blocks for reuse, not unmap them (see the module's
    docstring); returns whether it did. A no-op where the C library has no ``mallopt`` (not glibc), or
    when the environment sets ``JITORCH_KEEP_FREED_MEMORY=0``."""
    if os.environ.get("JITORCH_KEEP_FREED_MEMORY", "1").strip() == "0" or not sys.platform.startswith("linux"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # (the process's own symbols, libc's among them)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def cached_bytes():
    """Bytes held by the pool for reuse."""
    return _cached[0]


def empty_cache():
    """Let every pooled buffer go back to the system."""
    with _lock:
        _pool.clear()
        _cached[0] = 0
