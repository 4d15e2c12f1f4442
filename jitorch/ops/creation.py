"""Creation ops: tensors from Python data and NumPy, filled, ranged and identity
tensors, and the in-place writers ``fill_``, ``zero_`` and ``copy_``.

``tensor``, ``as_tensor`` and ``from_numpy`` take arbitrary Python data, so they
are plain functions; every other op here is declared in the registry, with a
meta rule that reads only sizes, dtypes, devices and Python scalars.
"""

from __future__ import annotations

import builtins
import math

import warnings

import numpy as np

from ..runtime import allocator
from ..runtime import dtypes as _dt
from ..runtime.casts import convert
from ..runtime.copy_parts import fill as fill_split
from ..runtime.device import CPU, get_default_device, to_device
from ..runtime.memory_format import ALL_FORMATS, check_memory_format, format_strides, preserve_format
from ..runtime.storage import Storage
from ..runtime.strided import (broadcast_shapes, contiguous_strides, dense_strides, is_non_overlapping_and_dense,
                               numel_overflows, span)
from . import powers, registry
from .registry import TensorSpec, defop, preserved_strides, scalar_name, write_all

# torch's "tensor options" keywords of every factory
OPTIONS = "ScalarType? dtype=None, Device? device=None, bool requires_grad=False"
LIKE_OPTIONS = OPTIONS + ", Any? memory_format=None"  # (the ``_like`` factories' and ``empty``'s)

def scalar_overflows(value, dtype):
    """torch's ``overflows``: whether a Python number does not fit ``dtype``.

    Unsigned integers accept negative integers down to ``-max`` (they wrap);
    floats overflow only when finite and beyond the dtype's range.
    """
    if dtype is _dt.bool:
        return False
    if dtype.is_floating_point:
        return math.isfinite(value) and abs(value) > _dt.finfo(dtype).max
    lo, hi = _dt.iinfo_range(dtype)
    if isinstance(value, float):
        return not lo <= value <= hi  # NaN fails too
    return not (-hi if dtype.kind == "u" else lo) <= value <= hi


def check_scalar_fits(value, dtype):
    """RuntimeError, worded as torch's, when ``value`` overflows ``dtype``."""
    if scalar_overflows(value, dtype):
        raise RuntimeError(f"value cannot be converted to type {_dt.C_NAMES[dtype.name]} without overflow")


def scalar_dtype_of(*values):
    """The dtype of a factory given Python numbers: bool, int64, or the default float."""
    if all(isinstance(v, (builtins.bool, np.bool_)) for v in values):
        return _dt.bool
    if any(isinstance(v, (float, np.floating)) for v in values):
        return _dt.get_default_dtype()
    return _dt.int64


# tensor(): nested Python data -----------------------------------------------------

_PY_SCALARS = {builtins.bool: _dt.bool, int: _dt.int64}
_PY_NUMBERS = frozenset((builtins.bool, int, float))  # leaves handled a whole list at a time


def _is_sequence(x):
    return isinstance(x, (list, tuple, range)) or (isinstance(x, np.ndarray) and x.ndim > 0)


def _sizes(data):
    """The shape, read from the first element at each depth (torch's compute_sizes)."""
    sizes = []
    seq = data
    while _is_sequence(seq):
        if isinstance(seq, np.ndarray):
            return sizes + list(seq.shape)
        sizes.append(len(seq))
        if not len(seq):
            break
        seq = seq[0]
        if isinstance(seq, str):
            raise ValueError("too many dimensions 'str'")
    return sizes


