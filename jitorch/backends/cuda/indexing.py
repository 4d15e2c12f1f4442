"""Indexing on CUDA: the ops that follow indices held in a tensor through the indexing kernels
(codegen/nvptx/indexing.py), every operand read in place; scatter_reduce through their reduce forms; and the
ops whose result size depends on the data (masked_select, argwhere, unique): a device scan, one read-back of
the count (as torch's), then scatters.

An index out of range claims the device's error word (runtime/cuda_errors.py), raised at the next
synchronisation.
"""

from __future__ import annotations

import numpy as np

from ...codegen.errors import CompileError
from ...codegen.nvptx.indexing import ATOMIC_DTYPES, FORMS, INDEX_DTYPES, index_kernel, mean_kernel
from ...ops.indexing import reduce_identity, scatter_reduce_combine
from ...ops.meta import opmath
from ...ops.registry import FUNCTIONS, result_strides
from ...runtime import cuda_backend, cuda_errors, dtypes
from ...runtime.casts import convert
from ...runtime.grad_mode import no_grad
from ...runtime.strided import broadcast_shapes, contiguous_strides, wrap_dim
from ..flags import are_deterministic_algorithms_enabled
from .copies import address, copy_values, empty, write
from .kernels import cached

_INDEXERS: dict = {}    # the arguments of index_kernel -> its LoopKernel
INDEXING_OPS = ("gather", "index_select", "index", "take", "scatter", "scatter.value", "scatter_add", "index_add",
                "index_copy", "index_fill", "index_fill.Tensor", "put", "index_put")


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


def _order_dependent(dtype):
    """Whether atomic float additions into ``dtype``, whose last bits depend on the order they land in, are
    refused: under ``jitorch.use_deterministic_algorithms(True)`` the op runs on the host instead."""
    return dtype.is_floating_point and are_deterministic_algorithms_enabled()


def _indexing(op, args, spec):
    """The ops that follow indices held in a tensor, through the generated kernels of
    codegen/nvptx/indexing.py, every operand read in place (take and put see ``self`` flattened);
    NotImplemented for what they do not cover (0-dim or empty operands, other index dtypes, atomic adds on
    small integers, a fractional alpha on integers, reduce= modes, several or boolean index tensors, atomic
    float adds under deterministic algorithms)."""
    parsed = _arguments(op, args)
    if parsed is None:
        return NotImplemented
    kernel_op, self, dim, index, source, alpha, value, vector = parsed
    form = FORMS[kernel_op]
    tensors = [self, index] + ([source] if source is not None else [])
    if not self.ndim or any(not t.numel() or t.device != self.device for t in tensors) or \
            index.dtype not in INDEX_DTYPES or (form.mode == "add" and self.dtype not in ATOMIC_DTYPES) or \
            (not self.dtype.is_floating_point and alpha != int(alpha)) or \
            (form.mode == "add" and _order_dependent(self.dtype)):
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
            # laid out as the CPU's result (index_fill's and index_put's: torch's clone in preserve_format),
            # so the kernel writes the result in place instead of a compact one copied into that layout
            out = self if flat else copy_values(self, result_strides(op, spec, args))
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
        kernel = cached(_INDEXERS, key, lambda: index_kernel(*key))
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
    x, dim, index, src, reduce, include_self = args
    if reduce in ("sum", "mean", "prod") and _order_dependent(x.dtype):
        return NotImplemented
    reduce = scatter_reduce_combine(reduce)
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
            out = out.scatter(d, index, np.array(reduce_identity(reduce, wide.np)).item())
        values = src.to(wide)
        kernel_op = f"scatter_reduce_{'sum' if reduce == 'mean' else reduce}"
        key = (kernel_op, index._shape, d, x._shape[d], (index.dtype, index._stride), (wide, out._stride),
               (wide, values._stride))
        kernel = cached(_INDEXERS, key, lambda: index_kernel(*key))
        cuda_backend.current().launch(kernel, [address(index), address(values), address(out),
                                               cuda_errors.word(x.device)], x.device.index)
        if reduce != "mean":
            return out.to(spec.dtype)
        count = x.new_full(x._shape, int(include_self), dtype=dtypes.int64).scatter_add(
            d, index, x.new_ones((), dtype=dtypes.int64).expand(index._shape))
        if not x.dtype.is_floating_point:  # the sum wrapped to the dtype, as the CPU's in place, then divided
            out = out.to(x.dtype).to(dtypes.int64)
        key = ("scatter_mean", out.numel(), out.dtype)
        kernel = cached(_INDEXERS, key, lambda: mean_kernel(*key[1:]))
        cuda_backend.current().launch(kernel, [address(count), address(out)], x.device.index)
        return out.to(spec.dtype)


def _positions(flags):
    """(the place of each element of 1-d bool CUDA tensor ``flags`` in a compacted result: its rank among
    the selected ones, or ``count``, one slot past the end, for the others; ``count``; the ranks, the
    number of selected elements up to each one less one). The ranks are a device cumsum; ``count`` is its
    last element, read back (the one synchronisation, as torch's)."""
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
    x, = args
    if not x.ndim or not x.numel():
        return NotImplemented
    with no_grad():
        at, count, _ = _positions((x != 0).reshape(-1))
        flat = FUNCTIONS["arange"](x.numel(), device=x.device)
        strides = contiguous_strides(x._shape)
        coordinates = FUNCTIONS["stack"]([flat.div(s, rounding_mode="floor").remainder(n)
                                          for s, n in zip(strides, x._shape)], 1)
        rows = _compacted(coordinates, at.unsqueeze(1).expand(coordinates._shape), count)
        return rows.t().contiguous().t()  # column-major, as torch's (and the host's) nonzero lays it out


def _unique(op, args, spec):
    """``unique`` of the flattened tensor as torch's (sorted; each NaN a value of its own, last): a stable device
    sort, a flag where each run of equal values starts, their ranks by a device cumsum (one read-back of the
    count), then scatters: each run's first value to its rank, each element's rank to its place in the input
    (the inverse), and ones added at the ranks (the counts). Unique slices along a dim stay on the host."""
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


IMPLEMENTATIONS = {**dict.fromkeys(INDEXING_OPS, _indexing), "scatter_reduce": _scatter_reduce,
                   "masked_select": _masked_select, "argwhere": _argwhere, "_unique": _unique}
