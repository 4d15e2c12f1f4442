"""View ops: each is a stride transform ``(args) -> (shape, strides, offset)``; none copies.

A view shares its base's storage, and so its version counter: writing through
a view changes the base. Ops that are views only when the strides allow one
(``reshape``, ``flatten``, ``contiguous``) are composites: a view, or a
``clone`` then a view. ``clone`` itself is the one copying op here.
"""

from __future__ import annotations

from math import gcd, prod
from operator import itemgetter

import numpy as np

from ..runtime import threads
from ..runtime.copy_parts import SPLIT_MIN, copy as _copy, fill as fill_split
from ..runtime.device import CPU
from ..runtime.memory_format import (ALL_FORMATS, channels_last, channels_last_3d, check_memory_format,  # noqa: F401
                                     contiguous_format, format_strides, is_contiguous_as, memory_format,
                                     preserve_format, suggest_memory_format)
from ..runtime.strided import (CONTIGUOUS_STRIDES, INT64_MAX, broadcast_shapes,
                               check_numel, contiguous_strides, contiguous_strides_cached, dense_strides, infer_size,
                               is_contiguous, is_non_overlapping_and_dense, list_str, may_overlap,
                               view_strides, wrap_dim, wrap_dims)
from . import registry
from .registry import TensorSpec, defop, scalar_name


_check_memory_format = check_memory_format  # (the name this module's importers know)


def _type_str(x):
    """torch's legacy type name of a tensor ("jitorch.FloatTensor"), as its error messages use it."""
    return f"jitorch.{scalar_name(x.dtype)}Tensor"


# Reshaping ------------------------------------------------------------------

def _view(x, size):
    geometry = _reshape_view(x, size)
    if geometry is None:
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at least one dimension spans "
            "across two contiguous subspaces). Use .reshape(...) instead."
        )
    return geometry


def _view_as(x, other):
    return _view(x, other.shape)


_CONTIGUOUS_VIEWS: dict = {}  # (shape, new shape) -> the new strides, of a view of a contiguous tensor
_STRIDED_VIEWS: dict = {}  # (shape, strides, new shape as given) -> (the new shape, its strides) of a view


def _reshape_view(x, shape):
    """The geometry of ``x.reshape(shape)`` when it is a view of ``x``, else None."""
    old = x._shape
    if shape.__class__ is tuple and CONTIGUOUS_STRIDES.get(old) == x._stride:
        # the commonest: every size given, of a contiguous tensor (`infer_size` and `view_strides`' first
        # cases, without their calls: an eager reshape's cost is its calls), remembered per pair of shapes
        # (a dict lookup costs half the checks)
        strides = _CONTIGUOUS_VIEWS.get((old, shape))
        if strides is not None:
            return shape, strides, x._offset
        if shape and min(shape) >= 0 and prod(shape) == prod(old):
            strides = contiguous_strides_cached(shape)
            if len(_CONTIGUOUS_VIEWS) > 4096:
                _CONTIGUOUS_VIEWS.clear()
            _CONTIGUOUS_VIEWS[(old, shape)] = strides
            return shape, strides, x._offset
    # another layout (a head's view of a GPT's q, k and v: a slice of one product's rows), remembered per
    # (shape, strides, new shape) as given: `infer_size` and `view_strides` cost 1.5 µs of a 3 µs view
    key = (old, x._stride, shape) if shape.__class__ is tuple else None
    made = _STRIDED_VIEWS.get(key)
    if made is not None:
        return made[0], made[1], x._offset
    shape = infer_size(shape, prod(old))
    strides = view_strides(x._shape, x._stride, shape)
    if strides is None:
        return None
    if key is not None:
        if len(_STRIDED_VIEWS) > 4096:
            _STRIDED_VIEWS.clear()
        _STRIDED_VIEWS[key] = (shape, strides)
    return shape, strides, x._offset


def _reshape(x, shape):
    shape = infer_size(shape, prod(x._shape))
    if view_strides(x._shape, x._stride, shape) is None:
        return _named(_the_copy(x.clone(memory_format=contiguous_format).view(shape)), "UnsafeViewBackward0")
    view = x.view(shape)
    return view if x.is_contiguous() else _named(view, "ReshapeAliasBackward0")


def _named(t, name):
    """``t`` with its history named as torch's reshape names it (torch makes with ``_unsafe_view`` and
    ``_reshape_alias`` what jitorch makes with ``view``)."""
    autograd = registry.AUTOGRAD
    if autograd is not None and t._requires_grad:
        autograd.rename_history(t, name)
    return t


def _the_copy(view):
    """``view`` (of a copy no one else holds) as the copy itself, as torch's ``_unsafe_view`` gives a reshape that
    copies: no view in autograd's sense (``_base`` None), so nothing of a view's bookkeeping stays on it (the
    version its history was made at, why it may not be rebased: `autograd.engine`). Its history is the view's."""
    view._base = None
    view.__dict__.pop("_view_version", None)
    view.__dict__.pop("_creation_meta", None)
    return view


def _reshape_as(x, other):
    return x.reshape(other.shape)


def _flatten_view(x, start_dim, end_dim):
    """``flatten``'s ``view_when``: the geometry of the view its body makes when it merges two dims or more
    of a tensor whose strides allow a view, else None (the body then gives ``x`` itself, a copy, or the
    error)."""
    shape = x._shape
    ndim = len(shape)
    if start_dim.__class__ is not int or end_dim.__class__ is not int:
        return None
    start = start_dim + ndim if start_dim < 0 else start_dim
    end = end_dim + ndim if end_dim < 0 else end_dim
    if not 0 <= start < end < ndim:
        return None
    if x._stride == CONTIGUOUS_STRIDES.get(shape):  # (a contiguous tensor's is contiguous: no frame)
        if start == 0 and end == ndim - 1:  # (the commonest: every dim)
            return (prod(shape),), (1,), x._offset
        merged = shape[:start] + (prod(shape[start:end + 1]),) + shape[end + 1:]
        strides = CONTIGUOUS_STRIDES.get(merged)
        if strides is not None:
            return merged, strides, x._offset
    return _reshape_view(x, shape[:start] + (prod(shape[start:end + 1]),) + shape[end + 1:])


