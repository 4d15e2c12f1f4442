"""Derivative rules of the structural ops: views, shape ops, products, indexing, casts and copies.

Formulas follow PyTorch's ``derivatives.yaml`` and are written with registry
ops only, so that backward graphs can themselves be differentiated and traced.
Views that pick a part of their input send the gradient back by scattering it
into zeros (``as_strided_scatter`` on a fresh, compact tensor, whose geometry
the same view op computes); views whose elements may repeat (``unfold``, an
overlapping ``as_strided``) accumulate it with ``index_add`` instead.
"""

from __future__ import annotations

import math

from jitorch.ops import functions
from jitorch.ops.views import compact, contiguous_format
from jitorch.runtime import dtypes as _dt
from jitorch.autograd.rule import defgrad, differentiates, nondifferentiable, not_implemented, reads
from jitorch.autograd.rules.common import per_input, wanted
from jitorch.ops.linalg import EINSUM_LETTERS, einsum_plan
from jitorch.ops.registry import OPS, hooks_take_calls
from jitorch.runtime.strided import broadcast_shapes, contiguous_strides, may_overlap, span, wrap_dim

# Helpers --------------------------------------------------------------------------------


def sum_to(g, shape):
    """``g`` summed down to ``shape`` (which ``g``'s shape is a broadcast of)."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(tuple(range(lead)))
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(dims, keepdim=True) if dims else g


def _scaled(t, factor):
    return t if factor == 1 else t * factor


def _cast_like(g, ref):
    """``g`` in ``ref``'s dtype and on its device."""
    if g.dtype is ref.dtype and g.device == ref.device:
        return g
    return OPS["_to_copy"](g, ref.dtype, ref.device)


def _into_zeros(g, shape, view):
    """Zeros of ``shape`` holding ``g`` at the elements that ``view`` (a view op
    selecting each element at most once) picks from a tensor of that shape."""
    zeros = g.new_zeros(tuple(shape))
    part = view(zeros)
    return functions.as_strided_scatter(zeros, g, tuple(part.shape), part.stride(), part.storage_offset())


def _accumulate_view(g, shape, view):
    """Zeros of ``shape`` with ``g`` added at the elements that ``view`` picks, an
    element picked several times (overlapping windows) receiving every share."""
    n = 1
    for s in shape:
        n *= s
    geometry = view(functions.empty(tuple(shape), device="meta"))
    return _add_into_storage(g.new_zeros(n), g, tuple(geometry.shape), geometry.stride(),
                             geometry.storage_offset()).view(tuple(shape))


def _add_into_storage(flat, g, size, stride, offset):
    """``flat`` with ``g`` added at the elements of the geometry (every share of an element reached
    several times)."""
    return OPS["_as_strided_add"](flat, compact(g), size, stride, offset)


def _zeros_as(t):
    """Zeros of ``t``'s shape, dtype and device, from its geometry alone."""
    return functions.zeros(tuple(t.shape), dtype=t.dtype, device=t.device)


def _region(t, shape):
    """The leading ``shape`` block of ``t`` (what a scatter reads from a larger ``src``)."""
    if tuple(t.shape) == tuple(shape):
        return t
    return t[tuple(slice(0, n) for n in shape)]


def _pad_to(g, shape):
    """``g`` in the leading block of zeros of ``shape`` (the inverse of `_region`)."""
    if tuple(g.shape) == tuple(shape):
        return g
    return _into_zeros(g, shape, lambda z: _region(z, g.shape))


def _self(fn, names=""):
    """The rule of an op with one differentiable argument, ``self``: ``fn(g, a)``, which reads the
    tensors ``names`` (by default none: only ``self``'s geometry)."""
    return differentiates("self", reads(names, lambda g, a, out: {"self": fn(g, a)}))


def _each_wanted(tensors, fn):
    """``fn(k)`` for the tensors of a list argument that require grad, None for the others."""
    return [fn(k) if wanted(t) else None for k, t in enumerate(tensors)]


# Views -----------------------------------------------------------------------------------

def _permute(g, a):
    n = a.self.ndim
    dims = [d % n for d in a.dims] if n else []
    return g.permute(sorted(range(n), key=lambda i: dims[i]))


