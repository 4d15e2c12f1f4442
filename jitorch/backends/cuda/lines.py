"""Ops that walk lines on CUDA, through the line kernels: cumsum and cumprod (codegen/nvptx/scan.py: a
thread walks each line in order, or, for a few long lines, the chunked walk), argmax, argmin, max.dim and
min.dim (the first extreme, NaN beyond all), and sort, topk, kthvalue and median (the bitonic sort of
codegen/nvptx/sort.py, then the merge passes of codegen/nvptx/merge.py for lines longer than one sort).
"""

from __future__ import annotations

from ...codegen.nvptx import scan, sort  # their line lengths read at each call (tests shorten them)
from ...codegen.nvptx.merge import merge_kernel
from ...codegen.nvptx.scan import arg_kernel, chunked_kernel, scan_kernel
from ...ops.registry import OPS
from ...runtime import cuda_backend, dtypes
from ...runtime.grad_mode import no_grad
from ...runtime.strided import wrap_dim
from .copies import address, copy_values, empty
from .kernels import cached

_SCANS: dict = {}       # the arguments of scan_kernel, arg_kernel, sort_kernel or merge_kernel -> its LoopKernel


def _scan(op, args, spec):
    """cumsum and cumprod through the generated scan: a thread walks each line in order, as the CPU does, or,
    for a few long lines, the chunked walk (codegen/nvptx/scan.py: exact for integers, float sums
    reassociated)."""
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
    kernel = cached(_SCANS, key, lambda: scan_kernel(*key))
    cuda_backend.current().launch(kernel, [address(x), address(out)], x.device.index)
    return out


def _chunk(x, d):
    """The chunk length of the chunked walk along ``d``, or 0 where a thread per line serves (short lines,
    or enough of them to fill the device)."""
    n = x._shape[d]
    return scan.chunk_of(n) if n > scan.LONG_LINE and x.numel() // n < scan.FEW_LINES else 0


def _chunked(name, phase, x, d, types, chunk, pointers, *made):
    """Launch ``phase`` of the chunked walk of ``name`` over ``x`` along ``d`` with ``pointers`` followed by
    new compact buffers over (lines, chunks) of the dtypes ``made``, which it returns."""
    key = (name, phase, x._shape, d, (x.dtype, x._stride), types, chunk)
    kernel = cached(_SCANS, key, lambda: chunked_kernel(*key))
    buffers = [empty(kernel.space, dtype, x.device) for dtype in made]
    cuda_backend.current().launch(kernel, pointers + [address(t) for t in buffers], x.device.index)
    return buffers[0] if len(buffers) == 1 else buffers


def _arg_reduction(op, args, spec):
    """argmax, argmin, max.dim and min.dim through the generated line walk (first extreme, NaN beyond all);
    a full argmax/argmin walks the flattened tensor."""
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
        values, positions = _chunked(op.name, "extremes", line, d, None, chunk, [address(line)], x.dtype, dtypes.int64)
        _chunked(op.name, "pick", line, d, None, chunk, [address(values), address(positions)] +
                 [address(t) for t in outs])
    else:
        key = (op.name, line._shape, d, (line.dtype, line._stride))
        kernel = cached(_SCANS, key, lambda: arg_kernel(*key))
        cuda_backend.current().launch(kernel, [address(line)] + [address(t) for t in outs], x.device.index)
    return outs[0] if len(outs) == 1 else op.result_type(*outs)


def _sort(op, args, spec):
    """sort, topk and kthvalue through the generated bitonic sort (stable, NaN last ascending and first
    descending, as the CPU), topk and kthvalue reading the first k of it. Lines longer than MAX_LINE are
    sorted in runs of MAX_LINE, then merged pairwise by the merge passes (codegen/nvptx/merge.py)."""
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
    key = (x._shape, d, (x.dtype, x._stride), bool(descending), sort.MAX_LINE if n > sort.MAX_LINE else None)
    kernel = cached(_SCANS, key, lambda: sort.sort_kernel(*key))
    values, indices = empty(x._shape, x.dtype, x.device), empty(x._shape, dtypes.int64, x.device)
    backend = cuda_backend.current()
    backend.launch(kernel, [address(x), address(values), address(indices)], x.device.index)
    width = sort.MAX_LINE
    while width < n:
        merge = cached(_SCANS, ("merge", x._shape, d, x.dtype, width, bool(descending)),
                        lambda: merge_kernel(x._shape, d, x.dtype, width, bool(descending)))
        merged = empty(x._shape, x.dtype, x.device), empty(x._shape, dtypes.int64, x.device)
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


IMPLEMENTATIONS = {"cumsum": _scan, "cumprod": _scan, "sort": _sort, "topk": _sort, "kthvalue": _sort,
                   "median": _sort, "median.dim": _sort,
                   **dict.fromkeys(("argmax", "argmin", "max.dim", "min.dim"), _arg_reduction)}