def _scalar_dtype(x):
    """The dtype torch infers for one element of the data."""
    t = type(x)
    if t is float:
        return _dt.get_default_dtype()
    found = _PY_SCALARS.get(t)
    if found is not None:
        return found
    Tensor = registry.Tensor
    if isinstance(x, Tensor):
        return x.dtype
    if isinstance(x, (np.bool_, np.integer, np.floating)):
        return _dt.from_numpy_dtype(x.dtype)
    if isinstance(x, (complex, np.complexfloating)):
        raise TypeError("complex tensors are not supported by jitorch")
    if isinstance(x, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{t.__name__}'")
    raise RuntimeError(f"Could not infer dtype of {t.__name__}")


def _infer_dtype(data):
    """torch's infer_scalar_type: the promotion of every element's dtype; an
    empty sequence counts as the default float."""
    if isinstance(data, np.ndarray):
        return _dt.from_numpy_dtype(data.dtype)
    if not _is_sequence(data):
        return _scalar_dtype(data)
    if not len(data):
        return _dt.get_default_dtype()
    kinds = set(map(type, data))
    if kinds <= _PY_NUMBERS:
        # the common leaf: Python numbers only, decided by their types at once
        return _dt.get_default_dtype() if float in kinds else _dt.int64 if int in kinds else _dt.bool
    out = None
    for x in data:
        d = _infer_dtype(x)
        out = d if out is None else _dt.promote_types(out, d)
    return out


def _check_structure(seq, sizes, dim, dtype):
    """Every sequence at depth ``dim`` has length ``sizes[dim]``; the leaves are scalars."""
    if dim == len(sizes):
        if _is_sequence(seq):
            name = type(seq).__name__
            raise TypeError(f"must be real number, not {name}" if dtype.is_floating_point
                            else f"'{name}' object cannot be interpreted as an integer")
        return
    if not _is_sequence(seq):
        raise TypeError("not a sequence")
    if isinstance(seq, np.ndarray) and seq.shape == tuple(sizes[dim:]):
        return
    if len(seq) != sizes[dim]:
        raise ValueError(f"expected sequence of length {sizes[dim]} at dim {dim} (got {len(seq)})")
    if dim + 1 == len(sizes) and set(map(type, seq)) <= _PY_NUMBERS:
        return
    for x in seq:
        _check_structure(x, sizes, dim + 1, dtype)


def _element_value(t):
    """A tensor inside a list counts as one scalar, as in torch."""
    if t.numel() != 1:
        if t.dtype.is_floating_point:
            raise ValueError("only one element tensors can be converted to Python scalars")
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return t.item()


def _tensors_to_values(data):
    Tensor = registry.Tensor
    if isinstance(data, Tensor):
        return _element_value(data)
    if isinstance(data, (list, tuple)):
        return [_tensors_to_values(x) for x in data]
    return data


def _has_tensor(data):
    if isinstance(data, registry.Tensor):
        return True
    if not isinstance(data, (list, tuple)) or set(map(type, data)) <= _PY_NUMBERS:
        return False
    return any(_has_tensor(x) for x in data)


_WIDE = {"b": np.bool_, "u": np.int64, "i": np.int64, "f": np.float64}


def _array_from_python(data, dtype, inferred):
    """The values of nested Python data as a NumPy array of ``dtype``, with torch's
    overflow check of integer targets."""
    if _has_tensor(data):
        data = _tensors_to_values(data)
    if dtype is _dt.uint64 and inferred is not _dt.bool:
        return _uint64_from_python(data, inferred)
    try:
        wide = np.array(data, dtype=_WIDE[inferred.kind])
    except OverflowError:
        raise ValueError("Overflow when unpacking long long") from None
    if dtype.kind in "iu" and wide.size and wide.dtype.kind != "b":  # bools fit every integer dtype
        lo, hi = _dt.iinfo_range(dtype)
        if wide.dtype.kind == "f":
            bad = not (np.all(wide >= lo) and np.all(wide <= hi))
        else:
            bad = not (np.all(wide >= (-hi if dtype.kind == "u" else lo)) and np.all(wide <= hi))
        if bad:
            raise RuntimeError(f"value cannot be converted to type {dtype.name} without overflow")
    return _contiguous(wide, dtype)


def _uint64_from_python(data, inferred):
    """uint64 values of nested Python numbers: torch unpacks each one as an unsigned 64-bit C integer,
    which refuses floats and negative or too large integers."""
    if inferred.kind == "f":
        raise TypeError("an integer is required")
    values = np.array(data, dtype=object)
    if values.size and values.min() < 0:
        raise OverflowError("can't convert negative int to unsigned")
    if values.size and values.max() > _dt.iinfo_range(_dt.uint64)[1]:
        raise OverflowError("int too big to convert")
    return np.asarray(values.astype(np.uint64), order="C")


def _contiguous(arr, dtype):
    """A C-contiguous copy of ``arr`` converted to ``dtype``."""
    return np.asarray(convert(arr, dtype.np), order="C")


def _to_array(data, dtype):
    """(array, dtype) of any data ``tensor()`` accepts; ``dtype`` None means inferred."""
    Tensor = registry.Tensor
    if isinstance(data, Tensor):
        registry.meta_warn(
            "To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
            "sourceTensor.detach().clone().requires_grad_(True), rather than jitorch.tensor(sourceTensor).",
            stacklevel=3)
        dtype = dtype or data.dtype
        if data.device.type == "meta":
            return None, data.shape, dtype
        data._values_read()
        return _contiguous(data._host_array(), dtype), data.shape, dtype
    if isinstance(data, (np.ndarray, np.generic)):
        if isinstance(data, np.ndarray):
            check_numpy_layout(data)
        arr = np.asarray(data)
        dtype = dtype or _dt.from_numpy_dtype(arr.dtype)
        return _contiguous(arr, dtype), arr.shape, dtype
    if isinstance(data, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    sizes = _sizes(data)
    inferred = _infer_dtype(data)
    dtype = dtype or inferred
    if not math.prod(sizes):  # nothing to store, so torch checks no further
        return np.zeros(sizes, dtype.np), tuple(sizes), dtype
    _check_structure(data, sizes, 0, dtype)
    return _array_from_python(data, dtype, inferred), tuple(sizes), dtype


def _source_strides(data):
    """The element strides of the tensor or NumPy array ``data`` a tensor() copies (None for other data; an
    array's strides are checked whole and non-negative already)."""
    if isinstance(data, registry.Tensor):
        return tuple(data._stride)
    if not isinstance(data, np.ndarray):
        return None
    return tuple(s // data.itemsize for s in data.strides)


def _copy_layout(shape, strides):
    """The strides of torch.tensor's copy of data laid out with ``strides`` (its preserve_format copy): those
    strides where they are non-overlapping and dense, size-1 dims' too (``np.ones((1, 5)).T`` gives (1, 5)),
    else dense strides in their order; an empty source's whatever they are (torch counts it contiguous, so
    ``np.zeros((0, 3))`` keeps (0, 0)); None for contiguous ones."""
    if strides is None or strides == contiguous_strides(shape):
        return None
    if 0 in shape or is_non_overlapping_and_dense(shape, strides):
        return strides
    return dense_strides(shape, strides)


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of ``data``: nested lists or tuples of numbers
    (and one-element tensors), NumPy arrays and scalars, or a tensor.

    The dtype is inferred as torch does: bools give bool, ints int64, any float the
    default dtype, NumPy data keeps its dtype, and mixed elements promote.
    """
    dtype = None if dtype is None else _dt.to_dtype(dtype)
    if device is None and isinstance(data, registry.Tensor):
        device = data.device
    device = to_device(device)
    with np.errstate(all="ignore"):
        arr, shape, dtype = _to_array(data, dtype)
    if device.type == "meta":
        t = registry.Tensor._empty(shape, dtype, device)
    elif arr is None:
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")
    elif device.type == "cpu":
        t = registry.Tensor._from_array(arr, dtype)
    else:
        from ..runtime.cuda_memory import upload
        t = registry.Tensor._empty(arr.shape, dtype, device)
        upload(t._storage.data_ptr(), arr, dtype)
    layout = _copy_layout(tuple(shape), _source_strides(data))
    if layout is not None:  # (fuzz seed 7952488: overlap checks compare the strides of size-1 dims too)
        laid_out = registry.Tensor._make(Storage.empty(span(shape, layout), dtype, t.device), tuple(shape), layout, 0)
        laid_out._write(t)
        laid_out._storage._version = 0  # (a new tensor's, as torch's: the copy is no write the caller made)
        t = laid_out
    t = pinned(t, pin_memory)
    if requires_grad:
        t._require_grad(True, "factory")
    t._made_from_data()
    return t


def pinned(t, pin_memory):
    """A factory's result ``t``, moved to page-locked host memory when ``pin_memory`` (torch's errors without a
    CUDA device, and for a result on a device)."""
    if not pin_memory:
        return t
    from ..runtime import cuda_backend  # here: `import jitorch` loads no CUDA module
    if not cuda_backend.current().available():
        raise RuntimeError("pin_memory=True requires a CUDA or other accelerator backend; no pinned memory "
                           "allocator is available on this system.")
    return t.pin_memory()


def as_tensor(data, dtype=None, device=None):
    """Like ``tensor`` but shares memory with a tensor or NumPy array when dtype
    and device already match."""
    Tensor = registry.Tensor
    dtype = None if dtype is None else _dt.to_dtype(dtype)
    if isinstance(data, Tensor):
        return data.to(dtype=dtype or data.dtype, device=device or data.device)
    if isinstance(data, np.ndarray) and (dtype is None or dtype.np == data.dtype) and \
            to_device(device).type == "cpu":
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(ndarray):
    """A tensor sharing memory with ``ndarray``: writes to either show in both. Its strides are the array's
    (in elements), size-1 and empty dims' included, as torch's."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    check_numpy_layout(ndarray)
    dtype = _dt.from_numpy_dtype(ndarray.dtype)
    if not ndarray.flags.writeable:
        warn_not_writable()
    return registry.Tensor._sharing(ndarray, dtype)


_NOT_WRITABLE = [False]


def warn_not_writable():
    """torch's UserWarning for wrapping a non-writeable array, once a process as torch's (TORCH_WARN_ONCE). The
    tensor stays read-only: an eager write raises NumPy's ValueError, and a compiled function that writes it runs
    eagerly to raise it, where torch writes through (undefined, and a crash for read-only mapped memory)."""
    if not _NOT_WRITABLE[0]:
        _NOT_WRITABLE[0] = True
        warnings.warn("The given NumPy array is not writable, and PyTorch does not support non-writable tensors. "
                      "This means writing to this tensor will result in undefined behavior. You may want to copy "
                      "the array to protect its data or make it writable before converting it to a tensor. This "
                      "type of warning will be suppressed for the rest of this program.", UserWarning, stacklevel=3)


def check_numpy_layout(ndarray):
    """torch's checks of a NumPy array it wraps, in its order (from_numpy, and tensor() and as_tensor() of an
    array, which copy such a wrapping): native byte order, strides in whole elements, no negative stride."""
    if not ndarray.dtype.isnative:
        raise ValueError("given numpy array has byte order different from the native byte order. "
                         "Conversion between byte orders is currently not supported.")
    if any(s % ndarray.itemsize for s in ndarray.strides):
        raise ValueError("given numpy array strides not a multiple of the element byte size. "
                         "Copy the numpy array to reallocate the memory.")
    if any(s < 0 for s in ndarray.strides):
        raise ValueError("At least one stride in the given numpy array is negative, and tensors with negative "
                         "strides are not currently supported. (You can probably work around this by making a "
                         "copy of your array  with array.copy().) ")


# Sized factories: zeros, ones, empty, full and their _like / new_ forms --------------

def check_size(size):
    """A factory's size: non-negative dims whose element count fits int64 (torch's errors)."""
    for n in size:
        if n < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {list(size)}")
    if numel_overflows(size):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)}")
    return tuple(size)