def _part(name):
    """Views that pick each element at most once: the gradient fills their place in zeros."""
    op = OPS[name]

    def grad(g, a):
        rest = [getattr(a, arg.name) for arg in op.schema.args[1:]]
        return _into_zeros(g, a.self.shape, lambda z: op(z, *rest))
    return grad


def _unfold(g, a):
    return _accumulate_view(g, a.self.shape, lambda p: p.unfold(a.dimension, a.size, a.step))


def _storage_counts(n, size, stride, offset, device):
    """How many elements of the geometry ``(size, stride, offset)`` read each of ``n`` storage elements."""
    return _add_into_storage(functions.zeros(n, device=device), functions.ones(size, device=device), size, stride, offset)


def _dense_order(size, stride, offset, n):
    """The order of dims (largest stride first) in which the geometry ``(size, stride, offset)`` is the
    compact layout of all ``n`` storage elements, each read once; else None."""
    if offset or math.prod(size) != n or n == 0:
        return None
    order = sorted(range(len(size)), key=lambda d: (size[d] != 1, stride[d]), reverse=True)
    expected = 1
    for d in reversed(order):
        if size[d] != 1:
            if stride[d] != expected:
                return None
            expected *= size[d]
    return order


def _as_strided(g, a):
    """as_strided addresses the storage: the gradient goes through a storage-sized
    buffer, then is read back with the input's own geometry. Where that geometry
    reads a storage element several times (an expanded input), each reading gets
    an equal share, so that the shares sum to the element's gradient (as torch).

    Where the view reads every storage element once (a pool's windows that tile the input), that buffer is
    the gradient permuted: one copy instead of a scatter into zeros. It is a clone, so that the buffer is
    fresh compact memory from offset 0, as the storage-addressed read back needs (a view of ``g`` could
    start elsewhere in a larger storage, and ``g`` may be saved or written later)."""
    x = a.self
    offset = x.storage_offset() if a.storage_offset is None else a.storage_offset
    size, stride = tuple(a.size), tuple(a.stride)
    geometry = (tuple(x.shape), x.stride(), x.storage_offset())
    n = max(span(*geometry), span(size, stride, offset))
    order = _dense_order(size, stride, offset, n)
    if order is not None:
        flat = g.permute(order).clone(memory_format=contiguous_format).reshape(n)
    elif may_overlap(size, stride):
        flat = _add_into_storage(g.new_zeros(n), g, size, stride, offset)
    else:
        flat = functions.as_strided_scatter(g.new_zeros(n), g, size, stride, offset)
    if may_overlap(*geometry[:2]):
        flat = flat / _storage_counts(n, *geometry, g.device).clamp_min(1).to(g.dtype)
    elif order is not None and geometry[1:] == (contiguous_strides(geometry[0]), 0):
        return flat.view(geometry[0])  # (a view a compiled kernel folds into its reads, as_strided is not)
    return flat.as_strided(*geometry)


def _joined(join):
    """Views giving a list of parts: the parts' gradients joined back along ``dim``."""
    def grad(g, a):
        if not g:  # unbind of an empty dim
            return _zeros_as(a.self)
        return join(list(g), wrap_dim(a.dim, a.self.ndim))
    return grad


defgrad("view view_as unflatten squeeze unsqueeze", _self(lambda g, a: g.reshape(a.self.shape)))
defgrad("alias clone", _self(lambda g, a: g))
defgrad("permute", _self(_permute))
defgrad("transpose swapdims", _self(lambda g, a: g.transpose(a.dim0, a.dim1)))
defgrad("swapaxes", _self(lambda g, a: g.transpose(a.axis0, a.axis1)))
defgrad("t", _self(lambda g, a: g.t()))
defgrad("movedim moveaxis", _self(lambda g, a: g.movedim(a.destination, a.source)))
defgrad("expand expand_as broadcast_to", _self(lambda g, a: sum_to(g, a.self.shape)))
for _name in ("narrow", "slice", "select", "diagonal"):
    defgrad(_name, _self(_part(_name)))
