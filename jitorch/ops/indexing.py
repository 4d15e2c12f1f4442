"""Indexing: ``x[index]``, ``x[index] = value`` and the index ops (gather, scatter, ...).

``x[index]`` follows torch's order: the basic parts of the index (ints,
slices, None, Ellipsis) build a view with ``select``, ``slice`` and
``unsqueeze``, so it shares storage; the advanced parts (integer or bool
tensors, lists, Python bools) are then applied by the ``index`` op, which
copies. Its placement rule is NumPy's: the dims of the broadcast index tensors
replace the indexed dims where those are adjacent, and go first otherwise.
Because ints are applied as views first, ``x[:, [0, 1], :, 0]`` keeps the
indexed dim in place where NumPy (for which the int is an advanced index too)
would move it first. ``x[index] = value`` writes through the same view, with
``copy_`` or, for advanced indices, ``index_put_``.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime.casts import convert
from ..runtime.copy_parts import fill as fill_split
from ..runtime.device import CPU
from ..runtime.strided import (broadcast_shapes, contiguous_strides, is_contiguous, is_non_overlapping_and_dense,
                               list_str, memory_order_strides, view_strides, wrap_dim)
from . import registry
from . import creation
from .creation import check_scalar_fits
from .index_positions import flat_positions, unbroadcast
from .meta import opmath
from .registry import OPS, TensorSpec, cpp_name, defop, preserved_strides, scalar_name, write_where
from .views import _same_buffer, _type_str

_INDEX_DTYPES = (_dt.int64, _dt.int32, _dt.uint8, _dt.bool)
_MASK_DTYPES = (_dt.uint8, _dt.bool)
_INT64_RANGE = _dt.iinfo_range(_dt.int64)


def _op(name, *args):
    """Call a registry op by name, with every argument of its schema."""
    return registry.call(OPS[name], args)


# Reading an index expression -----------------------------------------------------

def _index_items(index):
    """The index as a tuple of items; a short list holding slices, lists, tensors,
    None or Ellipsis counts as a tuple (NumPy's old rule, which torch keeps)."""
    if isinstance(index, tuple):
        return index
    if (isinstance(index, Sequence) and not isinstance(index, str) and len(index) < 32
            and any(isinstance(i, (Sequence, np.ndarray, slice, registry.Tensor)) or i is None or i is Ellipsis
                    for i in index)):
        registry.meta_warn("Using a non-tuple sequence for multidimensional indexing is deprecated; use "
                           "x[tuple(seq)] instead of x[seq].", stacklevel=4)
        return tuple(index)
    return (index,)


def _tensor_item(t):
    """A tensor index: 0-d integers act as ints, 0-d bools as Python bools, byte masks as bool masks."""
    if t.ndim == 0 and t.dtype in _MASK_DTYPES:
        return bool(t.item())
    if t.ndim == 0 and t.dtype in _dt.INTEGRAL:
        return int(t.item())
    if t.dtype is _dt.uint8:
        registry.meta_warn("indexing with dtype jitorch.uint8 is now deprecated, please use a dtype jitorch.bool "
                           "instead.", stacklevel=5)
        return t.to(_dt.bool)
    return t


def _normalize_item(item):
    """One index item as an int, bool, slice, None, Ellipsis or index tensor."""
    if item is None or item is Ellipsis or isinstance(item, (slice, bool)):
        return item
    if isinstance(item, (int, np.integer)):
        return int(item)
    if isinstance(item, registry.Tensor):
        return _tensor_item(item)
    if isinstance(item, (Sequence, np.ndarray)):
        arr = np.asarray(item) if not isinstance(item, np.ndarray) or item.dtype.kind in "biu" else None
        if arr is not None and arr.dtype.kind in "iu" and arr.size:
            return registry.Tensor._from_array(arr.astype(np.int64))
        t = creation.tensor(item)  # lists of numbers index as int64 (floats truncated), lists of bools as masks
        return _tensor_item(t if t.dtype in _MASK_DTYPES else t.to(_dt.int64))
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                     f"indices (got {registry.type_name(item)})")


def _dims_taken(item):
    if isinstance(item, registry.Tensor):
        return item.ndim if item.dtype is _dt.bool else 1
    return 0 if item is None or item is Ellipsis or isinstance(item, bool) else 1


def _slice_bound(v):
    try:
        return None if v is None else v.__index__()
    except AttributeError:
        raise TypeError("slice indices must be integers or None or have an __index__ method") from None


