"""CUDA implementations of ops that are not a one-op graph's kernel: constant factories filled on the device,
factories computed there from a formula (arange, eye, linspace, logspace), ops with generated kernels of
their own (matrix products, indexing and scatter_reduce, scans and arg-reductions, sorts and their merge
passes) or made of device copies and other ops (joins, repeat, repeat_interleave, roll, flip, softmax over
any dim), and the ops whose result size depends on the data (masked_select, argwhere, unique): a device
scan, one read-back of the count, then scatters.

Each implementation takes ``(op, args, spec)`` with the op's arguments already on one device and returns
its result, or NotImplemented for cases it does not cover, which `cuda_tensor.execute` then runs through
the op's one-op graph kernel or on the host.
"""

from __future__ import annotations

import numpy as np

from . import cuda_backend
from .casts import convert
from .cuda_tensor import (Storage, _cached, _copy_into, _run, _span, address, copy_values, empty,
                          empty_storage, non_blocking, upload, write)
from .strided import contiguous_strides, wrap_dim

_MATMULS: dict = {}     # (a shape, a strides, b shape, b strides, dtype) -> MatmulKernel (operands read in place)
_INDEXERS: dict = {}    # the arguments of index_kernel -> its LoopKernel
_SCANS: dict = {}       # the arguments of scan_kernel or arg_kernel -> its LoopKernel
_FORMULAS: dict = {}    # (factory op, dtype) -> its FactoryKernel (sizes and bounds are launch parameters)
MATMUL_OPS = ("matmul", "mm", "bmm", "mv", "dot", "vdot")
INDEXING_OPS = ("gather", "index_select", "index", "take", "scatter", "scatter.value", "scatter_add", "index_add",
                "index_copy", "index_fill", "index_fill.Tensor", "put", "index_put")
JOIN_OPS = ("cat", "concat", "concatenate", "stack")


# Constant factories -----------------------------------------------------------------------

# zeros, ones, empty and full, sized, ``_like`` and ``new_``: made in device memory, never on the host
FACTORIES = frozenset(f"{prefix}{name}{suffix}" for name in ("zeros", "ones", "empty", "full")
                      for prefix, suffix in (("", ""), ("", "_like"), ("new_", "")))
_FILL = {"zeros": 0, "ones": 1, "empty": None}


def create(op, args, spec):
    """A constant factory's result: device memory from the allocator, then filled on the device; on the CPU
    when asked (``zeros_like(cuda_tensor, device="cpu")``: only the input's layout is used)."""
    from ..ops.creation import _full_value
    from ..ops.views import dense_strides
    from ..tensor import Tensor
    names = [a.name for a in op.schema.args]
    source = args[0] if isinstance(args[0], Tensor) else None  # a _like or new_ op's tensor: its layout
    if spec.device.type != "cuda":
        from ..ops import registry
        stand_in = Tensor._make(Storage(np.empty(_span(source._shape, source._stride), source.dtype.np), source.dtype),
                                source._shape, source._stride, 0)
        return registry.execute(op, [stand_in] + list(args[1:]), spec)
    base = op.name.removeprefix("new_").removesuffix("_like")
    value = args[names.index("fill_value")] if base == "full" else _FILL[base]
    like = op.name.endswith("_like")
    strides = dense_strides(source._shape, source._stride) if like else contiguous_strides(spec.shape)
    t = Tensor._make(empty_storage(int(np.prod(spec.shape, dtype=np.int64)), spec.dtype, spec.device),
                     tuple(spec.shape), tuple(strides), 0)
    if value is not None:
        fill(t, _full_value(spec, value.item() if isinstance(value, Tensor) else value))
    return t


def fill(t, element):
    """Write ``element`` (a NumPy scalar of ``t``'s dtype) over all of compact CUDA tensor ``t``'s storage:
    one element goes up, then device copies double the filled prefix (log2(n) copies, all on the stream)."""
    backend = cuda_backend.current()
    n, item, start = t._storage.size, t.dtype.itemsize, t._storage.data_ptr()
    if not n:
        return
    backend.upload(start, np.full(1, element, t.dtype.np), True)
    done = 1
    while done < n:
        count = min(done, n - done)
        backend.device_copy(start + done * item, start, count * item)
        done += count


def _formula_factory(op, args, spec):
    """arange, eye, linspace and logspace computed on the device (codegen/nvptx/factories.py) from a few
    parameters the host works out as the CPU does; NotImplemented for integer bounds beyond int64."""
    from ..codegen.nvptx.factories import PARAMETERS, factory_kernel
    base = op.name.split(".")[0]
    named = dict(zip((a.name for a in op.schema.args), args))
    count = int(np.prod(spec.shape, dtype=np.int64))
    words = _factory_parameters(base, named, spec, count)
    if words is None:
        return NotImplemented
    out = empty(spec.shape, spec.dtype, spec.device)
    if count:
        kernel = _cached(_FORMULAS, (base, spec.dtype), lambda: factory_kernel(base, spec.dtype))
        with non_blocking():
            parameters = upload(np.array(words + [0] * (PARAMETERS - len(words)), np.int64), _int64(), spec.device)
        cuda_backend.current().launch(kernel.sized(count), [address(parameters), address(out)], out.device.index)
    return out