defgrad("unbind", _self(_joined(functions.stack)))
defgrad("split split.sizes split_with_sizes chunk", _self(_joined(functions.cat)))
defgrad("unfold", _self(_unfold))
defgrad("as_strided", _self(_as_strided))
def _strided_part(g, a, out):
    """The gradient of what ``as_strided(size, stride, storage_offset)`` addressed."""
    return compact(g).as_strided(a.size, a.stride, a.storage_offset or 0)


defgrad("_as_strided_add", per_input(self=reads("", lambda g, a, out: g), src=reads("", _strided_part)))
defgrad("as_strided_scatter", per_input(
    self=reads("", lambda g, a, out: functions.as_strided_scatter(g, g.new_zeros(tuple(a.size)), a.size, a.stride,
                                                                a.storage_offset or 0)),
    src=reads("", _strided_part)))


# Shape ops -------------------------------------------------------------------------------

def _cat(g, a, out):
    d = wrap_dim(a.dim, out.ndim)
    starts, start = [], 0
    for t in a.tensors:
        starts.append(start)
        if tuple(t.shape) != (0,):  # cat skips 1-D empty tensors whatever the other shapes
            start += t.shape[d]

    def part(k):
        t = a.tensors[k]
        return g.new_zeros((0,)) if tuple(t.shape) == (0,) else g.narrow(d, starts[k], t.shape[d])
    return {"tensors": _each_wanted(a.tensors, part)}


def _repeat(g, a):
    """Each output dim is (repeat, size) folded; summing the repeat halves undoes it."""
    x, repeats = a.self, tuple(a.repeats)
    padded = (1,) * (len(repeats) - x.ndim) + tuple(x.shape)
    folded = [n for pair in zip(repeats, padded) for n in pair]
    if not folded:
        return g
    return g.reshape(folded).sum(tuple(range(0, len(folded), 2))).reshape(x.shape)


def _repeat_interleave(g, a):
    x, r = a.self, a.repeats
    if a.dim is None:
        return g.reshape(x.numel(), r).sum(1).reshape(x.shape)
    d = wrap_dim(a.dim, x.ndim)
    shape = tuple(x.shape)
    return g.reshape(shape[:d] + (shape[d], r) + shape[d + 1:]).sum(d + 1)


def _selected(keepdim_arg=None):
    """Values picked along ``dim`` at the indices (sort, topk, kthvalue): their
    gradient is scattered back there."""
    def rule(g, a, out):
        x, dim, gv, indices = a.self, a.dim, g[0], out[1]
        if keepdim_arg is not None and not getattr(a, keepdim_arg) and x.ndim:
            d = wrap_dim(dim, x.ndim)
            gv, indices = gv.unsqueeze(d), indices.unsqueeze(d)
        return {"self": gv.new_zeros(x.shape).scatter(dim, indices, gv)}
    return rule


defgrad("cat concat concatenate", differentiates("tensors", reads("", _cat)))
defgrad("stack", differentiates("tensors", reads("", lambda g, a, out: {
    "tensors": _each_wanted(a.tensors, lambda k: g.select(wrap_dim(a.dim, g.ndim), k))})))
defgrad("flip", _self(lambda g, a: g.flip(a.dims)))
defgrad("roll", _self(lambda g, a: g.roll([-s for s in a.shifts], a.dims)))
defgrad("repeat", _self(_repeat))
defgrad("repeat_interleave", _self(_repeat_interleave))
defgrad("tril", _self(lambda g, a: g.tril(a.diagonal)))
defgrad("triu", _self(lambda g, a: g.triu(a.diagonal)))
defgrad("sort topk", differentiates("self", reads("result1", _selected())))
defgrad("kthvalue", differentiates("self", reads("result1", _selected("keepdim"))))


# Products --------------------------------------------------------------------------------

def _row(x):
    """matmul's left operand as a matrix: a vector becomes one row."""
    return x.unsqueeze(0) if x.ndim == 1 else x


def _column(y):
    """matmul's right operand as a matrix: a vector becomes one column."""
    return y.unsqueeze(-1) if y.ndim == 1 else y


def _matrix_grad(g, a):
    """matmul's gradient with the dims of vector operands back (as `_row` and `_column` give them)."""
    gm = g.unsqueeze(-2) if a.self.ndim == 1 else g
    return gm.unsqueeze(-1) if a.other.ndim == 1 else gm