def _flatten(x, start_dim, end_dim):
    if x.ndim == 0:
        return x.reshape(1)
    start, end = wrap_dim(start_dim, x.ndim), wrap_dim(end_dim, x.ndim)
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if start == end:
        return x
    shape = x.shape
    return x.reshape(tuple(shape[:start]) + (prod(shape[start:end + 1]),) + tuple(shape[end + 1:]))


def _unflatten(x, dim, sizes):
    if x.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = wrap_dim(dim, x.ndim)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    n = x.shape[d]
    known = prod(s for s in sizes if s != -1)
    if (-1 not in sizes and known != n) or (-1 in sizes and (known == 0 or n % known)):
        raise RuntimeError(f"unflatten: Provided sizes {list_str(sizes)} don't multiply up to the size of dim {d} "
                           f"({n}) in the input tensor")
    sizes = infer_size(sizes, n)
    return _view(x, tuple(x.shape[:d]) + sizes + tuple(x.shape[d + 1:]))


# Reordering dims ------------------------------------------------------------------

# dims as given -> (ndim, a getter of the wrapped and checked dims, two or more, from a shape or strides): an
# eager permute's cost is its calls
_PERMUTATIONS: dict = {}


def _permute(x, dims):
    shape, strides = x._shape, x._stride
    ndim = len(shape)
    cached = _PERMUTATIONS.get(dims) if dims.__class__ is tuple else None
    if cached is not None and cached[0] == ndim:
        pick = cached[1]
    else:
        if len(dims) != ndim:
            raise RuntimeError(
                f"permute(): number of dimensions in the tensor input does not match the length of the desired "
                f"ordering of dimensions i.e. input.dim() = {x.ndim} is not equal to len(dims) = {len(dims)}"
            )
        order = tuple(wrap_dim(d, ndim) for d in dims)
        if len(set(order)) != ndim:
            raise RuntimeError("permute(): duplicate dims are not allowed.")
        if ndim < 2:  # (the one order there is)
            return shape, strides, x._offset
        pick = itemgetter(*order)
        if dims.__class__ is tuple and all(d.__class__ is int for d in dims):  # (a key equal only to itself)
            if len(_PERMUTATIONS) > 4096:
                _PERMUTATIONS.clear()
            _PERMUTATIONS[dims] = ndim, pick
    return pick(shape), pick(strides), x._offset


def _transpose(x, dim0, dim1):
    ndim = len(x._shape)
    # (dims in range taken as they are: `wrap_dim`'s first case, without its calls)
    d0 = dim0 if dim0.__class__ is int and 0 <= dim0 < ndim else wrap_dim(dim0, ndim)
    d1 = dim1 if dim1.__class__ is int and 0 <= dim1 < ndim else wrap_dim(dim1, ndim)
    if ndim == 0:
        return (), (), x._offset
    shape, strides = list(x._shape), list(x._stride)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    strides[d0], strides[d1] = strides[d1], strides[d0]
    return tuple(shape), tuple(strides), x._offset


def _t(x):
    shape = x._shape
    if len(shape) == 2:  # (`_transpose` of dims 0 and 1, without its call)
        strides = x._stride
        return (shape[1], shape[0]), (strides[1], strides[0]), x._offset
    if len(shape) > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return shape, x._stride, x._offset


def _movedim(x, source, destination):
    if len(source) != len(destination):
        raise RuntimeError(
            f"movedim: Invalid source or destination dims: source ({list_str(source)} dims) should contain the "
            f"same number of dims as destination ({list_str(destination)} dims)"
        )
    src = tuple(wrap_dim(d, x.ndim) for d in source)
    dst = tuple(wrap_dim(d, x.ndim) for d in destination)
    for name, given, dims in (("source", source, src), ("destination", destination, dst)):
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({list_str(given)})")
    if x.ndim == 0:  # torch wraps dims of a 0-d tensor as if it had one; there is nothing to move
        return _permute(x, ())
    order = [None] * x.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(x.ndim) if d not in src)
    order = [next(rest) if o is None else o for o in order]
    return _permute(x, order)


# Adding and removing dims ---------------------------------------------------------

def _squeeze(x, dim):
    shape, strides = x._shape, x._stride
    ndim = len(shape)
    if dim is None:
        dims = range(ndim)
    elif dim.__class__ is tuple and len(dim) == 1 and dim[0].__class__ is int and 0 <= dim[0] < ndim:
        d = dim[0]  # the commonest: one dim, in range (`wrap_dims` without its calls)
        if shape[d] != 1:
            return shape, strides, x._offset
        return shape[:d] + shape[d + 1:], strides[:d] + strides[d + 1:], x._offset
    else:
        dims = wrap_dims(dim, ndim)
    keep = [i for i in range(ndim) if not (i in dims and shape[i] == 1)]
    return tuple(shape[i] for i in keep), tuple(strides[i] for i in keep), x._offset


def _unsqueeze(x, dim):
    shape, strides = x._shape, x._stride
    d = dim if dim.__class__ is int and 0 <= dim <= len(shape) else wrap_dim(dim, len(shape) + 1)
    stride = shape[d] * strides[d] if d < len(shape) else 1
    return shape[:d] + (1,) + shape[d:], strides[:d] + (stride,) + strides[d:], x._offset


_EXPANSIONS: dict = {}  # (sizes as given, shape, strides) -> (the new shape, its strides) of an expansion


def _expand(x, size, implicit=False):
    """torch's expand geometry (inferExpandGeometry): a dim broadcast from size 1 has stride 0; a new leading
    dim of size 1 has the stride that spans the dims after it, so ``x[None]`` and ``x.expand(1, n)`` are the
    same layout (``v = x[None]; v[:] = x`` is then a full overlap, as torch's, not a partial one). Remembered
    per sizes, shape and strides (a lookup costs a third of the checks; a refused expansion is not remembered)."""
    have_shape, have_strides = x._shape, x._stride
    if size == have_shape:  # (a tuple of the same sizes: the geometry stays)
        return have_shape, have_strides, x._offset
    key = (size, have_shape, have_strides) if size.__class__ is tuple else None
    made = _EXPANSIONS.get(key)
    if made is None:
        made = _expanded(x, size)
        if key is not None:
            if len(_EXPANSIONS) > 4096:
                _EXPANSIONS.clear()
            _EXPANSIONS[key] = made
    return made[0], made[1], x._offset


