"""DLPack: the C structures of the DLPack 1.x ABI and the PyCapsules that carry them.

A producer hands a consumer a PyCapsule named ``dltensor`` (a ``DLManagedTensor``, DLPack before 1.0) or
``dltensor_versioned`` (a ``DLManagedTensorVersioned``, with a version and flags such as read-only). The
consumer renames the capsule ``used_dltensor[_versioned]`` when it takes the tensor, and calls the managed
tensor's ``deleter`` exactly once when it no longer needs the memory; a capsule that nobody consumed calls
the deleter itself when it dies. This module builds such capsules for jitorch's memory (`export`) and
takes them from other libraries (`consume`); the ops layer (``ops.dlpack``) turns them into tensors.

The deleter and the capsule destructor are called by other libraries' C code at any moment, including
while a Python exception is being raised (NumPy drops a capsule it refuses with its error already set). A
ctypes callback cannot run then: its Python code would see the pending exception and clobber it. So both
are a few lines of native code, compiled once with llvmlite (`_native`): they set the pending exception
aside, drop the reference that kept the exported memory alive, and put the exception back.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import weakref

import numpy as np

from . import dtypes as _dt
from .forks import module_lock



class DLDeviceType(enum.IntEnum):
    """DLPack's device types (dlpack.h), as ``torch.utils.dlpack.DLDeviceType``."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDA,
                                                DLDeviceType.kDLCUDAHost, DLDeviceType.kDLCUDAManaged)

# DLDataTypeCode (dlpack.h)
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool = 0, 1, 2, 4, 5, 6
CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex", 6: "bool",
              7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz", 10: "float8_e4m3fn",
              11: "float8_e4m3fnuz", 12: "float8_e5m2", 13: "float8_e5m2fnuz", 14: "float8_e8m0fnu",
              15: "float6_e2m3fn", 16: "float6_e3m2fn", 17: "float4_e2m1fn"}

# DLManagedTensorVersioned's flags
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2

VERSION = (1, 0)  # the DLPack version jitorch's versioned capsules carry and the newest major it reads

_CODES = {d: ((kDLBool if d is _dt.bool else kDLBfloat if d is _dt.bfloat16 else
               {"u": kDLUInt, "i": kDLInt, "f": kDLFloat}[d.kind]), d.itemsize * 8) for d in _dt.ALL}