def _column_major(t):
    """Whether a matrix is a transposed contiguous one (``w.t()``): its gradient is computed in that
    layout, as torch's mm backward does, so that the leaf's gradient is contiguous again."""
    return t.ndim == 2 and t.stride(0) == 1 and t.stride(1) == t.shape[0] and t.shape[0] > 1


def _matmul_self(g, a, out):
    if a.self.ndim == 1 and a.other.ndim == 1:
        return g * a.other
    ym, gm = _column(a.other), _matrix_grad(g, a)
    if _column_major(a.self) and ym.ndim == 2:
        return ym.matmul(gm.transpose(-2, -1)).transpose(-2, -1)
    gx = _summed_product(gm, ym.transpose(-2, -1), (1,) * (a.self.ndim == 1) + tuple(a.self.shape))
    return gx if a.self.ndim > 1 else gx.reshape(a.self.shape)  # a vector's row back to a vector


def _matmul_other(g, a, out):
    if a.self.ndim == 1 and a.other.ndim == 1:
        return g * a.self
    xm, gm = _row(a.self), _matrix_grad(g, a)
    if _column_major(a.other):  # (a Linear layer's weight, whose inputs may be batched)
        return _summed_product(gm.transpose(-2, -1), xm, tuple(reversed(a.other.shape))).transpose(-2, -1)
    gy = _summed_product(xm.transpose(-2, -1), gm, tuple(a.other.shape) + (1,) * (a.other.ndim == 1))
    return gy if a.other.ndim > 1 else gy.reshape(a.other.shape)  # a vector's column back to a vector


def _summed_product(left, right, shape):
    """``sum_to(left @ right, shape)``: the gradient of a matmul operand of ``shape`` whose batch broadcast.
    The broadcast batch dims join the contraction instead (one product of ``(M, S*L) @ (S*L, K)`` rather
    than ``S`` products of ``(M, L) @ (L, K)`` and a sum), as BLAS wants its work: a convolution's weight
    gradient was one product per image, each contracting that image's positions only (a single position,
    for a transposed convolution of 1x1 noise)."""
    batch = broadcast_shapes(tuple(left.shape[:-2]), tuple(right.shape[:-2]))
    target = (1,) * (len(batch) - len(shape) + 2) + tuple(shape[:-2])
    summed = [i for i, (n, t) in enumerate(zip(batch, target)) if t == 1 and n != 1]
    if not summed:
        return sum_to(left.matmul(right), shape)
    kept = [i for i in range(len(batch)) if i not in summed]
    nb = len(batch)
    m, l, k = left.shape[-2], left.shape[-1], right.shape[-1]
    left = left.expand(batch + (m, l)).permute(*kept, nb, *summed, nb + 1)
    right = right.expand(batch + (l, k)).permute(*kept, *summed, nb, nb + 1)
    rows = math.prod(batch[i] for i in summed) * l
    kept_sizes = tuple(batch[i] for i in kept)
    product = left.reshape(*kept_sizes, m, rows).matmul(right.reshape(*kept_sizes, rows, k))
    return product.reshape(tuple(shape))


def _einsum(g, a, out):
    """Operand i's gradient is the einsum of ``g`` with the other operands onto
    i's labels; labels summed in i alone broadcast back, size-1 (broadcast) dims
    broadcast up or sum back, and a label repeated in i (a diagonal) is written into zeros."""
    tensors = a.tensors
    plan = einsum_plan(a.equation, tuple(tuple(t.shape) for t in tensors))
    letter = {x: EINSUM_LETTERS[k] for k, x in enumerate(sorted({x for labels in plan.operands for x in labels}))}

    def grad(i):
        labels, t = plan.operands[i], tensors[i]
        others = [(plan.out, g)] + [(plan.operands[j], tensors[j]) for j in range(len(tensors)) if j != i]
        seen = {x for ls, _ in others for x in ls}
        unique = list(dict.fromkeys(labels))
        kept = [x for x in unique if x in seen]
        lhs = ",".join("".join(letter[x] for x in ls) for ls, _ in others)
        gi = functions.einsum(f"{lhs}->{''.join(letter[x] for x in kept)}", [v for _, v in others])
        size = dict(zip(labels, t.shape))
        for pos, x in enumerate(unique):
            if x not in seen:
                gi = gi.unsqueeze(pos)
        # size-1 dims broadcast both ways: up to the operand's size, or summed down to its size 1
        gi = gi.expand(tuple(max(n, size[x]) for n, x in zip(gi.shape, unique)))
        gi = sum_to(gi, [size[x] for x in unique])
        if len(unique) == len(labels):
            return gi
        zeros = g.new_zeros(tuple(t.shape))
        strides = [sum(st for y, st in zip(labels, zeros.stride()) if y == x) for x in unique]
        return functions.as_strided_scatter(zeros, gi, tuple(gi.shape), strides, 0)
    return {"tensors": _each_wanted(tensors, grad)}