def _expanded(x, size):
    """`_expand`'s (shape, strides), or torch's error."""
    have_shape, have_strides = x._shape, x._stride
    if len(size) == len(have_shape) and size.__class__ is tuple:
        # the commonest: no new dims, every size given as is or broadcast from 1 (the loop below without its
        # lists and tests; anything else goes on to it)
        strides = []
        for n, have, stride in zip(size, have_shape, have_strides):
            if n == have:
                strides.append(stride)
            elif have == 1 and n >= 0:
                strides.append(0)
            else:
                break
        else:
            count = prod(size)
            if count and count <= INT64_MAX:  # (else `check_numel` below decides, dim by dim)
                return size, tuple(strides)
    if len(size) < x.ndim:
        raise RuntimeError(
            f"expand({_type_str(x)}{{{list_str(x.shape)}}}, size={list_str(size)}): the number of sizes provided "
            f"({len(size)}) must be greater or equal to the number of dimensions in the tensor ({x.ndim})"
        )
    lead = len(size) - len(have_shape)
    shape, strides = list(size), [0] * len(size)
    # dims from the last, as torch's checks run: its first error is that of the last dim that has one; a size
    # below -1 passes them (torch's numel check then refuses it)
    for i in range(len(size) - 1, -1, -1):
        n = size[i]
        if i < lead:
            if n == -1:
                raise RuntimeError(f"The expanded size of the tensor ({n}) isn't allowed in a leading, "
                                   f"non-existing dimension {i}")
            continue
        have = have_shape[i - lead]
        if n == -1:
            shape[i] = n = have
        if have == n:
            strides[i] = have_strides[i - lead]
        elif have != 1:
            raise RuntimeError(
                f"The expanded size of the tensor ({n}) must match the existing size ({have}) at non-singleton "
                f"dimension {i}.  Target sizes: {list_str(size)}.  Tensor sizes: {list_str(x.shape)}"
            )
    if min(shape, default=0) < 0:  # (torch's numel overflows; where another size is 0 it makes a negative size)
        raise RuntimeError("numel: integer multiplication overflow")
    if x.ndim:  # (a 0-d tensor's expansions have stride 0 throughout, as torch's)
        for i in range(lead - 1, -1, -1):
            if shape[i] == 1:
                strides[i] = shape[i + 1] * strides[i + 1]
    return check_numel(tuple(shape)), tuple(strides)


def _expand_as(x, other):
    return _expand(x, other.shape)


def _broadcast_to(x, size):
    return _expand(x, size)


def _broadcast_tensors(tensors):
    shape = broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return tuple(t.expand(shape) for t in tensors)


defop("broadcast_tensors(Tensor... tensors) -> Tensor[]", composite=_broadcast_tensors, kind="view",
      variants=("function",), doc="Views of all ``tensors`` expanded to their common broadcast shape.")


# Taking parts ---------------------------------------------------------------------

def _dim_of(x, dim, op_name):
    if x.ndim == 0:
        raise RuntimeError(f"{op_name}() cannot be applied to a 0-dim tensor.")
    return wrap_dim(dim, x.ndim)


def _part(x, d, start, length, step=1):
    """The view keeping ``length`` elements of dim ``d`` from ``start`` every ``step``."""
    shape, strides = x._shape, x._stride
    stride = strides[d]
    return (shape[:d] + (length,) + shape[d + 1:], strides[:d] + (stride * step,) + strides[d + 1:],
            x._offset + start * stride)


def _narrow(x, dim, start, length):
    d = _dim_of(x, dim, "narrow")
    n = x.shape[d]
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    if start < 0:
        start += n
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start + length > n:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return _part(x, d, start, length)


def _slice(x, dim, start, end, step):
    ndim = len(x._shape)
    if ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    if step <= 0:
        raise ValueError("step must be greater than zero")
    d = dim if dim.__class__ is int and 0 <= dim < ndim else wrap_dim(dim, ndim)
    n = x._shape[d]
    start = 0 if start is None else start + n if start < 0 else start
    end = n if end is None else end + n if end < 0 else end
    start = min(max(start, 0), n)
    end = min(max(end, start), n)
    return _part(x, d, start, (end - start + step - 1) // step, step)


def _select_geometry(x, d, index):
    shape, strides = x._shape, x._stride
    return shape[:d] + shape[d + 1:], strides[:d] + strides[d + 1:], x._offset + index * strides[d]


def _select(x, dim, index):
    if not x._shape:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = dim if dim.__class__ is int and 0 <= dim < len(x._shape) else wrap_dim(dim, len(x._shape))
    n = x._shape[d]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list_str(x._shape)} "
                         f"at dimension {d}")
    if index < 0:
        index += n
    shape, strides = x._shape, x._stride  # (`_select_geometry`, without its call)
    return shape[:d] + shape[d + 1:], strides[:d] + strides[d + 1:], x._offset + index * strides[d]


def _unbind(x, dim):
    if x.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = wrap_dim(dim, x.ndim)
    return [_select_geometry(x, d, i) for i in range(x.shape[d])]


def _split_parts(x, d, sizes):
    parts, start = [], 0
    for n in sizes:
        parts.append(_part(x, d, start, n))
        start += n
    return parts


def _split(x, split_size, dim):
    if x.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    if split_size < 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={split_size}")
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d]
    if split_size == 0 and n != 0:
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
    count = max(-(-n // split_size), 1) if split_size else 1
    return _split_parts(x, d, [min(split_size, n - i * split_size) for i in range(count)])


def _split_with_sizes(x, split_sizes, dim):
    if x.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d]
    if any(s < 0 for s in split_sizes):
        raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                           f"split_sizes={list_str(split_sizes)}")
    if sum(split_sizes) != n:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                           f"dimension {d}), but got split_sizes={list_str(split_sizes)}")
    return _split_parts(x, d, split_sizes)


