"""DLPack exchange of tensors (the Python array API's protocol, as torch and NumPy implement it).

`to_dlpack` is ``Tensor.__dlpack__``: a capsule over the tensor's memory, versioned (DLPack 1.x, with the
read-only and copied flags) when the consumer passes ``max_version >= (1, 0)``, the legacy ``dltensor``
otherwise. `from_dlpack` takes any object with ``__dlpack__``/``__dlpack_device__`` (a NumPy array, a torch
tensor, a jitorch tensor) or a capsule, and shares its memory: writes through either side show in both.

The capsule plumbing (structures, names, deleters) is the runtime's (`runtime.dlpack`).
"""

from __future__ import annotations

import numpy as np

from ..runtime import dlpack as _dl
from ..runtime.device import current_cuda_index, to_device
from ..runtime.storage import Storage
from ..runtime.strided import contiguous_strides
from . import registry

DLDeviceType = _dl.DLDeviceType


def dlpack_device(t):
    """``Tensor.__dlpack_device__``: (device type, index) in DLPack's terms."""
    if t.device.type == "cpu":
        return (DLDeviceType.kDLCPU, 0)
    if t.device.type == "cuda":
        return (DLDeviceType.kDLCUDA, t.device.index)
    raise ValueError(f"Unknown device type {t.device.type} for Dlpack")


def _sync_for_consumer(t, stream):
    """Make ``t``'s pending work visible on the consumer's CUDA ``stream`` (the protocol's stream argument)."""
    if t.device.index != current_cuda_index():
        raise BufferError(f"Can't export tensors on a different CUDA device index. Expected: {t.device.index}. "
                          f"Current device: {current_cuda_index()}.")
    if stream == -1:  # the consumer asked for no synchronisation
        return
    if stream == 2:
        raise BufferError("per-thread default stream is not supported.")
    if stream == 0:  # ambiguous on CUDA: the spec reserves 1 (legacy) and 2 (per-thread) for the defaults
        raise AssertionError("unsupported stream on CUDA: 0.")
    target = 0 if stream in (None, 1) else stream
    backend = _cuda_backend().current()
    if int(backend.stream()) != target:
        # The consumer's stream may run before work still queued on ours: wait for ours on the host, after
        # which anything the consumer queues sees the finished values.
        backend.synchronize()


def to_dlpack(t, *, stream=None, max_version=None, dl_device=None, copy=None):
    """``Tensor.__dlpack__``: a DLPack capsule sharing ``t``'s memory (see the module docstring)."""
    if t.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    t._values_read()  # a tracer cannot follow memory handed to another library
    if t.device.type == "meta":
        raise BufferError("Cannot pack tensors on meta")
    if stream is not None and type(stream) is not int:
        raise TypeError("stream must be ``int`` or ``none``")
    own = dlpack_device(t)
    if t.device.type == "cuda":
        _sync_for_consumer(t, stream)
    elif stream is not None and stream != -1:
        raise AssertionError("stream should be None on cpu.")
    copied = False
    if dl_device is not None and tuple(dl_device) != tuple(own):
        kind, index = dl_device
        if copy is False:
            raise BufferError(f"Can't export a tensor on {t.device} to DLPack device {tuple(dl_device)} "
                              "without a copy, and copy=False")
        if kind == DLDeviceType.kDLCPU:
            t = t.cpu()
        elif kind == DLDeviceType.kDLCUDA:
            t = t.to(f"cuda:{index}")
        else:
            raise BufferError(f"Can't export a tensor to DLPack device {tuple(dl_device)}: jitorch has kDLCPU and "
                              "kDLCUDA tensors")
        copied = True
    if copy and not copied:
        t = t.clone()
        copied = True
    storage = t._storage
    versioned = max_version is not None and max_version[0] >= 1
    data = None if storage.on_device else storage.data
    read_only = data is not None and not data.flags.writeable
    if read_only and not versioned:
        raise BufferError("Cannot export readonly array since signalling readonly is unsupported by DLPack "
                          "(supported by newer DLPack version).")
    # The capsule keeps the storage, and on CPU its current array: that memory stays valid even if the
    # storage later moves its elements (share_memory_).
    return _dl.export(t.data_ptr(), dlpack_device(t), t.dtype, t._shape, t._stride, (storage, data),
                      versioned=versioned, read_only=read_only, copied=copied)


