"""vmap's batching rules: how an op runs on physical tensors (the batch dimension first) at once.

A rule is ``rule(op, args, size, batched, physical) -> (op to call, its physical arguments)`` or None where
it does not apply (the caller then runs the op once per sample). ``batched(t)`` says whether tensor
argument ``t`` is batched at the level being run, ``physical(t)`` gives its ``[size, *t.shape]`` value;
other tensor arguments are the same for every sample. One rule serves each kind of op (pointwise ops
broadcast, ops along a ``dim`` shift it past the batch dimension), a few ops have their own. The caller
checks that the call's meta rule gives the batch size before each result's per-sample shape and dtype,
and falls back otherwise: a rule may be partial, never wrong.
"""

from __future__ import annotations

from ..ops import registry
from ..runtime.memory_format import channels_last, channels_last_3d, format_strides
from ..runtime.strided import contiguous_strides


def _tensors(op, args):
    return list(registry.tensors_of(op, args))


def _aligned(t, rank, batched, physical):
    """``t`` for a broadcasting op of per-sample rank ``rank``: batched, ``[B, 1, ..., *t.shape]``; else ``t``."""
    if not batched(t):
        return t
    p = physical(t)
    missing = rank - t.ndim
    return p.reshape((p.shape[0],) + (1,) * missing + tuple(t.shape)) if missing else p


def _expanded(t, size, batched, physical):
    """``t`` with the batch dimension in front: its physical value, or itself expanded to every sample."""
    return physical(t) if batched(t) else t.expand((size,) + tuple(t.shape))


def broadcasting(op, args, size, batched, physical):
    """Pointwise ops: the batched operands' per-sample dimensions right-aligned with the others'. A batched
    operand with no dimensions ranks lower in type promotion than its physical value would: declined where
    promotion could see it (operands of several dtypes)."""
    tensors = _tensors(op, args)
    rank = max(t.ndim for t in tensors)
    if rank and len({t.dtype for t in tensors}) > 1 and any(batched(t) and t.ndim == 0 for t in tensors):
        return None
    return op, registry.map_tensors(op, args, lambda t: _aligned(t, rank, batched, physical))


def _shift(d):
    return d + 1 if d >= 0 else d  # a negative dimension counts from the end, where the batch dimension is not


def along_dim(op, args, size, batched, physical):
    """Ops along ``dim`` (reductions, softmax, scans, sorts, gather/scatter, cat/stack, cross): every tensor
    with the batch dimension in front and ``dim`` moved past it. Tensors of different per-sample ranks are
    declined (a 1-D ``quantile`` q, ``trapezoid`` x or ``index_add`` index means something else than one
    broadcast with a batch dimension in front); so is a reduction's absent ``dim`` for ops other than
    reductions."""
    if len({t.ndim for t in _tensors(op, args)}) > 1:
        return None
    return shifted_dim(op, args, size, batched, physical)


_RESULT_DIMS = {"stack", "unsqueeze"}  # their dim counts the result's dimensions, which a 0-d sample has


def shifted_dim(op, args, size, batched, physical):
    """`along_dim` whatever the tensors' ranks (``select_scatter``'s source has one dimension less)."""
    i = op.arg_names.index("dim")
    d = args[i]
    first = _tensors(op, args)[0]
    if d is None or (isinstance(d, (list, tuple)) and not d):
        if op.kind != "reduction" or len(_tensors(op, args)) != 1:
            return None
        if first.ndim == 0:  # one element per sample: reduced over a dimension of one
            new = list(args)
            new[op.tensor_args[0][0]] = physical(first).reshape(size, 1)
            new[i] = [1]
            return op, new
        d = list(range(1, first.ndim + 1))
    elif op.public_name not in _RESULT_DIMS and any(t.ndim == 0 for t in _tensors(op, args)):
        return None  # a dim of a 0-d sample (0 or -1) would name the batch dimension (fuzz seed 7840825)
    elif isinstance(d, int):
        d = _shift(d)
    else:
        d = [_shift(x) for x in d]
    new = registry.map_tensors(op, args, lambda t: _expanded(t, size, batched, physical))
    new[i] = d
    return op, new


def leading(*names):
    """A rule for ops whose argument ``names`` may be batched (their leading dimensions are batch dimensions
    to the op, as ``linear``'s input), the others not."""
    def rule(op, args, size, batched, physical):
        positions = [op.arg_names.index(n) for n in names]
        if any(batched(t) for i, t in enumerate(args) if isinstance(t, registry.Tensor) and i not in positions):
            return None
        return op, registry.map_tensors(op, args, lambda t: physical(t) if batched(t) else t)
    return rule


