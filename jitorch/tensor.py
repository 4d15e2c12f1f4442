"""Tensor: a strided view on a Storage, plus autograd fields.

A tensor is ``storage + shape + strides (elements) + offset``; its dtype and
device are the storage's. Every op method is generated from the op registry
(`jitorch.ops.registry.install`); what is written here is the data model, the
NumPy bridge and the Python protocol.
"""

from __future__ import annotations

import builtins
import copy
from collections import OrderedDict
import warnings
import weakref
from math import prod

import numpy as np

from .runtime import dtypes as _dt
from .runtime.autocast_mode import STATE as _AUTOCAST_STATE
from .runtime.casts import copy_into
from .runtime.device import CPU, to_device
from .runtime.grad_mode import GRAD_OFF as _GRAD_OFF, INFERENCE_OPEN as _INFERENCE_OPEN, _state as _grad_state
from .runtime import profiling as _profiling, shared_memory as _shared_memory
from .runtime.layout import strided
from .runtime.storage import Storage, storage_of_array
from .runtime.strided import contiguous_strides, is_contiguous, wrap_dim
from .ops import registry as _registry
from .ops.registry import CONTIGUOUS_STRIDES as _CONTIGUOUS, contiguous_strides_cached
from .ops import creation as _creation
from .ops.views import (ALL_FORMATS, _check_memory_format, format_strides, is_contiguous_as, preserve_format,
                        suggest_memory_format)
from .ops import factories as _factories
from .ops import indexing as _indexing
from .ops import dlpack as _dlpack
from .runtime.hooks import add_hook


class Size(tuple):
    """torch.Size: a tuple of ints that prints as ``jitorch.Size([2, 3])``."""

    __slots__ = ()

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self):
        return f"jitorch.Size({list(self)})"

    def __getitem__(self, item):
        r = tuple.__getitem__(self, item)
        return Size(r) if isinstance(item, slice) else r

    def __add__(self, other):
        return Size(tuple(self) + tuple(other))


_new_object = object.__new__
_weakref = weakref.ref

# Objects told before a tensor's .grad is assigned (a tracer, while it records).
GRAD_WATCHERS: list = []

# Objects told when Python reads a tensor's values, makes a tensor from Python data or replaces a tensor's
# data or geometry (``.data =``, ``set_``, ``resize_``): a tracer, while it records: values read become
# constants of its graph, a tensor made from data is new at each call, and a graph cannot replace the data or
# geometry of the caller's tensors.
VALUE_WATCHERS: list = []

# Moves at every change of any tensor's geometry or memory: in-place view ops, out= resizes and ``.data =`` all
# go through `Tensor._set_geometry`. A compiled graph re-checks the captured tensors it was traced with only
# when it moved since their check last held (`jit.captures.geometry_guard`), which keeps its calls cheap.
GEOMETRY_EPOCH = [0]


class _ViewRefs(list):
    """Weak references to the views of a root base made while it recorded no history (`view_refs`), pruned of
    dead ones whenever their number reaches ``limit`` (then twice the live ones)."""

    __slots__ = ("limit",)

    def prune(self):
        self[:] = [r for r in self if r() is not None]
        self.limit = max(64, 2 * len(self))


# Why a view made without grad mode may not have its history rebased after a write into its memory (torch's
# CreationMeta NO_GRAD_MODE and INFERENCE_MODE): torch's messages after the one naming the view
# (`autograd.engine._view_message`). Here, below autograd, because the eager view shortcuts mark such views.
NO_GRAD_VIEW = (
    " Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving "
    "both the view and the inplace either both inside the no_grad block (if you don't want the inplace to be "
    "tracked) or both outside (if you want the inplace to be tracked).")
INFERENCE_VIEW = NO_GRAD_VIEW.replace("no_grad block", "inference_mode block")


# torch's refusals of requires_grad for an integer or bool tensor, by the way it was asked: they differ
CANNOT_REQUIRE_GRAD = {
    "factory": "Only Tensors of floating point and complex dtype can require gradients",
    "setter": "only Tensors of floating point and complex dtype can require gradients",
    "method": "only Tensors of floating point dtype can require gradients",
}


def view_refs(root):
    """The list of weak references to ``root``'s views made without history (``root._views``), made if it has
    none, pruned if full: autograd's `track_views` and `Tensor._view_of` append to it, and its
    `_views_catch_up` reads it once an in-place op gives ``root`` a history."""
    tracked = root._views
    if tracked is None:
        tracked = root._views = _ViewRefs()
        tracked.limit = 64
    elif len(tracked) >= tracked.limit:
        tracked.prune()
    return tracked


# C++'s type names of the dtypes (typeid), which torch's gradient dtype messages print
_CPP_TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
               "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
               "uint8": "unsigned char", "bool": "bool", "uint16": "short unsigned int", "uint32": "unsigned int",
               "uint64": "long unsigned int"}


def _check_grad(t, grad):
    """torch's checks of a gradient assigned to ``t.grad`` (found by hand against torch, session 36: any
    value was taken): a tensor, not ``t`` itself, of ``t``'s sizes, device type and ``grad_dtype``."""
    if not isinstance(grad, Tensor):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(grad).__name__}")
    if grad is t:
        raise RuntimeError("can't assign Variable as its own grad")
    if grad.device.type != t.device.type:
        raise RuntimeError(f"attempting to assign a gradient with device type '{grad.device.type}' to a tensor with "
                           f"device type '{t.device.type}'. Please ensure that the gradient and the tensor are on "
                           "the same device")
    if tuple(grad._shape) != tuple(t._shape):
        raise RuntimeError(f"attempting to assign a gradient of size '{list(grad._shape)}' to a tensor of size "
                           f"'{list(t._shape)}'. Please ensure that the gradient and the tensor are the same size")
    want = t.__dict__.get("_grad_dtype", t.dtype)
    if want is not None and grad.dtype is not want:
        raise RuntimeError(f"attempting to assign a gradient with dtype '{_CPP_TYPE_NAMES[grad.dtype.name]}' to a "
                           f"tensor with grad_dtype '{_registry.scalar_name(want)}'. The gradient must match the tensor's "
                           "grad_dtype (defaults to the tensor's dtype). You can set the tensor's grad_dtype "
                           "attribute with a specific dtype, or None to allow any dtype. Set grad_dtype with "
                           "caution. Diverging the dtypes of a tensor and its gradient may break downstream "
                           "systems that assume they match.")