def _chunk(x, chunks, dim):
    if x.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d]
    if n == 0:  # torch gives ``chunks`` empty pieces rather than one
        return _split_parts(x, d, [0] * chunks)
    return _split(x, -(-n // chunks), d)


def _diagonal(x, offset, dim1, dim2):
    d1, d2 = wrap_dim(dim1, x.ndim), wrap_dim(dim2, x.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if offset >= 0:
        n = max(min(x.shape[d1], x.shape[d2] - offset), 0)
        start = offset * x._stride[d2]
    else:
        n = max(min(x.shape[d1] + offset, x.shape[d2]), 0)
        start = -offset * x._stride[d1]
    keep = [i for i in range(x.ndim) if i not in (d1, d2)]
    shape = tuple(x.shape[i] for i in keep) + (n,)
    strides = tuple(x._stride[i] for i in keep) + (x._stride[d1] + x._stride[d2],)
    return shape, strides, x._offset + (start if n else 0)


def _unfold(x, dimension, size, step):
    d = wrap_dim(dimension, x.ndim)
    n = x.shape[d] if x.ndim else 1
    stride = x._stride[d] if x.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    shape, strides = list(x.shape), list(x._stride)
    if x.ndim:
        shape[d] = (n - size) // step + 1
        strides[d] = step * stride
    return tuple(shape) + (size,), tuple(strides) + (stride,), x._offset


def _as_strided(x, size, stride, storage_offset=None):
    return _strided_geometry(x._offset, x.dtype.itemsize, x.untyped_storage().nbytes(), size, stride, storage_offset)


def _strided_geometry(own_offset, item, have, size, stride, storage_offset):
    """``as_strided``'s checked (size, stride, offset) over a storage of ``have`` bytes of ``item``-byte
    elements, for a tensor at offset ``own_offset``."""
    offset = own_offset if storage_offset is None else storage_offset
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: "
                           f"{list_str(stride)}")
    if any(n < 0 for n in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list_str(size)}")
    check_numel(size)
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    need = 0 if 0 in size else (offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))) * item
    if need > have:
        raise RuntimeError(f"setStorage: sizes {list_str(size)}, strides {list_str(stride)}, storage offset "
                           f"{offset}, and itemsize {item} requiring a storage size of {need} are out of bounds "
                           f"for storage of size {have}")
    return tuple(size), tuple(stride), offset


def _alias(x):
    return tuple(x.shape), x._stride, x._offset


def _coordinates(dims, ndim, location):
    """The index of the element of a non-overlapping tensor at ``location`` (counted from its offset), given its
    dims (stride, size, dim) by decreasing stride; None if no element of it is there."""
    index = [0] * ndim
    if location < 0:
        return None
    for stride, size, d in dims:
        q = location // stride
        if q >= size:
            return None
        index[d] = q
        location -= q * stride
    return index if location == 0 else None


def _merged(shape, strides):
    """The dims of more than one element of a tensor, each run of dims adjacent both in its index order and in
    memory (an outer stride that is the inner size times the inner stride) merged into one: the same elements
    in the same order, so its contiguous layout is the same too."""
    sizes, steps = [], []
    for n, s in zip(shape, strides):
        if n == 1:
            continue
        if steps and steps[-1] == n * s:
            sizes[-1] *= n
            steps[-1] = s
        else:
            sizes.append(n)
            steps.append(s)
    return tuple(sizes), tuple(steps)


def compact_window(base, view):
    """``view``'s elements as ``(strides, offset)`` of an ``as_strided`` of ``base`` laid out contiguously
    (the compact layout `as_strided_scatter` reads): each view element is the base element at its memory
    location. None when the base's elements overlap, the view reaches memory that is no element of the
    base, or a stride there would be negative."""
    shape = tuple(view.shape)
    if prod(shape) == 0:
        return (0,) * len(shape), 0
    # (merged, a view dim that runs across base dims, as a flatten of the base, walks along one)
    base_shape, base_strides = _merged(base.shape, base._stride)
    dims = sorted(((s, n, d) for d, (n, s) in enumerate(zip(base_shape, base_strides))), reverse=True)
    reach = 0
    for stride, size, _ in reversed(dims):  # the innermost first: each stride must step over what is inside
        if stride <= reach:
            return None
        reach += (size - 1) * stride
    ndim, start = len(base_shape), view._offset - base._offset
    first = _coordinates(dims, ndim, start)
    if first is None:
        return None
    unit = contiguous_strides(base_shape)
    low, high, strides = list(first), list(first), []
    for n, t in zip(shape, view._stride):
        step = _coordinates(dims, ndim, start + t) if n > 1 else first
        if step is None:
            return None
        delta = [b - a for a, b in zip(first, step)]
        for d, k in enumerate(delta):
            low[d] += min(0, (n - 1) * k)
            high[d] += max(0, (n - 1) * k)
        strides.append(sum(k * u for k, u in zip(delta, unit)))
    if min(strides, default=0) < 0 or any(a < 0 or b >= n for a, b, n in zip(low, high, base_shape)):
        return None
    return tuple(strides), sum(c * u for c, u in zip(first, unit))


# Copies ---------------------------------------------------------------------------

def compact(t):
    """``t`` if its elements fill its own storage contiguously from offset 0, else such a copy: the layout
    of the IR's values (``as_strided`` on a graph value addresses it)."""
    if t._offset == 0 and t._storage.size == t.numel() and t.is_contiguous():
        return t
    return t.clone(memory_format=contiguous_format)


def _clone_strides(spec, x, fmt):
    """``clone``'s layout rule: `registry.preserved_strides`; the format's when asked."""
    if fmt is None or fmt is preserve_format:
        return registry.preserved_strides(spec, x)
    return format_strides(fmt, x.shape)


def _clone_meta(x, fmt):
    _check_memory_format("clone", fmt, ALL_FORMATS)
    format_strides(fmt, x.shape)
    return TensorSpec(x.shape, x.dtype, x.device)