defgrad("matmul", per_input(self=reads("other", _matmul_self), other=reads("self", _matmul_other)))
defgrad("mm", per_input(self=reads("mat2", lambda g, a, out: g.mm(a.mat2.t())),
                        mat2=reads("self", lambda g, a, out: a.self.t().mm(g))))
defgrad("bmm", per_input(self=reads("mat2", lambda g, a, out: g.bmm(a.mat2.transpose(1, 2))),
                         mat2=reads("self", lambda g, a, out: a.self.transpose(1, 2).bmm(g))))
defgrad("mv", per_input(self=reads("vec", lambda g, a, out: g.outer(a.vec)),
                        vec=reads("self", lambda g, a, out: a.self.t().mv(g))))
defgrad("dot", per_input(self=reads("tensor", lambda g, a, out: g * a.tensor),
                         tensor=reads("self", lambda g, a, out: g * a.self)))
defgrad("vdot", per_input(self=reads("other", lambda g, a, out: g * a.other),
                          other=reads("self", lambda g, a, out: g * a.self)))
defgrad("addmm", per_input(self=reads("", lambda g, a, out: sum_to(_scaled(g, a.beta), a.self.shape)),
                           mat1=reads("mat2", lambda g, a, out: _scaled(g.mm(a.mat2.t()), a.alpha)),
                           mat2=reads("mat1", lambda g, a, out: _scaled(a.mat1.t().mm(g), a.alpha))))
defgrad("baddbmm", per_input(
    self=reads("", lambda g, a, out: sum_to(_scaled(g, a.beta), a.self.shape)),
    batch1=reads("batch2", lambda g, a, out: _scaled(g.bmm(a.batch2.transpose(1, 2)), a.alpha)),
    batch2=reads("batch1", lambda g, a, out: _scaled(a.batch1.transpose(1, 2).bmm(g), a.alpha))))
defgrad("einsum", differentiates("tensors", reads("tensors", _einsum)))


# Indexing --------------------------------------------------------------------------------

def _masked_select(g, a, out):
    """``g`` put back where the (broadcast) mask is True, in row-major order."""
    shape = broadcast_shapes(tuple(a.self.shape), tuple(a.mask.shape))
    mask = a.mask.expand(shape).reshape(-1)
    return {"self": sum_to(g.new_zeros(mask.shape).index_put([mask], g, False).reshape(shape), a.self.shape)}


def _index_fill_value(g, a, out):
    """The sum of ``g`` over the filled elements (each once, however often ``index`` names it)."""
    filled = functions.zeros(a.self.shape, dtype=_dt.bool, device=g.device).index_fill(a.dim, a.index, True)
    return g.masked_fill(filled.logical_not(), 0).sum()


def _scattered(g, a, out):
    """``g`` where a scatter left ``self``'s values (overwritten elements get no gradient)."""
    return g.scatter(a.dim, a.index, 0)


def _gathered(g, a, out):
    """``src``'s gradient in a scatter: ``g`` read where each element went (zeros beyond ``index``)."""
    return _pad_to(g.gather(a.dim, a.index), a.src.shape)


