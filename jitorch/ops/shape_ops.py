"""Ops that rearrange or replicate elements: cat and stacking, flip, roll, repeat,
tril/triu, sorting and selection (sort, argsort, topk, kthvalue).

Stacking and flipping variants are composites over ``cat``/``flip``/``view``;
the rest are NumPy kernels that return fresh arrays.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.casts import convert
from ..runtime.device import CPU
from ..runtime.memory_format import contiguous_format, format_strides, suggest_memory_format
from ..runtime.strided import contiguous_strides, like_strides, list_str, wrap_dim, wrap_dims
from .meta import reduced_shape
from . import functions
from . import registry
from .registry import TensorSpec, defop, scalar_name, write_where
from .searching import unique_dim


def _require_tensors(op_name, tensors):
    if not tensors:
        raise RuntimeError(f"{op_name} expects a non-empty TensorList")


# cat and its stacking relatives ---------------------------------------------------

def _is_legacy_empty(t):
    """torch still skips 1-D tensors of shape [0] in cat, whatever the other shapes."""
    return t._shape == (0,)


def _cat_meta(tensors, dim):
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = _dt.promote_types(dtype, t.dtype)
    kept = [(i, t) for i, t in enumerate(tensors) if not _is_legacy_empty(t)]
    if not kept:
        return TensorSpec((0,), dtype, tensors[0].device)
    ref = kept[0][1]._shape
    d = wrap_dim(dim, len(ref))
    total = 0
    for i, t in kept:
        shape = t._shape
        if len(shape) != len(ref):
            raise RuntimeError(f"Tensors must have same number of dimensions: got {len(ref)} and {len(shape)}")
        for k, (n, m) in enumerate(zip(ref, shape)):
            if k != d and n != m:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size {n} but got "
                                   f"size {m} for tensor number {i} in the list.")
        total += shape[d]
    return TensorSpec(tuple(ref[:d]) + (total,) + tuple(ref[d + 1:]), dtype, tensors[0].device)


def _promoted(arrays, dtype):
    """The arrays converted to the result's dtype (those of another dtype only)."""
    return [a if a.dtype == dtype.np else convert(a, dtype.np) for a in arrays]


def _cat_cpu(spec, arrays, dim):
    kept = [a for a in arrays if a.shape != (0,)]
    if not kept:
        return np.empty((0,), spec.dtype.np)
    return np.concatenate(_promoted(kept, spec.dtype), axis=dim % kept[0].ndim)


# np.concatenate's C function behind its __array_function__ dispatcher (NumPy 1.26 and 2 have it), which the
# fast path's plain arrays need not go through: 0.25 us of a 1x1 cat
_concatenate = getattr(np.concatenate, "_implementation", np.concatenate)
_CONTIGUOUS = registry.CONTIGUOUS_STRIDES