_DTYPES = {code: d for d, code in _CODES.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


# The deleters are kept as plain addresses: ours is native code (`_native`), a foreign one is called
# through `_call_deleter`.
class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.Py_IncRef.argtypes = [ctypes.py_object]

# A capsule keeps a pointer to its name, so every name lives as long as the module: buffers, never temporaries.
NAMES = {False: ctypes.create_string_buffer(b"dltensor"), True: ctypes.create_string_buffer(b"dltensor_versioned")}
USED_NAMES = {False: ctypes.create_string_buffer(b"used_dltensor"),
              True: ctypes.create_string_buffer(b"used_dltensor_versioned")}
_STRUCTS = {False: DLManagedTensor, True: DLManagedTensorVersioned}
_KINDS = {False: "legacy", True: "versioned"}


def capsule_kind(capsule):
    """True for an unconsumed ``dltensor_versioned`` capsule, False for an unconsumed ``dltensor``, None for
    anything else (a used capsule, another capsule)."""
    if type(capsule).__name__ != "PyCapsule":
        return None
    for versioned in (True, False):
        if _api.PyCapsule_IsValid(capsule, NAMES[versioned]):
            return versioned
    return None


# Native helpers ------------------------------------------------------------------------------------------

_NATIVE_IR = """
declare void @PyErr_Fetch({pp}, {pp}, {pp})
declare void @PyErr_Restore({p}, {p}, {p})
declare i32 @PyGILState_Ensure()
declare void @PyGILState_Release(i32)
declare void @Py_DecRef({p})
declare i32 @PyCapsule_IsValid({p}, {p})
declare {p} @PyCapsule_GetPointer({p}, {p})

; The managed tensor's manager_ctx is a Python object (a reference the producer took): drop it, with the
; GIL held and any pending exception set aside. ``offset``: where manager_ctx lies in the structure.
define private void @release({p} %m, i64 %offset) {{
  %gil = call i32 @PyGILState_Ensure()
  %t = alloca {p}
  %v = alloca {p}
  %tb = alloca {p}
  call void @PyErr_Fetch({pp} %t, {pp} %v, {pp} %tb)
  %base = ptrtoint {p} %m to i64
  %at = add i64 %base, %offset
  %slot = inttoptr i64 %at to {pp}
  %ctx = load {p}, {pp} %slot
  call void @Py_DecRef({p} %ctx)
  %t1 = load {p}, {pp} %t
  %v1 = load {p}, {pp} %v
  %tb1 = load {p}, {pp} %tb
  call void @PyErr_Restore({p} %t1, {p} %v1, {p} %tb1)
  call void @PyGILState_Release(i32 %gil)
  ret void
}}

"""

# Per kind of capsule (legacy, versioned): the managed tensor's deleter, and the capsule's destructor, through
# which an unconsumed capsule releases its managed tensor (a consumed one was renamed and is the consumer's to
# release). A destructor runs with the GIL held; the capsule API here sets no error.
_KIND_IR = """
@name_{kind} = private constant [{size} x i8] c"{name}\\00"

define void @jitorch_dlpack_{kind}_deleter({p} %m) {{
  call void @release({p} %m, i64 {offset})
  ret void
}}

define void @jitorch_dlpack_{kind}_destructor({p} %capsule) {{
  %name = getelementptr [{size} x i8], {array} @name_{kind}, i64 0, i64 0
  %valid = call i32 @PyCapsule_IsValid({p} %capsule, {p} %name)
  %unconsumed = icmp ne i32 %valid, 0
  br i1 %unconsumed, label %unused, label %done
unused:
  %m = call {p} @PyCapsule_GetPointer({p} %capsule, {p} %name)
  call void @release({p} %m, i64 {offset})
  br label %done
done:
  ret void
}}
"""

_PYTHON_SYMBOLS = ("PyErr_Fetch", "PyErr_Restore", "PyGILState_Ensure", "PyGILState_Release", "Py_DecRef",
                   "PyCapsule_IsValid", "PyCapsule_GetPointer")
_lock = module_lock(globals(), "_lock")


@functools.cache
def _native():
    """The addresses of the native deleters and capsule destructors, compiled on first use (MCJIT; the engine
    stays for the life of the process, as capsules and tensors may outlive any other owner)."""
    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    pointer = ir.IntType(8).as_pointer()  # printed as llvmlite's LLVM wants it: `i8*` or `ptr`
    text = _NATIVE_IR.format(p=str(pointer), pp=str(pointer.as_pointer()))
    for versioned, kind in _KINDS.items():
        name = NAMES[versioned].value.decode()
        array = ir.ArrayType(ir.IntType(8), len(name) + 1).as_pointer()
        offset = _STRUCTS[versioned].manager_ctx.offset
        text += _KIND_IR.format(kind=kind, name=name, size=len(name) + 1, offset=offset, p=str(pointer),
                                array=str(array))
    for name in _PYTHON_SYMBOLS:
        llvm.add_symbol(name, ctypes.cast(getattr(_api, name), ctypes.c_void_p).value)
    module = llvm.parse_assembly(text)
    module.triple = llvm.get_process_triple()
    module.verify()
    machine = llvm.Target.from_triple(module.triple).create_target_machine()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    addresses = {f"{kind}_{role}": engine.get_function_address(f"jitorch_dlpack_{kind}_{role}")
                 for kind in _KINDS.values() for role in ("deleter", "destructor")}
    return engine, addresses


def _addresses():
    with _lock:
        return _native()[1]


# Export ---------------------------------------------------------------------------------------------------

def dl_dtype(dtype):
    """(code, bits) of a jitorch dtype."""
    return _CODES[dtype]


def export(data_ptr, device, dtype, shape, strides, owner, *, versioned, read_only=False, copied=False):
    """A new, unconsumed DLPack capsule for ``shape``/``strides`` (elements) of ``dtype`` at ``data_ptr`` on
    ``device`` (a (device_type, device_id) pair). ``owner`` (any Python object) is kept alive until the
    consumer calls the deleter, or the capsule dies unconsumed."""
    addresses = _addresses()
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    managed = _STRUCTS[versioned]()
    code, bits = _CODES[dtype]
    managed.dl_tensor = DLTensor(data_ptr, DLDevice(*device), ndim, DLDataType(code, bits, 1), shape_arr,
                                 strides_arr, 0)
    # manager_ctx holds one reference to everything the capsule needs: the structure itself, the shape
    # and strides arrays and the producer's memory; the native deleter drops it.
    keep = (managed, shape_arr, strides_arr, owner)
    _api.Py_IncRef(keep)
    managed.manager_ctx = id(keep)
    if versioned:
        managed.version = DLPackVersion(*VERSION)
        managed.flags = (FLAG_READ_ONLY if read_only else 0) | (FLAG_IS_COPIED if copied else 0)
    kind = _KINDS[versioned]
    managed.deleter = addresses[f"{kind}_deleter"]
    return _api.PyCapsule_New(ctypes.addressof(managed), NAMES[versioned], addresses[f"{kind}_destructor"])


# Consume --------------------------------------------------------------------------------------------------

_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)  # called with the GIL held: most deleters take it anyway