def _scatter_reduced(g, x, dim, index, src, reduce, include_self, out):
    """torch's scatter_reduce_backward; ``src`` beyond ``index``'s shape gets zeros."""
    s = _region(src, index.shape) if index.ndim == src.ndim else src
    if reduce == "sum":
        gx, gs = g, g.gather(dim, index)
    elif reduce == "mean":
        count = (functions.ones_like(g) if include_self else functions.zeros_like(g)).scatter_add(
            dim, index, functions.ones_like(s))
        gx = g / count.masked_fill(count == 0, 1)
        gs = gx.gather(dim, index)
    elif reduce == "prod":
        gx, gs = _scatter_prod(g, x, dim, index, s, include_self, out)
    elif reduce in ("amax", "amin"):  # shared evenly among the elements equal to the result
        x_is = x == out
        if not include_self:
            x_is = x_is.scatter(dim, index, False)
        s_is = s == out.gather(dim, index)
        share = g / x_is.to(g.dtype).scatter_add(dim, index, s_is.to(g.dtype))
        # products, not a masked fill, as torch's: a NaN result equals no element, so its share is g / 0
        # and every element reduced into it gets NaN (and an unequal one -0.0 where the share is negative)
        gx = share * x_is.to(g.dtype)
        gs = share.gather(dim, index) * s_is.to(g.dtype)
    else:  # torch's forward takes "max" and "min" as amax and amin, its backward does not
        raise RuntimeError(f"Expected 'reduce' to be one of 'sum', 'prod', 'mean', 'amax', 'amin' but got {reduce}.")
    grads = {}
    if wanted(x):
        grads["self"] = gx if include_self else gx.scatter(dim, index, 0)
    if wanted(src):
        grads["src"] = _pad_to(gs, src.shape)
    return grads


def _scatter_prod(g, x, dim, index, s, include_self, out):
    """Products over the elements other than the one differentiated, computed
    without dividing by zero: zeros are replaced by one in a second reduction."""
    masked_x = x.masked_fill(x == 0, 1)
    gx = g * masked_x.scatter_reduce(dim, index, s, "prod", include_self=include_self) / masked_x
    s_zero = s == 0
    zeros_per_target = g.new_zeros(x.shape).scatter_add(dim, index, s_zero.to(g.dtype)).gather(dim, index)
    single_zero = s_zero.logical_and(zeros_per_target == 1)
    without_it = x.scatter_reduce(dim, index, s.masked_fill(single_zero, 1), "prod", include_self=include_self)
    gs = functions.where(single_zero, (g * without_it).gather(dim, index),
                       (g * out).gather(dim, index) / s.masked_fill(s_zero, 1))
    return gx, gs


def _unchanged(g, a, out):
    return g


defgrad("index", _self(lambda g, a: g.new_zeros(a.self.shape).index_put(a.indices, g, True), "indices"))
defgrad("index_put", per_input(
    self=reads("indices", lambda g, a, out: g if a.accumulate else g.index_put(a.indices, g.new_zeros(()), False)),
    values=reads("indices", lambda g, a, out: sum_to(OPS["index"](g, a.indices), a.values.shape))))
def _gather_grad(g, a):
    """gather's gradient: ``g`` scattered (added) into zeros of ``self``'s shape. Where the index picks one
    element of every line along ``dim`` (nll_loss's pick of each row's target class), that is ``g`` where
    the line's position equals the index, else 0: pointwise, so a compiled graph fuses it into the kernels
    that read it, where the scatter writes a zero tensor of ``self``'s size first and scatters into it
    (a language model's one-hot of tokens by vocabulary, twice the size of its logits' gradient in traffic).
    The index goes through the positions' ``index_select`` first, which is the index itself or gather's bounds
    error: a compiled step that does not return the loss drops the forward's gather, and an out-of-range target
    would otherwise give a silently wrong gradient where the scatter raised. Eagerly (no tracer takes the
    calls) the scatter is the cheaper: one pass over the zeros, where the comparison and the selection each
    make a tensor of ``self``'s size (an LSTM language model's loss outside a compiled model: 28 MB, ~5 passes),
    and it scatters in place, into the zeros themselves (the functional scatter writes into a copy of them)."""
    shape, index = a.self.shape, a.index
    d = wrap_dim(a.dim, len(shape)) if shape else 0
    # (an empty index may have fewer dims than ``self``: torch's gather takes it, and it picks nothing)
    if (shape and index.ndim == len(shape) and index.shape[d] == 1 and all(index.shape[k] == n for k, n in enumerate(shape) if k != d)
            and hooks_take_calls()):
        positions = functions.arange(shape[d], device=index.device)
        checked = positions.index_select(0, index.reshape(-1)).view(index.shape)
        # g + 0 is the scatter's add into zeros: a -0.0 of g becomes +0.0 there too (torch's gradient)
        return functions.where(positions.view([-1 if k == d else 1 for k in range(len(shape))]) == checked,
                               functions.add(g, 0), 0)
    zeros = g.new_zeros(shape)
    if hooks_take_calls():  # (a trace records the functional scatter)
        return zeros.scatter_add(a.dim, a.index, g)
    return zeros.scatter_add_(a.dim, a.index, g)


