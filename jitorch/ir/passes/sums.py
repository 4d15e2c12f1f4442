"""Sums rewritten so that fusion can put them where their operands are made: bit-identical results, the node's
type kept.

Through a reshape: a sum of ``view(x, T)`` over dims that cover whole groups of ``x``'s dims (the dims the
reshape splits or merges together) is the sum of ``x`` over those dims, reshaped:

    sum(view(x, [35, 20, V]), [0, 1], keepdim)   ->   view(sum(x, [0], True), out)        (x: [700, V])

The elements are added in the same order (the reduced dims of the view are consecutive runs of ``x``'s, which
the kernel's loops merge again), so the bits do not change; only where ``x`` is computed by an op other than a
view (compact in memory: a strided source keeps the reduction it has). A language model's decoder-bias gradient
sums the logits' gradient over ``(seq, batch)`` through such a view, which kept it out of the kernel computing
that gradient: a second pass over the logits' size.

Of a one-hot: ``positions == q`` with ``positions`` the integers ``0 .. n-1`` along dim ``d`` and ``q``, ``v`` of
size one there, picks at most one element of each line along ``d``:

    sum(where(positions == q, v, 0), d, keepdim)   ->   where(0 <= q < n, v, 0) + 0       (reshaped to out)

(``+ 0``: the sum's ``+0.0 + -0.0`` is ``+0.0``; no range test where ``q`` is itself an ``index_select`` of the
same positions, which raises for an index out of range.) The gradient of a gather of one element per line
(`autograd.rules.structural._gather_grad`: nll_loss's, so cross-entropy's) is such a one-hot, and log-softmax's
backward sums it per row: a pass of comparisons over the logits' size becomes one over the rows.
"""

from __future__ import annotations

from ...ops import registry
from ...runtime import dtypes as _dt
from ..fake import fake_tensor
from ..graph import Node, Value
from ..values import TensorType
from .rewrite import Rewriter, graph_pass

# views that keep their operand's elements in row-major order
_RESHAPES = frozenset({"view", "reshape", "_unsafe_view", "unflatten", "unsqueeze", "squeeze", "flatten"})


def emit_op(graph, name, args, emit):
    """The value of op ``name`` on ``args`` (the schema's defaults after them), as a node passed to ``emit``."""
    op = registry.OPS[name]
    args = tuple(args) + tuple(a.default for a in op.schema.args[len(args):])
    spec = registry.quiet_meta(op, [fake_tensor(a.type.shape, a.type.dtype, a.type.device) if isinstance(a, Value)
                                    else a for a in args])
    node = Node(op, args)
    node.outputs.append(Value(graph._fresh(), TensorType(tuple(spec.shape), spec.dtype, spec.device), node, 0))
    emit(node)
    return node.outputs[0]


def _reshaped_to(graph, value, shape, emit):
    return value if tuple(value.type.shape) == tuple(shape) else emit_op(graph, "view", [value, list(shape)], emit)


def _plain_sum(node):
    """(input, reduced dims wrapped and sorted, keepdim) of a ``sum`` whose dtype is its input's; else None.
    Reduced dims ``None`` or ``[]`` (every dim) come back as all of them."""
    if node.op.name != "sum" or len(node.outputs) != 1 or not isinstance(node.args[0], Value):
        return None
    x, dims, keepdim, dtype = node.args
    if dtype is not None or x.type.dtype != node.outputs[0].type.dtype:
        return None
    ndim = x.type.ndim
    if isinstance(dims, int):
        dims = [dims]
    dims = range(ndim) if not dims else dims
    return x, sorted({d % ndim for d in dims}) if ndim else [], bool(keepdim)


def _groups(source, target):
    """The reshape of ``source`` into ``target`` as pairs (source dims, target dims) of equal products, in order;
    a dim of size one is a pair of its own (with no dims of the other shape)."""
    groups, i, j = [], 0, 0
    while i < len(source) or j < len(target):
        if j < len(target) and target[j] == 1:
            groups.append(([], [j]))
            j += 1
            continue
        if i < len(source) and source[i] == 1:
            groups.append(([i], []))
            i += 1
            continue
        if i == len(source) or j == len(target):
            return None
        si, tj, a, b = [i], [j], source[i], target[j]
        i, j = i + 1, j + 1
        while a != b:
            if a < b and i < len(source):
                a *= source[i]
                si.append(i)
                i += 1
            elif b < a and j < len(target):
                b *= target[j]
                tj.append(j)
                j += 1
            else:
                return None
        groups.append((si, tj))
    return groups