def _cat_entry(general):
    """`registry.OpDef.entry` of cat: CPU tensors of one dtype (none requiring grad in grad mode) that NumPy joins
    along an int dim (then as torch: one number of dims, the other sizes equal), in the public function's one
    frame; anything else (a dispatch hook or autocast on, ``out=``, ``axis=``) goes to ``general``, which serves
    it (and raises its errors), or, with ``general`` None, gives None."""
    miss = registry.entry_miss(general)
    hooks, autocast, absent = registry.DISPATCH_HOOKS, registry._AUTOCAST_STATE, registry.ABSENT
    Tensor, cpu = registry.Tensor, CPU  # (read from the closure: no global lookups)
    fresh = Tensor._fresh

    def cat(tensors, dim=0, *, axis=absent, out=None):
        if (hooks or out is not None or axis is not absent or autocast.key is not None or dim.__class__ is not int
                or tensors.__class__ is not list and tensors.__class__ is not tuple or not tensors):
            return miss((tensors, dim), axis=axis, out=out)
        first = tensors[0]
        if not isinstance(first, Tensor):
            return miss((tensors, dim))
        dtype, ndim = first.dtype, len(first._shape)
        arrays = []
        grad = False
        for t in tensors:
            # (a plain tensor's class tested before isinstance, whose call is a measurable share here)
            if t.__class__ is not Tensor and not isinstance(t, Tensor) or t.dtype is not dtype or t.device is not cpu:
                return miss((tensors, dim))
            if t._requires_grad:
                grad = True
            a = t._arr
            arrays.append(a if a is not None else t._array())
        if not -ndim <= dim < ndim or grad and registry.records_grad() or (
                ndim in (4, 5) and first._stride != _CONTIGUOUS.get(first._shape)):
            return miss((tensors, dim))  # (the general path lays a channels-last result out: `_cat_strides`)
        try:
            r = _concatenate(arrays, dim)  # (the axis as a keyword costs NumPy a parse)
        except ValueError:
            # Sizes or numbers of dims that do not match, a 0-d tensor: the general path raises torch's error. (A
            # 1-D empty tensor, which torch skips, among tensors of more dims is one of these; among 1-D tensors
            # it adds nothing, as skipped.)
            return miss((tensors, dim))
        shape = r.shape
        strides = _CONTIGUOUS.get(shape)
        # (NumPy's order follows the inputs': `contiguous_result` relays another)
        if strides is not None and r.flags.c_contiguous:
            return fresh(r, dtype, shape, strides)
        return registry.contiguous_result(r, dtype)
    return cat


def _cat_fast(args, record=True):
    """`registry.OpDef.fast` of cat: its entry without its general path (None for what that serves, tensors that
    require grad in grad mode among it: it records no node, whatever ``record`` says)."""
    if not _SERVED:
        _SERVED.append(_cat_entry(None))  # (at the first call: the entry reads the tensor class `install` sets)
    return _SERVED[0](*args)


_SERVED = []


# torch's cat resizes ``out`` first, then checks each operand but a 1-D empty one (``out`` itself when it stays
# so): ``hstack([e, e, e], out=e)`` of a 1-D empty ``e`` runs (fuzz seed 8662059); stack and the stackers are
# checked as the cat of the operands they give it (`overlap.check_write_overlap`'s ``overlap_as``)
_CAT_OVERLAP = {"resized_first": True, "overlap_skips": lambda shape: shape == (0,)}


def _cat_strides(spec, tensors, dim):
    """cat's layout rule, torch's ``cat_compute_output_memory_format``: the memory format every input suggests
    where they all suggest one channels-last format (4-d or 5-d inputs), else contiguous (None)."""
    return _joined_strides(spec.shape, [(t._shape, t._stride) for t in tensors])


def _joined_strides(shape, geometries):
    """The strides of cat's result of ``shape`` from its inputs' (shape, strides) ``geometries``: those of the
    one channels-last format they all suggest, else None (contiguous)."""
    if len(shape) not in (4, 5):
        return None
    fmt = None
    for t_shape, t_stride in geometries:
        suggested = suggest_memory_format(t_shape, t_stride)
        if suggested is contiguous_format or fmt is not None and suggested is not fmt:
            return None
        fmt = suggested
    return format_strides(fmt, shape)


for _name in ("cat", "concat", "concatenate"):
    _op = defop(f"{_name}(Tensor[] tensors, int dim=0) -> Tensor", meta=_cat_meta, cpu=_cat_cpu, kind="shape",
                variants=("function", "out"), layout=_cat_strides, **_CAT_OVERLAP,
                doc="Join tensors along an existing dim ``dim``; dtypes promote, other sizes must match. "
                    "1-D empty tensors are skipped.")
    _op.entry = _cat_entry
    _op.fast = _cat_fast