def _factory_parameters(base, named, spec, count):
    """The parameter words of ``base``'s factory kernel (see factories.py), floats as float64 bits."""
    import math

    from ..ops.creation import _arange_plan
    from ..codegen.nvptx.factories import step_types
    dtype = spec.dtype

    def bits(v):
        return int(np.float64(v).view(np.int64))
    if base == "eye":
        return [count, spec.shape[1]]
    if base == "arange":
        start, end = (0, named["start"]) if named["end"] is None else (named["start"], named["end"])
        _, first, step = _arange_plan(start, end, named["step"], dtype)
        if dtype.is_floating_point:
            return [count, 0, bits(first), bits(step)]
        return [count, 0, first, step] if all(-2 ** 63 <= v < 2 ** 63 for v in (first, step)) else None
    step_t = step_types(base, dtype)[0]
    t = step_t.np.type
    start, end, steps = named["start"], named["end"], named["steps"]
    if not dtype.is_floating_point:  # the bounds cast to the dtype first, as the CPU does
        start, end = (int(np.array(math.trunc(v)).astype(dtype.np)) for v in (start, end))
    first, last = t(start), t(end)
    with np.errstate(all="ignore"):
        step = (last - first) / t(steps - 1) if steps > 1 else t(-0.0)  # one point: first + -0.0 is first
    words = [count, steps // 2 if steps > 1 else 1, bits(first), bits(last), bits(step)]
    if base == "logspace":
        words.append(bits(np.float64(named["base"]) if step_types(base, dtype)[1] is _float64() else
                          np.float32(named["base"])))
    return words


# Matrix products ----------------------------------------------------------------------------

def _matmul(op, args, spec):
    """``matmul``/``mm``/``bmm``/``mv``/``dot`` through the tiled kernel (float32 and float16, non-empty),
    else NotImplemented. 1-D operands act as a row or a column, as on the CPU."""
    from ..codegen.errors import CompileError
    from ..codegen.nvptx.matmul import DTYPES, matmul_kernel
    a, b = args
    if a.dtype not in DTYPES or b.dtype is not a.dtype or not a.ndim or not b.ndim or 0 in a._shape or \
            0 in b._shape:
        return NotImplemented
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    key = (a2._shape, a2._stride, b2._shape, b2._stride, a.dtype)
    try:
        kernel = _cached(_MATMULS, key, lambda: matmul_kernel(a2._shape, b2._shape, a.dtype, a_strides=a2._stride,
                                                              b_strides=b2._stride))
    except CompileError:  # more batch matrices than one grid holds
        return NotImplemented
    out = empty(kernel.out_shape, a.dtype, a.device)
    cuda_backend.current().launch(kernel, [address(a2), address(b2), address(out)], a.device.index)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


# Indexing ---------------------------------------------------------------------------------

def _arguments(op, args):
    """(kernel op, self, dim, index, source, alpha, value, whether the index is 1-D along dim) of an indexing
    op's call; None for calls the kernels do not take (a reduce= mode, an index that is not one tensor)."""
    name = op.name
    if name in ("index", "index_put"):
        self, indices = args[:2]
        picked = [(d, t) for d, t in enumerate(indices) if t is not None]
        if len(picked) != 1 or picked[0][1].ndim != 1 or picked[0][1].dtype.name == "bool":
            return None
        (dim, at), = picked
        if name == "index":
            return "index", self, dim, at, None, 1, None, True
        values, accumulate = args[2:]
        shape = self._shape[:dim] + at._shape + self._shape[dim + 1:]
        source = values.to(self.dtype).expand(shape)  # a view: broadcast dims read with stride 0
        return ("index_put_accumulate" if accumulate else "index_put"), self, dim, at, source, 1, None, True
    if name in ("take", "put"):
        self, index = args[0], args[1]
        accumulate = name == "put" and args[3]
        return ("put_accumulate" if accumulate else name), self, 0, index, (args[2] if name == "put" else None), \
            1, None, True
    self, dim, index = args[:3]
    rest = args[3:]
    if name in ("scatter", "scatter.value") and rest[-1] is not None:
        return None
    source = rest[0] if name in ("scatter", "scatter_add", "index_add", "index_copy") else None
    value = rest[0] if name in ("scatter.value", "index_fill", "index_fill.Tensor") else None
    if value is not None and hasattr(value, "_shape"):  # a 0-d tensor: stored as a source read with stride 0
        if not self.ndim or index.ndim != 1:
            return None
        d = wrap_dim(dim, self.ndim)
        source = value.to(self.dtype).expand(self._shape[:d] + index._shape + self._shape[d + 1:])
        value = None
    kernel_op = "index_fill" if name.startswith("index_fill") else name
    return kernel_op, self, dim, index, source, (rest[1] if name == "index_add" else 1), value, \
        kernel_op in ("index_select", "index_add", "index_copy", "index_fill")


def _indexing(op, args, spec):
    """The ops that follow indices held in a tensor, through the generated kernels of
    codegen/nvptx/indexing.py, every operand read in place (take and put see ``self`` flattened);
    NotImplemented for what they do not cover (0-dim or empty operands, other index dtypes, atomic adds on
    small integers, a fractional alpha on integers, reduce= modes, several or boolean index tensors)."""
    from ..runtime.grad_mode import no_grad
    from ..codegen.errors import CompileError
    from ..codegen.nvptx.indexing import ATOMIC_DTYPES, FORMS, INDEX_DTYPES, index_kernel
    from . import cuda_errors
    parsed = _arguments(op, args)
    if parsed is None:
        return NotImplemented
    kernel_op, self, dim, index, source, alpha, value, vector = parsed
    form = FORMS[kernel_op]
    tensors = [self, index] + ([source] if source is not None else [])
    if not self.ndim or any(not t.numel() or t.device != self.device for t in tensors) or \
            index.dtype not in INDEX_DTYPES or (form.mode == "add" and self.dtype not in ATOMIC_DTYPES) or \
            (not self.dtype.is_floating_point and alpha != int(alpha)):
        return NotImplemented
    alpha = float(alpha) if self.dtype.is_floating_point else int(alpha)
    if value is not None:
        value = convert(np.array(value), self.dtype.np).item()
    flat = kernel_op in ("take", "put", "put_accumulate")
    with no_grad():
        if flat:  # the flattened self, and take's index and put's source as vectors
            self = (copy_values(self) if form.mode != "read" else self.contiguous()).view(-1)
            index = index.reshape(-1)
            source = source.reshape(-1) if source is not None else None
        dim = dim % self.ndim
        if vector and index.ndim != 1 or not vector and index.ndim != self.ndim:
            return NotImplemented
        if form.mode == "read":
            out = empty(index._shape if flat or not vector else spec.shape, self.dtype, self.device)
        else:
            out = self if flat else copy_values(self)  # compact, as the CPU's result
    if form.mode == "read" or not vector:
        space = out._shape if form.mode == "read" else index._shape  # scatter's source may be larger
    else:
        space = source._shape if source is not None else out._shape[:dim] + index._shape + out._shape[dim + 1:]
    index_strides = tuple(index._stride[0] if d == dim else 0 for d in range(len(space))) if vector \
        else index._stride
    target = (self.dtype, self._stride if form.mode == "read" else out._stride)
    key = (kernel_op, tuple(space), dim, self._shape[dim], (index.dtype, index_strides), target,
           (source.dtype, source._stride) if source is not None else None, alpha, value)
    try:
        kernel = _cached(_INDEXERS, key, lambda: index_kernel(*key))
    except CompileError:
        return NotImplemented
    if form.mode == "read":
        pointers = [address(self), address(index), address(out)]
    else:
        pointers = [address(index)] + ([address(source)] if source is not None else []) + [address(out)]
    cuda_backend.current().launch(kernel, pointers + [cuda_errors.word(self.device)], self.device.index)
    return out.view(spec.shape) if flat else out


def _scatter_reduce(op, args, spec):
    """scatter_reduce as the CPU computes it, on the device: ``self`` copied in the CPU's compute dtype (wider
    still for integers without atomics: int32, whose sums and products wrap to the same low bits), the
    reduction's identity stored at the indexed positions unless ``include_self``, every ``src`` element
    combined into its place by the reduce kernel (codegen/nvptx/indexing.py), then for mean the division by
    the count (a scatter_add of ones; floor division for integers, as NumPy's ``//``). Float sums and
    products land in the order the atomics do, so they may differ from the CPU's in the last bits."""
    from ..runtime.grad_mode import no_grad
    from ..codegen.nvptx.indexing import ATOMIC_DTYPES, INDEX_DTYPES, index_kernel, mean_kernel
    from ..ops.indexing import _reduce_identity
    from ..ops.meta import opmath
    from . import cuda_errors, dtypes
    x, dim, index, src, reduce, include_self = args
    if not x.ndim or index.ndim != x.ndim or src.ndim != x.ndim or not index.numel() or \
            x.dtype is dtypes.bool or index.dtype not in INDEX_DTYPES or \
            any(t.device != x.device for t in (index, src)):
        return NotImplemented
    wide = opmath(x.dtype)
    wide = wide if wide in ATOMIC_DTYPES else dtypes.int32
    d = wrap_dim(dim, x.ndim)
    with no_grad():
        out = empty(x._shape, wide, x.device)
        write(out, x)
        if not include_self:
            # the copy's identity: an infinity for the halves too (ml_dtypes' bfloat16 is no NumPy float kind);
            # for widened integers any value beyond theirs serves, as every indexed place gets a src element
            out = out.scatter(d, index, np.array(_reduce_identity(reduce, wide.np)).item())
        values = src.to(wide)
        kernel_op = f"scatter_reduce_{'sum' if reduce == 'mean' else reduce}"
        key = (kernel_op, index._shape, d, x._shape[d], (index.dtype, index._stride), (wide, out._stride),
               (wide, values._stride))
        kernel = _cached(_INDEXERS, key, lambda: index_kernel(*key))
        cuda_backend.current().launch(kernel, [address(index), address(values), address(out),
                                               cuda_errors.word(x.device)], x.device.index)
        if reduce != "mean":
            return out.to(spec.dtype)
        count = x.new_full(x._shape, int(include_self), dtype=dtypes.int64).scatter_add(
            d, index, x.new_ones((), dtype=dtypes.int64).expand(index._shape))
        if not x.dtype.is_floating_point:  # the sum wrapped to the dtype, as the CPU's in place, then divided
            out = out.to(x.dtype).to(dtypes.int64)
        key = ("scatter_mean", out.numel(), out.dtype)
        kernel = _cached(_INDEXERS, key, lambda: mean_kernel(*key[1:]))
        cuda_backend.current().launch(kernel, [address(count), address(out)], x.device.index)
        return out.to(spec.dtype)


# Data-dependent sizes: a device scan, one read-back of the count, a scatter -------------------------

def _positions(flags):
    """(the place of each element of 1-d bool CUDA tensor ``flags`` in a compacted result: its rank among
    the selected ones, or ``count``, one slot past the end, for the others; ``count``; the ranks, the
    number of selected elements up to each one less one). The ranks are a device cumsum; ``count`` is its
    last element, read back (the one synchronisation, as torch's)."""
    from . import dtypes
    ranks = flags.to(dtypes.int64).cumsum(0) - 1
    count = int(ranks[-1].item()) + 1
    return ranks.where(flags, count), count, ranks


def _compacted(values, at, count, dim=0):
    """``values`` (along ``dim``) placed at ``at`` by the scatter kernel into a result with one spare slot
    that takes the unselected ones; the first ``count``."""
    shape = values._shape[:dim] + (count + 1,) + values._shape[dim + 1:]
    return empty(shape, values.dtype, values.device).scatter(dim, at, values).narrow(dim, 0, count)


def _masked_select(op, args, spec):
    """The entries of ``self`` where ``mask`` (both broadcast) is True, in row-major order: their places from
    `_positions`, then one scatter."""
    from ..runtime.grad_mode import no_grad
    from .strided import broadcast_shapes
    x, mask = args
    shape = broadcast_shapes(x._shape, mask._shape)
    if 0 in shape:
        return empty((0,), x.dtype, x.device)
    with no_grad():
        at, count, _ = _positions(mask.expand(shape).reshape(-1))
        return _compacted(x.expand(shape).reshape(-1), at, count)


def _argwhere(op, args, spec):
    """The indices of ``self``'s nonzero entries, a row each in row-major order: the coordinates of every
    element (from a device arange), placed by `_positions` with one scatter."""
    from ..runtime.grad_mode import no_grad
    from .. import stack
    x, = args
    if not x.ndim or not x.numel():
        return NotImplemented
    with no_grad():
        at, count, _ = _positions((x != 0).reshape(-1))
        flat = _arange(x.numel(), x.device)
        strides = contiguous_strides(x._shape)
        coordinates = stack([flat.div(s, rounding_mode="floor").remainder(n) for s, n in zip(strides, x._shape)], 1)
        rows = _compacted(coordinates, at.unsqueeze(1).expand(coordinates._shape), count)
        return rows.t().contiguous().t()  # column-major, as torch's (and the host's) nonzero lays it out


def _unique(op, args, spec):
    """``unique`` of the flattened tensor as torch's (sorted; each NaN a value of its own, last): a stable device
    sort, a flag where each run of equal values starts, their ranks by a device cumsum (one read-back of the
    count), then scatters: each run's first value to its rank, each element's rank to its place in the input
    (the inverse), and ones added at the ranks (the counts). Unique slices along a dim stay on the host."""
    from ..runtime.grad_mode import no_grad
    from . import dtypes
    x, _, _, _, dim = args
    if dim is not None or not x.numel():
        return NotImplemented
    with no_grad():
        key = x.reshape(-1)
        values, order = (key.to(dtypes.uint8) if x.dtype is dtypes.bool else key).sort()
        starts = x.new_ones(key._shape, dtype=dtypes.bool)
        if key.numel() > 1:
            after, before = values[1:], values[:-1]
            write(starts[1:], after != before)
        at, count, rank = _positions(starts)
        inverse = empty(key._shape, dtypes.int64, x.device).scatter(0, order, rank).view(x._shape)
        counts = x.new_zeros((count,), dtype=dtypes.int64).scatter_add(
            0, rank, x.new_ones((), dtype=dtypes.int64).expand(key._shape))
        return op.result_type(_compacted(values, at, count).to(x.dtype), inverse, counts)


# Joining ----------------------------------------------------------------------------------

def _join(op, args, spec):
    """cat and stack: each input written into its slice of the result by `write` (a device copy or the
    strided copy kernel), cast to the promoted dtype on the way; 1-D empty inputs skipped, as torch does."""
    tensors, dim = args
    if any(t.device != tensors[0].device or t.device.type != "cuda" for t in tensors):
        return NotImplemented
    out = empty(spec.shape, spec.dtype, spec.device)
    if op.name == "stack":
        d = wrap_dim(dim, len(spec.shape))
        for i, t in enumerate(tensors):
            write(out.select(d, i), t)
        return out
    kept = [t for t in tensors if t._shape != (0,)]
    start = 0
    for t in kept:
        d = wrap_dim(dim, t.ndim)
        write(out.narrow(d, start, t._shape[d]), t)
        start += t._shape[d]
    return out


def _scaled_product(op, args, spec):
    """addmm and baddbmm: ``beta * self + alpha * product`` as the CPU computes it (the product through the
    tiled kernel, then the scalings; ``self`` ignored, NaNs included, when beta is 0)."""
    from ..runtime.grad_mode import no_grad
    inp, m1, m2, beta, alpha = args
    product = _matmul(op, (m1, m2), spec)
    if product is NotImplemented:
        return NotImplemented
    with no_grad():
        out = product if alpha == 1 else product.mul(alpha)
        return out if beta == 0 else out.add(inp if beta == 1 else inp.mul(beta))


def _repeat(op, args, spec):
    """``x.repeat(*reps)``: the result seen as (r0, n0, r1, n1, ...) takes ``x`` broadcast over the r's,
    in one strided copy."""
    from ..runtime.grad_mode import no_grad
    x, reps = args
    out = empty(spec.shape, spec.dtype, x.device)
    if out.numel():
        sizes = (1,) * (len(reps) - x.ndim) + x._shape
        with no_grad():
            write(out.view(tuple(v for r, n in zip(reps, sizes) for v in (r, n))),
                  x.reshape(tuple(v for n in sizes for v in (1, n))))
    return out


def _repeat_interleave(op, args, spec):
    """``x.repeat_interleave(r, dim)``: the result seen as (..., n, r, ...) takes ``x`` broadcast over the
    r's, in one strided copy (the flattened ``x`` when no dim is given)."""
    from ..runtime.grad_mode import no_grad
    x, repeats, dim = args[:3]
    out = empty(spec.shape, spec.dtype, x.device)
    if out.numel():
        with no_grad():
            line = x.reshape(-1) if dim is None else x
            d = 0 if dim is None else wrap_dim(dim, x.ndim)
            shape = line._shape
            write(out.view(shape[:d] + (shape[d], repeats) + shape[d + 1:]), line.unsqueeze(d + 1))
    return out


def _roll(op, args, spec):
    """``x.roll(shifts, dims)``: per rolled dim, its two pieces copied to their new places (a flattened
    roll when no dims are given, as torch does)."""
    from ..runtime.grad_mode import no_grad
    x, shifts, dims = args
    with no_grad():
        if not dims:
            return _roll(op, (x.reshape(-1), shifts, (0,)), spec).view(x._shape)
        current = x
        for shift, d in zip(shifts, dims):
            d = wrap_dim(d, x.ndim)
            n = x._shape[d]
            shift = shift % n if n else 0
            if shift:
                out = empty(current._shape, current.dtype, current.device)
                write(out.narrow(d, shift, n - shift), current.narrow(d, 0, n - shift))
                write(out.narrow(d, 0, shift), current.narrow(d, n - shift, shift))
                current = out
    return current if current is not x else copy_values(x)


def _flip(op, args, spec):
    """``x.flip(dims)``: one strided copy reading ``x`` backwards along the flipped dims."""
    x, dims = args
    flipped = {wrap_dim(d, x.ndim) for d in dims}
    out = empty(spec.shape, spec.dtype, x.device)
    if out.numel():
        last = sum((x._shape[d] - 1) * x._stride[d] for d in flipped)
        _copy_into(out, address(x) + last * x.dtype.itemsize, x.dtype,
                   [-s if d in flipped else s for d, s in enumerate(x._stride)])
    return out


def _scan(op, args, spec):
    """cumsum and cumprod through the generated scan: a thread walks each line in order, as the CPU does, or,
    for a few long lines, the chunked walk (codegen/nvptx/scan.py: exact for integers, float sums
    reassociated)."""
    from ..codegen.nvptx.scan import scan_kernel
    x, dim = args[0], args[1]
    if not x.ndim or not x.numel():
        return NotImplemented
    d = wrap_dim(dim, x.ndim)
    out = empty(spec.shape, spec.dtype, x.device)
    types = (spec.dtype, spec.compute or spec.dtype)
    chunk = _chunk(x, d)
    if chunk:
        totals = _chunked(op.name, "totals", x, d, types, chunk, [address(x)], types[1])
        _chunked(op.name, "carries", x, d, types, chunk, [address(totals)])
        _chunked(op.name, "prefixes", x, d, types, chunk, [address(x), address(totals), address(out)])
        return out
    key = (op.name, x._shape, d, (x.dtype, x._stride), *types)
    kernel = _cached(_SCANS, key, lambda: scan_kernel(*key))
    cuda_backend.current().launch(kernel, [address(x), address(out)], x.device.index)
    return out


def _chunk(x, d):
    """The chunk length of the chunked walk along ``d``, or 0 where a thread per line serves (short lines,
    or enough of them to fill the device)."""
    from ..codegen.nvptx import scan
    n = x._shape[d]
    return scan.chunk_of(n) if n > scan.LONG_LINE and x.numel() // n < scan.FEW_LINES else 0


def _chunked(name, phase, x, d, types, chunk, pointers, *made):
    """Launch ``phase`` of the chunked walk of ``name`` over ``x`` along ``d`` with ``pointers`` followed by
    new compact buffers over (lines, chunks) of the dtypes ``made``, which it returns."""
    from ..codegen.nvptx.scan import chunked_kernel
    key = (name, phase, x._shape, d, (x.dtype, x._stride), types, chunk)
    kernel = _cached(_SCANS, key, lambda: chunked_kernel(*key))
    buffers = [empty(kernel.space, dtype, x.device) for dtype in made]
    cuda_backend.current().launch(kernel, pointers + [address(t) for t in buffers], x.device.index)
    return buffers[0] if len(buffers) == 1 else buffers


def _arg_reduction(op, args, spec):
    """argmax, argmin, max.dim and min.dim through the generated line walk (first extreme, NaN beyond all);
    a full argmax/argmin walks the flattened tensor."""
    from ..runtime.grad_mode import no_grad
    from ..codegen.nvptx.scan import arg_kernel
    x, dim = args[0], args[1]
    if not x.numel() or x.dtype.name == "bool":
        return NotImplemented
    with no_grad():
        line = x.reshape(-1) if dim is None or not x.ndim else x
    d = 0 if dim is None or not x.ndim else wrap_dim(dim, x.ndim)
    specs = list(spec) if isinstance(spec, tuple) else [spec]
    outs = [empty(s.shape, s.dtype, x.device) for s in specs]
    chunk = _chunk(line, d)
    if chunk:  # each chunk's first extreme, then the first of those
        values, positions = _chunked(op.name, "extremes", line, d, None, chunk, [address(line)], x.dtype, _int64())
        _chunked(op.name, "pick", line, d, None, chunk, [address(values), address(positions)] +
                 [address(t) for t in outs])
    else:
        key = (op.name, line._shape, d, (line.dtype, line._stride))
        kernel = _cached(_SCANS, key, lambda: arg_kernel(*key))
        cuda_backend.current().launch(kernel, [address(line)] + [address(t) for t in outs], x.device.index)
    return outs[0] if len(outs) == 1 else op.result_type(*outs)


def _as_strided_scatter(op, args, spec):
    """A compact copy of ``self`` with ``src`` written through the strided view of it (conv's input gradient
    is made of these)."""
    x, src, size, stride, storage_offset = args
    out = copy_values(x)
    if src.numel():
        write(out.as_strided(size, stride, storage_offset or 0), src)
    return out


def _as_strided_add(op, args, spec):
    """``self`` with ``src`` added through the strided view of it, every share of an element the view reaches
    several times (the backward of overlapping windows): the view's storage positions, then index_add's atomic
    adds."""
    from .. import arange
    from ..runtime.grad_mode import no_grad
    x, src, size, stride, storage_offset = args
    with no_grad():
        positions = arange(x.shape[0], device=x.device).as_strided(size, stride, storage_offset or 0)
        return x.index_add(0, positions.reshape(-1), src.reshape(-1))


def _triangle(op, args, spec):
    """tril/triu: ``x`` where the column minus the row is on the kept side of ``diagonal``, else zero."""
    from ..runtime.grad_mode import no_grad
    x, diagonal = args
    if x.ndim < 2 or not x.numel():
        return NotImplemented
    rows, cols = x._shape[-2:]
    with no_grad():
        offsets = _arange(cols, x.device) - _arange(rows, x.device).unsqueeze(-1)  # (rows, cols): j - i
        keep = offsets <= diagonal if op.name == "tril" else offsets >= diagonal
        return x.where(keep, x.new_zeros(()))


def _arange(n, device):
    from .. import arange
    return arange(n, device=device)


def _moment(op, args, spec):
    """var and std with a correction, as the CPU computes them: the mean, the squared deviations' sum over
    the degrees of freedom (at least 0), the root for std; in the compute dtype, each step a kernel."""
    from ..runtime.grad_mode import no_grad
    from ..ops.reductions import _axis, _count
    x, dim, correction, keepdim = args
    if not x.ndim or not x.numel():
        return NotImplemented
    axis = _axis(x, dim)
    dims = tuple(range(x.ndim)) if axis is None else tuple(axis)
    n = _count(x._shape, axis)
    dof = max(n - (1 if correction is None else correction), 0)
    with no_grad():
        a = x.to(spec.compute or spec.dtype)
        deviation = a - a.sum(dims, keepdim=True) / n
        out = (deviation * deviation).sum(dims, keepdim=keepdim) / dof
        return (out.sqrt() if op.name.startswith("std") else out).to(spec.dtype)


def _norm(op, args, spec):
    """Vector norms over ``dim`` as the CPU computes them (``|x|`` in the compute dtype, then the max, min,
    count of nonzeros, sum, or the ``p``-th root of the sum of ``p``-th powers); the nuclear norm stays on
    the host."""
    import math

    from ..runtime.grad_mode import no_grad
    from ..ops.reductions import _axis, _norm_order
    x, p, dim, keepdim, dtype = args
    order = _norm_order(p, dim)
    if order == "matrix" or not x.ndim or not x.numel():
        return NotImplemented
    axis = _axis(x, dim)
    dims = tuple(range(x.ndim)) if axis is None else tuple(axis)
    with no_grad():
        m = x.to(spec.dtype).to(spec.compute or spec.dtype).abs()
        if order in (math.inf, -math.inf):
            out = m.amax(dims, keepdim) if order > 0 else m.amin(dims, keepdim)
        elif order == 0:
            out = (m != 0).sum(dims, keepdim=keepdim).to(m.dtype)
        elif order == 1:
            out = m.sum(dims, keepdim=keepdim)
        else:
            out = (m ** order).sum(dims, keepdim=keepdim) ** (1 / order)
        return out.to(spec.dtype)


def _log_sum_exp_or_nan_mean(op, args, spec):
    """logsumexp (shifted by the finite max, so rows of -inf stay -inf and +inf gives +inf) and nanmean
    (the NaN-free sum over the NaN-free count), in the compute dtype, as the CPU computes them."""
    from ..runtime.grad_mode import no_grad
    from ..ops.reductions import _axis
    x, dim, keepdim = args[:3]
    if not x.ndim or not x.numel():
        return NotImplemented
    axis = _axis(x, dim)
    dims = tuple(range(x.ndim)) if axis is None else tuple(axis)
    with no_grad():
        a = x.to(spec.compute or spec.dtype)
        if op.name == "nanmean":
            out = a.nansum(dims, keepdim=keepdim) / (~a.isnan()).sum(dims, keepdim=keepdim)
        else:
            top = a.amax(dims, keepdim=True)
            top = top.where(top.isfinite(), top.new_zeros(()))
            out = (a - top).exp().sum(dims, keepdim=True).log() + top
            if not keepdim:
                out = out.squeeze(dims)
        return out.to(spec.dtype)


def _sort(op, args, spec):
    """sort, topk and kthvalue through the generated bitonic sort (stable, NaN last ascending and first
    descending, as the CPU), topk and kthvalue reading the first k of it. Lines longer than MAX_LINE are
    sorted in runs of MAX_LINE, then merged pairwise by the merge passes (codegen/nvptx/merge.py)."""
    from ..runtime.grad_mode import no_grad
    from ..codegen.nvptx.merge import merge_kernel
    from ..codegen.nvptx.sort import MAX_LINE, sort_kernel
    from ..ops.registry import OPS
    x = args[0]
    if op.name == "median":
        with no_grad():
            return _median(x.reshape(-1), 0, False)[0] if x.numel() and x.dtype.name != "bool" else NotImplemented
    if op.name == "sort":
        dim, descending = args[1], args[2]
    elif op.name == "topk":
        dim, descending = args[2], args[3]
    elif op.name == "median.dim":
        dim, descending = args[1], False
    else:
        dim, descending = args[2], False
    if not x.ndim or not x.numel() or x.dtype.name == "bool":
        return NotImplemented
    d = wrap_dim(dim, x.ndim)
    n = x._shape[d]
    key = (x._shape, d, (x.dtype, x._stride), bool(descending), MAX_LINE if n > MAX_LINE else None)
    kernel = _cached(_SCANS, key, lambda: sort_kernel(*key))
    values, indices = empty(x._shape, x.dtype, x.device), empty(x._shape, _int64(), x.device)
    backend = cuda_backend.current()
    backend.launch(kernel, [address(x), address(values), address(indices)], x.device.index)
    width = MAX_LINE
    while width < n:
        merge = _cached(_SCANS, ("merge", x._shape, d, x.dtype, width, bool(descending)),
                        lambda: merge_kernel(x._shape, d, x.dtype, width, bool(descending)))
        merged = empty(x._shape, x.dtype, x.device), empty(x._shape, _int64(), x.device)
        backend.launch(merge, [address(t) for t in (values, indices) + merged], x.device.index)
        values, indices = merged
        width *= 2
    if op.name == "sort":
        return op.result_type(values, indices)
    with no_grad():
        if op.name == "median.dim":
            return op.result_type(*_median(x, d, args[2], values, indices))
        if op.name == "topk":
            k = args[1]
            return op.result_type(copy_values(values.narrow(d, 0, k)), copy_values(indices.narrow(d, 0, k)))
        k, keepdim = args[1], args[3]
        pick = (lambda t: t.narrow(d, k - 1, 1)) if keepdim else (lambda t: t.select(d, k - 1))
        return OPS["kthvalue"].result_type(copy_values(pick(values)), copy_values(pick(indices)))


def _median(x, d, keepdim, values=None, indices=None):
    """The lower median along ``d`` as the CPU picks it: the ((n - 1) // 2)-th of the stable ascending sort,
    or, in a line holding NaN, its first NaN (the first of the NaNs, which the sort puts last in order)."""
    from ..ops.registry import OPS
    if values is None:
        values, indices = x.sort(d)
    n = x._shape[d]
    nans = x.isnan().sum(d, keepdim=True) if x.dtype.is_floating_point else None
    at = (n - 1) // 2 if nans is None else (n - nans).where(nans > 0, (n - 1) // 2)
    if nans is None:
        pick = (lambda t: t.narrow(d, at, 1)) if keepdim else (lambda t: t.select(d, at))
        return copy_values(pick(values)), copy_values(pick(indices))
    picked = [t.gather(d, at) for t in (values, indices)]
    return tuple(t if keepdim else t.squeeze(d) for t in picked)


def _einsum(op, args, spec):
    """einsum of one or two operands without repeated labels in an operand: labels only one side has and
    the output lacks are summed first, then the two operands are permuted to (batch, kept, contracted) and
    (batch, contracted, kept), multiplied by the tiled matmul (float32, float16) and permuted to the output's
    order; one operand is a sum and a permutation. Diagonals and three or more operands stay on the host."""
    from ..runtime.grad_mode import no_grad
    from ..ops.linalg import _einsum_plan
    equation, tensors = args
    tensors = list(tensors)
    plan = _einsum_plan(equation, tuple(t._shape for t in tensors))
    if len(tensors) > 2 or any(len(set(labels)) != len(labels) for labels in plan.operands) or \
            spec.dtype.name not in ("float32", "float16") or not all(t.numel() for t in tensors):
        return NotImplemented
    sizes = dict(zip(plan.out, plan.shape))
    for labels, (full, _) in zip(plan.operands, plan.numpy_operands):
        sizes.update(zip(labels, full))
    with no_grad():
        operands = []
        for t, labels, (full, _) in zip(tensors, plan.operands, plan.numpy_operands):
            t = t.to(spec.dtype).expand(full)
            others = set().union(*(set(o) for o in plan.operands if o is not labels)) if len(tensors) > 1 else set()
            alone = [d for d, x in enumerate(labels) if x not in plan.out and x not in others]
            if alone:  # a label only this operand has and the output drops: sum it now
                t = t.sum(alone)
                labels = tuple(x for d, x in enumerate(labels) if d not in alone)
            operands.append((t, labels))
        if len(operands) == 1:
            t, labels = operands[0]
            return t.permute([labels.index(x) for x in plan.out]).contiguous() if labels else t.clone()
        (a, la), (b, lb) = operands
        batch = [x for x in plan.out if x in la and x in lb]
        left = [x for x in la if x not in lb]
        right = [x for x in lb if x not in la]
        contracted = [x for x in la if x in lb and x not in plan.out]

        def count(labels):
            n = 1
            for x in labels:
                n *= sizes[x]
            return n
        a = a.permute([la.index(x) for x in batch + left + contracted]).reshape(
            count(batch), count(left), count(contracted))
        b = b.permute([lb.index(x) for x in batch + contracted + right]).reshape(
            count(batch), count(contracted), count(right))
        product = (a @ b).reshape(tuple(sizes[x] for x in batch + left + right))
        order = batch + left + right
        return product.permute([order.index(x) for x in plan.out]).contiguous()


def _int64():
    from . import dtypes
    return dtypes.int64


def _float64():
    from . import dtypes
    return dtypes.float64


def _softmax(op, args, spec):
    """softmax and log_softmax over any dim of a float32/float64 tensor: the row kernel over compact rows,
    with the dim moved last (and back) by strided copies when it is not."""
    from ..runtime.grad_mode import no_grad
    from ..ops.registry import TensorSpec
    x, dim, dtype = args
    if not x.ndim or not x.numel() or dtype not in (None, x.dtype) or x.dtype.name not in ("float32", "float64"):
        return NotImplemented
    d, last = wrap_dim(dim, x.ndim), x.ndim - 1
    with no_grad():
        rows = x.transpose(d, last)
        if not rows.is_contiguous():
            rows = copy_values(rows)
        out = _run(op, (rows, -1, None), TensorSpec(rows._shape, x.dtype, x.device), x.device, None)
        return out if d == last else copy_values(out.transpose(d, last))


IMPLEMENTATIONS = {
    **dict.fromkeys(MATMUL_OPS, _matmul), **dict.fromkeys(INDEXING_OPS, _indexing), **dict.fromkeys(JOIN_OPS, _join),
    "addmm": _scaled_product, "baddbmm": _scaled_product, "scatter_reduce": _scatter_reduce,
    "masked_select": _masked_select, "argwhere": _argwhere, "_unique": _unique, "repeat": _repeat,
    "repeat_interleave": _repeat_interleave, "roll": _roll, "flip": _flip, "cumsum": _scan, "cumprod": _scan,
    "softmax": _softmax, "log_softmax": _softmax, "as_strided_scatter": _as_strided_scatter,
    "_as_strided_add": _as_strided_add,
    "tril": _triangle, "triu": _triangle, "var.correction": _moment, "std.correction": _moment,
    "norm": _norm, "logsumexp": _log_sum_exp_or_nan_mean, "nanmean": _log_sum_exp_or_nan_mean,
    "sort": _sort, "topk": _sort, "kthvalue": _sort, "median": _sort, "median.dim": _sort, "einsum": _einsum,
    **dict.fromkeys(("arange", "eye", "eye.m", "linspace", "logspace"), _formula_factory),
    **dict.fromkeys(("argmax", "argmin", "max.dim", "min.dim"), _arg_reduction)}