def _zeros_meta(size, dtype, device, requires_grad):
    if to_device(device).type != "meta" and any(n < 0 for n in size):
        raise RuntimeError("zeros: Dimension size must be non-negative.")  # torch's own wording for zeros
    return sized_spec(size, dtype, device)


def sized_spec(size, dtype, device, default=None):
    """The spec of a factory output: ``dtype`` or ``default`` or the default float."""
    return TensorSpec(check_size(size), dtype or default or _dt.get_default_dtype(), to_device(device))


def like_spec(x, dtype, device, fmt=None, name=None):
    """The spec of a ``_like`` output: ``x``'s shape, its dtype and device unless given; op ``name``'s memory
    format ``fmt`` checked as torch checks it (its type, a channels-last format's rank)."""
    if name is not None:
        check_memory_format(name, fmt, ALL_FORMATS)
        format_strides(fmt, x.shape)
    return TensorSpec(x.shape, dtype or x.dtype, x.device if device is None else to_device(device))


def like_strides(spec, x, *rest):
    """The layout rule of the ``_like`` factories, whose last argument is ``memory_format``: the input's in
    preserve_format (`registry.preserved_strides`), else the format's."""
    fmt = rest[-1]
    if fmt is None or fmt is preserve_format:
        return preserved_strides(spec, x)
    return format_strides(fmt, spec.shape)