def _clone_cpu(spec, x, fmt):
    item = x.itemsize
    shape, strides = x.shape, tuple(s // item for s in x.strides)
    if fmt is not None and fmt is not preserve_format:
        strides = format_strides(fmt, shape) or contiguous_strides(shape)
    elif not is_non_overlapping_and_dense(shape, strides):
        strides = dense_strides(shape, strides)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if 0 not in shape else 0
    out = np.lib.stride_tricks.as_strided(np.empty(span, x.dtype), shape, tuple(s * item for s in strides))
    _copy(out, x)
    return out


def _contiguous(x, fmt):
    _check_memory_format("contiguous", fmt, ALL_FORMATS)
    fmt = contiguous_format if fmt is None else fmt
    if is_contiguous_as(x.shape, x._stride, fmt):
        return x
    _check_memory_format("contiguous", fmt, (contiguous_format, channels_last, channels_last_3d))
    return x.clone(memory_format=fmt)


defop("clone(Tensor self, *, Any? memory_format=None) -> Tensor", meta=_clone_meta, cpu=_clone_cpu, kind="copy",
      layout=_clone_strides,
      doc="A copy of ``self`` in new memory; keeps a dense layout's strides (``preserve_format``), otherwise "
          "its dims' order, or is laid out in ``memory_format`` (contiguous_format, channels_last for 4-d, "
          "channels_last_3d for 5-d) when given.")
def _contiguous_fast(args, record=True):
    """`registry.OpDef.fast` of ``contiguous``: ``x`` itself if contiguous, else a contiguous copy of a CPU
    tensor (as `_clone_cpu` copies) made without the composite's clone through the general path; None for
    a tensor that requires grad while grad mode records it, and for other arguments."""
    x, fmt = args
    if not isinstance(x, registry.Tensor) or fmt is not None and fmt is not contiguous_format:
        return None
    if x._stride == CONTIGUOUS_STRIDES.get(x._shape) or is_contiguous(x._shape, x._stride):  # (a lookup first)
        return x
    if x.device is not CPU or x._storage._data is None or x._requires_grad and registry.records_grad():
        return None
    arr = x._arr if x._arr is not None else x._array()
    out = np.empty(arr.shape, arr.dtype)
    _copy(out, arr)
    return registry.Tensor._fresh(out, x.dtype)


_op = defop("contiguous(Tensor self, *, Any? memory_format=None) -> Tensor", composite=_contiguous, variants=("method",),
            doc="``self`` if it is contiguous in ``memory_format`` (contiguous_format by default, channels_last, "
                "channels_last_3d), else such a copy.")
_op.fast = _contiguous_fast
defop("reshape(Tensor self, int... shape) -> Tensor", composite=_reshape, view_when=_reshape_view,
      doc="``self`` with another shape: a view when the strides allow one, else a contiguous copy.")
defop("reshape_as(Tensor self, Tensor other) -> Tensor", composite=_reshape_as, variants=("method",),
      doc="``self.reshape(other.shape)``.")
defop("flatten(Tensor self, int start_dim=0, int end_dim=-1) -> Tensor", composite=_flatten, view_when=_flatten_view,
      doc="``self`` with dims ``start_dim..end_dim`` merged into one (a view when the strides allow).")

# (schema, view transform, variants, doc); the rest of every declaration is the same.
_VIEWS = [
    ("view(Tensor self, int... size) -> Tensor", _view, ("method",),
     "A view with another shape; RuntimeError if the strides do not allow one."),
    ("view_as(Tensor self, Tensor other) -> Tensor", _view_as, ("method",), "``self.view(other.shape)``."),
    ("unflatten(Tensor self, int dim, int[] sizes) -> Tensor", _unflatten, ("function", "method"),
     "A view with dim ``dim`` split into ``sizes`` (one may be -1)."),
    ("permute(Tensor self, int... dims) -> Tensor", _permute, ("function", "method"),
     "A view with the dims reordered."),
    ("transpose(Tensor self, int dim0, int dim1) -> Tensor", _transpose, ("function", "method", "inplace"),
     "A view with two dims swapped."),
    ("swapaxes(Tensor self, int axis0, int axis1) -> Tensor", _transpose, ("function", "method", "inplace"),
     "Alias of ``transpose``."),
    ("swapdims(Tensor self, int dim0, int dim1) -> Tensor", _transpose, ("function", "method", "inplace"),
     "Alias of ``transpose``."),
    ("t(Tensor self) -> Tensor", _t, ("function", "method", "inplace"),
     "The transpose of a matrix; 0-d and 1-d tensors are returned as they are (as a view)."),
    ("movedim(Tensor self, int[] source, int[] destination) -> Tensor", _movedim, ("function", "method"),
     "A view with dims ``source`` moved to positions ``destination``, the others keeping their order."),
    ("moveaxis(Tensor self, int[] source, int[] destination) -> Tensor", _movedim, ("function", "method"),
     "Alias of ``movedim``."),
    ("squeeze(Tensor self, int[]? dim=None) -> Tensor", _squeeze, ("function", "method", "inplace"),
     "A view without the size-1 dims (all of them, or those among ``dim``)."),
    ("unsqueeze(Tensor self, int dim) -> Tensor", _unsqueeze, ("function", "method", "inplace"),
     "A view with a size-1 dim inserted at ``dim``."),
    ("expand(Tensor self, int... size, *, bool implicit=False) -> Tensor", _expand, ("method",),
     "A view broadcasting size-1 dims to ``size`` (stride 0; new dims in front, with torch's strides); -1 keeps "
     "a dim's size."),
    ("expand_as(Tensor self, Tensor other) -> Tensor", _expand_as, ("method",), "``self.expand(other.shape)``."),
    ("broadcast_to(Tensor self, int[] size) -> Tensor", _broadcast_to, ("function", "method"),
     "``self.expand(size)``."),
    ("narrow(Tensor self, int dim, int start, int length) -> Tensor", _narrow, ("function", "method"),
     "A view of ``length`` elements of dim ``dim`` from ``start`` (which may be negative)."),
    ("slice(Tensor self, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor", _slice, (),
     "A view of ``start:end:step`` along ``dim``, bounds clamped like Python slices (what indexing uses)."),
    ("select(Tensor self, int dim, int index) -> Tensor", _select, ("function", "method"),
     "A view of one index along ``dim``, without that dim."),
    ("unbind(Tensor self, int dim=0) -> Tensor[]", _unbind, ("function", "method"),
     "The slices along ``dim``, as a tuple of views."),
    ("split(Tensor self, int split_size, int dim=0) -> Tensor[]", _split, ("function", "method"),
     "Views of ``split_size`` elements along ``dim`` (the last may be smaller)."),
    ("split.sizes(Tensor self, int[] split_size, int dim=0) -> Tensor[]", _split_with_sizes, ("function", "method"),
     "Views of the given sizes along ``dim``; they must sum to its size."),
    ("split_with_sizes(Tensor self, int[] split_sizes, int dim=0) -> Tensor[]", _split_with_sizes,
     ("function", "method"), "Views of the given sizes along ``dim``; they must sum to its size."),
    ("chunk(Tensor self, int chunks, int dim=0) -> Tensor[]", _chunk, ("function", "method"),
     "At most ``chunks`` views of equal size (the last may be smaller) along ``dim``."),
    ("diagonal(Tensor self, int offset=0, int dim1=0, int dim2=1) -> Tensor", _diagonal, ("function", "method"),
     "A view of the diagonal of dims ``dim1`` and ``dim2`` (shifted by ``offset``), as the last dim."),
    ("unfold(Tensor self, int dimension, int size, int step) -> Tensor", _unfold, ("method",),
     "A view of all windows of ``size`` elements every ``step`` along ``dimension``, as a new last dim."),
    ("as_strided(Tensor self, int[] size, int[] stride, int? storage_offset=None) -> Tensor", _as_strided,
     ("function", "method", "inplace"), "A view with the given sizes, strides and storage offset."),
    ("alias(Tensor self) -> Tensor", _alias, (), "A view of the whole of ``self`` (what ``x[...]`` gives)."),
]

for _schema, _fn, _variants, _doc in _VIEWS:
    _op = defop(_schema, view=_fn, kind="view", variants=_variants, doc=_doc)
    if _fn is _view:
        # the eager shortcut's geometry (`registry._view_shortcut`): ``view``'s without the frame that raises for
        # incompatible strides (its None sends those calls to the general path, which raises)
        _op.attrs["view_when"] = _reshape_view


def _view_dtype(x, dtype):
    """``x.view(dtype)``: the same bytes read as ``dtype``; with another element size the last dim (of
    stride 1) is rescaled, as torch's ``view_dtype``, and every other stride and the offset must allow it."""
    old, new = x.dtype.itemsize, dtype.itemsize
    if old == new:
        return x.shape, x._stride, x._offset, dtype
    what = f"to view {scalar_name(x.dtype)} as {scalar_name(dtype)} (different element sizes)"
    if x.ndim == 0:
        raise RuntimeError(f"self.dim() cannot be 0 {what}")
    if x._stride[-1] != 1:
        raise RuntimeError(f"self.stride(-1) must be 1 {what}, but got {x._stride[-1]}")
    if old > new:
        k = old // new
        return (*x.shape[:-1], x.shape[-1] * k), (*(s * k for s in x._stride[:-1]), 1), x._offset * k, dtype
    k = new // old
    if x._offset % k:
        raise RuntimeError(f"self.storage_offset() must be divisible by {k} {what}, but got {x._offset}")
    if x.shape[-1] % k:
        raise RuntimeError(f"self.size(-1) must be divisible by {k} {what}, but got {x.shape[-1]}")
    for i, stride in enumerate(x._stride[:-1]):
        if stride % k:
            raise RuntimeError(f"self.stride({i}) must be divisible by {k} {what}, but got {stride}")
    return (*x.shape[:-1], x.shape[-1] // k), (*(s // k for s in x._stride[:-1]), 1), x._offset // k, dtype


defop("view.dtype(Tensor self, ScalarType dtype) -> Tensor", view=_view_dtype, kind="view", variants=("method",),
      reinterprets=True, doc="The same memory read as ``dtype`` (a tensor sharing the storage, not a copy).")



# Scatter into a view: how the tracer records an in-place write through a view ------------

def _as_strided_scatter_meta(x, src, size, stride, storage_offset):
    # ``self`` is read as a contiguous tensor (the IR's compact layout), whatever its strides: the
    # view must fit in its elements, not in its storage
    item = x.dtype.itemsize
    size, stride, offset = _strided_geometry(0, item, x.numel() * item, size, stride, storage_offset)
    if tuple(src.shape) != size:
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list_str(src.shape)}"
                           f", slice size = {list_str(size)}")
    return TensorSpec(tuple(x.shape), x.dtype, x.device)