def _stack_meta(tensors, dim):
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    first = tuple(tensors[0].shape)
    dtype = tensors[0].dtype
    for i, t in enumerate(tensors[1:], 1):
        if tuple(t.shape) != first:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list_str(first)} at entry 0 "
                               f"and {list_str(t.shape)} at entry {i}")
        dtype = _dt.promote_types(dtype, t.dtype)
    d = wrap_dim(dim, len(first) + 1)
    return TensorSpec(first[:d] + (len(tensors),) + first[d:], dtype, tensors[0].device)


def _stack_cpu(spec, arrays, dim):
    # one NumPy call: stacking a DataLoader batch of many small samples costs one dispatch, not one per sample
    return np.stack(_promoted(arrays, spec.dtype), axis=wrap_dim(dim, arrays[0].ndim + 1))


def _stack_as_cat(tensors, dim):
    """The cat torch's stack runs (of the tensors unsqueezed at ``dim``), after stack's own checks."""
    _stack_meta(tensors, dim)
    return registry.OPS["cat"], ([t.unsqueeze(wrap_dim(dim, t.ndim + 1)) for t in tensors], dim)


def _stack_strides(spec, tensors, dim):
    """stack's layout rule, torch's: below the inputs' rank torch's stack is their cat along ``dim`` viewed with
    the new dim split off it (channels-last inputs keep their layout, the new dim outside ``dim``); at the end
    it is the cat of the inputs unsqueezed there."""
    shape = tuple(spec.shape)
    d = wrap_dim(dim, len(shape))
    if d == len(shape) - 1:
        return _joined_strides(shape, [(t._shape + (1,), t._stride + (1,)) for t in tensors])
    joined = _joined_strides(shape[:d] + (shape[d] * shape[d + 1],) + shape[d + 2:],
                             [(t._shape, t._stride) for t in tensors])
    if joined is None:
        return None
    return joined[:d] + (shape[d + 1] * joined[d], joined[d]) + joined[d + 1:]


defop("stack(Tensor[] tensors, int dim=0) -> Tensor", meta=_stack_meta, cpu=_stack_cpu, kind="shape",
      variants=("function", "out"), layout=_stack_strides,
      overlap_as=_stack_as_cat, doc="Join tensors of one shape along a new dim ``dim``; dtypes promote.")


def at_least(t, ndim):
    """``t`` viewed with at least ``ndim`` dims, as torch.atleast_{1,2,3}d does: a
    scalar becomes (1, ...), a vector a row (1, n) or (1, n, 1), a matrix (m, n, 1)."""
    shape = tuple(t.shape)
    if len(shape) >= ndim:
        return t
    if not shape:
        return t.view((1,) * ndim)
    if len(shape) == 1:
        return t.view((1,) + shape + (1,) * (ndim - 2))
    return t.view(shape + (1,))


def _stacker(name, ndim, dim, vector_dim=None):
    """cat along ``dim`` after ``atleast_{ndim}d``; along ``vector_dim`` when the inputs are vectors."""
    def operands(tensors):
        ts = [at_least(t, ndim) for t in tensors]
        return ts, vector_dim if vector_dim is not None and ts[0].ndim == 1 else dim

    def composite(tensors):
        _require_tensors(name, tensors)
        return functions.cat(*operands(tensors))
    composite.operands = operands
    return composite


def _column_operands(tensors):
    return [t.view(t.numel(), 1) if t.ndim <= 1 else t for t in tensors], 1


def _column_stack(tensors):
    _require_tensors("column_stack", tensors)
    return functions.cat(*_column_operands(tensors))


_column_stack.operands = _column_operands


_STACKERS = [
    ("hstack", _stacker("hstack", 1, 1, vector_dim=0), "Join tensors column-wise: along dim 1, or dim 0 for vectors."),
    ("vstack", _stacker("vstack", 2, 0), "Join tensors row-wise (vectors become rows) along dim 0."),
    ("row_stack", _stacker("vstack", 2, 0), "Alias of ``vstack``."),
    ("dstack", _stacker("dstack", 3, 2), "Join tensors depth-wise along dim 2 (after ``atleast_3d``)."),
    ("column_stack", _column_stack, "Join tensors as columns: vectors and scalars become (n, 1) columns."),
]
for _name, _fn, _doc in _STACKERS:
    defop(f"{_name}(Tensor[] tensors) -> Tensor", composite=_fn, kind="shape", variants=("function", "out"), doc=_doc,
          overlap_as=lambda tensors, operands=_fn.operands: (registry.OPS["cat"], operands(tensors)))