class Tensor:
    """An n-dimensional strided array, PyTorch style."""

    # Fields every tensor sets are slots; the autograd fields, rarely set, are
    # class defaults overridden in the instance dict, which keeps creation cheap.
    # (``_views``: a root base's `view_refs`, None until its first view without history: a slot, read by every
    # such view, which a dict lookup made a tenth of. ``_requires_grad``: a slot too, read by every op, which
    # reads a class default several times slower)
    __slots__ = ("_storage", "_shape", "_size", "_stride", "_offset", "_arr", "dtype", "device", "_base",
                 "_views", "_requires_grad", "__weakref__", "__dict__")
    @property
    def grad(self):
        """The gradient accumulated by backward() into this leaf (None until then)."""
        if GRAD_WATCHERS:  # a tracer records which tensors' .grad the traced code uses (see jit.tracer)
            for watcher in GRAD_WATCHERS:
                watcher.grad_touched(self, True)
        return self.__dict__.get("_grad")

    @grad.setter
    def grad(self, value):
        if value is not None:
            _check_grad(self, value)
        if GRAD_WATCHERS:
            for watcher in GRAD_WATCHERS:
                watcher.grad_touched(self, False)
        self.__dict__["_grad"] = value

    @grad.deleter
    def grad(self):
        self.grad = None

    @property
    def grad_dtype(self):
        """The dtype backward gives this leaf's ``.grad`` (incoming gradients are cast to it); None takes any.
        Defaults to the tensor's dtype."""
        if not self.is_leaf:
            raise RuntimeError("grad_dtype can only be accessed on leaf tensors.")
        return self.__dict__.get("_grad_dtype", self.dtype)

    @grad_dtype.setter
    def grad_dtype(self, value):
        if not self.is_leaf:
            raise RuntimeError("grad_dtype can only be set on leaf tensors.")
        grad = self.__dict__.get("_grad")
        if value is not None and grad is not None and grad.dtype is not value:
            raise RuntimeError(f"Cannot set grad_dtype to '{_registry.scalar_name(value)}' because there is already "
                               f"a gradient with dtype '{_CPP_TYPE_NAMES[grad.dtype.name]}'. Please clear the gradient "
                               "(.grad = None) before changing grad_dtype, or ensure the new grad_dtype matches the "
                               "existing gradient's dtype.")
        self.__dict__["_grad_dtype"] = value
    grad_fn = None

    __array_priority__ = 1000  # numpy defers reflected operators to us

    # Construction ---------------------------------------------------------

    # The constructors below set every slot themselves rather than call one another: each Python call is
    # a measurable share of a small eager op, and every op makes its result here.

    @classmethod
    def _make(cls, storage, shape, strides, offset, arr=None):
        t = _new_object(cls)
        t._storage = storage
        t._shape = shape
        t._size = None
        t._stride = strides
        t._offset = offset
        t._arr = arr
        t.dtype = storage.dtype
        t.device = storage.device
        t._base = None
        t._views = None
        t._requires_grad = False
        return t

    @staticmethod
    def _fresh(arr, dtype, shape=None, strides=None):
        """A new tensor owning ``arr``, a C-contiguous array of ``dtype``'s NumPy type (a kernel's result).
        ``shape`` and ``strides``, if given, are ``arr``'s shape (as a tuple equal to it) and its contiguous
        strides, which a caller that holds them already spares it working out. (A static method: a class
        method's call costs a bound method, and every result is a plain Tensor.)"""
        if shape is None:
            shape = arr.shape
            strides = _CONTIGUOUS.get(shape)
            if strides is None:
                strides = contiguous_strides_cached(shape)
        # Storage(arr, dtype) written out, as the constructors below are: every op's result pays for it
        storage = _new_object(Storage)
        storage._data = arr
        storage.dtype = dtype
        storage.device = CPU
        storage.size = arr.size
        storage._version = 0
        storage._ptr = None
        storage.inference = _INFERENCE_OPEN[0] > 0 and _grad_state.inference
        if _profiling.RECORDER is not None:
            _profiling.RECORDER.allocated(storage)
        t = Tensor()  # (a call of the class, which has no __init__, costs less than object.__new__(Tensor))
        t._storage = storage
        t._shape = shape
        t._size = None
        t._stride = strides
        t._offset = 0
        t._arr = arr
        t.dtype = dtype
        t.device = CPU
        t._base = None
        t._views = None
        t._requires_grad = False
        return t

    @classmethod
    def _from_array(cls, arr, dtype=None):
        """Wrap a NumPy array without copying where its strides allow."""
        if dtype is None:
            dtype = _dt.from_numpy_dtype(arr.dtype)
        if arr.flags.c_contiguous:
            return cls._fresh(arr, dtype)
        found = storage_of_array(arr)
        if found is None:
            arr = np.ascontiguousarray(arr)
            return cls._from_array(arr, dtype)
        flat, offset, strides = found
        return cls._make(Storage(flat, dtype), arr.shape, strides, offset, arr)

    @classmethod
    def _sharing(cls, arr, dtype):
        """A tensor over ``arr``'s memory with its strides exactly (those of size-1 and empty dims too), as
        torch.from_numpy: ``np.ones((1, 5)).T`` gives strides (1, 5), which overlap checks and a tensor()
        copy of it see. ``arr``'s strides are non-negative multiples of its item size (the caller checks)."""
        flat, offset, strides = storage_of_array(arr)
        if arr.flags.c_contiguous and strides == contiguous_strides_cached(arr.shape):
            return cls._fresh(arr, dtype, arr.shape, strides)
        return cls._make(Storage(flat, dtype), arr.shape, strides, offset, arr)

    @classmethod
    def _empty(cls, shape, dtype, device=CPU):
        n = 1
        for s in shape:
            n *= s
        storage = Storage.empty(n, dtype, device)
        return cls._make(storage, tuple(shape), contiguous_strides(shape), 0)

    @staticmethod
    def _view_of(base, shape, strides, offset, track=False):
        """A view of ``base`` with this geometry (a plain Tensor; its root base is ``base``'s, if it is a view).
        ``track``: the view records no history (its base's, if any, is not recorded now); while grad mode is on
        and its root base is a floating tensor without history, the root remembers it weakly (`view_refs`), as
        autograd's `track_views` does, so that an in-place op that later gives the root a history gives the
        view one too (torch regenerates a view's grad_fn from its base); without grad mode it is marked as
        `track_views` marks such views. One frame for both: every eager view op on a tensor without history
        pays for it."""
        storage = base._storage
        t = Tensor()  # (a call of the class, which has no __init__, costs less than object.__new__(Tensor))
        t._storage = storage
        t._shape = shape
        t._size = None
        t._stride = strides
        t._offset = offset
        t._arr = None
        t.dtype = storage.dtype
        t.device = storage.device
        t._views = None
        t._requires_grad = False
        root = base._base
        if root is None:
            t._base = root = base
            if not track:
                return t
            meta = None
        else:
            t._base = root
            if not track:
                return t
            meta = base.__dict__.get("_creation_meta")  # (only views carry one: `autograd.engine.record`)
        if _GRAD_OFF[0] and not _grad_state.enabled:  # (no thread counted: grad mode is on)
            if root.dtype.is_floating_point:
                # torch's view made in no_grad mode, as `autograd.engine.no_grad_views` marks one, written out:
                # every eager view op on a floating tensor without grad mode pays for it
                d = t.__dict__
                d["_creation_meta"] = INFERENCE_VIEW if _grad_state.inference else NO_GRAD_VIEW
                if root._requires_grad:
                    t._requires_grad = True
                    d["_view_version"] = storage._version
                else:
                    tracked = root._views
                    if tracked is None or len(tracked) >= tracked.limit:
                        tracked = view_refs(root)
                    tracked.append(_weakref(t))
            return t
        if root._requires_grad or not root.dtype.is_floating_point:
            return t
        tracked = root._views
        if tracked is None or len(tracked) >= tracked.limit:
            tracked = view_refs(root)
        tracked.append(_weakref(t))
        if meta is not None:
            t._creation_meta = meta
        return t

    @classmethod
    def _reinterpreted(cls, base, shape, strides, offset, dtype):
        """``base``'s memory read as ``dtype`` with this geometry (in elements of ``dtype``): a tensor that
        shares the storage and its version counter, but no view in autograd's sense (no ``_base``), as
        torch's ``view(dtype)``."""
        return cls._make(base._storage.reinterpret(dtype), tuple(shape), tuple(strides), offset)

    def _set_geometry(self, shape, strides, offset):
        GEOMETRY_EPOCH[0] += 1
        self._shape = tuple(shape)
        self._size = None
        self._stride = tuple(strides)
        self._offset = offset
        self._arr = None

    def _resize(self, shape, strides=None):
        """torch's ``resize_`` (of an ``out=`` tensor) to dense ``strides`` (contiguous by default): from the
        same offset over the same memory when that holds enough elements (a view stays a view of its
        base), else new memory."""
        strides = contiguous_strides(shape) if strides is None else tuple(strides)
        if self._offset + prod(shape) <= self._storage.size:
            self._set_geometry(shape, strides, self._offset)
            return
        fresh = Tensor._empty(shape, self.dtype, self.device)
        self._storage = fresh._storage
        self._set_geometry(fresh._shape, strides, 0)

    def resize_(self, *sizes, memory_format=None):
        """Give this tensor ``sizes`` (contiguous strides, or ``memory_format``'s) from its offset: over its memory
        when that holds enough elements, else over new memory that starts with the old elements (other tensors on the old
        memory keep it: a strided view never moves)."""
        if not sizes:
            raise TypeError('resize_() missing 1 required positional arguments: "size"')
        if self._requires_grad:
            raise RuntimeError("cannot resize variables that require grad")
        _check_memory_format("resize_", memory_format, ALL_FORMATS)
        if memory_format is preserve_format:
            raise RuntimeError("Unsupported memory formatPreserve")  # (torch's words, without a space)
        shape = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else tuple(sizes)
        if any(n < 0 for n in shape):
            raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
        strides = format_strides(memory_format, shape) or contiguous_strides(shape)
        old, needed = self._storage, self._offset + prod(shape)
        if (shape, strides) != (self._shape, self._stride):
            for watcher in VALUE_WATCHERS:  # (a graph cannot give the caller's tensors another geometry)
                watcher.data_replaced(self)
        if needed > old.size:
            if old.is_shared() and self.device.type == "cpu":  # other processes map the old memory
                raise RuntimeError("Trying to resize storage that is not resizable")
            self._storage = Storage.empty(needed, self.dtype, self.device)
            if old.size and self.device.type != "meta":
                Tensor._make(self._storage, (old.size,), (1,), 0).copy_(Tensor._make(old, (old.size,), (1,), 0))
        self._set_geometry(shape, strides, self._offset)
        self._bump_version()
        return self

    def resize_as_(self, the_template, memory_format=None):
        """``resize_`` to ``the_template``'s shape."""
        return self.resize_(the_template._shape, memory_format=memory_format)

    def resize(self, *sizes):
        """Deprecated: this tensor's elements (in order) in shape ``sizes``, which must hold as many (torch's
        ``autograd._functions.Resize``: a reshape that autograd differentiates)."""
        warnings.warn("non-inplace resize is deprecated", stacklevel=2)
        return self._resized(sizes)

    def resize_as(self, tensor):
        """Deprecated: `resize` to ``tensor``'s shape."""
        warnings.warn("non-inplace resize_as is deprecated", stacklevel=2)
        return self._resized(tuple(tensor._shape))

    def _resized(self, sizes):
        n = prod(sizes)
        if n != self.numel():
            raise RuntimeError(f"requested resize to {'x'.join(map(str, sizes))} ({n} elements in total), but the "
                               f"given tensor has a size of {'x'.join(map(str, self._shape))} ({self.numel()} "
                               "elements). autograd's resize can only change the shape of a given tensor, while "
                               "preserving the number of elements. ")
        return self.contiguous().view(tuple(sizes))

    def module_load(self, other, assign=False):
        """How ``load_state_dict`` transforms the state's ``other`` for this parameter or buffer: ``other``
        detached when ``assign``, else this tensor with ``other`` copied in, detached (a new object either way)."""
        return other.detach() if assign else self.copy_(other).detach()

    def as_subclass(self, cls):
        """A tensor of class ``cls`` (a subclass of Tensor) on this tensor's memory, in its autograd graph."""
        if not (isinstance(cls, type) and issubclass(cls, Tensor)):
            raise TypeError("Creating a Tensor subclass from a class that does not inherit from Tensor is not "
                            "possible. Make sure your class inherits from Tensor.")
        alias = self.view_as(self)
        alias.__class__ = cls
        return alias

    def set_(self, source=None, storage_offset=0, size=None, stride=None):
        """Make this tensor view ``source`` (a tensor, or a storage): with ``source``'s geometry, or the given
        one over its memory; ``set_()`` gives it empty memory of its own."""
        if _grad_state.enabled:  # torch's in-place refusals for a leaf that requires grad and its views
            base = self._base if self._base is not None else self
            if base._requires_grad and base.grad_fn is None:
                raise RuntimeError(f"a {'view of a ' if base is not self else ''}leaf Variable that requires grad "
                                   "is being used in an in-place operation.")
        if source is None:
            storage, shape, strides, offset = Storage.empty(0, self.dtype, self.device), (0,), (1,), 0
        elif isinstance(source, Tensor):
            if source.dtype is not self.dtype:
                raise RuntimeError(f"Could not set tensor of type {_registry.cpp_name(source.dtype)} to a tensor "
                                   f"of type {_registry.cpp_name(self.dtype)}")
            storage = source._storage
            shape, strides, offset = (source._shape, source._stride, source._offset) if size is None else \
                (tuple(size), None, storage_offset)
        else:  # a storage: its memory read as this tensor's dtype, as torch's untyped storages are
            source = getattr(source, "_untyped_storage", source)  # (a TypedStorage's)
            storage = source if source.dtype is self.dtype else source.reinterpret(self.dtype)
            shape, strides, offset = ((storage.size,), (1,), 0) if size is None else (tuple(size), None, storage_offset)
        strides = contiguous_strides(shape) if strides is None and stride is None else tuple(strides or stride)
        extent = 0 if 0 in shape else offset + 1 + sum((n - 1) * st for n, st in zip(shape, strides))
        if extent > storage.size:
            raise RuntimeError(f"setStorage: sizes {list(shape)}, strides {list(strides)}, storage offset {offset}, "
                               f"and itemsize {self.dtype.itemsize} requiring a storage size of "
                               f"{extent * self.dtype.itemsize} are out of bounds for storage of size "
                               f"{storage.size * self.dtype.itemsize}")
        for watcher in VALUE_WATCHERS:
            watcher.data_replaced(self)
        self._storage = storage
        self._set_geometry(shape, strides, offset)
        self._bump_version()
        return self

    # The NumPy view ----------------------------------------------------------

    def _array(self):
        """The NumPy view of this tensor's elements (shares memory; cached)."""
        arr = self._arr
        if arr is None:
            st = self._storage
            if st.data is None:
                raise st.no_data_error(self)
            item = st.dtype.itemsize
            if st.size == 0 or 0 in self._shape:
                arr = np.empty(self._shape, st.data.dtype)
            else:
                arr = np.ndarray(self._shape, st.data.dtype, buffer=st.data, offset=self._offset * item,
                                 strides=tuple(s * item for s in self._stride))
            self._arr = arr
        return arr

    def _write(self, value):
        """Copy a tensor or array into this tensor's elements, casting; bumps the version."""
        storage = self._storage
        if storage.on_device:
            from .runtime.device import DEVICE_BACKENDS
            DEVICE_BACKENDS[self.device.type].write(self, value)
        elif storage._data is not None:  # a meta tensor has no elements to write
            src = value._host_array() if isinstance(value, Tensor) else value
            copy_into(self._array(), src)
        storage._version += 1

    def _host_array(self):
        """The elements as a NumPy array: the view itself on CPU, a host copy of a CUDA tensor's
        (which waits for the work queued on the device)."""
        if self._storage.on_device:
            from .runtime.cuda_memory import download
            return download(self)
        return self._array()

    def _bump_version(self):
        self._storage._version += 1

    # Metadata -------------------------------------------------------------------

    @property
    def shape(self):
        size = self._size  # the Size is made on first use: most tensors never show theirs
        if size is None:
            size = self._size = Size(self._shape)
        return size

    def size(self, dim=None):
        """The shape, or the size of one dim."""
        if dim is None:
            return self.shape
        return self._shape[self._own_dim(dim)]

    def stride(self, dim=None):
        """Strides in elements, or the stride of one dim."""
        if dim is None:
            return self._stride
        return self._stride[self._own_dim(dim)]

    def _own_dim(self, dim):
        """``dim`` wrapped to index this tensor's sizes (a 0-d tensor has none)."""
        if not self._shape:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        return wrap_dim(dim, len(self._shape))

    def storage_offset(self):
        return self._offset

    @property
    def ndim(self):
        return len(self._shape)

    def dim(self):
        return len(self._shape)

    ndimension = dim

    def numel(self):
        n = 1
        for s in self._shape:
            n *= s
        return n

    nelement = numel

    def element_size(self):
        return self.dtype.itemsize

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.numel() * self.dtype.itemsize

    def is_contiguous(self, memory_format=None):
        """Whether the elements are laid out densely in ``memory_format``'s order: row-major by default,
        channels_last (a 4-d tensor's NHWC) or channels_last_3d (a 5-d tensor's NDHWC); size-1 dims' strides
        are not looked at."""
        if memory_format is None:
            return is_contiguous(self._shape, self._stride)
        _check_memory_format("is_contiguous", memory_format, ALL_FORMATS)
        return is_contiguous_as(self._shape, self._stride, memory_format)

    def data_ptr(self):
        return self._storage.data_ptr() + self._offset * self.dtype.itemsize

    def const_data_ptr(self):
        """`data_ptr`, for reading (jitorch does not tell the two apart)."""
        return self.data_ptr()

    def untyped_storage(self):
        """The storage of this tensor's memory (of the tensor it reinterprets, for ``x.view(dtype)``)."""
        return getattr(self._storage, "root", self._storage)

    def storage(self):
        """Deprecated: torch's TypedStorage of this tensor's memory (its size, data_ptr and elements are the
        whole memory's, not this view's)."""
        from .ops import typed_storage
        typed_storage.warn_removal()
        return typed_storage.typed_storage(self._storage, _flat_tensor)

    def storage_type(self):
        """torch's legacy storage class of this tensor's dtype (``FloatStorage``), None where torch has none."""
        from .ops import typed_storage
        return typed_storage.LEGACY_CLASSES.get(self.dtype.name)

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def is_complex(self):
        return False

    def is_signed(self):
        return self.dtype.is_signed

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def is_cpu(self):
        return self.device.type == "cpu"

    @property
    def is_meta(self):
        return self.device.type == "meta"

    def is_nonzero(self):
        """Whether the single element is not zero (RuntimeError for a tensor of more or fewer elements)."""
        return self.__bool__()

    def is_same_size(self, other):
        return self._shape == other._shape

    def is_set_to(self, other):
        """Whether both tensors view the same storage with the same geometry."""
        return (self._storage is other._storage and self._offset == other._offset and self._shape == other._shape
                and self._stride == other._stride)

    # What torch's tensors can be and jitorch's never are (a lazily conjugated or negated view, a distributed
    # tensor): always False, as torch answers for an ordinary dense tensor.
    def is_conj(self):
        return False

    def is_neg(self):
        return False

    def is_pinned(self, device=None):
        """Whether this tensor's elements are in page-locked host memory (`pin_memory`)."""
        storage = self._storage
        if storage.device.type != "cpu" or storage.data is None:
            return False
        from .runtime.cuda_memory import is_pinned_address  # here: `import jitorch` loads no CUDA module
        return is_pinned_address(storage.data_ptr())

    def pin_memory(self, device=None):
        """A copy of this CPU tensor, with the same strides, in page-locked host memory, from which copies to a
        CUDA device run asynchronously (``non_blocking=True``); ``self`` when it is pinned already. As in torch,
        a RuntimeError without a CUDA device."""
        if self.device.type != "cpu":
            raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
        if self.is_pinned():
            return self
        from .runtime.cuda_memory import pinned_array
        extent = 0 if 0 in self._shape else 1 + sum((n - 1) * s for n, s in zip(self._shape, self._stride))
        out = Tensor._make(Storage(pinned_array(extent, self.dtype), self.dtype), self._shape,
                               self._stride, 0)
        return out.copy_(self)

    def share_memory_(self):
        """Move this tensor's storage into shared memory, where other processes (jitorch.multiprocessing) map it
        without a copy. A no-op when it is there already, and for CUDA tensors, which are shared when sent."""
        _shared_memory.share_tensors([self])
        return self

    def is_shared(self):
        """Whether this tensor's storage lives in shared memory (always True for CUDA tensors, as in torch)."""
        return self.device.type == "cuda" or self._storage.is_shared()

    def is_distributed(self):
        return False

    @property
    def _version(self):
        return self._storage._version

    def get_device(self):
        return -1 if self.device.type == "cpu" else (self.device.index or 0)

    @property
    def layout(self):
        return strided

    @property
    def real(self):
        """The real part: the tensor itself, for jitorch's real dtypes (as torch)."""
        return self

    @real.setter
    def real(self, value):
        self.copy_(value)

    def conj_physical_(self):
        """Conjugate in place: nothing to do for jitorch's real dtypes; returns self, as torch."""
        return self

    @property
    def output_nr(self):
        """Which output of the op that made it this tensor is (0 for leaves and single outputs)."""
        return self.__dict__.get("_output_nr", 0)

    def dim_order(self, *, ambiguity_check=False):
        """The dims from outermost to innermost in memory (by decreasing stride; ties keep dim order)."""
        return tuple(sorted(range(self.ndim), key=lambda d: -self._stride[d]))

    def is_inference(self):
        """Whether this tensor's memory was allocated inside ``inference_mode`` (views of it included)."""
        return self._storage.inference

    # Autograd fields (the engine arrives with the autograd layer) ------------------

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._require_grad(flag, "setter")

    def requires_grad_(self, requires_grad=True):
        """Mark this tensor as needing gradients (floating dtypes only)."""
        return self._require_grad(requires_grad, "method")

    def _require_grad(self, requires_grad, by):
        """``requires_grad_``, refusing a dtype that cannot with torch's message for the way it was asked
        (`CANNOT_REQUIRE_GRAD`: a factory's ``requires_grad=``, the ``requires_grad`` setter or the method)."""
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(CANNOT_REQUIRE_GRAD[by])
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
            )
        self._requires_grad = builtins.bool(requires_grad)
        return self

    @property
    def is_leaf(self):
        """Whether this tensor has no history. As torch's, it raises for a view made in no_grad mode (or whose
        base was) of a base that requires grad, once its memory was written since (its history may not be
        rebased: `autograd.engine.gradient_edge` raises). (``grad_fn`` answers None there: a check on every
        read of the attribute every op reads would cost them all; docs/differences-from-torch.md.)"""
        if "_creation_meta" in self.__dict__ and self._requires_grad and _registry.AUTOGRAD is not None:
            _registry.AUTOGRAD.gradient_edge(self)
        return self.grad_fn is None

    # backward() is installed by jitorch.autograd (`autograd.gradients.tensor_backward`), a layer above

    def register_hook(self, hook):
        """Call ``hook(grad)`` with this tensor's gradient during backward; a tensor it returns
        replaces the gradient. Returns a handle whose ``remove()`` unregisters it."""
        self._check_hook_target("register_hook")
        if self.grad_fn is None:
            hooks = self.__dict__.setdefault("_hooks", OrderedDict())
        else:
            hooks = self.grad_fn.hooks.setdefault(getattr(self, "_output_nr", 0), OrderedDict())
        return add_hook(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(tensor)`` on this leaf after backward accumulated its ``.grad`` (not for
        ``autograd.grad``); the hook returns None. Returns a removable handle."""
        self._check_hook_target("register_post_accumulate_grad_hook")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        return add_hook(self.__dict__.setdefault("_post_accumulate_grad_hooks", OrderedDict()), hook)

    def _check_hook_target(self, method):
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        for hook in _registry.DISPATCH_HOOKS:  # a trace refuses hooks on tensors that outlive the call
            hook.hook_registered(self, method)

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in ``.grad`` after backward."""
        if self.grad_fn is None or self.__dict__.get("_retains_grad"):
            return
        import weakref
        self._retains_grad = True
        self.grad_fn.retained[getattr(self, "_output_nr", 0)] = weakref.ref(self)

    @property
    def retains_grad(self):
        return bool(self.__dict__.get("_retains_grad"))

    def _history_copy(self, copy_data=True):
        """A tensor with this one's autograd history and (a copy of) its values: what an in-place
        op's backward sees as its input, once the op has overwritten this tensor."""
        if not copy_data:
            t = Tensor._view_of(self, self._shape, self._stride, self._offset)
        elif self._storage.on_device:
            from .runtime.device import DEVICE_BACKENDS
            t = DEVICE_BACKENDS[self.device.type].copy_values(self)
        else:
            t = Tensor._from_array(self._array().copy(), self.dtype)
        t.grad_fn = self.grad_fn
        t._requires_grad = self._requires_grad
        if "_output_nr" in self.__dict__:
            t._output_nr = self._output_nr
        if self.grad_fn is None and self._requires_grad:
            t._accumulator = self.__dict__.get("_accumulator") or _accumulator_of(self)
        return t

    # NumPy and Python values ---------------------------------------------------

    def numpy(self, *, force=False):
        """A NumPy array sharing this tensor's memory (CPU only)."""
        if self._requires_grad and _grad_state.enabled and not force:  # (torch's check: grad mode too)
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self.device.type != "cpu":
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        self._values_read()
        return self._array()

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy(force=True)
        if dtype is not None:
            return arr.astype(dtype, copy=False)
        return arr

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule sharing this tensor's memory (the array API's protocol; see `jitorch.from_dlpack`):
        versioned when ``max_version >= (1, 0)``; ``stream`` is the consumer's CUDA stream (-1: no sync)."""
        return _dlpack.to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        """(DLPack device type, device index) of this tensor's memory."""
        return _dlpack.dlpack_device(self)

    def _values_read(self):
        """Tell the value watchers that Python reads this tensor's values."""
        for watcher in VALUE_WATCHERS:
            watcher.values_read(self)

    def _made_from_data(self):
        """Tell the value watchers that this tensor was just made from Python data (``jitorch.tensor``)."""
        for watcher in VALUE_WATCHERS:
            watcher.made_from_data(self)

    def item(self):
        """The single value of a one-element tensor as a Python number."""
        arr = self._arr
        if arr is not None and arr.size == 1 and not VALUE_WATCHERS and self.dtype is not _dt.bfloat16:
            return arr.item()  # (what the lines below give, without their calls)
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        self._values_read()
        arr = self._host_array().reshape(())
        return arr.item() if self.dtype is not _dt.bfloat16 else float(arr.astype(np.float32))

    def tolist(self):
        """Nested Python lists of the values (a Python number for 0-d tensors)."""
        self._values_read()
        arr = self._host_array()
        if self.dtype is _dt.bfloat16 or self.dtype is _dt.float16:
            arr = arr.astype(np.float32)
        return arr.tolist()

    def _scalar_value(self, what):
        if self.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.item()

    def __bool__(self):
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"Boolean value of Tensor with more than one value is ambiguous" if n > 1
                               else "Boolean value of Tensor with no values is ambiguous")
        return builtins.bool(self.item())

    __nonzero__ = __bool__  # (Python 2's name, which torch keeps)

    def __long__(self):
        return self.__int__()

    def __contains__(self, element):
        if not isinstance(element, (Tensor, builtins.int, builtins.float, builtins.bool)):
            raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
                               f"{type(element)}.")
        return builtins.bool((element == self).any().item())

    def __reversed__(self):
        return self if self.ndim == 0 else self.flip(0)

    def __deepcopy__(self, memo):
        """A copy with its own memory (views copied together keep sharing theirs), ``requires_grad`` and a
        copy of ``.grad``; only leaves copy, as in torch."""
        if id(self) in memo:
            return memo[id(self)]
        if self.grad_fn is not None:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.")
        key = ("storage", id(self._storage))
        if key not in memo:
            whole = Tensor._make(self._storage, (self._storage.size,), (1,), 0)
            memo[key] = whole.detach().clone()._storage
            memo.setdefault(id(memo), []).append(self._storage)  # copy's keep-alive list: ids stay unique
        out = type(self)._make(memo[key], self._shape, self._stride, self._offset)
        out._requires_grad = self._requires_grad
        if self.grad is not None:
            out.grad = copy.deepcopy(self.grad, memo)
        memo[id(self)] = out
        return out

    def apply_(self, callable):
        """Apply the Python ``callable`` to each element in place (slow; CPU only, as torch)."""
        return self._map_in_place("apply_", callable)

    def map_(self, tensor, callable):
        """``self[i] = callable(self[i], tensor[i])`` in place, ``tensor`` broadcast to ``self``."""
        return self._map_in_place("map_", callable, tensor)

    def map2_(self, x, y, callable):
        """``self[i] = callable(self[i], x[i], y[i])`` in place, ``x`` and ``y`` broadcast to ``self``."""
        return self._map_in_place("map2_", callable, x, y)

    def _map_in_place(self, name, fn, *others):
        if self._requires_grad:
            raise RuntimeError(f"Can't call {name}() on Variable that requires grad. Use var.detach().{name}() "
                               "instead.")
        if self.device.type != "cpu":
            raise TypeError(f"{name}() is only implemented on CPU tensors")
        columns = [t.reshape(-1).tolist() for t in (self,) + tuple(o.expand(self._shape) for o in others)]
        values = _creation.tensor([fn(*items) for items in zip(*columns)])
        self.copy_(values.view(self._shape))  # copy_ casts the callable's numbers to self's dtype
        return self

    def __int__(self):
        return int(self._scalar_value("int"))

    def __float__(self):
        return float(self._scalar_value("float"))

    def __index__(self):
        if self.dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __hash__(self):
        return id(self)

    def __repr__(self):
        from ._tensor_str import tensor_repr
        return tensor_repr(self)

    def __format__(self, spec):
        if self.ndim == 0:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self.tolist() if self.device.type != "meta" else None, self.dtype, self._shape))

    # Copies and conversion ------------------------------------------------------

    def to(self, *args, **kwargs):
        """Cast and/or move: ``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``."""
        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        copy = kwargs.pop("copy", False)
        non_blocking = kwargs.pop("non_blocking", False)
        fmt = kwargs.pop("memory_format", None)
        if kwargs:
            raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
        flags = []  # positional (non_blocking, copy) after the target, as torch allows
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, _dt.dtype):
                dtype = a
            elif isinstance(a, builtins.bool):
                flags.append(a)
            elif isinstance(a, (str, _device_cls(), int)):
                device = a
            elif a is None:
                continue
            else:
                raise TypeError(f"to() received an invalid combination of arguments - got {type(a).__name__}")
        copy = copy or flags[1:2] == [True]
        non_blocking = non_blocking or flags[:1] == [True]
        dtype = self.dtype if dtype is None else _dt.to_dtype(dtype)
        device = self.device if device is None else to_device(device)
        if device.type == "cuda":
            from .runtime.cuda_memory import canonical
            device = canonical(device)  # "cuda" is the current device, cuda:0
        _check_memory_format("to", fmt, ALL_FORMATS)
        if dtype is self.dtype and device == self.device and not copy and (
                fmt is None or fmt is preserve_format or fmt is suggest_memory_format(self._shape, self._stride)):
            return self  # (torch's to_will_alias: a transposed matrix stays itself under contiguous_format)
        if fmt is None or fmt is preserve_format:
            return self._copy_to(dtype, device, non_blocking)
        strides = format_strides(fmt, self._shape) or contiguous_strides(self._shape)  # (the rank's error first)
        if dtype is self.dtype and device == self.device:
            return self.clone(memory_format=fmt)
        out = self._copy_to(dtype, device, non_blocking)  # (keeps a dense input's strides)
        return out if out._stride == strides else out.clone(memory_format=fmt)

    def _copy_to(self, dtype, device, non_blocking):
        from .ops import registry
        if non_blocking and device != self.device:
            from .runtime.cuda_memory import non_blocking as queued
            with queued():
                return registry.FUNCTIONS["_to_copy"](self, dtype=dtype, device=device)
        return registry.FUNCTIONS["_to_copy"](self, dtype=dtype, device=device)

    def type(self, dtype=None, non_blocking=False):
        """The legacy type's name (``"jitorch.FloatTensor"``, ``"jitorch.cuda.LongTensor"``), or a copy cast to
        ``dtype``: a dtype, a legacy type or its name (``"torch.cuda.FloatTensor"`` also moves to CUDA)."""
        if dtype is None:
            return f"jitorch.{'cuda.' if self.is_cuda else ''}{_TYPE_NAMES[self.dtype.name]}"
        if isinstance(dtype, str):
            return self.to(*_legacy_type(dtype), non_blocking=non_blocking)
        if isinstance(dtype, type) and isinstance(getattr(dtype, "dtype", None), _dt.dtype):  # jitorch.LongTensor
            return self.to("cuda" if dtype.is_cuda else "cpu", dtype.dtype, non_blocking=non_blocking)
        if not isinstance(dtype, _dt.dtype):
            raise TypeError("dtype must be a type, str, or dtype object")
        return self.to(dtype, non_blocking=non_blocking)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False):
        """A copy on a CUDA device (``self`` when already there)."""
        return self.to("cuda" if device is None else device, non_blocking=non_blocking)

    def type_as(self, other):
        return self.to(other.dtype)

    def new(self, *args, device=None):
        """``Tensor.new``: the legacy constructor of ``self``'s dtype (and device unless given): ``new()`` is
        empty, ``new(2, 3)`` or ``new(size)`` uninitialised, ``new(data)`` a copy of Python data, ``new(other)``
        an alias of a tensor of the same dtype."""
        device = self.device if device is None else to_device(device)
        if len(args) == 1 and isinstance(args[0], Tensor):
            other = args[0]
            if other.dtype is not self.dtype:
                raise TypeError(f"expected {self.type()} (got {other.type()})")
            return other.detach()
        if all(isinstance(a, builtins.int) and not isinstance(a, builtins.bool) for a in args):
            return _registry.FUNCTIONS["empty"](args if args else (0,), dtype=self.dtype, device=device)
        if len(args) == 1 and isinstance(args[0], Size):  # a size (a list or tuple is data)
            return _registry.FUNCTIONS["empty"](tuple(args[0]), dtype=self.dtype, device=device)
        if len(args) == 1:
            return _creation.tensor(args[0], dtype=self.dtype, device=device)
        raise TypeError(f"new() received an invalid combination of arguments - got "
                        f"({', '.join(type(a).__name__ for a in args)})")

    new_empty_strided = _factories.new_empty_strided

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        from .ops.creation import tensor
        return tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def detach(self):
        """A view of the same data, cut from the autograd graph. As torch's, it is no view for
        autograd (no ``_base``): an in-place op on it, or through a view of it, gives history to it
        alone, never to this tensor, and one on this tensor none to it. (It takes this tensor's NumPy view,
        the same elements: ``p.data.add_(...)``'s shortcut wants one.)"""
        return Tensor._make(self._storage, self._shape, self._stride, self._offset, self._arr)

    def detach_(self):
        """Take this tensor out of autograd's graph, in place; a view refuses, as torch's."""
        if self._base is not None:
            raise RuntimeError(
                "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel (DDP) "
                "for training, and gradient_as_bucket_view is set as True, gradients are views of DDP buckets, and "
                "hence detach_() cannot be called on these gradients. To fix this error, please refer to the "
                "Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution.")
        self.grad_fn = None
        self._requires_grad = False
        return self

    # Indexing --------------------------------------------------------------------

    __getitem__ = _indexing.getitem  # (not a method that calls it: a frame is a share of a small view's cost)

    def __setitem__(self, index, value):
        _indexing.setitem(self, index, value)

    @property
    def T(self):
        if self.ndim > 2:
            import warnings
            warnings.warn("The use of `x.T` on tensors of dimension other than 2 to reverse their shape is "
                          "deprecated", UserWarning, stacklevel=2)
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        if self.ndim < 2:
            raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got {self.ndim}-D tensor.")
        return self.transpose(-2, -1)

    @property
    def H(self):
        return self.T

    @property
    def mH(self):
        return self.mT

    @property
    def data(self):
        return self.detach()

    @data.setter
    def data(self, other):
        for watcher in VALUE_WATCHERS:
            watcher.data_replaced(self)
        self._storage = other._storage
        self._set_geometry(other._shape, other._stride, other._offset)
        self.dtype = other.dtype
        self.device = other.device