def _through_reshape(graph, node, emit):
    """The sum ``node`` computed on the reshape's source (see the module docstring), or None."""
    found = _plain_sum(node)
    if found is None:
        return None
    view, reduced, _ = found
    reshape = view.node
    if reshape is None or reshape.op.name not in _RESHAPES or not isinstance(reshape.args[0], Value):
        return None
    x = reshape.args[0]
    if x.node is None or x.node.op.view is not None or x.type.dtype != view.type.dtype:
        return None
    groups = _groups(tuple(x.type.shape), tuple(view.type.shape))
    if groups is None:
        return None
    dims = []
    for sdims, tdims in groups:
        inside = [d in reduced for d in tdims]
        if any(inside) and not all(inside):
            return None
        if tdims and all(inside):
            dims += sdims
    if not dims:
        return None
    whole = len(dims) == x.type.ndim  # (a full sum stays one: the kernel splits it into parts as before)
    summed = emit_op(graph, "sum", [x, None, False] if whole else [x, dims, True], emit)
    return _reshaped_to(graph, summed, node.outputs[0].type.shape, emit)


def _view_chain(value):
    """The value a chain of `_RESHAPES` ending at ``value`` starts from (``value`` itself where none)."""
    while value.node is not None and value.node.op.name in _RESHAPES and isinstance(value.node.args[0], Value):
        value = value.node.args[0]
    return value


def _positions(value):
    """n where ``value`` is ``arange(n)`` (integers from 0 by 1), else None."""
    node = value.node
    if node is None or node.op.name != "arange" or value.type.dtype not in _dt.INTEGRAL or value.type.ndim != 1:
        return None
    start, end, step = node.args[:3]
    lo, hi = (0, start) if end is None else (start, end)
    if lo != 0 or step != 1 or hi != value.type.shape[0]:
        return None
    return hi


def _along(shape, ndim):
    """``shape`` right-aligned to ``ndim`` dims."""
    return (1,) * (ndim - len(shape)) + tuple(shape)


def _one_hot_sum(graph, node, emit):
    """The sum ``node`` of a one-hot along its one reduced dim, without the one-hot (module docstring), or None."""
    found = _plain_sum(node)
    if found is None or len(found[1]) != 1:
        return None
    picked, (d,), keepdim = found
    ndim = picked.type.ndim
    where = picked.node
    if where is None or where.op.name != "where.self" or not picked.type.dtype.is_floating_point:
        return None
    cond, v, zero = where.args
    if not isinstance(cond, Value) or not isinstance(v, Value) or isinstance(zero, Value) or zero != 0 \
            or cond.node is None or cond.node.op.name != "eq" or v.type.ndim > ndim \
            or _along(v.type.shape, ndim)[d] != 1:
        return None
    for p, q in (cond.node.args, cond.node.args[::-1]):
        if not isinstance(p, Value) or not isinstance(q, Value) \
                or q.type.dtype not in _dt.INTEGRAL or p.type.ndim > ndim or q.type.ndim > ndim:
            continue
        base = _view_chain(p)
        n = _positions(base)
        line = tuple(n if k == d else 1 for k in range(ndim))
        if n is None or n != picked.type.shape[d] or _along(p.type.shape, ndim) != line \
                or _along(q.type.shape, ndim)[d] != 1:
            continue
        selected = _view_chain(q).node
        if selected is not None and selected.op.name == "index_select" and selected.args[0] is base:
            kept = v  # (q is one of the positions: index_select raised otherwise)
        else:
            inside = emit_op(graph, "logical_and", [emit_op(graph, "ge", [q, 0], emit), emit_op(graph, "lt", [q, n], emit)],
                           emit)
            kept = emit_op(graph, "where.self", [inside, v, 0], emit)
        total = emit_op(graph, "add", [kept, 0], emit)
        shape = list(picked.type.shape)
        shape[d] = 1
        if _along(total.type.shape, ndim) != tuple(shape):
            total = emit_op(graph, "expand", [total, shape], emit)
        return _reshaped_to(graph, total, node.outputs[0].type.shape, emit)
    return None


@graph_pass("sums", "rewrote %d sums")
def run(graph):
    """Rewrite each sum of a reshape or of a one-hot (see the module docstring), in one sweep."""
    rw = Rewriter(graph)
    rewrites, nodes = 0, []
    for node in graph.nodes:
        rw.update_args(node)
        emitted = []
        for rule in (_one_hot_sum, _through_reshape):
            new = rule(graph, node, emitted.append)
            if new is not None and new.type == node.outputs[0].type and rw.replace_node(node, [new]):
                nodes += emitted
                rewrites += 1
                break
            emitted.clear()
        else:
            nodes.append(node)
    graph.nodes = nodes
    rw.finish()
    return rewrites