# flip, roll --------------------------------------------------------------------------

def _flip_meta(x, dims):
    wrap_dims(dims, x.ndim)
    return TensorSpec(x.shape, x.dtype, x.device)


def _flip_cpu(spec, x, dims):
    flipped = {d % x.ndim for d in dims} if x.ndim else set()
    return x[tuple(slice(None, None, -1) if d in flipped else slice(None) for d in range(x.ndim))].copy()


defop("flip(Tensor self, int[] dims) -> Tensor", meta=_flip_meta, cpu=_flip_cpu, kind="shape",
      variants=("function", "method", "out"), layout=registry.preserved_strides,  # (torch's empty_like(self))
      doc="A copy with the order of elements reversed along ``dims``.")


def _flipper(min_ndim, dim):
    def composite(self):
        if self.ndim < min_ndim:
            raise RuntimeError(f"Input must be >= {min_ndim}-d.")
        return self.flip([dim])
    return composite


defop("fliplr(Tensor self) -> Tensor", composite=_flipper(2, 1), kind="shape", variants=("function", "method", "out"),
      doc="Reverse the columns (dim 1).")
defop("flipud(Tensor self) -> Tensor", composite=_flipper(1, 0), kind="shape", variants=("function", "method", "out"),
      doc="Reverse the rows (dim 0).")


def _roll_meta(x, shifts, dims):
    if not shifts:
        raise RuntimeError("`shifts` required")
    if len(shifts) != len(dims) and (dims or len(shifts) != 1):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if dims and x.ndim == 0:
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    for d in dims:
        wrap_dim(d, x.ndim)
    return TensorSpec(x.shape, x.dtype, x.device)


def _roll_cpu(spec, x, shifts, dims):
    if not dims:
        return np.roll(x, shifts[0])
    return np.roll(x, shifts, axis=tuple(d % x.ndim for d in dims))


def _roll_strides(spec, x, shifts, dims):
    """roll's layout rule, torch's: an empty tensor's roll is its clone (preserve_format); one without ``dims``
    rolls the flattened tensor (contiguous); one along ``dims`` is the cat of two narrows along the first dim (cat's
    rule on their geometry), then the roll of that result along the rest, one dim at a time: a later dim whose
    shift leaves one narrow empty (a dim of one element) makes the result contiguous though the first kept the
    channels-last layout."""
    if x.numel() == 0:
        return like_strides(x._shape, x._stride)
    if not dims:
        return None
    shape, strides = tuple(spec.shape), x._stride
    for dim, shift in zip(dims, shifts):
        d = wrap_dim(dim, x.ndim)
        size = shape[d]
        start = (size - shift) % size
        strides = _joined_strides(shape, [(shape[:d] + (n,) + shape[d + 1:], strides) for n in (size - start, start)])
        if strides is None:
            strides = contiguous_strides(shape)
    return strides


defop("roll(Tensor self, int[] shifts, int[] dims=()) -> Tensor", meta=_roll_meta, cpu=_roll_cpu, kind="shape",
      variants=("function", "method", "out"), layout=_roll_strides,
      doc="Shift elements circularly by ``shifts`` along ``dims``; without dims, over the flattened tensor.")


# repeat, tile, repeat_interleave ------------------------------------------------------

def _repeat_meta(x, repeats):
    if len(repeats) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    padded = (1,) * (len(repeats) - x.ndim) + tuple(x.shape)
    shape = tuple(n * r for n, r in zip(padded, repeats))
    for n in shape:
        if n < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {list_str(shape)}")
    return TensorSpec(shape, x.dtype, x.device)