class Imported:
    """A consumed managed tensor: what it describes, and `release`, which calls its deleter (once)."""

    __slots__ = ("address", "deleter", "data", "device_type", "device_id", "dtype", "shape", "strides",
                 "read_only", "__weakref__")

    def release(self):
        deleter, self.deleter = self.deleter, None
        if deleter:
            _DELETER(deleter)(self.address)

    def __del__(self):
        self.release()


def consume(capsule):
    """Take the managed tensor out of an unconsumed ``dltensor[_versioned]`` capsule: check that jitorch can
    represent it, rename the capsule ``used_...`` and return an `Imported` that owns it (its `release` must
    run once the memory is no longer used; dropping it does). A capsule jitorch cannot read is left
    unconsumed (its own destructor frees it) and BufferError says why."""
    versioned = capsule_kind(capsule)
    if versioned is None:
        raise RuntimeError("from_dlpack received an invalid capsule. Note that DLTensor capsules can be consumed "
                           "only once, so you might have already constructed a tensor from it once.")
    address = _api.PyCapsule_GetPointer(capsule, NAMES[versioned])
    managed = _STRUCTS[versioned].from_address(address)
    flags = 0
    if versioned:
        major, minor = managed.version.major, managed.version.minor
        if major > VERSION[0]:
            raise RuntimeError(f"unsupported DLPack capsule major version: {major}. Maximum supported version: "
                               f"{VERSION[0]}")
        flags = managed.flags
    t = managed.dl_tensor
    dtype = _DTYPES.get((t.dtype.code, t.dtype.bits))
    if dtype is None or t.dtype.lanes != 1:
        code = CODE_NAMES.get(t.dtype.code, f"code {t.dtype.code}")
        if t.dtype.code <= kDLComplex:  # the codes whose name leaves the width open
            code += str(t.dtype.bits)
        lanes = f" x{t.dtype.lanes} lanes" if t.dtype.lanes != 1 else ""
        raise BufferError(f"from_dlpack: jitorch has no dtype for DLPack's {code}{lanes}; it reads "
                          "bool, int8-64, uint8-64, float16, bfloat16, float32 and float64")
    device_type = t.device.device_type
    if device_type not in (kDLCPU, kDLCUDAHost, kDLCUDA, kDLCUDAManaged):
        name = DLDeviceType(device_type).name if device_type in DLDeviceType._value2member_map_ else "unknown"
        raise BufferError(f"from_dlpack: unsupported device type {name} ({device_type}): jitorch reads "
                          "kDLCPU, kDLCUDAHost, kDLCUDA and kDLCUDAManaged tensors")
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    strides = tuple(t.strides[i] for i in range(ndim)) if ndim and t.strides else None
    _api.PyCapsule_SetName(capsule, USED_NAMES[versioned])
    imported = Imported()
    imported.address, imported.deleter = address, managed.deleter
    imported.data = (t.data or 0) + t.byte_offset
    imported.device_type, imported.device_id = device_type, t.device.device_id
    imported.dtype, imported.shape, imported.strides = dtype, shape, strides
    imported.read_only = bool(flags & FLAG_READ_ONLY)
    return imported


class _Buffer:
    """Host memory of an `Imported` as NumPy sees it (``__array_interface__``): arrays made from it keep it,
    and so the imported tensor, alive."""

    __slots__ = ("__array_interface__", "imported")

    def __init__(self, imported, nbytes):
        self.imported = imported
        self.__array_interface__ = {"data": (imported.data, imported.read_only), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


def host_array(imported, count):
    """A flat array of ``count`` elements of the imported host memory: shares it, read-only if the producer
    said so, and keeps the managed tensor until the last view of it goes."""
    dtype = imported.dtype
    if count == 0:
        imported.release()  # nothing to keep: an empty tensor reads no memory
        return np.empty(0, dtype.np)
    raw = np.asarray(_Buffer(imported, count * dtype.itemsize))
    return raw.view(dtype.np)


def device_storage(imported, count, device):
    """A CUDA storage of ``count`` elements over the imported device memory (``device``: its jitorch device,
    checked); the managed tensor is released when the storage goes."""
    from .cuda_memory import CudaStorage  # (here: `import jitorch` loads none of the CUDA runtime)
    storage = CudaStorage(None, imported.dtype, device, count)
    storage._ptr = imported.data
    weakref.finalize(storage, imported.release)
    return storage


__all__ = ["DLDeviceType", "export", "consume", "host_array", "device_storage", "Imported", "dl_dtype",
           "capsule_kind"]
