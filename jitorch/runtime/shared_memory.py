"""CPU storage in memory other processes can map: ``share_memory_()`` and the handles jitorch.multiprocessing sends.

A shared storage's bytes live in an anonymous memory file (``memfd_create``, torch's "file_descriptor" sharing
strategy), mapped into each process that uses it. A process that receives the storage maps its own duplicate of
the file's descriptor, which ``multiprocessing`` passes over a Unix socket. The kernel counts the descriptors and
mappings, so the memory is freed when the last process lets go of it: there is no name to unlink, and nothing
leaks when a process is killed.

Moving a storage into shared memory replaces its buffer (as torch's ``share_memory_`` does). Every tensor on it
keeps its storage object, so it reads the new buffer once its cached NumPy view (``Tensor._arr``) is dropped.
`share_tensors` finds those tensors from the ones it is given, in proportion to them (`_forget_old_arrays`), and
searches the garbage collector's referrers only for a storage that something it cannot name refers to.
"""

from __future__ import annotations

import gc
import mmap
import os
import sys
import weakref

import numpy as np
from .forks import module_lock

_lock = module_lock(globals(), "_lock")
# storage (a root, never a reinterpretation) -> the memory file its buffer lives in
_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# (device, inode) of a memory file -> the storage on it here, so a storage that comes back is the same object
_BY_FILE: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