def _repeat_cpu(spec, x, repeats):
    return np.tile(x.reshape((1,) * (len(repeats) - x.ndim) + x.shape), repeats)


defop("repeat(Tensor self, int... repeats) -> Tensor", meta=_repeat_meta, cpu=_repeat_cpu, kind="shape",
      variants=("method",), doc="Tile the tensor ``repeats[i]`` times along each dim (leading new dims allowed).")


def _tile(self, dims):
    return self.repeat((1,) * (self.ndim - len(dims)) + tuple(dims))


defop("tile(Tensor self, int[] dims) -> Tensor", composite=_tile, kind="shape", variants=("function", "method"),
      doc="``repeat`` where missing leading repeats count as 1.")


def _interleave_dim(x, dim):
    """The dim ``repeat_interleave`` repeats along, or None for the flattened tensor."""
    if dim is None:
        return None
    if x.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return wrap_dim(dim, x.ndim)


def _interleave_meta(x, repeats, dim, output_size):
    if repeats < 0:
        raise RuntimeError("Repeats must be non-negative")
    d = _interleave_dim(x, dim)
    shape = (x.numel(),) if d is None else tuple(x.shape)
    d = d or 0
    if output_size is not None and output_size != shape[d] * repeats:
        raise RuntimeError(f"repeat_interleave: Invalid output_size, expected {shape[d] * repeats} but got "
                           f"{output_size}")
    return TensorSpec(shape[:d] + (shape[d] * repeats,) + shape[d + 1:], x.dtype, x.device)


def _interleave_cpu(spec, x, repeats, dim, output_size):
    return np.repeat(x, repeats, axis=None if dim is None else dim % x.ndim)


defop("repeat_interleave(Tensor self, int repeats, int? dim=None, *, int? output_size=None) -> Tensor",
      meta=_interleave_meta, cpu=_interleave_cpu, kind="shape", variants=("function", "method"),
      doc="Repeat each element ``repeats`` times along ``dim`` (over the flattened tensor by default).")


def _counts_meta(repeats, output_size):
    if repeats.ndim != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (_dt.int32, _dt.int64):
        raise NotImplementedError(f'"repeat_interleave_cpu" not implemented for \'{scalar_name(repeats.dtype)}\'')
    return TensorSpec((output_size,), repeats.dtype, repeats.device)


def _counts_cpu(spec, repeats, output_size):
    if (repeats < 0).any():
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and output_size != repeats.sum():
        raise RuntimeError("allocated size does not match required size")
    return np.repeat(np.arange(len(repeats)), repeats)


defop("repeat_interleave.Tensor(Tensor repeats, *, int? output_size=None) -> Tensor", meta=_counts_meta,
      cpu=_counts_cpu, kind="index", variants=("function",),
      doc="The indices ``0, 1, ...`` each repeated ``repeats[i]`` times (``repeats`` a 1-d integer tensor).")


def _interleave_by(x, repeats, dim, output_size):
    """``repeat_interleave`` with a tensor of repeats: the rows along ``dim`` chosen by the indices
    ``repeat_interleave(repeats)`` gives (a 0-d or one-element ``repeats`` repeats every row alike)."""
    d = _interleave_dim(x, dim)
    if d is None:
        x, d = x.flatten(), 0
    if repeats.ndim > 1:
        raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
    n = x.shape[d] if x.ndim else 1
    if repeats.numel() == 1:
        repeats = repeats.reshape(1).expand(n)
    elif repeats.shape[0] != n:
        raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                           f"{repeats.shape[0]} and input.size(0) = {n}")
    index = functions.repeat_interleave(repeats, output_size=output_size)
    return x.reshape(1).index_select(0, index) if x.ndim == 0 else x.index_select(d, index)


