"""``Tensor.storage()``: torch's deprecated TypedStorage, a typed view of a tensor's whole memory.

torch keeps it for old code that reads ``x.storage().size()``, ``data_ptr()`` or single elements; each
`TypedStorage` here wraps the tensor's `Storage` (the memory every view shares) and reads and writes its
elements through a flat tensor over it, so a write shows in every tensor on that memory and bumps their
version counter. Slices are refused as torch refuses them.
"""

from __future__ import annotations

import warnings

from ..runtime.storage import Storage

# dtype name -> torch's legacy storage class name (uint16/32/64 have none: ``storage_type()`` is None)
_LEGACY_NAMES = {"float64": "DoubleStorage", "float32": "FloatStorage", "float16": "HalfStorage",
                 "bfloat16": "BFloat16Storage", "uint8": "ByteStorage", "int8": "CharStorage",
                 "int16": "ShortStorage", "int32": "IntStorage", "int64": "LongStorage", "bool": "BoolStorage"}


def warn_removal():
    warnings.warn("TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only "
                  "storage class. This should only matter to you if you are using storages directly.  To access "
                  "UntypedStorage directly, use tensor.untyped_storage() instead of tensor.storage()",
                  UserWarning, stacklevel=3)


class TypedStorage:
    """The memory of a tensor as a flat sequence of its dtype's elements (torch's ``TypedStorage``)."""

    is_sparse = False

    def __init__(self, storage, flat_of):
        if not isinstance(storage, Storage):
            raise TypeError(f"TypedStorage wraps a Storage, not {type(storage).__name__}")
        self._untyped_storage = storage  # (torch's attribute name: ``Tensor.set_`` reads it)
        self._flat_of = flat_of  # storage -> the 1-D tensor over all of it

    dtype = property(lambda self: self._untyped_storage.dtype)
    device = property(lambda self: self._untyped_storage.device)
    is_cuda = property(lambda self: self._untyped_storage.device.type == "cuda")

    def size(self):
        """The number of elements of the dtype the memory holds."""
        return self._untyped_storage.size

    __len__ = size

    def element_size(self):
        """Bytes per element."""
        return self.dtype.itemsize

    def nbytes(self):
        """Bytes of memory."""
        return self._untyped_storage.size * self.dtype.itemsize

    def data_ptr(self):
        """The address of the memory's first element (not of a view's first element)."""
        return self._untyped_storage.data_ptr()

    def untyped(self):
        """The storage itself (``x.untyped_storage()``)."""
        return self._untyped_storage

    def is_shared(self):
        """Whether the memory is shared between processes."""
        return self._untyped_storage.is_shared()

    def share_memory_(self):
        """Move the memory into shared memory; returns this storage."""
        self._untyped_storage.share_memory_()
        return self

    def type(self):
        """torch's legacy storage type name (``'jitorch.FloatStorage'``, as ``Tensor.type()`` names jitorch)."""
        return f"jitorch.{self.pickle_storage_type()}"

    def pickle_storage_type(self):
        """The legacy type name without the package (``'FloatStorage'``)."""
        return _LEGACY_NAMES.get(self.dtype.name, "TypedStorage")

    def _index(self, idx):
        if isinstance(idx, slice):
            raise RuntimeError("slices are only supported in UntypedStorage.__getitem__")
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise RuntimeError(f"can't index a {type(self)} with {type(idx)}")
        n = self.size()
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for storage of size {n}")
        return idx % n

    def __getitem__(self, idx):
        warn_removal()
        return self._flat_of(self._untyped_storage)[self._index(idx)].item()

    def __setitem__(self, idx, value):
        warn_removal()
        flat = self._flat_of(self._untyped_storage)
        flat[idx if isinstance(idx, slice) else self._index(idx)] = value

    def tolist(self):
        """The elements as Python numbers."""
        return self._flat_of(self._untyped_storage).tolist()

    def __iter__(self):
        return iter(self.tolist())

    def fill_(self, value):
        """Set every element to ``value``; returns this storage."""
        self._flat_of(self._untyped_storage).fill_(value)
        return self

    def __repr__(self):
        return "\n".join([*(f" {v}" for v in self.tolist()),
                          f"[jitorch.storage.TypedStorage(dtype={self.dtype}, device={self.device}) "
                          f"of size {self.size()}]"])


# torch's legacy storage classes (``FloatStorage``): a tensor's ``storage()`` is an instance of its dtype's
LEGACY_CLASSES = {dtype_name: type(name, (TypedStorage,), {"__module__": "jitorch"})
                  for dtype_name, name in _LEGACY_NAMES.items()}


def typed_storage(storage, flat_of):
    """The TypedStorage of ``storage``: of its dtype's legacy class where torch has one."""
    return LEGACY_CLASSES.get(storage.dtype.name, TypedStorage)(storage, flat_of)