def _check_0d_index(index):
    """torch's refusals of an index of a 0-d tensor that is one int or one slice (its binding's shortcuts
    for those, before the count of indexed dims that refuses everything else, ``x[(0,)]`` too)."""
    if isinstance(index, slice):
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        if index == 0:
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` "
                             "in C++ to convert a 0-dim tensor to a number")
        raise IndexError(f"index {index} is out of bounds for dimension 0 with size 0")


def _check_count(x, items):
    """torch's count of the dims an index takes, before it reads any item: each item takes one dim but None,
    Ellipsis and Python bools (none) and bool or byte tensors (their dims)."""
    taken = 0
    for i in items:
        if isinstance(i, registry.Tensor):
            taken += i.ndim if i.dtype in _MASK_DTYPES else 1
        elif not (i is None or i is Ellipsis or i is True or i is False):
            taken += 1
    if taken > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")


def _apply_basic(x, items):
    """(view, indices): the view of ``x`` the basic items select, and the advanced
    indices still to apply to it (``index`` op format), or None when there are none."""
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    taken = sum(_dims_taken(i) for i in items)
    if taken > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    result, dim, real = x, 0, 0  # real: the "dimension" torch's error messages name: the item's place in the index
    indices, covered = [], 0     # advanced indices and how many dims of ``result`` they span

    def record(t):
        nonlocal covered, dim
        indices.extend([None] * (dim - covered))
        indices.append(t)
        width = t.ndim if t.dtype is _dt.bool else 1
        covered = dim + width
        dim += width

    for item in items:
        if item is Ellipsis:
            dim += x.ndim - taken
            real += 1  # (one place, however many dims it spans: ``a[..., 5]`` names dimension 1, as torch)
            continue
        real += 1
        if item is None:
            result = _op("unsqueeze", result, dim)
            dim += 1
        elif isinstance(item, bool):
            result = _op("unsqueeze", result, dim)
            record(registry.Tensor._from_array(np.zeros(int(item), np.int64)))
        elif isinstance(item, int):
            n = result.shape[dim]
            if not -n <= item < n:
                raise IndexError(f"index {item} is out of bounds for dimension {real - 1} with size {n}")
            result = _op("select", result, dim, item)
        elif isinstance(item, slice):
            if item.step == 0:
                raise ValueError("slice step cannot be zero")
            start, stop, step = _slice_bound(item.start), _slice_bound(item.stop), _slice_bound(item.step)
            if (start, stop, step) not in ((None, None, None), (None, None, 1)):  # ``:`` keeps the dim as is
                result = _op("slice", result, dim, start, stop, 1 if step is None else step)
            dim += 1
        else:
            record(item)
    if result is x and not indices:  # x[...] is still a new view
        result = _op("alias", x)
    return result, (indices or None)


def _split_index(x, index):
    """(view, advanced indices or None): the view the basic part of ``index`` selects. Index tensors are
    moved to the view's device, as torch lets CPU indices (and Python lists) index a CUDA tensor."""
    if index.__class__ is int and x._shape and -x._shape[0] <= index < x._shape[0]:
        # x[i], the commonest index, skips the parsing; the op's variant takes its eager fast path
        return registry.FUNCTIONS["select"](x, 0, index), None
    if not x._shape:
        _check_0d_index(index)
    items = _index_items(index)
    _check_count(x, items)
    view, indices = _apply_basic(x, [_normalize_item(i) for i in items])
    if indices is not None and view.device.type != "cpu":
        indices = [t.to(view.device) if isinstance(t, registry.Tensor) and t.device != view.device else t
                   for t in indices]
    return view, indices


def _basic_geometry(x, items):
    """(shape, strides, offset) of the view ``x[items]`` for a tuple of Python ints and slices of Python ints
    within range, None and at most one Ellipsis: what `_apply_basic`'s chain of ``select``, ``slice`` and
    ``unsqueeze`` gives, computed without making its intermediate tensors. None for anything else (other
    items, an index out of range, a step that is not positive), which the chain serves or refuses."""
    shape, strides, offset = x._shape, x._stride, x._offset
    ndim = len(shape)
    taken, ellipsis = 0, False
    for item in items:
        kind = item.__class__
        if kind is int or kind is slice:
            taken += 1
        elif item is Ellipsis:
            if ellipsis:
                return None
            ellipsis = True
        elif item is not None:
            return None
    if taken > ndim:
        return None
    sizes, steps, d = [], [], 0  # the view's dims so far, and the next dim of ``x`` the items reach
    for item in items:
        kind = item.__class__
        if kind is int:
            n = shape[d]
            if not -n <= item < n:
                return None
            offset += (item + n if item < 0 else item) * strides[d]
            d += 1
        elif kind is slice:
            n, stride = shape[d], strides[d]
            d += 1
            start, stop, step = item.start, item.stop, item.step
            if start is None and stop is None and (step is None or step.__class__ is int and step == 1):
                sizes.append(n)  # ``:`` keeps the dim as it is
                steps.append(stride)
                continue
            if step is None:
                step = 1
            if (step.__class__ is not int or step <= 0 or start is not None and start.__class__ is not int
                    or stop is not None and stop.__class__ is not int):
                return None
            # `views._slice`'s bounds
            start = 0 if start is None else start + n if start < 0 else start
            stop = n if stop is None else stop + n if stop < 0 else stop
            start = min(max(start, 0), n)
            stop = min(max(stop, start), n)
            sizes.append((stop - start + step - 1) // step)
            steps.append(stride * step)
            offset += start * stride
        elif item is None:  # `views._unsqueeze` before dim ``d`` of ``x``
            sizes.append(1)
            steps.append(shape[d] * strides[d] if d < ndim else 1)
        else:  # Ellipsis
            skip = ndim - taken
            sizes.extend(shape[d:d + skip])
            steps.extend(strides[d:d + skip])
            d += skip
    return tuple(sizes) + shape[d:], tuple(steps) + strides[d:], offset


def getitem(x, index):
    """``x[index]``: a view for basic indices, a copy once advanced indices take part."""
    kind = index.__class__
    if (kind is int or kind is tuple or kind is slice) and not registry.DISPATCH_HOOKS and not (
            x._requires_grad and registry.records_grad()):
        # a view that records no history, made at once (a dispatch hook sees the general path's ops)
        shape = x._shape
        if kind is int:
            if not shape or not -shape[0] <= index < shape[0]:
                geometry = None
            else:  # `views._select` of dim 0
                strides = x._stride
                geometry = shape[1:], strides[1:], x._offset + (index + shape[0] if index < 0 else index) * strides[0]
        else:
            geometry = _basic_geometry(x, (index,) if kind is slice else index)
        if geometry is not None:
            return registry.Tensor._view_of(x, geometry[0], geometry[1], geometry[2], True)
    if kind is tuple or kind is list:
        taken = _take_fast(x, index)
        if taken is not None:
            return taken
    view, indices = _split_index(x, index)
    return view if indices is None else _op("index", view, indices)


_ALL = slice(None)


def _take_fast(x, index):
    """``x[index]`` for an index of whole-dim slices and one list of Python ints in range (``v[:, [-1]]``, as
    sampling code takes each row's last kept value), of a C-contiguous CPU tensor that records no history: the
    general path's copy (`_index_cpu`'s NumPy indexing of one dim, which is ``np.take``'s), made at once; None
    for anything else, which the general path serves (and raises its errors for)."""
    if registry.DISPATCH_HOOKS or x.device is not CPU or x._requires_grad and registry.records_grad():
        return None
    items = (index,) if index.__class__ is list else index
    shape = x._shape
    if len(items) > len(shape):
        return None
    dim = None
    for d, item in enumerate(items):
        if item.__class__ is list:
            if dim is not None or not item:
                return None
            dim = d
        elif item.__class__ is not slice or item != _ALL:
            return None
    if dim is None or x._stride != contiguous_strides(shape):
        return None
    chosen = items[dim]
    for i in chosen:
        if i.__class__ is not int:  # (bools are masks; NumPy's ints and tensors take the general path)
            return None
    n = shape[dim]
    if not -n <= min(chosen) or not max(chosen) < n:
        return None
    out = np.take(x._arr if x._arr is not None else x._array(), np.array(chosen, np.intp), dim)
    return registry.contiguous_result(out, x.dtype)


def _value_tensor(target, value):
    """The value of ``x[i] = value`` as a tensor; Python numbers take ``target``'s dtype."""
    if isinstance(value, registry.Tensor):
        return value
    if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise TypeError(f"can't assign a {registry.type_name(value)} to a {_type_str(target)}")
    if isinstance(value, (int, np.integer)) and not _INT64_RANGE[0] <= value <= _INT64_RANGE[1]:
        raise ValueError("Overflow when unpacking long long")
    if target.dtype not in (_dt.float16, _dt.bfloat16):  # torch lets halves overflow to inf here
        check_scalar_fits(value, target.dtype)
    token = fp_errors.enter()
    try:
        arr = convert(np.asarray(value), target.dtype.np)
    finally:
        fp_errors.leave(token)
    return registry.Tensor._from_array(arr, target.dtype)


_FILL_DTYPES = {_dt.float32: np.float32, _dt.float64: np.float64}


def _masked_fill_fast(x, mask, value):
    """``x[mask] = value`` written straight into ``x``: a CPU float32 or float64 ``x`` that does not require
    grad and can be written (no element repeated), a bool mask of its shape in other memory, a Python float
    its dtype holds (or an infinity, or NaN); True when done, False for the general path (its checks and
    errors, the profile's and the trace's record). Sampling code writes ``-inf`` so on every token."""
    scalar = _FILL_DTYPES.get(x.dtype)
    if (scalar is None or value.__class__ is not float or registry.DISPATCH_HOOKS or x._requires_grad
            or mask.dtype is not _dt.bool or mask._shape != x._shape or x.device.type != "cpu"
            or mask.device.type != "cpu" or mask._storage is x._storage or x._storage._data is None
            or not is_non_overlapping_and_dense(x._shape, x._stride)):
        return False
    with np.errstate(over="raise"):  # (a finite value past the dtype's range: the general path's error)
        try:
            scalar(value)
        except FloatingPointError:
            return False
    np.copyto(x._array(), value, where=mask._array())
    x._storage._version += 1
    return True


def setitem(x, index, value):
    """``x[index] = value``: ``value`` broadcast (and cast, for basic indices) into the indexed elements."""
    if index.__class__ is registry.Tensor and _masked_fill_fast(x, index, value):
        return
    value = _value_tensor(x, value)
    if index is False:  # selects nothing; torch returns before writing
        return
    if value.numel() == 1 and _one_byte_mask(index):  # (the mask becomes bool on its way to index_put_)
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype unsigned char")
    view, indices = _split_index(x, index)
    if indices is None:
        _copy_to(view, value)
        return
    view.index_put_(indices, _drop_leading_ones(value), False)


def _one_byte_mask(index):
    """Whether ``index``'s only index tensor (or list) is a uint8 mask: torch's index_put_ then writes one
    value as ``masked_fill_`` (`_fill_mask`), which refuses byte masks."""
    items = index if isinstance(index, tuple) else (index,)
    given = [i for i in items if isinstance(i, (list, np.ndarray)) or isinstance(i, registry.Tensor) and i.ndim]
    return len(given) == 1 and isinstance(given[0], registry.Tensor) and given[0].dtype is _dt.uint8


def _copy_to(view, value):
    """torch's write of a basic index: a copy of a value of the view's shape, a fill with a 0-d value (a
    number), else a copy of the value expanded to the view's shape. Which one decides how an overlap of
    the value with ``x`` is judged (`ops.overlap`)."""
    if value.shape == view.shape:
        view.copy_(value)
    elif value.ndim == 0 and value.device.type == "cpu":
        registry.call_inplace(OPS["fill.Tensor"], (view, value))
    else:
        view.copy_(_drop_leading_ones(value).expand(view.shape))


def _drop_leading_ones(value):
    """``value`` without its leading size-1 dims, as torch takes a value to write through an index."""
    ones = next((i for i, n in enumerate(value.shape) if n != 1), value.ndim)
    return value.squeeze(tuple(range(ones))) if ones else value


def _one_mask(indices):
    """Whether the advanced part of an index is a single boolean mask."""
    given = [t for t in indices if t is not None]
    return len(given) == 1 and isinstance(given[0], registry.Tensor) and given[0].dtype is _dt.bool


# The index op and index_put ----------------------------------------------------------

def _index_entries(x, indices):
    """Check advanced indices against ``x``; their shapes, one per dim they index
    (None for a dim not indexed; a mask gives one entry of unknown size per dim)."""
    if len(indices) > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim} (got {len(indices)})")
    entries = []
    for t in indices:
        if t is None:
            entries.append(None)
            continue
        if t.dtype not in _INDEX_DTYPES:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if t.dtype in _MASK_DTYPES:
            d = len(entries)
            for j, n in enumerate(t.shape):
                if d + j >= x.ndim or n != x.shape[d + j]:
                    raise IndexError(f"The shape of the mask {list_str(t.shape)} at index {j} does not match the "
                                     f"shape of the indexed tensor {list_str(x.shape)} at index {d + j}")
            entries.extend([(None,)] * t.ndim)
        else:
            entries.append(tuple(t.shape))
    if len(entries) > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim} (got {len(entries)})")
    if all(e is None for e in entries):
        raise IndexError("at least one index must be provided")
    return entries


def _broadcast_index_shapes(shapes):
    """The broadcast shape of index tensors; None where a mask's size is not known yet."""
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    unknown = any(None in s for s in shapes)
    for s in shapes:
        for j, n in enumerate(s, ndim - len(s)):
            m = out[j]
            if n == 1 or m == n:
                continue
            if m == 1:
                out[j] = n
            elif n is None or m is None or unknown:
                out[j] = None
            else:
                raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                                 + ", ".join(list_str(s) for s in shapes))
    return tuple(out)


def _index_shape(shape, entries):
    """The shape of ``x[indices]``: broadcast index dims in place of adjacent indexed dims, else first."""
    pos = [i for i, e in enumerate(entries) if e is not None]
    b = _broadcast_index_shapes([entries[i] for i in pos])
    if pos[-1] - pos[0] == len(pos) - 1:
        return tuple(shape[:pos[0]]) + b + tuple(shape[pos[-1] + 1:])
    return b + tuple(n for i, n in enumerate(shape) if i not in pos)


def _first_out_of_range(idx, n, negative=True):
    """The first value of ``idx`` outside ``[-n, n)`` (``[0, n)`` without ``negative``), or None. (The first
    in C order of ``idx`` is the first of its `unbroadcast` view: each broadcast copy comes after its first.)"""
    low = -n if negative else 0
    idx = unbroadcast(idx)
    if idx.size == 0 or (idx.min() >= low and idx.max() < n):
        return None
    return int(idx[(idx < low) | (idx >= n)].flat[0])


def _numpy_key(shape, indices):
    """(NumPy index, result shape) of ``indices`` (arrays): masks become their nonzero
    positions; raises torch's errors for broadcasting and out-of-range values."""
    key = []
    for a in indices:
        if a is None:
            key.append(slice(None))
        elif a.dtype == np.bool_ or a.dtype == np.uint8:
            key.extend(np.nonzero(a))
        else:
            key.append(a)
    target = _index_shape(shape, [None if isinstance(k, slice) else k.shape for k in key])
    arrays = [(d, k) for d, k in enumerate(key) if not isinstance(k, slice)]
    for ordinal, (d, k) in enumerate(arrays):
        bad = _first_out_of_range(k, shape[d])
        if bad is not None:
            raise IndexError(f"index {bad} is out of bounds for dimension {ordinal} with size {shape[d]}")
    return tuple(key), target


def _index_meta(x, indices):
    return TensorSpec(_index_shape(x.shape, _index_entries(x, indices)), x.dtype, x.device)


def _index_cpu(spec, x, indices):
    return x[_numpy_key(x.shape, indices)[0]]


def _index_layout(spec, x, indices):
    """torch's layout of ``x[indices]`` on the CPU: its TensorIterator's, over ``x`` restrided to the
    result's shape (stride 0 across the index dims) and the broadcast index tensors viewed in the result's
    dims (AdvancedIndex). The same on every device, as all layout rules (`registry.result_strides`)."""
    shape, strides = list(x.shape), list(_guarded_strides(x))
    columns = _index_columns(indices)
    columns += [None] * (len(shape) - len(columns))
    pos = [d for d, c in enumerate(columns) if c is not None]
    if pos[-1] - pos[0] != len(pos) - 1:  # torch moves the indexed dims (and their indices) to the front
        order = pos + [d for d in range(len(shape)) if d not in pos]
        shape, strides = [shape[d] for d in order], [strides[d] for d in order]
        columns = [columns[d] for d in order]
        pos = list(range(len(pos)))
    b = broadcast_shapes(*(columns[d][0] for d in pos))
    before, after = pos[0], len(shape) - pos[-1] - 1
    src = (spec.shape, tuple(strides[:before]) + (0,) * len(b) + tuple(strides[pos[-1] + 1:]))
    viewed = (1,) * before + b + (1,) * after
    operands = [src] + [(viewed, view_strides(b, _broadcast_index(*columns[d], b), viewed)) for d in pos]
    return memory_order_strides(spec.shape, operands)


def _index_columns(indices):
    """(shape, strides, int32) of each index, one per dim of ``x`` it indexes (None for the others); a
    mask gives its nonzero positions, one column per dim."""
    columns = []
    for t in indices:
        if t is None:
            columns.append(None)
        elif t.dtype in _MASK_DTYPES:
            columns.extend([((int(np.count_nonzero(t._host_array())),), (1,), False)] * t.ndim)
        else:
            columns.append((t.shape, _guarded_strides(t), t.dtype is _dt.int32))
    return columns


def _guarded_strides(t):
    """``t``'s strides; a contiguous tensor's as a compiled call sees it, `contiguous_strides`: the strides of
    its size-1 dims address nothing and are neither guarded nor traced, but torch's order can turn on them
    (docs/differences-from-torch.md)."""
    return contiguous_strides(t.shape) if is_contiguous(t.shape, t.stride()) else t.stride()


def _broadcast_index(shape, strides, int32, target):
    """The strides of an index broadcast to ``target`` (0 across the dims it expands), as torch reads it:
    an int32 index through its int64 copy, made after the broadcast (dense, in the same order)."""
    off = len(target) - len(shape)
    out = tuple(0 if d < off or shape[d - off] != target[d] else strides[d - off] for d in range(len(target)))
    if int32 and not is_non_overlapping_and_dense(target, out):
        return memory_order_strides(target, [(target, out)])
    return out


def _check_values_fit(values_shape, target):
    fits = len(values_shape) <= len(target) and all(
        v == 1 or t is None or v == t for v, t in zip(reversed(values_shape), reversed(target)))
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list_str(values_shape)} cannot be broadcast to "
                           f"indexing result of shape {list_str(target)}")


def _fill_mask(indices, values, accumulate):
    """The mask of an index_put_ that torch runs as ``masked_fill_(mask, values.item())`` (its
    canDispatchToMaskedFill): one value, not accumulated, one bool or uint8 index and no other index tensor;
    else None. The mask must then be bool and the value, of any dtype, must fit ``self``'s as a number.
    (torch does so for values on the CPU only; jitorch on every device, so that its devices agree.)"""
    if accumulate or prod(values.shape) != 1:
        return None
    given = [t for t in indices if t is not None]
    if len(given) != 1 or given[0].dtype not in (_dt.bool, _dt.uint8, np.bool_, np.uint8):
        return None
    return given[0]


def _index_put_meta(x, indices, values, accumulate):
    # torch's order: index tensors (dtypes, mask shapes), the masked_fill_ dispatch, then shape and dtype
    target = _index_shape(x.shape, _index_entries(x, indices))
    mask = _fill_mask(indices, values, accumulate)
    if mask is not None:
        if mask.dtype is not _dt.bool:
            raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                               f"{cpp_name(mask.dtype)}")
        return TensorSpec(x.shape, x.dtype, x.device)
    if None not in target:  # (a mask's count is known only from its values: the CPU kernel checks then)
        _check_values_fit(values.shape, target)
    if values.dtype is not x.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{scalar_name(x.dtype)} for the destination and {scalar_name(values.dtype)} for the "
                           f"source.")
    return TensorSpec(x.shape, x.dtype, x.device)


def _put_values(x, indices, values, accumulate, target):
    """The values index_put writes into ``x`` (an array) at an index of shape ``target``: one value through
    a mask checked and converted as masked_fill_'s number (`_fill_mask`), else ``values`` broadcast."""
    if _fill_mask(indices, values, accumulate) is not None:
        value = values.reshape(())
        check_scalar_fits(value.item(), _dt.from_numpy_dtype(x.dtype))
        return convert(value, x.dtype)
    _check_values_fit(values.shape, target)
    return np.broadcast_to(values, target)


def _index_put_cpu(spec, x, indices, values, accumulate):
    key, target = _numpy_key(x.shape, indices)
    values = _put_values(x, indices, values, accumulate, target)
    out = x.copy()
    if accumulate:
        np.add.at(out, key, values)
    else:
        out[key] = values
    return out


def _index_put_overlap(x, indices, values, accumulate):
    """torch writes one-element values through one boolean mask as ``masked_fill_(mask, values.item())``,
    which checks only the mask; other writes refuse any overlap with the indices or values. (torch does so
    for values on the CPU only; jitorch on every device, so that its devices agree.)"""
    if not accumulate and values.numel() == 1 and _one_mask(indices):
        return {"indices": "partial"}
    return "any"


def _index_put_expanded(b, new, indices, values, accumulate):
    """index_put_ into an expanded self (`registry.write_inplace`): each add of ``accumulate`` reads what the last
    one left in the shared memory (np.add.at is unbuffered), as torch's serial loop."""
    key, target = _numpy_key(b.shape, indices)
    values = _put_values(b, indices, values, accumulate, target)
    if accumulate:
        np.add.at(b, key, values)
    else:
        b[key] = values


defop("index(Tensor self, Tensor?[] indices) -> Tensor", meta=_index_meta, cpu=_index_cpu, kind="index",
      variants=(), layout=_index_layout,
      doc="``self`` indexed by integer or bool tensors, one per dim (None: the whole dim); a copy.")
defop("index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
      meta=_index_put_meta, cpu=_index_put_cpu, kind="index", variants=("function", "method", "inplace"),
      overlap=_index_put_overlap, layout=preserved_strides, expanded_write=_index_put_expanded,
      expanded_warning="tensor[indices] = tensor",
      doc="``self`` with ``values`` (broadcast) written at ``self[indices]``, or added there with ``accumulate``.")


# gather and scatter ----------------------------------------------------------------

def _nonempty(shape):
    """torch treats a 0-d tensor as 1-d of size 1 in gather and scatter."""
    return tuple(shape) or (1,)


def _read_index(index, ndim):
    """``index`` as a >= 1-d array; an empty one, whose dtype and shape torch does not check, as ``ndim``
    dims of size 0."""
    if index.size == 0:
        return np.zeros((0,) * max(ndim, 1), np.int64)
    return index.reshape(_nonempty(index.shape))


def _gather_meta(x, dim, index, sparse_grad):
    d = wrap_dim(dim, x.ndim)
    if index.numel() == 0:  # torch checks neither its dtype nor its shape: the result is empty
        return TensorSpec(tuple(index.shape), x.dtype, x.device)
    if index.dtype not in (_dt.int64, _dt.int32):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    xs, ids = _nonempty(x.shape), _nonempty(index.shape)
    if len(ids) != len(xs):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for i, (n, m) in enumerate(zip(ids, xs)):
        if i != d and n > m:
            raise RuntimeError(f"Size does not match at dimension {i} expected index {list_str(index.shape)} to be "
                               f"no larger than self {list_str(x.shape)} apart from dimension {d}")
    return TensorSpec(tuple(index.shape), x.dtype, x.device)


def _check_dim_indices(idx, n, d):
    bad = _first_out_of_range(idx, n, negative=False)
    if bad is not None:
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size {n}")


# A gather along the last dim by an index expanded along other dims takes, for each of at most this many rows of
# its unexpanded index, the same positions from every row those dims span (grid_sample's taps, one index per
# sample for all channels: a row's 17 kB stays in cache, where one flat take of all 884k values hops over all)
BLOCK_TAKES_MAX = 256


def _gather_cpu(spec, x, dim, index, sparse_grad):
    d = wrap_dim(dim, x.ndim)
    x1, idx = x.reshape(_nonempty(x.shape)), _read_index(index, x.ndim)
    _check_dim_indices(idx, x1.shape[d], d)
    part = x1[tuple(slice(None) if i == d else slice(0, n) for i, n in enumerate(idx.shape))]
    rows = unbroadcast(idx)
    if (d == idx.ndim - 1 and rows is not idx and idx.size and rows.shape[-1] == idx.shape[-1]
            and prod(rows.shape[:-1]) <= BLOCK_TAKES_MAX):
        out = np.empty(idx.shape, x1.dtype)
        for at in np.ndindex(*rows.shape[:-1]):
            block = tuple(slice(None) if rows.shape[i] < idx.shape[i] else slice(j, j + 1) for i, j in enumerate(at))
            out[block] = part[block].take(rows[at], axis=-1)
        return out.reshape(spec.shape)
    if x1.flags.c_contiguous and idx.size:  # (a view: its elements at the positions, one flat take)
        return x1.reshape(-1).take(flat_positions(x1.shape, d, idx)).reshape(spec.shape)
    return np.take_along_axis(part, idx.astype(np.intp), axis=d).reshape(spec.shape)


defop("gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor", meta=_gather_meta,
      cpu=_gather_cpu, kind="index", variants=("function", "method", "out"), overlap={"self": "any", "index": "partial"},
      doc="``out[i][j] = self[index[i][j]][j]`` along ``dim`` (for 2-d, dim 0); ``index`` has ``self``'s ndim.")

_SCATTER_REDUCES = ("add", "multiply")
# torch's scatter_reduce also takes "max" and "min" (undocumented) for amax and amin; its backward refuses them
_SCATTER_REDUCE_ALIASES = {"max": "amax", "min": "amin"}
_SCATTER_REDUCE_REDUCES = ("sum", "prod", "mean", "amax", "amin", *_SCATTER_REDUCE_ALIASES)


def scatter_reduce_combine(reduce):
    """The reduction scatter_reduce's ``reduce`` names: "amax" and "amin" for torch's aliases "max" and "min"."""
    return _SCATTER_REDUCE_ALIASES.get(reduce, reduce)


def _scatter_checks(x, dim, index, src, reduce=None, allowed=_SCATTER_REDUCES):
    """The checks of every scatter: dtypes, dims, sizes, and the reduction's name."""
    d = wrap_dim(dim, x.ndim)
    empty = index.numel() == 0  # torch checks neither its dtype nor its shape: nothing is written
    if index.dtype not in (_dt.int64, _dt.int32) and not empty:
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if src is not None and src.dtype is not x.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if not empty:
        _scatter_shape_check(x, d, index, src)
    if reduce is not None and reduce not in allowed:
        if allowed is _SCATTER_REDUCES:
            raise RuntimeError("reduce argument must be either add or multiply.")
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return TensorSpec(x.shape, x.dtype, x.device)


def _scatter_shape_check(x, d, index, src):
    """torch's checks of a non-empty index's (and ``src``'s) dims against ``self``'s."""
    xs, ids = _nonempty(x.shape), _nonempty(index.shape)
    ss = None if src is None else _nonempty(src.shape)
    if len(ids) != len(xs):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if ss is not None and len(ss) != len(xs):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    too_big = any(i != d and n > m for i, (n, m) in enumerate(zip(ids, xs))) or (
        ss is not None and any(n > m for n, m in zip(ids, ss)))
    if too_big and index.ndim:
        tail = "" if src is None else f" and to be no larger size than src {list_str(src.shape)}"
        raise RuntimeError(f"Expected index {list_str(index.shape)} to be no larger than self {list_str(x.shape)} "
                           f"apart from dimension {d}{tail}")


def _compute_copy(x):
    """A row-major >= 1-d copy of ``x`` in its compute dtype (float32 for the halves)."""
    return np.array(x.reshape(_nonempty(x.shape)), dtype=opmath(_dt.from_numpy_dtype(x.dtype)).np, order="C")


def _scatter_target(x, dim, index, out=None):
    """(self as a >= 1-d copy in its compute dtype, or ``out``, self's own >= 1-d array when given, the
    coordinates ``index`` writes to, their shape)."""
    d = wrap_dim(dim, x.ndim)
    out = _compute_copy(x) if out is None else out
    idx = _read_index(index, x.ndim)
    _check_dim_indices(idx, out.shape[d], d)
    coords = list(np.indices(idx.shape, sparse=True))
    coords[d] = idx
    return out, tuple(coords), idx.shape


def _src_values(src, index):
    if index.size == 0:  # of any shape (`_read_index`): the values of no position
        return src.reshape(-1)[:0]
    s = src.reshape(_nonempty(src.shape))
    return s[tuple(slice(0, n) for n in _nonempty(index.shape))]


_UFUNCS = {"add": np.add, "multiply": np.multiply, "sum": np.add, "prod": np.multiply, "amax": np.maximum,
           "amin": np.minimum}


# A scatter-add of at least this many values into a contiguous float array goes through the code generator's
# kernel, one value per row (a gather's backward: grid_sample's 221k values, np.add.at 2.8 ms, the positions
# and the kernel 1.6 ms); np.add.at's per-call cost is lower below
KERNEL_FROM_VALUES = 4096


def _scatter_into(spec, x, dim, index, values, reduce, out=None):
    out, coords, shape = _scatter_target(x, dim, index, out)
    values = np.broadcast_to(convert(values, out.dtype), shape)
    if reduce is None:
        out[coords] = values
        return out.reshape(spec.shape)
    if _UFUNCS[reduce] is np.add and _element_kernel(out, values) is not None:
        d = wrap_dim(dim, out.ndim)
        add_at_positions(out, flat_positions(out.shape, d, coords[d]), values)
    else:
        _UFUNCS[reduce].at(out, coords, values)
    return out.reshape(spec.shape)


def _element_kernel(out, values):
    """The generated scatter-add that `add_at_positions` takes for these arrays, or None (NumPy's)."""
    if (values.size < KERNEL_FROM_VALUES or not out.flags.c_contiguous or out.dtype not in (np.float32, np.float64)
            or values.dtype != out.dtype or SCATTER_ROWS_KERNEL is None):
        return None
    return SCATTER_ROWS_KERNEL(out.dtype.name)


def add_at_positions(out, positions, values):
    """``np.add.at(out.reshape(-1), positions, values)`` into a C-contiguous ``out``, ``positions`` and
    ``values`` of one shape, with its bits: each value added in C order, one rounding each. Many float values
    go through the code generator's kernel (each value its own row of one element), others through NumPy."""
    kernel = _element_kernel(out, values)
    if kernel is None:
        np.add.at(out.reshape(-1), positions, values)
        return
    kernel(out.reshape(-1, 1), np.ascontiguousarray(positions, np.int64).reshape(-1),
           np.ascontiguousarray(values).reshape(-1, 1))


def _scatter_in_place(op, reduce_of, src_is_tensor):
    """Make ``x.op_(dim, index, src or value, ...)`` scatter straight into ``x``'s memory (the op's
    ``fast_into``), where the general path, which scatters into a copy of ``x`` and writes the copy back,
    gives the same values: every tensor a CPU tensor with memory, ``x`` C-contiguous, of its own compute
    dtype (a half self adds in float32) and not an inference tensor, ``src`` of ``x``'s dtype, and no
    backward node to record. An eager gather's gradient scatters into fresh zeros so: a language model's
    loss outside a compiled model (28 MB of zeros a step) no longer copies them into fresh pages and back.
    ``reduce_of(args)``: the reduction's name, or None."""
    def fast_into(args):
        x, dim, index, src = args[0], args[1], args[2], args[3]
        tensors = (x, index, src) if src_is_tensor else (x, index)
        if not all(isinstance(t, registry.Tensor) and t.device.type == "cpu" and t._storage.data is not None
                   for t in tensors) or not isinstance(dim, int):
            return False
        if not src_is_tensor and not isinstance(src, (int, float)):
            return False
        if (opmath(x.dtype) is not x.dtype or x._storage.inference or not x.is_contiguous()
                or (src_is_tensor and src.dtype is not x.dtype)
                or (registry.records_grad() and any(t.requires_grad for t in tensors))):
            return False
        reduce = reduce_of(args)
        try:
            spec = op.meta(*args)
        except (RuntimeError, IndexError, TypeError, ValueError):  # the general path raises it
            return False
        own = x._array().reshape(_nonempty(x.shape))
        values = _src_values(src._array(), index._array()) if src_is_tensor else src
        token = fp_errors.enter()
        try:
            _scatter_into(spec, x._array(), dim, index._array(), values, reduce, out=own)
        finally:
            fp_errors.leave(token)
        x._storage._version += 1
        return True
    op.fast_into = fast_into


# torch's scatter with reduce= has no derivative: its autograd fallback serves every form
_REDUCE_FALLBACK = {"autograd_fallback": lambda args: args[4] is not None}
# torch's scatter, scatter_add, scatter_reduce and index_add write into an ``out=`` that is ``self`` itself (its
# kernels copy self into out unless they are the same tensor, then write in place: ``T.scatter(v, 0, i, x, out=v)``,
# fuzz seed 8660185 of ``--out-views``), and refuse a partial overlap with it, as any with the index or the source
def _self_may_be_out(source):
    return {"self": "partial", "index": "any", source: "any"}


defop("scatter(Tensor self, int dim, Tensor index, Tensor src, *, str? reduce=None) -> Tensor",
      meta=lambda x, dim, index, src, reduce: _scatter_checks(x, dim, index, src, reduce),
      cpu=lambda spec, x, dim, index, src, reduce: _scatter_into(spec, x, dim, index, _src_values(src, index), reduce),
      kind="index", overlap=_self_may_be_out("src"),
      variants=("function", "method", "inplace", "out"), **_REDUCE_FALLBACK,
      doc="``self`` with ``src[i][j]`` written at ``index[i][j]`` along ``dim`` (added or multiplied with ``reduce``).")
defop("scatter.value(Tensor self, int dim, Tensor index, Scalar value, *, str? reduce=None) -> Tensor",
      meta=lambda x, dim, index, value, reduce: _scatter_checks(x, dim, index, None, reduce),
      cpu=lambda spec, x, dim, index, value, reduce: _scatter_into(spec, x, dim, index, value, reduce),
      kind="index", overlap=_self_may_be_out("src"),
      variants=("function", "method", "inplace", "out"), **_REDUCE_FALLBACK,
      doc="``self`` with ``value`` written at the positions ``index`` gives along ``dim``.")
defop("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
      meta=lambda x, dim, index, src: _scatter_checks(x, dim, index, src),
      cpu=lambda spec, x, dim, index, src: _scatter_into(spec, x, dim, index, _src_values(src, index), "add"),
      kind="index", overlap=_self_may_be_out("src"),
      variants=("function", "method", "inplace", "out"),
      doc="``self`` with ``src[i][j]`` added at ``index[i][j]`` along ``dim`` (repeated indices accumulate).")
_scatter_in_place(OPS["scatter"], lambda args: args[4], True)
_scatter_in_place(OPS["scatter.value"], lambda args: args[4], False)
_scatter_in_place(OPS["scatter_add"], lambda args: "add", True)


def _scatter_reduce_cpu(spec, x, dim, index, src, reduce, include_self):
    reduce = scatter_reduce_combine(reduce)
    out, coords, _ = _scatter_target(x, dim, index)
    values = convert(_src_values(src, index), out.dtype)
    if reduce == "mean":
        count = np.zeros(out.shape, np.int64) + include_self
        np.add.at(count, coords, 1)
    if not include_self:
        out[coords] = reduce_identity(reduce, out.dtype)
    _UFUNCS["sum" if reduce == "mean" else reduce].at(out, coords, values)
    if reduce == "mean":
        hit = count > 0
        total, count = out[hit], count[hit]
        if spec.dtype.np != out.dtype:  # a half type: torch divides its sum and count rounded to it
            total, count = (convert(convert(a, spec.dtype.np), out.dtype) for a in (total, count))
        out[hit] = total // count if out.dtype.kind in "iub" else total / count
    return out.reshape(spec.shape)


def reduce_identity(reduce, npd):
    """The value scatter_reduce's ``reduce`` starts a slot of NumPy dtype ``npd`` from when ``self`` is not
    included (its identity; the dtype's extremes for integer amax and amin)."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    lo, hi = (-np.inf, np.inf) if npd.kind == "f" else (False, True) if npd.kind == "b" else \
        (np.iinfo(npd).min, np.iinfo(npd).max)
    return lo if reduce == "amax" else hi


def _scatter_reduce_meta(x, dim, index, src, reduce, include_self):
    spec = _scatter_checks(x, dim, index, src, reduce, _SCATTER_REDUCE_REDUCES)
    if reduce == "mean" and x.dtype is _dt.bool:  # (torch's mean kernel has no bool: it divides)
        raise NotImplementedError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'")
    return spec


defop("scatter_reduce(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor",
      meta=_scatter_reduce_meta,
      cpu=_scatter_reduce_cpu, kind="index", overlap=_self_may_be_out("src"),
      variants=("function", "method", "inplace", "out"),
      doc="``self`` with ``src`` reduced (sum, prod, mean, amax, amin) into the positions ``index`` gives "
          "along ``dim``; ``include_self`` counts ``self``'s values in the reduction.")


# Index ops along one dim -----------------------------------------------------------

def _along(a, d):
    """``a`` (>= 1-d) with dim ``d`` first, so that ``_along(a, d)[idx]`` indexes dim ``d`` (a view)."""
    a = a.reshape(_nonempty(a.shape))
    return a if d == 0 else np.moveaxis(a, d, 0)  # (moveaxis's checks: ~3 us of an embedding backward's call)


def _index_select_meta(x, dim, index):
    d = wrap_dim(dim, x.ndim)
    if index.dtype not in (_dt.int64, _dt.int32):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    n = 1 if index.ndim == 0 else index.shape[0]
    shape = () if x.ndim == 0 else tuple(x.shape[:d]) + (n,) + tuple(x.shape[d + 1:])
    return TensorSpec(shape, x.dtype, x.device)


def _index_select_cpu(spec, x, dim, index):
    d = wrap_dim(dim, x.ndim)
    idx = index.reshape(-1)
    _check_select_indices(idx, x.shape[d] if x.ndim else 1, d, x.ndim)
    return np.take(x.reshape(_nonempty(x.shape)), idx, axis=d).reshape(spec.shape)


def _check_select_indices(idx, n, d, ndim):
    """torch's CPU error for an index_select index outside ``[0, n)`` along dim ``d`` of ``ndim`` dims: its kernel
    along dim 1 of a tensor of 2 dims or more reports the value and the size; every other checks 'out of range'."""
    bad = _first_out_of_range(idx, n, negative=False)
    if bad is None:
        return
    if d == 1 and ndim > 1:
        raise RuntimeError(f"INDICES element is out of DATA bounds, id={bad} axis_dim={n}")
    raise IndexError("index out of range in self")


def check_gather_index(index, size, op, dim, ndim):
    """Raise eager's error for ``op`` ("gather" or "index_select") along ``dim`` of a source of ``ndim`` dims and
    ``size`` elements there where a value of the tensor ``index`` falls outside ``[0, size)``: a compiled
    kernel's indexed loads, checked before the kernel runs, so that it never reads out of bounds."""
    idx = index._array()
    if not idx.size or (idx.min() >= 0 and idx.max() < size):
        return
    idx = idx.reshape(-1)
    if op == "gather":
        _check_dim_indices(idx, size, dim)
    else:
        _check_select_indices(idx, size, dim, ndim)


defop("index_select(Tensor self, int dim, Tensor index) -> Tensor", meta=_index_select_meta,
      cpu=_index_select_cpu, kind="index", variants=("function", "method", "out"),
      doc="The entries of ``self`` at positions ``index`` (a vector) along ``dim``; a copy.")


def _sliced_shape(shape, d):
    return tuple(n for i, n in enumerate(shape) if i != d)


def _index_add_meta(x, dim, index, source, alpha):
    d = wrap_dim(dim, x.ndim)
    if index.ndim > 1:
        raise IndexError(f"index_add_(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
                         f"{scalar_name(index.dtype)} and size: {list_str(index.shape)}")
    if index.dtype not in (_dt.int64, _dt.int32):
        raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: {scalar_name(index.dtype)}")
    if source.dtype is not x.dtype:
        raise RuntimeError(f"index_add_(): self ({scalar_name(x.dtype)}) and source ({scalar_name(source.dtype)}) "
                           "must have the same scalar type")
    if d != 0 and d >= source.ndim:
        raise RuntimeError(f"index_add_(): Indexing dim {d} is out of bounds of the source tensor with dim "
                           f"{source.ndim}")
    n = prod(index.shape)
    if n != (source.shape[d] if source.ndim else 1):
        if not source.ndim:  # torch's message asks a 0-d source for its size and raises that error instead
            raise IndexError("Dimension specified as 0 but tensor has no dimensions")
        raise RuntimeError(f"index_add_(): Number of indices ({n}) should be equal to source.size(dim): "
                           f"({source.shape[d]}), for dim: {d}")
    if source.ndim != x.ndim or _sliced_shape(source.shape, d) != _sliced_shape(x.shape, d):
        raise RuntimeError("source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list_str(x.shape)} source.shape = {list_str(source.shape)}")
    return TensorSpec(x.shape, x.dtype, x.device)


def _index_add_indices(index, d, shape, alpha):
    """index_add's flat indices, checked: torch's CPU kernel for a 2-D self and alpha 1 (index_put's) raises
    RuntimeError naming the index, every other one IndexError."""
    idx = index.reshape(-1)
    if len(shape) == 2 and alpha == 1:
        _check_dim_indices(idx, shape[d], d)
    elif _first_out_of_range(idx, shape[d], negative=False) is not None:
        raise IndexError("index out of range in self")
    return idx


def _index_add_cpu(spec, x, dim, index, source, alpha):
    out = _compute_copy(x)
    index_add_into(out, out, dim, index, source, alpha)
    return out.reshape(spec.shape)


def index_add_into(out, x, dim, index, source, alpha=1):
    """`index_add` written into ``out``, a row-major array of ``x``'s shape in its compute dtype (eager's copy
    of ``x``, or a compiled graph's arena buffer, which may be ``x``'s own); ``x`` None: zeros (a compiled
    graph's embedding backward, whose zeros are not filled first). The indices are checked before anything
    is written."""
    d = wrap_dim(dim, len(out.shape))
    flat = out.reshape(_nonempty(out.shape))
    idx = _index_add_indices(index, d, flat.shape, alpha)
    if x is None:
        fill_split(flat, 0)  # (a compiled LSTM step's embedding gradient: 8 MB of zeros, else on one thread)
    elif not _same_buffer(out, x):
        np.copyto(out, x.reshape(out.shape))
    # (``source`` itself where it is of ``out``'s dtype and apart from it: convert's copy was a pass over every
    # value, 393 KB in a GPT's embedding backward, before the kernel's one)
    source = np.asarray(source)
    same = source.dtype == out.dtype and not np.may_share_memory(source, out)
    values = _along(source if same else convert(source, out.dtype), d)
    if alpha != 1 or out.dtype.kind == "c":  # (times a real 1 is no change, sign of zero and NaN's bits kept)
        values = values * convert(np.asarray(alpha), out.dtype)
    add_rows_at(_along(flat, d), idx, values)


# Rows at least this long (and this many of them) are added by rounds (`add_rows_at`); np.add.at, which adds
# element by element, is faster below (its cost per row is about 1.8 us for 128 floats, the rounds' ~50 us fixed)
ROUNDS_FROM_ROW = 64
ROUNDS_FROM_ROWS = 32


# (NumPy dtype name) -> a compiled scatter-add of rows (codegen/scatter.py's `ScatterRowsKernel`: called on
# ``(out, idx, values)``, 2-D with unit column strides and int64 indices, it adds each row of ``values`` in order
# into its row of ``out``) or None; set by the code generator, which the ops layer cannot import
SCATTER_ROWS_KERNEL = None


def _scatter_rows_kernel(out, values):
    """The registered kernel that adds ``values``' rows into ``out``'s as `add_rows_at` (both 2-D, rows whose
    elements are contiguous, one float dtype), or None."""
    if SCATTER_ROWS_KERNEL is None or out.ndim != 2 or values.ndim != 2 or out.dtype != values.dtype \
            or out.strides[1] != out.itemsize or values.strides[1] != values.itemsize:
        return None
    return SCATTER_ROWS_KERNEL(out.dtype.name)


def add_rows_at(out, idx, values):
    """``np.add.at(out, idx, values)`` (``out[idx[i]] += values[i]`` for each ``i`` in order) with the same
    bits, for rows of ``values``: a row that ``idx`` names several times gets its values in ``idx``'s order,
    each added to the running sum, as np.add.at adds them. Long rows of contiguous elements go through the
    code generator's kernel (`SCATTER_ROWS_KERNEL`: an embedding's backward, 768 token rows of 128 floats into
    a 65-row table, np.add.at 1.5 ms, the rounds below 0.13 ms, the kernel 0.03 ms); other long rows are added
    in rounds, the k-th of a row's values in round k, every row's at once (the rows of one round are distinct:
    one vectorised add), where np.add.at visits each element alone."""
    n = len(idx)
    if values.dtype not in (np.float32, np.float64) or n < ROUNDS_FROM_ROWS or \
            prod(values.shape[1:]) < ROUNDS_FROM_ROW:
        np.add.at(out, idx, values)
        return
    rows = out.reshape(out.shape[0], -1)
    kernel = _scatter_rows_kernel(rows, values.reshape(n, -1)) if np.may_share_memory(rows, out) else None
    if kernel is not None:
        kernel(rows, np.ascontiguousarray(idx, np.int64), values.reshape(n, -1))
        return
    rows, which, counts = np.unique(idx, return_inverse=True, return_counts=True)
    # the rows by how many values they get, most first: round k adds into the first `active[k]` of them
    by_count = np.argsort(-counts, kind="stable")
    place = np.empty_like(by_count)
    place[by_count] = np.arange(len(rows))
    active = np.bincount(counts, minlength=counts.max() + 1)[::-1].cumsum()[::-1][1:]  # rows with more than k
    starts = np.concatenate(([0], np.cumsum(active)[:-1]))
    # each value's rank among its row's values (in idx's order: a stable sort keeps it)
    order = np.argsort(which, kind="stable")
    rank = np.empty(n, np.intp)
    rank[order] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    laid = np.empty((n,) + values.shape[1:], values.dtype)
    laid[starts[rank] + place[which]] = values
    targets = rows[by_count]
    sums = out[targets]
    for start, k in zip(starts.tolist(), active.tolist()):
        sums[:k] += laid[start:start + k]
    out[targets] = sums


defop("index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor",
      meta=_index_add_meta, cpu=_index_add_cpu, kind="index", overlap=_self_may_be_out("source"),
      variants=("function", "method", "inplace", "out"),
      doc="``self`` with ``alpha * source`` added at positions ``index`` along ``dim`` (repeats accumulate).")


def _index_fill_meta(x, dim, index, value):
    wrap_dim(dim, x.ndim)
    if index.dtype is not _dt.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if index.ndim > 1:
        raise RuntimeError("Index has to be a vector/scalar")
    _check_fill_value("index_fill_", x, value)
    return TensorSpec(x.shape, x.dtype, x.device)


def _check_fill_value(op_name, x, value):
    """A fill value is a Python number that fits ``x``'s dtype, or a 0-d tensor."""
    if isinstance(value, registry.Tensor):
        if value.ndim:
            raise RuntimeError(f"{op_name} only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.ndim} dimension(s).")
    else:
        check_scalar_fits(value, x.dtype)


def _fill_value(value, spec, out):
    """A fill value as the NumPy scalar of ``out``'s dtype; a 0-d tensor's is read as torch's CPU kernels
    read it (``value.item()``), so one that does not fit ``spec``'s dtype raises as a number's does."""
    if isinstance(value, np.ndarray):
        check_scalar_fits(value.item(), spec.dtype)
    return convert(np.asarray(value), out.dtype)


def _index_fill_cpu(spec, x, dim, index, value):
    d = wrap_dim(dim, x.ndim)
    out = x.reshape(_nonempty(x.shape)).copy()
    idx = index.reshape(-1)
    bad = _first_out_of_range(idx, out.shape[d])
    if bad is not None:
        raise IndexError(f"index {bad} is out of bounds for dimension {d} with size {out.shape[d]}")
    _along(out, d)[idx] = _fill_value(value, spec, out)
    return out.reshape(spec.shape)


def _index_filled(shape, dim, index, value):
    """The elements index_fill writes (`registry.write_inplace`)."""
    mask = np.zeros(shape, bool)
    _along(mask, wrap_dim(dim, len(shape)))[index.reshape(-1)] = True
    return mask


_INDEX_FILL_DOC = "``self`` with the entries at positions ``index`` along ``dim`` set to ``value``."
# index_fill, index_put and put out of place are torch's clone(preserve_format) written in place: the result
# keeps a dense self's strides (preserved_strides)
defop("index_fill(Tensor self, int dim, Tensor index, Scalar value) -> Tensor", meta=_index_fill_meta,
      cpu=_index_fill_cpu, kind="index", variants=("function", "method", "inplace"), overlap={"index": "any"},
      layout=preserved_strides, expanded_write=write_where(_index_filled),
      expanded_warning="tensor[mask] = scalar", doc=_INDEX_FILL_DOC)
defop("index_fill.Tensor(Tensor self, int dim, Tensor index, Tensor value) -> Tensor", meta=_index_fill_meta,
      cpu=_index_fill_cpu, kind="index", variants=("function", "method", "inplace"), overlap={"index": "any"},
      layout=preserved_strides, expanded_write=write_where(_index_filled),
      expanded_warning="tensor[mask] = scalar", doc=_INDEX_FILL_DOC)


def _index_copy_meta(x, dim, index, source):
    # torch's order: index rank, scalar/dimensionality (IndexError), index dtype, dtypes, slice shapes, count
    d = wrap_dim(dim, x.ndim)
    if index.ndim > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.ndim})")
    n = prod(index.shape)
    if not source.ndim and n != 1:
        raise IndexError(f"index_copy_(): When source is scalar, index should have one element (got {n})")
    if source.ndim and x.ndim and source.ndim != x.ndim:
        raise IndexError(f"index_copy_(): When source and destination are not scalars, their dimensionality must "
                         f"match. Source dimensionality ({source.ndim}), destination dimensionality ({x.ndim})")
    if index.dtype is not _dt.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got {scalar_name(index.dtype)}")
    if source.dtype is not x.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{scalar_name(x.dtype)} and (source) {scalar_name(source.dtype)}")
    if _sliced_shape(source.shape, d) != _sliced_shape(x.shape, d):
        raise RuntimeError(
            f"index_copy_(): Source/destination tensor must have same slice shapes. Destination slice shape: "
            f"{' '.join(map(str, _sliced_shape(x.shape, d)))} at dimension {d} and source slice shape: "
            f"{' '.join(map(str, _sliced_shape(source.shape, d)))} at dimension 0.")
    if source.ndim and n != source.shape[d]:
        raise IndexError(f"index_copy_(): Number of indices ({n}) should be equal to source.size(dim) "
                         f"({source.shape[d]})")
    return TensorSpec(x.shape, x.dtype, x.device)


def _index_copy_cpu(spec, x, dim, index, source):
    d = wrap_dim(dim, x.ndim)
    out = x.reshape(_nonempty(x.shape)).copy()
    idx = index.reshape(-1)
    bad = _first_out_of_range(idx, out.shape[d], negative=False)
    if bad is not None:
        raise IndexError(f"index_copy_(): index {bad} is out of bounds for dimension {d} with size {out.shape[d]}")
    _along(out, d)[idx] = _along(source, d)
    return out.reshape(spec.shape)


defop("index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor", meta=_index_copy_meta,
      cpu=_index_copy_cpu, kind="index", variants=("function", "method", "inplace"),
      doc="``self`` with the slices of ``source`` along ``dim`` written at positions ``index``.")


# Masks and flat indices -------------------------------------------------------------

def _masked_fill_meta(x, mask, value):
    if mask.dtype is not _dt.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{cpp_name(mask.dtype)}")
    _check_fill_value("masked_fill_", x, value)
    return TensorSpec(broadcast_shapes(x.shape, mask.shape), x.dtype, x.device)


def _masked_fill_cpu(spec, x, mask, value):
    out = np.array(np.broadcast_to(x, spec.shape))
    out[np.broadcast_to(mask, spec.shape)] = _fill_value(value, spec, out)
    return out


def _masked(shape, mask, value):
    """The elements masked_fill writes (`registry.write_inplace`)."""
    return np.broadcast_to(mask, shape)


_MASKED_FILL_DOC = "``self`` (broadcast with ``mask``) with ``value`` where ``mask`` is True."
defop("masked_fill(Tensor self, Tensor mask, Scalar value) -> Tensor", meta=_masked_fill_meta,
      cpu=_masked_fill_cpu, kind="index", variants=("function", "method", "inplace"), overlap={"mask": "partial"},
      expanded_write=write_where(_masked), expanded_warning="tensor[mask] = scalar", doc=_MASKED_FILL_DOC)
defop("masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor", meta=_masked_fill_meta,
      cpu=_masked_fill_cpu, kind="index", variants=("function", "method", "inplace"), overlap={"mask": "partial"},
      expanded_write=write_where(_masked), expanded_warning="tensor[mask] = scalar", doc=_MASKED_FILL_DOC)


def _masked_select_meta(x, mask):
    if mask.dtype is not _dt.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    broadcast_shapes(x.shape, mask.shape)
    return TensorSpec((None,), x.dtype, x.device)


def _masked_select_cpu(spec, x, mask):
    shape = np.broadcast_shapes(x.shape, mask.shape)
    return np.broadcast_to(x, shape)[np.broadcast_to(mask, shape)]


defop("masked_select(Tensor self, Tensor mask) -> Tensor", meta=_masked_select_meta, cpu=_masked_select_cpu,
      kind="index", variants=("function", "method", "out"),
      doc="The 1-d tensor of the entries of ``self`` (broadcast with ``mask``) where ``mask`` is True.")

defop("argwhere(Tensor self) -> Tensor", meta=lambda x: TensorSpec((None, x.ndim), _dt.int64, x.device),
      cpu=lambda spec, x: np.argwhere(x != 0), kind="index", layout=lambda spec, x: (1, spec.shape[0]),
      doc="The indices of the nonzero entries of ``self``, one row each: shape ``(count, self.ndim)``.")


def _nonzero(x, as_tuple):
    if not as_tuple:
        return x.argwhere()
    return (x.reshape(1) if x.ndim == 0 else x).argwhere().unbind(1)


defop("nonzero(Tensor self, *, bool as_tuple=False) -> Any", composite=_nonzero,
      doc="``argwhere(self)``, or with ``as_tuple`` one 1-d index tensor per dim (a 0-d input counts as 1-d).")

defop("where(Tensor condition) -> Any", composite=lambda condition: _nonzero(condition, True), variants=("function",),
      doc="``nonzero(condition, as_tuple=True)``: one 1-d index tensor per dim of the nonzero entries.")


def _nonzero_static_meta(x, size, fill_value):
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    return TensorSpec((size, x.ndim), _dt.int64, x.device)


def _nonzero_static_cpu(spec, x, size, fill_value):
    found = np.argwhere(x != 0)[:size]
    return np.concatenate([found, np.full((size - len(found), x.ndim), fill_value, np.int64)])


defop("nonzero_static(Tensor self, *, int size, int fill_value=-1) -> Tensor", meta=_nonzero_static_meta,
      cpu=_nonzero_static_cpu, kind="index",
      doc="``argwhere(self)`` cut or padded with ``fill_value`` to ``size`` rows: a shape the data does not decide.")


def _flat_bounds(idx, n):
    bad = _first_out_of_range(idx, n)
    if bad is not None:
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")


def _take_meta(x, index):
    if index.dtype is not _dt.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {scalar_name(index.dtype)}")
    return TensorSpec(tuple(index.shape), x.dtype, x.device)


def _take_cpu(spec, x, index):
    if x.size == 0 and index.size:
        raise IndexError("take(): tried to take from an empty tensor")
    _flat_bounds(index, x.size)
    return np.take(x.reshape(-1), index)


defop("take(Tensor self, Tensor index) -> Tensor", meta=_take_meta, cpu=_take_cpu, kind="index",
      variants=("function", "method", "out"),
      doc="The entries of ``self``, read as a flat (row-major) tensor, at ``index``; the result has its shape.")


def _put_meta(x, index, source, accumulate):
    if index.dtype is not _dt.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {scalar_name(index.dtype)}")
    if source.dtype is not x.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{scalar_name(x.dtype)} and source.dtype = {scalar_name(source.dtype)}")
    if prod(source.shape) != prod(index.shape):
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {prod(source.shape)}, index.numel() = {prod(index.shape)}")
    return TensorSpec(x.shape, x.dtype, x.device)


def _put_cpu(spec, x, index, source, accumulate):
    out = _compute_copy(x)
    flat, idx = out.reshape(-1), index.reshape(-1)
    _flat_bounds(idx, flat.size)
    if accumulate:
        np.add.at(flat, idx, convert(source.reshape(-1), out.dtype))
    else:
        flat[idx] = source.reshape(-1)
    return out.reshape(spec.shape)


defop("put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor", meta=_put_meta,
      cpu=_put_cpu, kind="index", variants=("function", "method", "inplace"), layout=preserved_strides,
      doc="``self`` with ``source`` written (or added, with ``accumulate``) at flat (row-major) positions ``index``.")