def _flat_tensor(storage):
    """The 1-D tensor over all of ``storage`` (a TypedStorage's elements)."""
    return Tensor._make(storage, (storage.size,), (1,), 0)


def _cast_method(name, dtype):
    def cast(self, memory_format=preserve_format):
        _check_memory_format(name, memory_format, ALL_FORMATS)
        return self.to(dtype, memory_format=memory_format)
    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = f"``self.to({dtype})``: self when it already is {dtype}, else a copy (strides kept unless " \
        "``memory_format`` is given: contiguous_format, channels_last, channels_last_3d)."
    return cast


for _name, _dtype in (("float", _dt.float32), ("double", _dt.float64), ("half", _dt.float16),
                      ("bfloat16", _dt.bfloat16), ("int", _dt.int32), ("long", _dt.int64), ("short", _dt.int16),
                      ("char", _dt.int8), ("byte", _dt.uint8), ("bool", _dt.bool)):
    setattr(Tensor, _name, _cast_method(_name, _dtype))


def _accumulator_of(t):
    return _registry.AUTOGRAD.gradient_edge(t)


# Devices and layouts jitorch has none of: these predicates are False for every tensor, as torch's are for one on
# the CPU or a CUDA device with the strided layout.
for _name in ("is_xpu", "is_mps", "is_ipu", "is_xla", "is_vulkan", "is_maia", "is_mtia", "is_mkldnn",
              "is_quantized", "is_sparse", "is_sparse_csr", "is_nested"):
    setattr(Tensor, _name, property(lambda self: False, doc=f"False: jitorch has no {_name[3:]} tensors."))