def _same_buffer(out, x):
    """Whether arrays ``out`` and ``x`` are the same elements of the same memory (a compiled graph's result
    computed in its operand's buffer), so that copying one into the other would change nothing."""
    return out.__array_interface__["data"][0] == x.__array_interface__["data"][0] and out.shape == x.shape \
        and out.strides == x.strides


# The code generator's gather kernels for `_as_strided_add` and `as_strided_scatter` (jitorch/codegen/windows.py
# registers ``window_kernel``): ``WINDOW_KERNEL(dtype, numel, offset, plan, src_strides, mode, init)`` -> a
# callable of ``(x, src, out)`` arrays, or None where it builds none (the NumPy passes below then run).
WINDOW_KERNEL = None
# A copy ("assign") into fewer elements than this runs NumPy's strided copy, not a gather kernel: the kernel's
# gain is in cache use on large buffers (a transposed read, `codegen.windows`), while building one for a new
# layout costs LLVM 30-100 ms, which small scatters of new layouts (a view's gradient in eager backward, one
# per shape) paid each: 4% of the test suite's CPU. Both give the same bits (a copy).
WINDOW_COPY_MIN_ELEMENTS = 1 << 15


def window_plan(numel, size, stride, offset):
    """How each element of a flat buffer of ``numel`` elements finds the elements of the strided view
    ``(size, stride, offset)`` that land on it, for a gather kernel (each output element sums its own
    contributions: no scatter): the buffer read as memory dims, outermost first, each ``(step, dims)``
    where ``dims`` are the view dims ``(dim, factor, size)`` that move along it (``stride = factor * step``).
    A convolution's windows over a ``(C, H, W, N)`` buffer give four memory dims, H's and W's each moved by
    a kernel position and an output position. A memory dim's view dims are listed in their order but the
    largest last (the one a gather solves for rather than loops over). None where the view does not decompose
    so: a dim of stride 0 or below, strides along one memory dim whose common step reaches into the dims inside
    it. The decomposition is unique: each memory dim's step exceeds the farthest element the dims inside it
    reach."""
    dims = sorted((s, d, n) for d, (n, s) in enumerate(zip(size, stride)) if n > 1)
    memory, reach, inner = [], 0, 0  # (inner: the farthest element the memory dims inside the last one reach)
    for s, d, n in dims:
        if s <= 0:
            return None
        if memory and s <= reach:  # it moves along the memory dim being built (windows overlap there)
            step, views = memory[-1]
            unit = gcd(step, s)  # (a stride 2 with a dilation 3: the memory dim steps by one row)
            if unit <= inner:
                return None
            memory[-1] = (unit, [(e, f * step // unit, m) for e, f, m in views] + [(d, s // unit, n)])
        else:
            memory.append((s, [(d, 1, n)]))
            inner = reach
        reach += (n - 1) * s
    if offset < 0 or offset + reach >= numel:
        return None
    # per memory dim, the view dims a gather loops over in their order, then the one it solves: the largest
    return tuple((step, tuple(sorted(views, key=lambda v: (v == max(views, key=itemgetter(2)), v[0]))))
                 for step, views in reversed(memory))


def _window_kernel(out, x, src, size, stride, storage_offset, mode):
    """Run the registered gather kernel of ``mode`` ("add": `_as_strided_add`; "assign": `as_strided_scatter`)
    into the flat ``out``, starting from ``x`` (None: zeros); False where no kernel serves the call."""
    if WINDOW_KERNEL is None or out.dtype not in _WINDOW_DTYPES or src.dtype != out.dtype or src.size == 0 \
            or any(s % src.itemsize for s in src.strides) \
            or (mode == "assign" and out.size < WINDOW_COPY_MIN_ELEMENTS):
        return False
    offset = 0 if storage_offset is None else storage_offset
    plan = window_plan(out.size, size, stride, offset)
    if plan is None or (mode == "assign" and any(len(views) > 1 for _, views in plan)):
        return False  # (a scatter whose view overlaps writes one share of many: NumPy's order decides which)
    init = "zero" if x is None else "none" if _same_buffer(out, x) else "copy"
    if init == "copy" and not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    kernel = WINDOW_KERNEL(out.dtype, out.size, offset, plan, tuple(s // src.itemsize for s in src.strides), mode,
                           init)
    if kernel is None:
        return False
    kernel(out if x is None else x, src, out)
    return True


_WINDOW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))




def _disjoint_dim(size, stride):
    """A dim of the strided view ``(size, stride)`` whose slices lie in disjoint ranges of memory (its stride
    exceeds the span of every other dim together, as a col2im's channels do), the longest such; None if none.
    Threads that each write one range of it write no element in common, and each element's writes come in
    the order they come in the whole pass."""
    best = None
    for d, (n, s) in enumerate(zip(size, stride)):
        if n > 1 and (best is None or n > size[best]):
            span = sum((m - 1) * abs(t) for e, (m, t) in enumerate(zip(size, stride)) if e != d)
            if abs(s) > span:
                best = d
    return best


def _pieces(size, stride, count):
    """``(dim, [(lo, hi), ...])``: how a pass touching ``count`` elements through the view ``(size, stride)``
    splits across the team (`_disjoint_dim`), or None where it runs whole."""
    parts = min(threads.get_num_threads(), count // (SPLIT_MIN // 2))
    if count < SPLIT_MIN or parts < 2:
        return None
    d = _disjoint_dim(size, stride)
    if d is None:
        return None
    return d, threads.bounds(size[d], parts)


def _narrowed(a, d, lo, hi):
    return a[(slice(None),) * d + (slice(lo, hi),)]


def as_strided_scatter_into(out, x, src, size, stride, storage_offset):
    """`as_strided_scatter` written into ``out``, a C-contiguous array of ``x``'s shape and dtype (its eager
    kernel's new memory, or a compiled graph's arena buffer, which may be ``x``'s own); ``x`` None: zeros (a
    compiled graph's padded input, whose zeros are not filled first). Where the view does not overlap,
    float32/float64 of `WINDOW_COPY_MIN_ELEMENTS` or more run the code generator's gather kernel: each element
    is ``src``'s or ``x``'s, in one pass.
    Otherwise a large scatter whose view does not overlap itself splits across the team along a dim of disjoint
    ranges (`_pieces`); one that overlaps runs whole (which write wins is the whole copy's)."""
    if _window_kernel(out.reshape(-1), x if x is None else x.reshape(-1), src, size, stride, storage_offset,
                      "assign"):
        return
    if x is None:
        fill_split(out, 0)
    elif not _same_buffer(out, x):
        _copy(out, x)
    flat = out.reshape(-1)
    offset = 0 if storage_offset is None else storage_offset
    item = flat.itemsize
    size, stride = tuple(size), tuple(stride)
    region = np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * item for s in stride))
    pieces = _pieces(size, stride, prod(size))
    if pieces is not None and may_overlap(size, stride):
        pieces = None
    if pieces is None or src.shape != size:
        _copy(region, src)  # ``src`` of another dtype is cast to ``self``'s, as torch's copy_ does
        return
    d, bounds = pieces
    threads.run_parts(_copy, [(_narrowed(region, d, lo, hi), _narrowed(src, d, lo, hi)) for lo, hi in bounds])


def _as_strided_scatter_cpu(spec, x, src, size, stride, storage_offset):
    out = np.empty(x.shape, x.dtype)
    as_strided_scatter_into(out, x, src, size, stride, storage_offset)
    return out


defop("as_strided_scatter(Tensor self, Tensor src, int[] size, int[] stride, int? storage_offset=None) -> Tensor",
      meta=_as_strided_scatter_meta, cpu=_as_strided_scatter_cpu, kind="other", variants=("function", "method"),
      doc="A copy of ``self`` (read as a contiguous tensor) whose elements at the strided view "
          "``as_strided(size, stride, storage_offset)`` are replaced by ``src`` (cast to ``self``'s dtype).")


def _as_strided_add_meta(x, src, size, stride, storage_offset):
    if x.ndim != 1:
        raise RuntimeError(f"_as_strided_add: expected a 1-D self (a storage's elements), got {list_str(x.shape)}")
    return _as_strided_scatter_meta(x, src, size, stride, storage_offset)


def _looped_dims(size, stride):
    """Dims to loop over so that the rest address distinct elements: the smallest first (a window's
    kernel positions), until what is left does not overlap."""
    looped = []
    for d in sorted(range(len(size)), key=lambda d: size[d]):
        rest = [e for e in range(len(size)) if e not in looped]
        if not may_overlap([size[e] for e in rest], [stride[e] for e in rest]):
            break
        looped.append(d)
    return looped


def _as_strided_add_cpu(spec, x, src, size, stride, storage_offset):
    out = np.empty(x.shape, x.dtype)
    as_strided_add_into(out, x, src, size, stride, storage_offset)
    return out


def as_strided_add_into(out, x, src, size, stride, storage_offset):
    """`_as_strided_add` written into ``out``, a contiguous 1-D array of ``x``'s shape and dtype (its eager
    kernel's new memory, or a compiled graph's arena buffer, whose pages a call finds already mapped: a
    col2im's output is megabytes, and faulting fresh memory in was a third of its time; it may be ``x``'s own).
    ``x`` None: zeros (a compiled graph's col2im, whose zeros are not filled first).

    float32/float64 views that `window_plan` decomposes (a convolution's windows: col2im) run the code
    generator's gather kernel: each element is ``x``'s plus its shares, added in a fixed order (by memory
    dim, outermost first, and within one by view dim: a convolution's kernel positions row-major), whatever
    the number of threads. Other views add one slice of non-overlapping elements at a time with NumPy; a large
    one splits across the team along a dim of disjoint ranges (`_pieces`: a col2im's channels), each element's
    shares added in the same order as on one thread."""
    if _window_kernel(out, x, src, size, stride, storage_offset, "add"):
        return
    if x is None:
        fill_split(out, 0)
    elif not _same_buffer(out, x):
        _copy(out, x)
    if 0 in tuple(size):
        return
    offset = 0 if storage_offset is None else storage_offset
    size, stride = list(size), list(stride)
    # a dim of stride 0 reads one element repeatedly: its sum lands there once
    repeated = tuple(d for d, (n, s) in enumerate(zip(size, stride)) if s == 0 and n > 1)
    if repeated:
        src = src.sum(axis=repeated, keepdims=True, dtype=src.dtype)
        for d in repeated:
            size[d] = 1
    # the slices in the gather kernel's order (each element gets its shares in the order the kernel adds them:
    # the same bits whether or not the code generator is loaded), else the fewest slices that do not overlap
    plan = window_plan(out.size, size, stride, offset)
    looped = [d for _, dims in plan for d, _, _ in dims[:-1]] if plan is not None else _looped_dims(size, stride)
    pieces = _pieces(size, stride, src.size)
    if pieces is None:
        _add_windows(out, src, offset, size, stride, looped)
        return
    d, bounds = pieces
    threads.run_parts(_add_windows, [(out, _narrowed(src, d, lo, hi), offset + lo * stride[d],
                                      size[:d] + [hi - lo] + size[d + 1:], stride, looped) for lo, hi in bounds])


def _add_windows(out, src, offset, size, stride, looped):
    """``src`` added into the elements of the view ``(size, stride, offset)`` of the 1-D ``out``, a loop over
    the ``looped`` dims (`_looped_dims`) of adds into distinct elements."""
    rest = [d for d in range(len(size)) if d not in looped]
    item = out.itemsize
    view_size, view_strides = tuple(size[d] for d in rest), tuple(stride[d] * item for d in rest)
    # each iteration adds into distinct elements: one vectorised add (np.add.at would visit every element
    # alone)
    for where in np.ndindex(*(size[d] for d in looped)):
        base = offset + sum(i * stride[d] for i, d in zip(where, looped))
        region = np.lib.stride_tricks.as_strided(out[base:], view_size, view_strides)
        pick = [slice(None)] * len(size)
        for i, d in zip(where, looped):
            pick[d] = i
        region += src[tuple(pick)]


defop("_as_strided_add(Tensor self, Tensor src, int[] size, int[] stride, int? storage_offset=None) -> Tensor",
      meta=_as_strided_add_meta, cpu=_as_strided_add_cpu, kind="other", variants=("function",),
      doc="A copy of the 1-D ``self`` with ``src`` added at the elements of the strided view ``as_strided(size, "
          "stride, storage_offset)``; an element the view reaches several times (overlapping windows) gets "
          "every share. The backward of an overlapping ``as_strided``.")


__all__ = ["memory_format", "preserve_format", "contiguous_format", "channels_last", "channels_last_3d", "dense_strides", "compact_window"]


def _integral_start(convert):
    """``narrow``'s argument converter, after the check of torch's ``narrow(Tensor self, int dim, Tensor start,
    int length)`` overload: a tensor ``start`` must be 0-d of an integer dtype (a bool or float one, or one of
    more dims, raises its RuntimeError, where the int converter took a 0-d bool as a number)."""
    def converted(args):
        start = args[2] if len(args) > 2 else None
        if isinstance(start, registry.Tensor) and (start.ndim != 0 or start.dtype.is_floating_point
                                                   or start.dtype.name == "bool"):
            raise RuntimeError("start must be an 0-dim integral Tensor.")
        return convert(args)
    return converted


registry.OPS["narrow"].convert = _integral_start(registry.OPS["narrow"].convert)
