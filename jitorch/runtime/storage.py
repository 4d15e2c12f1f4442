"""Storage: one flat buffer, its dtype, its device, and a version counter.

On CPU the buffer is a 1-D NumPy array; every tensor on it is a strided view.
A ``meta`` storage has a size and no data. The version counter counts in-place
writes; every view of the storage shares it, and autograd compares it with the
version it saw when it saved a tensor.
"""

from __future__ import annotations

import numpy as np

from . import profiling, shared_memory
from .device import CPU, DEVICE_BACKENDS, META
from .grad_mode import INFERENCE_OPEN, _state as _grad_state


class Storage:
    """A flat buffer. ``data`` may be given as any C-contiguous array: it is
    flattened on first use, which spares short-lived results the reshape."""

    __slots__ = ("_data", "dtype", "device", "size", "_version", "_ptr", "inference", "__weakref__")
    on_device = False  # elements in device memory (a CUDA storage), not in a host array

    # (`Tensor._fresh` makes a kernel result's storage without this call: a change here goes there too)
    def __init__(self, data, dtype, device=CPU, size=None):
        self._data = data
        self.dtype = dtype
        self.device = device
        self.size = data.size if data is not None else size
        self._version = 0
        self._ptr = None
        # allocated inside inference_mode: its tensors are inference tensors
        self.inference = INFERENCE_OPEN[0] > 0 and _grad_state.inference
        if profiling.RECORDER is not None and data is not None:
            profiling.RECORDER.allocated(self)

    @property
    def data(self):
        d = self._data
        if d is not None and d.ndim != 1:
            d = self._data = d.reshape(-1)
        return d

    @classmethod
    def empty(cls, n, dtype, device=CPU):
        if device.type == "meta":
            return cls(None, dtype, device, n)
        if device.type == "cpu":
            return cls(np.empty(n, dtype.np), dtype, device)
        return DEVICE_BACKENDS[device.type].empty_storage(n, dtype, device)

    def no_data_error(self, tensor):
        """The error for reading the elements of a storage that has none."""
        return NotImplementedError(f"Cannot access the data of a tensor on device '{tensor.device}'")

    def nbytes(self):
        return self.size * self.dtype.itemsize

    def data_ptr(self):
        """The buffer's address (cached: a storage's buffer never moves)."""
        ptr = self._ptr
        if ptr is None:
            data = self.data
            ptr = self._ptr = 0 if data is None else data.__array_interface__["data"][0]
        return ptr

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"Storage(size={self.size}, dtype={self.dtype}, device='{self.device}')"

    def reinterpret(self, dtype):
        """This memory read as ``dtype`` (``x.view(dtype)``): the same buffer and the same version counter,
        as many whole elements of ``dtype`` as its bytes hold."""
        root = getattr(self, "root", self)
        cls = _REINTERPRETED.get(type(root))
        if cls is None:
            cls = _REINTERPRETED[type(root)] = type(f"Reinterpreted{type(root).__name__}",
                                                    (Reinterpretation, type(root)), {"__slots__": ("root",)})
        view = object.__new__(cls)
        view.root, view.dtype, view.device = root, dtype, root.device
        view.size = root.nbytes() // dtype.itemsize
        view.inference = root.inference
        view.read_root()
        return view

    def replace_buffer(self, data):
        """Move the elements to ``data``, a 1-D array of as many (``share_memory_()``). Tensors on this storage
        read ``data`` once their cached arrays are dropped, and reinterpretations once they `read_root`."""
        self._data = data
        self._ptr = None

    def share_memory_(self):
        """Move this storage into shared memory (a no-op when it is shared already, or not on the CPU)."""
        shared_memory.share_storages([self])
        return self

    def is_shared(self):
        """Whether this storage lives in shared memory."""
        return shared_memory.is_shared(self)

    @classmethod
    def new_shared(cls, n, dtype):
        """A new CPU storage of ``n`` zeros of ``dtype`` in shared memory (torch's ``_new_shared``)."""
        return shared_memory.new_shared(cls, n, dtype)

    @classmethod
    def from_shared_file(cls, fd, nbytes, dtype):
        """The CPU storage of ``dtype`` on a memory file another process shared (see `shared_memory`)."""
        return shared_memory.storage_from_descriptor(fd, nbytes, dtype, cls)


class Reinterpretation:
    """A storage's memory read as another dtype (mixed into a subclass of the root's storage class)."""

    __slots__ = ()

    # writes through either bump the one counter every view of the memory shares
    _version = property(lambda st: st.root._version, lambda st, v: setattr(st.root, "_version", v))

    def read_root(self):
        """Point at the root's current buffer (again, after the root moved into shared memory)."""
        root, data = self.root, self.root.data
        self._data = None if data is None else data.view(np.uint8)[:self.size * self.dtype.itemsize].view(self.dtype.np)
        self._ptr = root.data_ptr() if root.on_device else None


_REINTERPRETED: dict = {}  # storage class -> its reinterpreting subclass


def storage_of_array(arr):
    """Wrap a NumPy array without copying: (storage array, offset, element strides), the strides exactly the
    array's (a size-1 or empty dim's too, as torch.from_numpy keeps them).

    Works for any array whose strides are non-negative multiples of its item
    size; otherwise returns None and the caller copies.
    """
    item = arr.itemsize
    strides = arr.strides
    if any(s < 0 or s % item for s in strides):
        return None
    elements = tuple(s // item for s in strides)
    if arr.size == 0:
        return np.empty(0, arr.dtype), 0, elements
    if arr.flags.c_contiguous:
        return arr.reshape(-1), 0, elements
    span = 1 + sum((n - 1) * s for n, s in zip(arr.shape, strides)) // item
    flat = np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(item,))
    return flat, 0, elements


__all__ = ["Storage", "storage_of_array", "META"]