# Legacy type names: "FloatTensor", "UInt16Tensor"
_TYPE_NAMES = {name: scalar + "Tensor" for name, scalar in _dt.SCALAR_NAMES.items()}
_TYPE_NAMES_INV = {v: k for k, v in _TYPE_NAMES.items()}


def _legacy_type(name):
    """(device, dtype) of a legacy type's name: ``"torch.cuda.FloatTensor"``, ``"jitorch.LongTensor"``."""
    prefix, _, kind = name.rpartition(".")
    if kind not in _TYPE_NAMES_INV or prefix not in ("torch", "jitorch", "torch.cuda", "jitorch.cuda"):
        raise ValueError(f"invalid type: '{name}'")
    return ("cuda" if prefix.endswith("cuda") else "cpu"), _dt.to_dtype(_TYPE_NAMES_INV[kind])


def _device_cls():
    from .runtime.device import device
    return device


def _rebuild(values, dtype, shape):
    from .ops.creation import tensor
    if values is None:
        return Tensor._empty(shape, dtype, to_device("meta"))
    return tensor(values, dtype=dtype)


# Python operators, each the registry op of the same meaning.
_BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "true_divide", "div": "true_divide",  # (Python 2's name)
    "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
# the ops whose reflected operator torch computes with the tensor first (``x.add(other)``)
_COMMUTING = frozenset(("add", "mul", "bitwise_and", "bitwise_or", "bitwise_xor"))
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_UNARY = {"neg": "neg", "abs": "abs"}


