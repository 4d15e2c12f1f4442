"""Ops on CUDA made of device copies and other ops: joins (cat, stack), repeat, repeat_interleave, roll and
flip (strided copies), as_strided_scatter and its add, tril and triu, var and std, vector norms, logsumexp
and nanmean (each step a kernel, in the compute dtype, as the CPU computes them), and softmax over any dim
(the row kernel, the dim moved last by strided copies).
"""

from __future__ import annotations

import math

from ...ops.reductions import moment_divisor, norm_order, numpy_axis, reduced_count
from ...ops.registry import FUNCTIONS, TensorSpec
from ...runtime.grad_mode import no_grad
from ...runtime.strided import wrap_dim
from .copies import address, copy_into, copy_values, empty, write
from .generated import run

JOIN_OPS = ("cat", "concat", "concatenate", "stack")


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


def _repeat(op, args, spec):
    """``x.repeat(*reps)``: the result seen as (r0, n0, r1, n1, ...) takes ``x`` broadcast over the r's,
    in one strided copy."""
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
        copy_into(out, address(x) + last * x.dtype.itemsize, x.dtype,
                   [-s if d in flipped else s for d, s in enumerate(x._stride)])
    return out


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
    x, src, size, stride, storage_offset = args
    with no_grad():
        positions = FUNCTIONS["arange"](x.shape[0], device=x.device).as_strided(size, stride, storage_offset or 0)
        return x.index_add(0, positions.reshape(-1), src.reshape(-1))


def _triangle(op, args, spec):
    """tril/triu: ``x`` where the column minus the row is on the kept side of ``diagonal``, else zero."""
    x, diagonal = args
    if x.ndim < 2 or not x.numel():
        return NotImplemented
    rows, cols = x._shape[-2:]
    with no_grad():
        arange = FUNCTIONS["arange"]
        offsets = arange(cols, device=x.device) - arange(rows, device=x.device).unsqueeze(-1)  # (rows, cols): j - i
        keep = offsets <= diagonal if op.name == "tril" else offsets >= diagonal
        return x.where(keep, x.new_zeros(()))


def _moment(op, args, spec):
    """var and std with a correction, as the CPU computes them: the mean, the squared deviations' sum over
    the degrees of freedom (at least 0), the root for std; in the compute dtype, each step a kernel."""
    x, dim, correction, keepdim = args
    if not x.ndim or not x.numel():
        return NotImplemented
    axis = numpy_axis(x, dim)
    dims = tuple(range(x.ndim)) if axis is None else tuple(axis)
    n = reduced_count(x._shape, axis)
    dof = moment_divisor(n, correction)
    with no_grad():
        a = x.to(spec.compute or spec.dtype)
        deviation = a - a.sum(dims, keepdim=True) / n
        out = (deviation * deviation).sum(dims, keepdim=keepdim) / dof
        return (out.sqrt() if op.name.startswith("std") else out).to(spec.dtype)


def _norm(op, args, spec):
    """Vector norms over ``dim`` as the CPU computes them (``|x|`` in the compute dtype, then the max, min,
    count of nonzeros, sum, or the ``p``-th root of the sum of ``p``-th powers); the nuclear norm stays on
    the host."""
    x, p, dim, keepdim, dtype = args
    order = norm_order(p, dim)
    if order == "matrix" or not x.ndim or not x.numel():
        return NotImplemented
    axis = numpy_axis(x, dim)
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
    x, dim, keepdim = args[:3]
    if not x.ndim or not x.numel():
        return NotImplemented
    axis = numpy_axis(x, dim)
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


def _softmax(op, args, spec):
    """softmax and log_softmax over any dim of a float32/float64 tensor: the row kernel over compact rows,
    with the dim moved last (and back) by strided copies when it is not."""
    x, dim, dtype = args
    if not x.ndim or not x.numel() or dtype not in (None, x.dtype) or x.dtype.name not in ("float32", "float64"):
        return NotImplemented
    d, last = wrap_dim(dim, x.ndim), x.ndim - 1
    with no_grad():
        rows = x.transpose(d, last)
        if not rows.is_contiguous():
            rows = copy_values(rows)
        out = run(op, (rows, -1, None), TensorSpec(rows._shape, x.dtype, x.device), x.device, None)
        return out if d == last else copy_values(out.transpose(d, last))


IMPLEMENTATIONS = {
    **dict.fromkeys(JOIN_OPS, _join), "repeat": _repeat, "repeat_interleave": _repeat_interleave, "roll": _roll,
    "flip": _flip, "as_strided_scatter": _as_strided_scatter, "_as_strided_add": _as_strided_add,
    "tril": _triangle, "triu": _triangle, "var.correction": _moment, "std.correction": _moment, "norm": _norm,
    "logsumexp": _log_sum_exp_or_nan_mean, "nanmean": _log_sum_exp_or_nan_mean, "softmax": _softmax,
    "log_softmax": _softmax}