def _empty_meta(size, dtype, device, requires_grad, fmt):
    """``empty``'s spec: a memory format must fit the rank, and preserve_format has nothing to preserve."""
    check_memory_format("empty", fmt, ALL_FORMATS)
    if fmt is preserve_format:
        raise RuntimeError("unsupported memory format Preserve")
    spec = sized_spec(size, dtype, device)
    format_strides(fmt, spec.shape)
    return spec


def _new_spec(x, size, dtype, device):
    return TensorSpec(check_size(size), dtype or x.dtype, x.device if device is None else to_device(device))


def _filler(value):
    """Kernels of a constant factory: sized (``zeros``), like (``zeros_like``, keeping
    the input's memory order as torch's preserve_format does)."""
    if value is None:
        return (lambda spec, *a: pooled(spec.shape, spec.dtype.np),
                lambda spec, x, *a: dense_like(x, spec.dtype.np))
    return (lambda spec, *a: pooled(spec.shape, spec.dtype.np, value),
            lambda spec, x, *a: dense_like(x, spec.dtype.np, value))


def pooled(shape, dtype, value=None):
    """A fresh C-contiguous array (``value`` everywhere, or uninitialised); a large one from the caching
    allocator's pool (`runtime.allocator`), as a compiled call's results come, and back to it when its tensor
    dies. Fresh pages cost more than the fill on this project's virtual machines: an eager gradient of an LSTM
    language model's 700x10000 log-probabilities (nll_loss's backward, outside the compiled model) came from
    the C library's heap, which grew by a new block every few steps, each faulting in 28 MB of zeroed huge pages
    (~55 ms of system CPU, against 1 ms to fill a block that is already mapped). A large one is filled in ranges
    on the thread team (`copy_parts.fill`), as a compiled graph's zeros are: that gradient's zeros were the
    largest pass of the LSTM step's eager backward, run on one thread at any thread count."""
    arr, buf = allocator.empty(shape, dtype)
    if buf is not None:  # (the tensor keeps this very array as its storage's data)
        allocator.track(arr, buf)
    if value is not None:
        fill_split(arr, value)
    return arr