def install_operators(functions):
    # An operator calls its op's fast path itself (`operator_fast_path`), as the op's variant would: ``x + y``
    # on small tensors costs a few Python calls, each a measurable share of it.
    hooks, autocast = _registry.DISPATCH_HOOKS, _AUTOCAST_STATE

    def forward(fname):
        fn = functions[fname]
        fast = _registry.operator_fast_path(fn)
        pair = fast is not None and fn._op.fast_pair  # (the maker of its method for two tensors, or None)

        def op(self, other):
            try:
                if fast is not None and not hooks and autocast.key is None:
                    r = fast((self, other))
                    if r is not None:
                        return r
                return fn(self, other)
            except TypeError:
                if isinstance(other, (Tensor, builtins.int, builtins.float, builtins.bool, np.generic)):
                    raise
                return NotImplemented
        # (two tensors of one class: the pointwise shortcut's own method, which hands ``op`` the rest)
        return pair(op, fn) if pair else op

    def reflected(fname):
        fn = functions[fname]
        fast = _registry.operator_fast_path(fn)
        if fname in _COMMUTING:
            # torch's ``2.0 * x`` is ``x.mul(2.0)``: the tensor first, so a half type reads the number as
            # ``x * 2.0`` does (unrounded, `pointwise_base.reads_unrounded`)
            return forward(fname)
        def op(self, other):
            if fname == "matmul":
                return fn(_as_tensor_like(other, self), self)
            try:
                if fast is not None and not hooks and autocast.key is None:
                    r = fast((other, self))
                    if r is not None:
                        return r
                return fn(other, self)
            except TypeError:
                return NotImplemented
        return op

    def inplace(fname):
        def op(self, other):
            return getattr(self, fname + "_")(other)
        return op

    for dunder, fname in _BINARY.items():
        if fname not in functions:
            continue
        setattr(Tensor, f"__{dunder}__", forward(fname))
        setattr(Tensor, f"__r{dunder}__", reflected(fname))
        if dunder != "matmul" and hasattr(Tensor, fname + "_"):
            setattr(Tensor, f"__i{dunder}__", inplace(fname))
    for dunder, fname in _COMPARE.items():
        if fname in functions:
            setattr(Tensor, f"__{dunder}__", forward(fname))
    for dunder, fname in _UNARY.items():
        if fname in functions:  # the op's function itself, as the operator's method: no frame of its own
            setattr(Tensor, f"__{dunder}__", functions[fname])
    Tensor.__invert__ = _invert
    Tensor.__pos__ = _pos


def _invert(self):
    if self.dtype.is_floating_point:
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return self.bitwise_not()


def _pos(self):
    if self.dtype is _dt.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return self


def _as_tensor_like(value, like):
    if isinstance(value, Tensor):
        return value
    from .ops.creation import tensor
    return tensor(value, device=like.device) if not isinstance(value, (builtins.int, builtins.float, builtins.bool)) else \
        tensor(value, dtype=_dt.result_type(value), device=like.device)