defop("repeat_interleave.self_Tensor(Tensor self, Tensor repeats, int? dim=None, *, int? output_size=None) -> Tensor",
      composite=_interleave_by, kind="shape", variants=("function", "method"),
      doc="Repeat the rows along ``dim`` (of the flattened tensor by default) ``repeats[i]`` times each.")


# tril, triu ------------------------------------------------------------------------------

def _triangle(name, fn):
    def meta(x, diagonal):
        if x.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        return TensorSpec(x.shape, x.dtype, x.device)

    def zeroed(shape, diagonal):
        """The elements the in-place form writes (zeros, outside the kept triangle): torch's triu_/tril_ write
        them through an expanded tensor's shared memory (fuzz seed 5592928: ``x0.triu_(2)`` of an expanded
        input raised the overlap error torch does not)."""
        keep = fn(np.ones(shape[-2:], bool), diagonal)
        return np.broadcast_to(~keep, shape)

    defop(f"{name}(Tensor self, int diagonal=0) -> Tensor", meta=meta, cpu=lambda spec, x, k: fn(x, k), kind="shape",
          variants=("function", "method", "inplace", "out"), overlap=None, expanded_write=write_where(zeroed),
          doc=f"The {'lower' if name == 'tril' else 'upper'} triangle of the last two dims (from the ``diagonal``-th "
              "diagonal; 0 is the main one, positive above it), zero elsewhere.")


_triangle("tril", np.tril)
_triangle("triu", np.triu)


# sort and selection ----------------------------------------------------------------------

def _sort_key(x):
    """Half types sort through float32: the same order, with NumPy's fast sorts."""
    return x.astype(np.float32) if x.dtype in _dt.HALF_NP else x


def _argsort(x, axis, descending):
    """Stable order along ``axis``: NaN last ascending, first descending, like torch;
    equal elements keep their order in both directions."""
    key = _sort_key(x)
    if not descending:
        return np.argsort(key, axis=axis, kind="stable")
    n = key.shape[axis]
    # a stable ascending sort of the reversed data, reversed, keeps ties in their original order (reversed by a
    # slice: ``np.flip`` builds the same view through Python code, 1.2 µs a call on topk's sampling step)
    reverse = (slice(None),) * axis + (slice(None, None, -1),)
    order = np.argsort(key[reverse], axis=axis, kind="stable")
    return (n - 1) - order[reverse]


def _sorted(x, dim, descending):
    """(values, indices) sorted along ``dim``; a 0-d tensor is its own sort."""
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    axis = dim % x.ndim
    order = _argsort(x, axis, descending)
    return np.take_along_axis(x, order, axis), order


def _sort_meta(x, dim, descending, stable):
    wrap_dim(dim, x.ndim)
    return TensorSpec(x.shape, x.dtype, x.device), TensorSpec(x.shape, _dt.int64, x.device)


def _sort_cpu(spec, x, dim, descending, stable):
    return _sorted(x, dim, descending)


defop("sort(Tensor self, int dim=-1, bool descending=False, *, bool? stable=False) -> (Tensor values, Tensor indices)",
      meta=_sort_meta, cpu=_sort_cpu, kind="sort", variants=("function", "method", "out"),
      layout=registry.preserved_strides,  # torch's: both results laid out as self (fuzz seed 7100091: msort)
      doc="Sorted values along ``dim`` and their indices. NaN sorts as the largest value; the order is stable.")


def _argsort_composite(self, dim, descending, stable):
    return self.sort(dim, descending, stable=stable).indices


defop("argsort(Tensor self, int dim=-1, bool descending=False, *, bool stable=False) -> Tensor",
      composite=_argsort_composite, kind="sort", variants=("function", "method"),
      doc="The indices that sort ``self`` along ``dim`` (``sort(...).indices``).")