def dense_like(x, dtype, value=None):
    """A fresh array shaped like array ``x`` (``value`` everywhere, or uninitialised), laid out as torch's
    preserve_format: dense strides in the order of ``x``'s (infer_dense_strides; NumPy's order "K" differs
    for expanded inputs)."""
    n = int(np.prod(x.shape, dtype=np.int64))
    flat = pooled((n,), dtype, value)
    item = flat.itemsize
    strides = dense_strides(x.shape, [s // x.itemsize for s in x.strides])
    return np.lib.stride_tricks.as_strided(flat, x.shape, [s * item for s in strides])


for _name, _value, _what in (("zeros", 0, "zeros"), ("ones", 1, "ones"), ("empty", None, "uninitialised values")):
    _sized_cpu, _like_cpu = _filler(_value)
    if _name == "empty":
        defop(f"empty(int... size, *, {LIKE_OPTIONS}) -> Tensor", meta=_empty_meta, cpu=_sized_cpu, kind="creation",
              variants=("function",), layout=lambda spec, *args: format_strides(args[-1], spec.shape),
              doc="A tensor of uninitialised values of the given size (default float dtype unless ``dtype``), laid "
                  "out in ``memory_format`` (contiguous_format, channels_last for 4-d, channels_last_3d for 5-d).")
    else:
        defop(f"{_name}(int... size, *, {OPTIONS}) -> Tensor",
              meta=_zeros_meta if _name == "zeros" else lambda size, dtype, device, rg: sized_spec(size, dtype, device),
              cpu=_sized_cpu, kind="creation", variants=("function",),
              doc=f"A tensor of {_what} of the given size (default float dtype unless ``dtype``).")
    defop(f"{_name}_like(Tensor input, *, {LIKE_OPTIONS}) -> Tensor",
          meta=(lambda name: lambda x, dtype, device, rg, fmt: like_spec(x, dtype, device, fmt, name))(f"{_name}_like"),
          cpu=_like_cpu, kind="creation", variants=("function",), cross_device=True, layout=like_strides,
          doc=f"A tensor of {_what} with the shape, dtype and device of ``input`` unless given, laid out as "
              "``input`` (preserve_format) or in ``memory_format``.")
    defop(f"new_{_name}(Tensor self, int... size, *, {OPTIONS}) -> Tensor",
          meta=lambda x, size, dtype, device, rg: _new_spec(x, size, dtype, device),
          cpu=_sized_cpu, kind="creation", variants=("method",), cross_device=True,
          doc=f"A tensor of {_what} of the given size, with ``self``'s dtype and device unless given.")
del _name, _value, _what, _sized_cpu, _like_cpu


def full_value(spec, value):
    """``value`` as one element of the output dtype (floats truncate into integers)."""
    return convert(np.array(value), spec.dtype.np)


def _checked(spec, value):
    """``spec``, once the fill value is known to fit its dtype."""
    check_scalar_fits(value, spec.dtype)
    return spec


defop(f"full(int[] size, Scalar fill_value, *, {OPTIONS}) -> Tensor",
      meta=lambda size, v, dtype, device, rg: _checked(sized_spec(size, dtype, device, scalar_dtype_of(v)), v),
      cpu=lambda spec, size, v, *a: np.full(spec.shape, full_value(spec, v)), kind="creation",
      variants=("function",),
      doc="A tensor of the given size filled with ``fill_value``; the dtype follows the value "
          "(bool, int64 or the default float) unless given.")
defop(f"full_like(Tensor input, Scalar fill_value, *, {LIKE_OPTIONS}) -> Tensor",
      meta=lambda x, v, dtype, device, rg, fmt: _checked(like_spec(x, dtype, device, fmt, "full_like"), v),
      cpu=lambda spec, x, v, *a: dense_like(x, spec.dtype.np, full_value(spec, v)), kind="creation",
      layout=like_strides,
      variants=("function",), cross_device=True,
      doc="A tensor with the shape (and dtype, device) of ``input`` filled with ``fill_value``.")
defop(f"new_full(Tensor self, int[] size, Scalar fill_value, *, {OPTIONS}) -> Tensor",
      meta=lambda x, size, v, dtype, device, rg: _checked(_new_spec(x, size, dtype, device), v),
      cpu=lambda spec, x, size, v, *a: np.full(spec.shape, full_value(spec, v)), kind="creation",
      variants=("method",), cross_device=True, doc="A tensor of the given size filled with ``fill_value``, with ``self``'s dtype "
                                "and device unless given.")


# Ranges --------------------------------------------------------------------------

def _not_implemented(op_name, dtype):
    return NotImplementedError(f'"{op_name}" not implemented for \'{scalar_name(dtype)}\'')


def c_num(x):
    """A number as C++ streams print it in torch's messages (``0``, ``-1``, ``1.5``, ``inf``, ``3e+38``)."""
    return f"{x:g}" if isinstance(x, float) else str(x)


def arange_plan(start, end, step, dtype):
    """(length, first value, step) of ``arange`` as torch computes them.

    The bounds are checked in float64. Integer dtypes count from the start and
    step truncated to int64 (so a fractional step may truncate to 0 and repeat
    the start, as in torch); int64 also counts its length exactly in integers,
    every other dtype as ceil((end - start) / step) in float64.
    """
    fstart, fend, fstep = float(start), float(end), float(step)
    if fstep == 0:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(fstart) and math.isfinite(fend)):
        raise RuntimeError(f"unsupported range: {c_num(fstart)} -> {c_num(fend)}")
    if not (fstep > 0 and fend >= fstart or fstep < 0 and fend <= fstart):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype.is_floating_point:
        first, increment = fstart, fstep
    else:
        first, increment = _to_int64(start), _to_int64(step)
    if dtype is _dt.int64:
        if increment == 0:
            raise ValueError("step must be nonzero")
        # torch's C++ integer division truncates; the quotient is never negative, so // agrees
        sign = 1 if increment > 0 else -1
        length = (_to_int64(end) - first + increment - sign) // increment
    else:
        length = (fend - fstart) / fstep
        length = math.ceil(length) if math.isfinite(length) else length
    if not 0 <= length <= 2 ** 63 - 1:
        raise RuntimeError("invalid size, possible overflow?")
    return length, first, increment


def _to_int64(value):
    """A bound or step as torch's ``Scalar.to<int64_t>()``: truncated, checked for overflow."""
    check_scalar_fits(value, _dt.int64)
    return int(value)


def _arange_meta(start, end, step, dtype, device, rg):
    if end is None:
        start, end = 0, start
    dtype = dtype or scalar_dtype_of(start, end, step)
    if dtype is _dt.bool:
        raise _not_implemented("arange_cpu", dtype)
    length = arange_plan(start, end, step, dtype)[0]
    return TensorSpec((length,), dtype, to_device(device))


def _arange_cpu(spec, start, end, step, *rest):
    if end is None:
        start, end = 0, start
    length, xstart, xstep = arange_plan(start, end, step, spec.dtype)
    if not spec.dtype.is_floating_point:
        return xstart + xstep * np.arange(length, dtype=np.int64)
    return xstart + xstep * np.arange(length, dtype=np.float64)


_op = defop(f"arange(Scalar start=0, Scalar? end=None, Scalar step=1, *, {OPTIONS}) -> Tensor",
            meta=_arange_meta, cpu=_arange_cpu, kind="creation", variants=("function",),
            doc="Values from ``start`` (0 when only one bound is given) up to ``end`` (excluded) by ``step``: "
                "int64 when every argument is an integer, else the default float dtype.")

# Bounds and steps the shortcut takes: NumPy's int64 arange counts its length in float64, exact this far
_ARANGE_FAST_MAX = 1 << 31


def _arange_fast(args, record=True):
    """`registry.OpDef.fast` of ``arange``: int64 values from Python int bounds and step (a model's positions,
    ``arange(0, t)``), on the CPU as the default device, without requires_grad: NumPy's int64 arange, whose values
    are `_arange_cpu`'s ``start + step * arange(length)`` for bounds within `_ARANGE_FAST_MAX`; None for
    anything else (the general path, which raises the errors: a zero step, bounds against the step's sign)."""
    start, end, step, dtype, device, requires_grad = args
    if end is None:
        start, end = 0, start
    if (start.__class__ is not int or end.__class__ is not int or step.__class__ is not int or device is not None
            or dtype is not None and dtype is not _dt.int64 or requires_grad is not False
            or get_default_device() is not CPU):
        return None
    if not (0 < step <= _ARANGE_FAST_MAX and start <= end or -_ARANGE_FAST_MAX <= step < 0 and end <= start) or \
            not (-_ARANGE_FAST_MAX <= start <= _ARANGE_FAST_MAX and -_ARANGE_FAST_MAX <= end <= _ARANGE_FAST_MAX):
        return None
    return registry.Tensor._fresh(np.arange(start, end, step, dtype=np.int64), _dt.int64)


_op.fast = _arange_fast


def _steps_meta(op_name, start, end, steps, dtype, device):
    dtype = dtype or _dt.get_default_dtype()
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if dtype is _dt.bool:
        raise _not_implemented(f"{op_name}_cpu", dtype)
    check_scalar_fits(start, dtype)
    check_scalar_fits(end, dtype)
    return TensorSpec((steps,), dtype, to_device(device))


def lin_values(start, end, steps, dtype, exponents=False):
    """``steps`` evenly spaced values, computed from both ends as torch does (the
    first half from ``start``, the rest from ``end``): floating dtypes in their
    own arithmetic, integer dtypes in float64 from the bounds cast to the dtype.
    As ``logspace`` exponents of a half type, the sums are kept in float32."""
    if dtype.is_floating_point:
        t = dtype.np.type
    else:
        t = np.float64
        start, end = (int(np.array(math.trunc(v)).astype(dtype.np)) for v in (start, end))
    first, last = t(start), t(end)
    if steps == 1:
        return np.full(1, first)
    step = (last - first) / t(steps - 1)
    idx = np.arange(steps)
    if t in (np.float32, np.float64) and not exponents:  # torch's kernel: ``first + step * i``, one fma
        return np.where(idx < steps // 2, fma(step, idx, first), fma(-step, steps - 1 - idx, last))
    up, down = step * idx.astype(t), step * (steps - 1 - idx).astype(t)
    if exponents and dtype in (_dt.float16, _dt.bfloat16):
        first, last, up, down = np.float32(first), np.float32(last), up.astype(np.float32), down.astype(np.float32)
    return np.where(idx < steps // 2, first + up, last - down)


def fma(a, count, c):
    """``a * count + c`` rounded once to ``a``'s type (float32 or float64), as C's ``fma``: torch's CPU and
    CUDA ``linspace`` kernels compile ``start + step * i`` to fused multiply-adds, which can differ by an
    ulp from the product and sum rounded apart (fuzz seed 7500962: a histogram's bin edge, and so which bin
    a value on it fell in). ``count``: integers below 2**29. Exact by error-free transformations in float64
    (Dekker's product, Knuth's sum); a float32 result from the float64 sum rounded to odd first, so that
    rounding it again to float32 is the one rounding. Non-finite values are the plain product and sum's."""
    t = np.dtype(type(a)) if np.isscalar(a) else a.dtype
    a64, n, c64 = np.float64(a), count.astype(np.float64), np.float64(c)
    with np.errstate(all="ignore"):
        if t == np.float64:
            product, low = powers.two_prod_dekker(powers.Arrays(), a64, n)
        else:  # (a float32 step times such a count is exact in float64)
            product, low = a64 * n, 0.0
        total = product + c64
        back = total - product
        err = (product - (total - back)) + (c64 - back) + low
        if t == np.float64:
            result = total + err
        else:
            even = (total.view(np.int64) & 1) == 0
            odd = np.nextafter(total, np.where(err > 0, np.inf, -np.inf))
            result = np.where(even & (err != 0), odd, total).astype(np.float32)
        plain = (a * count.astype(t) + c).astype(t)
    return np.where(np.isfinite(result), result, plain)


defop(f"linspace(Scalar start, Scalar end, int steps, *, {OPTIONS}) -> Tensor",
      meta=lambda start, end, steps, dtype, device, rg: _steps_meta("linspace", start, end, steps, dtype, device),
      cpu=lambda spec, start, end, steps, *a: lin_values(start, end, steps, spec.dtype), kind="creation",
      variants=("function",), doc="``steps`` evenly spaced values from ``start`` to ``end`` (both included).")
def _logspace(base, exponents):
    """``base ** exponents``, in float32 for the half types as torch computes them (jitorch's own pow,
    `powers.power`: not NumPy's, whose bits depend on its version)."""
    t = np.float64 if exponents.dtype == np.float64 else np.float32
    return powers.power(t(base), exponents.astype(t), t)


defop(f"logspace(Scalar start, Scalar end, int steps, float base=10.0, *, {OPTIONS}) -> Tensor",
      meta=lambda start, end, steps, base, dtype, device, rg: _steps_meta("logspace", start, end, steps, dtype, device),
      cpu=lambda spec, start, end, steps, base, *a: _logspace(base, lin_values(start, end, steps, spec.dtype, True)),
      kind="creation", variants=("function",),
      doc="``base`` raised to ``steps`` evenly spaced exponents from ``start`` to ``end``.")


def _zero_dim_bounds(op_name, convert):
    """``linspace``/``logspace``'s argument converter, after torch's refusal of a ``start`` or ``end`` tensor
    of any dims (a RuntimeError naming the dims of each tensor bound, where the converter's would be a
    TypeError: a Scalar argument takes a 0-d tensor only)."""
    def converted(args):
        bounds = [(name, v.ndim) for name, v in zip(("start", "end"), args[:2]) if isinstance(v, registry.Tensor)]
        if any(ndim for _, ndim in bounds):
            dims = " and ".join(f"{name} with {ndim} dimension(s)" for name, ndim in bounds)
            raise RuntimeError(f"{op_name} only supports 0-dimensional start and end tensors, but got {dims}.")
        return convert(args)
    return converted


for _name in ("linspace", "logspace"):
    registry.OPS[_name].convert = _zero_dim_bounds(_name, registry.OPS[_name].convert)


def _eye_meta(n, m, dtype, device):
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    return TensorSpec((n, m), dtype or _dt.get_default_dtype(), to_device(device))


defop(f"eye(int n, *, {OPTIONS}) -> Tensor",
      meta=lambda n, dtype, device, rg: _eye_meta(n, n, dtype, device),
      cpu=lambda spec, *a: np.eye(*spec.shape, dtype=spec.dtype.np), kind="creation", variants=("function",),
      doc="The ``n`` by ``n`` identity matrix.")
defop(f"eye.m(int n, int m, *, {OPTIONS}) -> Tensor",
      meta=lambda n, m, dtype, device, rg: _eye_meta(n, m, dtype, device),
      cpu=lambda spec, *a: np.eye(*spec.shape, dtype=spec.dtype.np), kind="creation", variants=("function",),
      doc="An ``n`` by ``m`` matrix with ones on the diagonal.")


# In-place writers: fill_, zero_, copy_ -------------------------------------------------

def _same_spec(x):
    return TensorSpec(x.shape, x.dtype, x.device)


def _fill_scalar_meta(x, value):
    check_scalar_fits(value, x.dtype)
    return _same_spec(x)


def _fill_tensor_meta(x, value):
    if value.ndim:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} "
                           "dimensions.")
    return _same_spec(x)


_FILL_DOC = "A tensor like ``self`` filled with ``value`` (cast to ``self``'s dtype); ``fill_`` writes in place."
defop("fill.Scalar(Tensor self, Scalar value) -> Tensor", meta=_fill_scalar_meta,
      cpu=lambda spec, x, v: dense_like(x, spec.dtype.np, full_value(spec, v)), kind="creation",
      variants=("function", "inplace"), layout=preserved_strides, expanded_write=write_all, doc=_FILL_DOC)
# (no expanded_write: torch's fill_ of a tensor value, and so ``x[...] = value`` with a basic index, refuses to
# write through an expanded tensor, where its fill_ of a number writes)
defop("fill.Tensor(Tensor self, Tensor value) -> Tensor", meta=_fill_tensor_meta,
      cpu=lambda spec, x, v: dense_like(x, spec.dtype.np, convert(v, spec.dtype.np)), kind="creation",
      variants=("function", "inplace"), layout=preserved_strides, doc=_FILL_DOC)
defop("zero(Tensor self) -> Tensor", meta=_same_spec, cpu=lambda spec, x: np.zeros(spec.shape, spec.dtype.np),
      kind="creation", variants=("inplace",), expanded_write=write_all,
      doc="``x.zero_()`` fills ``x`` with zeros in place.")


def _copy_meta(x, src, non_blocking):
    if src.device.type == "meta" and x.device.type != "meta":
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")
    shape = broadcast_shapes(x.shape, src.shape)
    if shape != x.shape:
        raise RuntimeError(f"output with shape {list(x.shape)} doesn't match the broadcast shape {list(shape)}")
    return _same_spec(x)


defop("copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor", meta=_copy_meta,
      cpu=lambda spec, x, src, nb: convert(np.broadcast_to(src, spec.shape), spec.dtype.np), kind="creation",
      variants=("inplace",), cross_device=True, overlap="partial", numbers_as_tensors=True,
      doc="``x.copy_(src)`` writes ``src`` (broadcast to ``x``'s shape, cast to its dtype) into ``x``; "
          "a Python number is a 0-d tensor, as in torch.")
