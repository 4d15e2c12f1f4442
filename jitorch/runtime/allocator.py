"""A caching allocator for large CPU buffers (compiled kernels' outputs).

Touching fresh memory is expensive on virtual machines: a new 64 MiB result
can cost tens of milliseconds in page faults, more than the kernel that fills
it. So, in the spirit of PyTorch's caching allocators, a large buffer whose
tensor has died goes back to a pool and the next request of the same size
reuses it, already mapped.

A buffer is reused only when nothing but the pool refers to it: a NumPy view
of it that outlived its tensor (``t.numpy()``) keeps it out of the pool, which
CPython's reference counts tell exactly.
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

MIN_BYTES = 1 << 20          # smaller buffers are cheap to fault in: plain np.empty
MAX_CACHED_BYTES = 1 << 30   # beyond this the pool lets buffers go back to the system

_lock = threading.Lock()
_pool: dict = {}             # nbytes -> [flat uint8 arrays]
_cached = [0]


def empty(shape, dtype):
    """An uninitialised array of ``shape`` and NumPy ``dtype``, from the pool when one fits."""
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
        buf = np.empty(nbytes, np.uint8)
    return buf.view(dtype).reshape(shape), buf


def track(storage, buf):
    """Return ``buf`` to the pool when ``storage`` (the tensor memory built on it) dies."""
    if buf is not None:
        weakref.finalize(storage, _release, buf)


def _release(buf):
    with _lock:
        if _cached[0] + buf.nbytes > MAX_CACHED_BYTES:
            return
        _pool.setdefault(buf.nbytes, []).append(buf)
        _cached[0] += buf.nbytes


def cached_bytes():
    """Bytes held by the pool for reuse."""
    return _cached[0]


def empty_cache():
    """Let every pooled buffer go back to the system."""
    with _lock:
        _pool.clear()
        _cached[0] = 0
