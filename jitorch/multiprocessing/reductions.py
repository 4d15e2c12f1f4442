"""How tensors cross process boundaries: a handle to shared memory, never the elements.

Registered with ``multiprocessing.reduction.ForkingPickler``, which every ``multiprocessing`` queue, pipe and
process argument goes through. A CPU tensor is moved into shared memory (`Tensor.share_memory_`) and sent as
its storage's memory-file descriptor (passed over a Unix socket by ``multiprocessing``'s ``DupFd``) plus plain
numbers for its geometry: the handle names only functions of this module, never code of the sender's choosing.

A CUDA tensor travels as its allocation's CUDA IPC handle (64 bytes of plain data from ``cuIpcGetMemHandle``),
the byte offset of its storage in that allocation, the storage's size, the device index and its geometry; the
receiver maps the allocation with ``cuIpcOpenMemHandle`` (once per handle) and unmaps it when its last storage on
it dies. As in torch, the sending process must keep the tensor alive while receivers use it.
"""

from __future__ import annotations

from multiprocessing.reduction import DupFd, ForkingPickler

from ..nn.parameter import Parameter
from ..runtime import dtypes as _dt
from ..runtime import cuda_memory, shared_memory
from ..runtime.device import META
from ..runtime.storage import Storage
from ..tensor import Tensor

def rebuild_storage(descriptor, nbytes, dtype_name):
    """The storage behind a handle: this process's mapping of the sender's memory file."""
    return Storage.from_shared_file(descriptor.detach(), nbytes, _dt.to_dtype(dtype_name))


def reduce_storage(storage):
    """A CPU storage as (its memory file, its size, its dtype); the storage moves into shared memory first."""
    if storage.device.type != "cpu":
        raise RuntimeError(_device_error(storage.device))
    fd, nbytes = shared_memory.handle(storage)
    root = getattr(storage, "root", storage)
    return rebuild_storage, (DupFd(fd), nbytes, str(root.dtype).removeprefix("jitorch."))


def rebuild_tensor(cls, storage, dtype_name, shape, strides, offset, requires_grad):
    """A tensor of ``cls`` viewing ``storage`` (read as ``dtype_name``) with this geometry."""
    dtype = _dt.to_dtype(dtype_name)
    if storage.dtype != dtype:
        storage = storage.reinterpret(dtype)
    t = cls._make(storage, tuple(shape), tuple(strides), offset)
    if requires_grad:
        t.requires_grad_(True)
    return t


def rebuild_cuda_tensor(cls, handle, offset, count, storage_dtype, device_index, dtype_name, shape, strides,
                        storage_offset, requires_grad):
    """A tensor of ``cls`` on another process's CUDA allocation (IPC ``handle``), mapped here."""
    storage = cuda_memory.ipc_import(handle, offset, count, _dt.to_dtype(storage_dtype), device_index)
    return rebuild_tensor(cls, storage, dtype_name, shape, strides, storage_offset, requires_grad)


def rebuild_meta_tensor(cls, dtype_name, shape, strides, offset, requires_grad):
    """A meta tensor: only its geometry crosses over, as it has no elements."""
    dtype = _dt.to_dtype(dtype_name)
    t = cls._make(Storage.empty(offset + _span(shape, strides), dtype, META), tuple(shape), tuple(strides), offset)
    return t.requires_grad_(True) if requires_grad else t


def _span(shape, strides):
    return 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def _device_error(device):
    return f"a tensor on {device} cannot be sent to another process: move it to the CPU first (tensor.cpu())"


def reduce_tensor(tensor):
    """A tensor as its storage's handle plus its dtype, geometry, class and ``requires_grad``."""
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not support "
            "crossing process boundaries.  If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue).")
    geometry = (str(tensor.dtype).removeprefix("jitorch."), tensor._shape, tensor._stride, tensor._offset,
                tensor.requires_grad)
    if tensor.device.type == "meta":
        return rebuild_meta_tensor, (type(tensor), *geometry)
    if tensor.device.type == "cuda":
        root = getattr(tensor._storage, "root", tensor._storage)
        handle, offset, index = cuda_memory.ipc_export(root)
        return rebuild_cuda_tensor, (type(tensor), handle, offset, root.size, str(root.dtype).removeprefix("jitorch."),
                                     index, *geometry)
    if tensor.device.type != "cpu":
        raise RuntimeError(_device_error(tensor.device))
    shared_memory.share_tensors([tensor])  # before its storage's reducer, which would search for the tensors on it
    return rebuild_tensor, (type(tensor), tensor.untyped_storage(), *geometry)


def init_reductions():
    """Register the reducers with ``ForkingPickler`` (what torch.multiprocessing does on import)."""
    for cls in (Tensor, Parameter):
        ForkingPickler.register(cls, reduce_tensor)
    ForkingPickler.register(Storage, reduce_storage)