class SharedFile:
    """An anonymous memory file of ``nbytes`` mapped into this process.

    The descriptor stays open while the storage lives, so the storage can be sent again; ``mapping`` is what
    the storage's array views, and it outlives the storage for as long as any NumPy view of it does.
    """

    __slots__ = ("fd", "nbytes", "mapping", "__weakref__")

    def __init__(self, fd, nbytes):
        self.fd = fd
        self.nbytes = nbytes
        # mmap refuses a length of 0: an empty storage maps one byte and views none of it
        self.mapping = mmap.mmap(fd, max(nbytes, 1))

    @classmethod
    def create(cls, nbytes):
        """A new zero-filled memory file, mapped."""
        fd = os.memfd_create("jitorch-storage", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, max(nbytes, 1))
            return cls(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise

    def array(self, dtype, count):
        """The first ``count`` elements of NumPy ``dtype`` in the mapping (writable, shares memory)."""
        return np.frombuffer(self.mapping, dtype, count=count)


def _close(fd):
    os.close(fd)


def _file_key(fd):
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _adopt(storage, shared):
    _SHARED[storage] = shared
    _BY_FILE[_file_key(shared.fd)] = storage
    weakref.finalize(storage, _close, shared.fd)


def is_shared(storage):
    """Whether ``storage`` (or the storage it reinterprets) lives in shared memory."""
    return getattr(storage, "root", storage) in _SHARED


def share_storages(storages):
    """Move each CPU storage that is not shared yet into a memory file of its own, in place.

    Storages on other devices are left alone (CUDA memory is shared through IPC handles when sent, as in
    torch), as are meta storages, which have no elements. The caller holds the storages, so the tensors on
    them are searched for among the garbage collector's referrers (`share_tensors` does without).
    """
    moved = _move(storages)
    if moved:
        _drop_stale_views(moved)


def share_tensors(tensors):
    """`share_storages` of these tensors' storages; the tensors on them forget their arrays of the old buffers
    at a cost in proportion to the tensors found (`_forget_old_arrays`)."""
    _forget_old_arrays(_move([t._storage for t in tensors]), tensors)


def _move(storages):
    """The root storages among (or under) ``storages`` that this call moved into shared memory."""
    moved = []
    with _lock:
        for storage in storages:
            root = getattr(storage, "root", storage)
            if root in _SHARED or root.device.type != "cpu" or root.data is None or any(r is root for r in moved):
                continue
            shared = SharedFile.create(root.nbytes())
            data = shared.array(root.data.dtype, root.size)
            np.copyto(data, root.data)
            root.replace_buffer(data)
            _adopt(root, shared)
            moved.append(root)
    return moved


def _references_besides(obj, known):
    """How many references to ``obj`` there are besides ``known`` ones, for a caller that passes a local
    variable of its own (counted in ``known``): what the call itself adds is measured once (`_CALL`)."""
    return sys.getrefcount(obj) - known - _CALL


def _measure_call():
    probe = object()
    return _references_besides(probe, 1)


_CALL = 0
_CALL = _measure_call()


def _forget_old_arrays(roots, tensors):
    """Make every tensor on the moved root storages ``roots`` (a list this call empties) forget its array of the
    old buffer, finding them without a search of the whole process: the candidates are ``tensors``, their bases
    and the views their bases keep (``Tensor._views``). Each storage's references are then counted
    (``sys.getrefcount``): when the candidates on it and this frame's own reference account for all of them, no
    other tensor can be on it; otherwise (a detached alias, a view its base does not keep, a reinterpretation of
    its memory as another dtype) its referrers are searched (`_drop_stale_views`).
    """
    candidates = _candidates(tensors)
    while roots:
        root = roots.pop()  # this frame's one reference to it (`_references_besides`)
        on_it = [t for t in candidates if t._storage is root]
        if _references_besides(root, 1 + len(on_it)):
            _drop_stale_views([root])
            continue
        for t in on_it:
            t._arr = None


def _candidates(tensors):
    """``tensors``, their bases and the views each base keeps, without repeats."""
    found, seen, queue = [], set(), list(tensors)
    while queue:
        t = queue.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        found.append(t)
        queue.append(t._base)
        views = t._views
        if views:
            queue += [ref() for ref in views]
    return found


def _drop_stale_views(roots):
    """Make every tensor on ``roots``, or on a reinterpretation of one, forget its array of the old buffer.

    The tensors are the garbage collector's referrers of the storages (a tensor is any object with a cached
    ``_arr`` and a ``_storage``: the runtime does not import the tensor type, which lives above it; this module
    does not import the storage type either, which builds on it).
    """
    # gc.get_referrers skips the objects a gc.freeze() put in the permanent generation (as users freeze before
    # forking workers): a frozen tensor or reinterpretation kept reading the old buffer. They are searched too,
    # and frozen again after, with the objects made since the user's freeze (which the collector then leaves
    # alone as it does the others).
    frozen = gc.get_freeze_count()
    if frozen:
        gc.unfreeze()
    try:
        holders = list(roots)
        while holders:
            ids = {id(h) for h in holders}
            reinterpretations = []
            for obj in gc.get_referrers(*holders):
                if hasattr(obj, "read_root"):  # a storage reinterpreting one of them (``x.view(dtype)``)
                    if id(obj) not in ids and id(obj.root) in ids:
                        obj.read_root()
                        reinterpretations.append(obj)
                elif hasattr(type(obj), "_arr") and id(getattr(obj, "_storage", None)) in ids:
                    obj._arr = None
            holders = reinterpretations
    finally:
        if frozen:
            gc.freeze()


def new_shared(storage_type, count, dtype):
    """A new CPU storage of ``count`` zeros of ``dtype`` (``storage_type(array, dtype)``) in shared memory."""
    shared = SharedFile.create(count * dtype.itemsize)
    storage = storage_type(shared.array(dtype.np, count), dtype)
    with _lock:
        _adopt(storage, shared)
    return storage


def handle(storage):
    """What another process needs to map ``storage``: (descriptor, byte size), sharing it first if needed."""
    root = getattr(storage, "root", storage)
    share_storages([root])  # (the tensor's reducer shares its tensor first, `share_tensors`)
    shared = _SHARED[root]
    return shared.fd, shared.nbytes


def storage_from_descriptor(fd, nbytes, dtype, storage_type):
    """The storage of ``dtype`` on memory file ``fd``, a descriptor this call owns: it is kept while the storage
    lives, or closed at once when the file is mapped here already (a storage sent twice, or sent back).
    A new storage is ``storage_type(array, dtype)``."""
    size = os.fstat(fd).st_size
    if size < max(nbytes, 1):
        os.close(fd)
        raise RuntimeError(f"a shared storage of {nbytes} bytes arrived as a memory file of {size} bytes")
    with _lock:
        storage = _BY_FILE.get(_file_key(fd))
        if storage is not None:
            os.close(fd)
            return storage if storage.dtype == dtype else storage.reinterpret(dtype)
        shared = SharedFile(fd, nbytes)
        storage = storage_type(shared.array(dtype.np, nbytes // dtype.itemsize), dtype)
        _adopt(storage, shared)
        return storage