def _topk_meta(x, k, dim, largest, sorted):
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if k < 0 or k > n:
        raise RuntimeError("selected index k out of range")
    if x.dtype is _dt.bool:
        raise RuntimeError("topk does not support bool dtypes on CPU")
    shape = tuple(x.shape)
    shape = shape[:d] + (k,) + shape[d + 1:] if x.ndim else ()
    return TensorSpec(shape, x.dtype, x.device), TensorSpec(shape, _dt.int64, x.device)


def _topk_cpu(spec, x, k, dim, largest, sorted):
    values, order = _sorted(x, dim, largest)
    if x.ndim == 0:
        return values, order
    # (a slice, copied: np.take's copy of ``range(k)`` converted it to an index array first, 2.9 µs a call)
    first_k = (slice(None),) * (dim % x.ndim) + (slice(0, k),)
    return np.ascontiguousarray(values[first_k]), np.ascontiguousarray(order[first_k])


_TOPK_FAST_DTYPES = (_dt.float32, _dt.float64)


def _topk_fast(args, record=True):
    """`registry.OpDef.fast` of ``topk``: a CPU float32 or float64 tensor of at least one dim and element, with
    an int ``k`` in range and an int ``dim``, selected by `_topk_cpu` without the general path's conversion, meta
    rule and wrapping (sampling from a language model calls it once per token); None (the general path, which
    raises the errors and records the backward node) for anything else, and for a tensor that requires grad
    while grad mode records it."""
    x, k, dim, largest, ordered = args
    if (not isinstance(x, registry.Tensor) or x.device is not CPU or x.dtype not in _TOPK_FAST_DTYPES
            or k.__class__ is not int or dim.__class__ is not int or largest.__class__ is not bool
            or ordered.__class__ is not bool or (x._requires_grad and registry.records_grad())):
        return None
    shape = x._shape
    if not shape or 0 in shape or not -len(shape) <= dim < len(shape) or not 0 <= k <= shape[dim]:
        return None
    values, order = _topk_cpu(None, x._array(), k, dim, largest, ordered)
    if order.dtype != np.int64:
        return None
    return _TOPK.result_type(registry.contiguous_result(values, x.dtype), registry.contiguous_result(order, _dt.int64))


_TOPK = defop("topk(Tensor self, int k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, "
              "Tensor indices)",
              meta=_topk_meta, cpu=_topk_cpu, kind="sort", variants=("function", "method", "out"),
              doc="The ``k`` largest (or smallest) elements along ``dim`` and their indices, in sorted order; NaN "
                  "counts as the largest value.")
_TOPK.fast = _topk_fast


def _kthvalue_meta(x, k, dim, keepdim):
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if n == 0:
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size.")
    if k < 1 or k > n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    if x.dtype is _dt.bool and x.ndim:  # torch selects from a 0-d tensor without its kernel
        raise NotImplementedError("\"kthvalue_cpu\" not implemented for 'Bool'")
    shape = reduced_shape(tuple(x.shape), (d,) if x.ndim else (), keepdim)
    return TensorSpec(shape, x.dtype, x.device), TensorSpec(shape, _dt.int64, x.device)


def _greater_or_nan(a, b):
    return (a != a and b == b) or a > b