def matmul(op, args, size, batched, physical):
    """``matmul``, ``mm``, ``bmm`` as ``matmul`` of the physical operands: matrices (or stacks of them) align
    their batch dimensions; a batched vector times an unbatched matrix is a matrix times it; a matrix times an
    unbatched vector stays one."""
    a, b = args[0], args[1]
    target = registry.OPS["matmul"]
    if a.ndim >= 2 and b.ndim >= 2:
        rank = max(a.ndim, b.ndim)
        return target, [_aligned(a, rank, batched, physical), _aligned(b, rank, batched, physical)]
    if a.ndim == 1 and b.ndim == 2 and not batched(b):
        return target, [physical(a), b]
    if a.ndim >= 2 and b.ndim == 1 and not batched(b):
        return target, [physical(a), b]
    return None


def like(op, args, size, batched, physical):
    """Ops whose one tensor gives its shape to the result (``clone``, ``_to_copy``, ``zeros_like``); a channels-last
    memory format raises torch's errors (its clone's NYI, the rank error of a factory's physical tensor)."""
    fmt = args[op.arg_names.index("memory_format")] if "memory_format" in op.arg_names else None
    if fmt is channels_last or fmt is channels_last_3d:
        if op.public_name == "clone":
            raise RuntimeError("NYI: Tensor.clone(memory_format) inside vmap is only supported with memory_format "
                               "jitorch.preserve_format or jitorch.contiguous_format (got "
                               f"{'ChannelsLast' if fmt is channels_last else 'ChannelsLast3d'})")
        format_strides(fmt, (size, *args[0].shape))
    return op, registry.map_tensors(op, args, physical)


def sized(op, args, size, batched, physical):
    """``new_zeros``-like ops (a shape argument, values independent of the tensor): the batch size in front."""
    i = op.arg_names.index("size")
    new = registry.map_tensors(op, args, physical)
    new[i] = [size] + list(args[i])
    return op, new


def repeat(op, args, size, batched, physical):
    """``repeat``: the tensor's dimensions right-aligned with the repeats (torch pads them on the left), the
    batch dimension repeated once."""
    reps = list(args[1])
    return op, [_aligned(args[0], max(len(reps), args[0].ndim), batched, physical), [1] + reps]


def as_strided_scatter(op, args, size, batched, physical):
    """``as_strided_scatter`` of a compact tensor (a view's backward, padding): each sample's elements follow
    one another in a compact physical tensor, so the batch is one more dimension of stride one sample."""
    self, src, shape, strides, offset = args
    compact = (self._offset == 0 and tuple(self._stride) == tuple(contiguous_strides(tuple(self.shape)))
               and self._storage.size == self.numel())
    if not compact:
        return None
    p = _expanded(self, size, batched, physical).contiguous()
    if p.storage_offset() != 0:
        p = p.clone()
    return op, [p, _expanded(src, size, batched, physical), [size] + list(shape),
                [self.numel()] + list(strides), offset]


def index_select(op, args, size, batched, physical):
    """``index_select``: an unbatched index selects along the shifted dimension; a batched one (each sample its
    own) is a ``gather`` with the index spread over the other dimensions."""
    self, d, index = args
    d = d % max(self.ndim, 1)
    if not batched(index):
        return op, [physical(self), d + 1, index]
    if self.ndim == 0:
        return None
    shape = list(self.shape)
    spread = [size] + shape[:d] + [index.numel()] + shape[d + 1:]
    view = [size] + [1] * d + [index.numel()] + [1] * (self.ndim - d - 1)
    return registry.OPS["gather"], [_expanded(self, size, batched, physical), d + 1,
                                    physical(index).reshape(view).expand(spread), False]


def linear(op, args, size, batched, physical):
    """``linear``: a batched input alone is more leading dimensions; batched weights (an ensemble) make a
    batch of matrix products, ``baddbmm`` with the bias (matrices of inputs only)."""
    x, w, b = args
    if not batched(w) and (b is None or not batched(b)):
        return op, [physical(x), w, b]
    if x.ndim != 2:
        return None
    inputs, weights = _expanded(x, size, batched, physical), _expanded(w, size, batched, physical).transpose(1, 2)
    if b is None:
        return registry.OPS["matmul"], [inputs, weights]
    return registry.OPS["baddbmm"], [_expanded(b, size, batched, physical).unsqueeze(1), inputs, weights, 1, 1]


RULES = {
    "select_scatter": shifted_dim,
    "index_select": index_select,
    "as_strided_scatter": as_strided_scatter,
    "repeat": repeat,
    "matmul": matmul, "mm": matmul, "bmm": matmul,
    "linear": linear,
    "layer_norm": leading("input"),
    "embedding": leading("indices"),
    "copy": broadcasting,
}


def rule_for(op):
    """The batching rule of ``op``, or None (it runs per sample)."""
    rule = RULES.get(op.public_name)
    if rule is not None:
        return rule
    if op.kind == "pointwise":
        return broadcasting
    if "dim" in op.arg_names:
        return along_dim
    if op.kind in ("copy", "cast", "creation") and len(op.tensor_args) == 1 and not op.tensor_args[0][1]:
        return sized if "size" in op.arg_names else like
    return None