# (self is saved unread, as torch's gather node saves it: a write into it before the backward raises)
defgrad("gather", _self(_gather_grad, "index self"))
# (with reduce=, torch has no derivative: its autograd fallback's node raises in backward, as jitorch's)
defgrad("scatter", per_input(self=reads("index", _scattered), src=reads("index", _gathered)))
defgrad("scatter.value", per_input(self=reads("index", _scattered)))
defgrad("scatter_add", per_input(self=reads("", _unchanged), src=reads("index", _gathered)))
defgrad("scatter_reduce", differentiates("self src", reads("self index src result", lambda g, a, out: (
    _scatter_reduced(g, a.self, a.dim, a.index, a.src, a.reduce, a.include_self, out)))))
defgrad("index_select", _self(lambda g, a: g.new_zeros(a.self.shape).index_add(a.dim, a.index, g), "index"))
defgrad("index_add", per_input(
    self=reads("", _unchanged),
    source=reads("index", lambda g, a, out: _scaled(g.index_select(a.dim, a.index).reshape(a.source.shape),
                                                    a.alpha))))
defgrad("index_copy", per_input(
    self=reads("index", lambda g, a, out: g.index_fill(a.dim, a.index, 0)),
    source=reads("index", lambda g, a, out: g.index_select(a.dim, a.index).reshape(a.source.shape))))
defgrad("index_fill index_fill.Tensor", per_input(
    self=reads("index", lambda g, a, out: g.index_fill(a.dim, a.index, 0)), value=reads("index", _index_fill_value)))
defgrad("masked_fill masked_fill.Tensor", per_input(
    self=reads("mask", lambda g, a, out: sum_to(g.masked_fill(a.mask, 0), a.self.shape)),
    value=reads("mask", lambda g, a, out: g.masked_fill(a.mask.logical_not(), 0).sum())))
defgrad("masked_select", differentiates("self", reads("mask", _masked_select)))
defgrad("take", _self(lambda g, a: g.new_zeros(a.self.shape).put(a.index, g, True), "index"))
defgrad("put", per_input(
    self=reads("index", lambda g, a, out: g if a.accumulate else g.put(a.index, _zeros_as(a.source), False)),
    source=reads("index", lambda g, a, out: g.take(a.index).reshape(a.source.shape))))


# Casts, copies, fills ----------------------------------------------------------------------

def _overwritten(g, a, out):
    """``self``'s gradient in an op that overwrites it: zeros, as torch gives."""
    return functions.zeros_like(g)


reads("", _overwritten)
defgrad("_to_copy", _self(lambda g, a: _cast_like(g, a.self)))
defgrad("copy", per_input(self=_overwritten,
                          src=reads("", lambda g, a, out: _cast_like(sum_to(g, a.src.shape), a.src))))
defgrad("fill.Scalar zero", per_input(self=_overwritten))
defgrad("fill.Tensor", per_input(self=_overwritten, value=reads("", lambda g, a, out: g.sum())))

# Index and count outputs only.
nondifferentiable("argwhere", "nonzero_static", "view.dtype", "repeat_interleave.Tensor")
# unique's values require grad, as torch's, whose derivative is not implemented (nor its forward-mode one)
defgrad("_unique", differentiates("self", reads("", lambda g, a, out: not_implemented(
    "_unique2" if a.dim is None else "unique_dim"))))
# A check of values (ops.value_checks): its result is a constant True.
nondifferentiable("_check_values")
# Factories that read only a tensor's shape, dtype and device (their results never require grad).
nondifferentiable("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
                  "randint_like.low", "new_zeros", "new_ones", "new_empty", "new_full")