def _torch_select(row, k):
    """The index of the element torch's kthvalue picks as the ``k``-th smallest (0-based) of the list ``row``:
    its quickselect (ATen's ``quick_select_template``: median-of-three pivot, Hoare partition, NaN largest),
    whose choice among equal elements (which index; -0.0 or 0.0) no sort reproduces."""
    values, index = list(row), list(range(len(row)))

    def swap(i, j):
        values[i], values[j] = values[j], values[i]
        index[i], index[j] = index[j], index[i]

    left, right = 0, len(values) - 1
    while right > left:
        if right == left + 1:
            if _greater_or_nan(values[left], values[right]):
                swap(left, right)
            break
        swap(left + (right - left) // 2, left + 1)
        for i, j in ((left + 1, right), (left, right), (left + 1, left)):
            if _greater_or_nan(values[i], values[j]):
                swap(i, j)
        i, j, pivot = left + 1, right, values[left]
        while True:
            i += 1
            while _greater_or_nan(pivot, values[i]):
                i += 1
            j -= 1
            while _greater_or_nan(values[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(left, j)
        if j <= k:
            left = i
        if j >= k:
            right = j - 1
    return index[k]


def _kthvalue_cpu(spec, x, k, dim, keepdim):
    ordered, order = _sorted(x, dim, False)
    if x.ndim == 0:
        return ordered, order
    axis = dim % x.ndim
    values, indices = np.take(ordered, [k - 1], axis=axis), np.take(order, [k - 1], axis=axis)
    # where the k-th value has equals in its row (beside it in the sorted row: -0.0 equals 0.0, NaNs sort last),
    # torch's quickselect decides which of them, and which zero
    ties = None
    for j in (k - 2, k):
        if 0 <= j < x.shape[axis]:
            near = np.take(ordered, [j], axis=axis)
            same = near == values
            if x.dtype.kind not in "biu":  # (bfloat16's kind is "V")
                same |= np.isnan(near) & np.isnan(values)
            ties = same if ties is None else ties | same
    if ties is not None and ties.any():
        rows = np.moveaxis(x, axis, -1)
        for at in map(tuple, np.argwhere(np.moveaxis(ties, axis, -1)[..., 0])):
            row = rows[at]
            j = _torch_select(row.tolist(), k - 1)
            where = at[:axis] + (0,) + at[axis:]
            values[where], indices[where] = row[j], j
    return (values, indices) if keepdim else (np.squeeze(values, axis), np.squeeze(indices, axis))


defop("kthvalue(Tensor self, int k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)",
      meta=_kthvalue_meta, cpu=_kthvalue_cpu, kind="sort", variants=("function", "method", "out"),
      doc="The ``k``-th smallest element along ``dim`` (1-based) and its index; NaN counts as the largest value.")


# unique: the output size depends on the data --------------------------------------------

def _unique_meta(x, sorted, return_inverse, return_counts, dim):
    if dim is not None:
        d = unique_dim(x, dim)
        values = tuple(None if i == d else n for i, n in enumerate(x.shape))
        inverse = (x.shape[d],)
    else:
        values, inverse = (None,), x.shape
    return (TensorSpec(values, x.dtype, x.device), TensorSpec(inverse, _dt.int64, x.device),
            TensorSpec((None,), _dt.int64, x.device))


def _unique_cpu(spec, x, sorted, return_inverse, return_counts, dim):
    axis = None if dim is None else wrap_dim(dim, x.ndim)
    # NumPy cannot sort ml_dtypes' half types by value: their float32 values sort the same
    keys = x.astype(np.float32) if x.dtype.kind == "V" else x
    # each NaN is a value of its own, as in torch (NumPy merges them by default)
    values, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True, axis=axis,
                                        **({} if axis is not None else {"equal_nan": False}))
    return values.astype(x.dtype), inverse.reshape(spec[1].shape), counts


defop("_unique(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False, int? dim=None) "
      "-> (Tensor values, Tensor inverse, Tensor counts)",
      meta=_unique_meta, cpu=_unique_cpu, kind="sort", variants=("function",),
      doc="The sorted distinct values (slices along ``dim``), the index of each input element's value, and counts.")


def _unique(x, sorted=True, return_inverse=False, return_counts=False, dim=None):
    from . import registry
    values, inverse, counts = registry.FUNCTIONS["_unique"](x, sorted, return_inverse, return_counts, dim)
    extra = (inverse,) * return_inverse + (counts,) * return_counts
    return (values, *extra) if extra else values


defop("unique(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False, int? dim=None) "
      "-> Any", composite=_unique, kind="sort",
      doc="Distinct values, sorted; with ``return_inverse``/``return_counts`` also the inverse indices and counts "
          "(a tuple, as torch returns).")