def _target_device(device):
    """A jitorch device as a DLPack (device type, index) pair."""
    device = to_device(device)
    if device.type == "cpu":
        return (DLDeviceType.kDLCPU, 0)
    if device.type == "cuda":
        return (DLDeviceType.kDLCUDA, current_cuda_index() if device.index is None else device.index)
    raise BufferError(f"from_dlpack: can't place a DLPack tensor on device '{device}'")


def from_dlpack(ext_tensor, *, device=None, copy=None):
    """A tensor sharing the memory of ``ext_tensor``: an object with ``__dlpack__`` and ``__dlpack_device__``
    (NumPy, torch, CuPy, jitorch...) or a DLPack capsule (consumed once). ``copy=True`` copies, ``copy=False``
    raises BufferError where sharing is impossible (negative strides, another device), ``device`` moves the
    result there (a copy unless it is where the memory is)."""
    if not hasattr(ext_tensor, "__dlpack__"):
        if device is not None or copy is not None:
            raise AssertionError("device and copy kwargs not supported when ext_tensor is already a DLPack capsule.")
        return _tensor_of(_dl.consume(ext_tensor), copy)
    ext_device = tuple(ext_tensor.__dlpack_device__())
    kwargs = {"max_version": _dl.VERSION}
    if copy is not None:
        kwargs["copy"] = copy
    cross_device = False
    if device is not None:
        target = _target_device(device)
        cross_device = ext_device != target
        if not cross_device:
            kwargs["dl_device"] = target
        elif copy is False:
            raise ValueError(f"cannot move DLPack tensor from device {ext_device} to {target} without copying. "
                             "Set copy=None or copy=True.")
    if ext_device[0] == DLDeviceType.kDLCUDA:
        # the stream we will use it on: the spec numbers the legacy default stream 1
        kwargs["stream"] = int(_cuda_backend().current().stream()) or 1
    # Older producers know fewer keywords (NumPy 1.26: only ``stream``): drop them one by one, as torch does
    capsule, producer_copies = None, True
    for drop in (None, "max_version", "copy", "dl_device"):
        if drop is not None:
            producer_copies = producer_copies and drop != "copy"
            kwargs.pop(drop, None)
        try:
            capsule = ext_tensor.__dlpack__(**kwargs)
            break
        except TypeError:
            if drop == "dl_device":
                raise
    t = _tensor_of(_dl.consume(capsule), copy)
    if copy and not producer_copies and not cross_device:
        t = t.clone()
    if cross_device:
        t = t.to(device)
    return t


def _tensor_of(imported, copy):
    """The tensor over an `runtime.dlpack.Imported` (copied where jitorch cannot share it and ``copy`` allows)."""
    Tensor = registry.Tensor
    dtype, shape = imported.dtype, imported.shape
    count = 1
    for n in shape:
        count *= n
    strides = imported.strides if imported.strides is not None else contiguous_strides(shape)
    on_cuda = imported.device_type in (DLDeviceType.kDLCUDA, DLDeviceType.kDLCUDAManaged)
    if count == 0:
        imported.release()
        device = _cuda_device(imported.device_id) if on_cuda else to_device("cpu")
        return Tensor._empty(shape, dtype, device)
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    if low < 0:  # jitorch's strides are never negative: only a copy can hold these values
        if copy is False or on_cuda:
            raise BufferError(f"from_dlpack: strides {list(strides)} are negative, which jitorch tensors cannot "
                              "share; " + ("copy the tensor on its device first" if on_cuda else
                                           "pass copy=None or copy=True to copy it"))
        imported.data += low * dtype.itemsize
        flat = _dl.host_array(imported, span)
        item = dtype.itemsize
        view = np.lib.stride_tricks.as_strided(flat[-low:], shape, tuple(s * item for s in strides))
        return Tensor._from_array(np.ascontiguousarray(view), dtype)
    if on_cuda:
        storage = _dl.device_storage(imported, span, _cuda_device(imported.device_id))
    else:
        storage = Storage(_dl.host_array(imported, span), dtype)
    return Tensor._make(storage, tuple(shape), tuple(strides), 0)


__all__ = ["from_dlpack", "to_dlpack", "dlpack_device", "DLDeviceType"]


def _cuda_device(index):
    """The jitorch device of CUDA device ``index``, checked against the devices present."""
    from ..runtime.cuda_memory import canonical
    return canonical(to_device(f"cuda:{index}"))


def _cuda_backend():
    """The CUDA runtime's backend module, imported at the first CUDA exchange (`import jitorch` loads none
    of the CUDA runtime)."""
    from ..runtime import cuda_backend
    return cuda_backend
