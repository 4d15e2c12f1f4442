"""Errors that kernels find in their data, reported at the next synchronisation.

Kernels that can meet bad data (an index outside its dim) take the device's *error word* as their last
pointer: two int64 in device memory, zero while nothing went wrong. The first thread to meet a bad value
claims the word with a code naming the op, the dim and its size, and stores the value next to it. After
such a launch the device is marked, and its next blocking download (``.item()``, ``.cpu()``, ...) or
``jitorch.cuda.synchronize()`` reads the word back, clears it and raises the RuntimeError the CPU raises
for that op. This is when torch reports a device-side assert too, but here the device stays usable.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import cuda_backend

OPS = ("gather", "index_select", "scatter_add", "index_add", "index", "take", "scatter", "scatter.value",
       "index_copy", "index_fill", "put", "put_accumulate", "index_put", "index_put_accumulate")
_words: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # backend -> {device index: allocator Block}
_marked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # backend -> device indices to read back


def error_code(op, dim, size):
    """The code a kernel of ``op`` over a dim ``dim`` of ``size`` writes (op, dim and size packed)."""
    return 1 + OPS.index(op) + (dim << 4) + (size << 12)


def message(code, value):
    """The CPU's message for the error a kernel reported."""
    op, dim, size = OPS[(code & 15) - 1], (code >> 4) & 255, code >> 12
    if op == "index_select":  # torch's CPU kernel gives the value and size along dim 1 only (`_check_select_indices`)
        return f"INDICES element is out of DATA bounds, id={value} axis_dim={size}" if dim == 1 else \
            "index out of range in self"
    if op in ("take", "put", "put_accumulate"):
        return f"out of range: tried to access index {value} on a tensor of {size} elements."
    prefix = "index_copy_(): " if op == "index_copy" else ""
    if op.startswith("index_put") or op == "index":
        dim = 0  # x[..., idx]: torch numbers the index tensors, and the kernels take one
    return f"{prefix}index {value} is out of bounds for dimension {dim} with size {size}"


def word(device):
    """The device address of ``device``'s error word, which the launch about to happen may write: the
    device is marked for a read back at the next synchronisation."""
    backend = cuda_backend.current()
    words = _words.setdefault(backend, {})
    block = words.get(device.index)
    if block is None:  # kept as long as the backend: no storage needs to free it
        block = words[device.index] = backend.allocator(device.index).malloc(16, int(backend.stream()))
        backend.upload(block.address, np.zeros(2, np.int64), True)
    _marked.setdefault(backend, set()).add(device.index)
    return block.address


def check(index=None):
    """Raise the error a kernel reported on device ``index`` (every marked device by default) since the last
    check, clearing it; call only where the stream has been waited for."""
    backend = cuda_backend.current()
    marked = _marked.get(backend)
    if not marked:
        return
    for i in sorted(marked) if index is None else [index] if index in marked else []:
        marked.discard(i)
        address = _words[backend][i].address
        host = np.zeros(2, np.int64)
        backend.download(host, address)
        if host[0]:
            backend.upload(address, np.zeros(2, np.int64))
            raise RuntimeError(f"{message(int(host[0]), int(host[1]))} (found by a kernel on cuda:{i}; errors in "
                               "CUDA kernels are reported at the next synchronization)")

