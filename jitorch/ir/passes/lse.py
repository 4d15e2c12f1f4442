"""log_softmax's log-probs kept out of memory where only elementwise readers and gathers read them.

A classifier's loss reads its log-probs twice: nll_loss gathers one per row, and the backward computes
``g - exp(lp) * sum(g)`` over all of them. log_softmax's row kernel wrote every log-prob (a word language model's
``(700, 10000)`` float32: 28 MB) and the backward's kernel read them back. Here

    lp = log_softmax(x, -1)   ->   m, n = _log_softmax_stats(x, -1);  lp = (x - m) - n

(the row kernel's first two passes, writing each row's max ``m`` and ``n = log(sum(exp(x - m)))``,
`jitorch.codegen.kernel.build_softmax`), where ``lp`` is read only by pointwise nodes and reductions (fusion
puts ``(x - m) - n`` into their kernels) and by gathers along the rows (each becomes ``(gather(x) - m) - n``), and
is neither returned, written back nor laid out by the graph. The elements are the row kernel's bit for bit: its
third pass stored ``(x - m) - n`` with the same ``m`` and ``n``.

``x`` itself may be computed pointwise (a decoder's bias add, maybe through reshapes that keep the rows' last
dim: the language model's ``(seq, batch, vocab)`` logits seen as ``(seq * batch, vocab)``). Each reader then
gets its own copy of ``x``'s pointwise cone (at most `MAX_CONE` nodes), with the reshapes moved onto the cone's
leaves, so that no kernel has to write ``x``: the statistics' kernel evaluates ``x`` as its prologue
(`jit.executor.softmax_prologues`), the backward's kernel computes it again from the product it came from, and
a gather reads the leaves at the picked elements (``gather(mm + b) = gather(mm) + gather(expand(b))``). A leaf
that a reshape crosses must be a compact result of the graph or broadcast along the kept dim alone (a bias).
Every copy computes the same ops on the same elements, so the values are the same bits.
"""

from __future__ import annotations

from functools import partial
from math import prod

from ...ops import registry
from ...runtime import dtypes as _dt
from ..graph import Node, Value
from ..lowerable import kind_of
from ..values import TensorType
from . import dce
from .rewrite import Rewriter, graph_pass, has_effects
from .sums import emit_op

# The most pointwise nodes a copy of log_softmax's input may hold.
MAX_CONE = 12
# views that keep their operand's elements in row-major order
_RESHAPES = frozenset({"view", "reshape", "_unsafe_view", "unflatten", "unsqueeze", "squeeze", "flatten"})


def _row_log_softmax(node):
    """(input, its shape) of a log_softmax over the last dim of a CPU float32/float64 tensor with elements in its
    rows, in the input's dtype; else None."""
    if node.op.name != "log_softmax" or not isinstance(node.args[0], Value):
        return None
    x, dim, dtype = node.args
    t = x.type
    if t.ndim < 1 or dim % t.ndim != t.ndim - 1 or dtype not in (None, t.dtype) or \
            t.dtype not in (_dt.float32, _dt.float64) or t.shape[-1] == 0 or t.device.type != "cpu":
        return None
    return x, tuple(t.shape)


def _row_gather(reader, lp, shape):
    """Whether ``reader`` is a gather from ``lp`` along its last dim with an index over the same rows."""
    if reader.op.name != "gather" or reader.args[0] is not lp or reader.args[2] is lp:
        return False
    index = reader.args[2]
    return reader.args[1] % len(shape) == len(shape) - 1 and isinstance(index, Value) and \
        tuple(index.type.shape[:-1]) == shape[:-1]


class _Cone:
    """Copies of a value's pointwise cone over ``shape``, each leaf read through ``leaf(value, emit)``: a leaf of
    ``shape``, one that broadcasts to it, or one of its elements in another shape with the same last dim (which
    the cone reshaped)."""

    def __init__(self, graph, shape, layouts):
        self.graph, self.shape, self.layouts = graph, shape, layouts

    def copy(self, v, leaf, emit):
        """``v`` over ``shape`` (its elements, maybe reshaped), its cone copied; None where it cannot be."""
        self.budget = MAX_CONE
        return self._full(v, leaf, emit, reshaped=False)

    def _full(self, v, leaf, emit, reshaped):
        node = v.node
        if node is not None and node.op.name in _RESHAPES and kind_of(node) == "view" and \
                isinstance(node.args[0], Value) and _rows_kept(node.args[0].type.shape, self.shape):
            return self._full(node.args[0], leaf, emit, True)
        if node is not None and kind_of(node) == "pointwise" and not has_effects(node) and len(node.outputs) == 1:
            self.budget -= 1
            if self.budget < 0:
                return None
            args = []
            for a in node.args:
                if isinstance(a, Value):
                    a = self._full(a, leaf, emit, reshaped) if a.type.shape == v.type.shape else \
                        self._broadcast(a, v.type.shape, leaf, emit, reshaped)
                    if a is None:
                        return None
                args.append(a)
            return emit_op(self.graph, node.op.name, args, emit)
        if tuple(v.type.shape) != self.shape and (node is None or kind_of(node) not in ("external", "reduction")
                                                  or v in self.layouts):
            return None  # (a view of it might not be a view: its memory may not be compact)
        return leaf(v, emit)

    def over_rows(self, v, emit):
        """Leaf ``v`` as the cone reads it over ``shape``."""
        if _broadcasts(v.type.shape, self.shape):
            return v
        return emit_op(self.graph, "view", [v, list(self.shape)], emit)

    def picked(self, index, v, emit):
        """The elements of leaf ``v`` seen over ``shape`` that ``index`` picks along the last dim (a reshaped leaf
        gathered as it lies, its index reshaped to it: a view of the leaf read by this kernel and another
        would have to be written)."""
        last = len(self.shape) - 1
        if v.type.ndim == 0:  # (every element's: an operand that must stay 0-d, fill.Tensor's value, stays so)
            return v
        if _broadcasts(v.type.shape, self.shape):
            if tuple(v.type.shape) != self.shape:
                v = emit_op(self.graph, "expand", [v, list(self.shape)], emit)
            return emit_op(self.graph, "gather", [v, last, index], emit)
        lines = list(v.type.shape[:-1]) + [index.type.shape[-1]]
        picked = emit_op(self.graph, "gather", [v, len(lines) - 1, emit_op(self.graph, "view", [index, lines], emit)],
                         emit)
        return emit_op(self.graph, "view", [picked, list(index.type.shape)], emit)

    def _broadcast(self, a, over, leaf, emit, reshaped):
        """Operand ``a`` of a node over shape ``over``, which it broadcasts to, seen over ``shape``."""
        if not reshaped:
            return leaf(a, emit)
        aligned = (1,) * (len(over) - a.type.ndim) + tuple(a.type.shape)
        if any(n != 1 for n in aligned[:-1]):
            return None  # (broadcast along a dim that the reshape merges or splits)
        if a.type.ndim > 1:
            a = emit_op(self.graph, "view", [a, [1] * (len(self.shape) - 1) + [aligned[-1]]], emit)
        return leaf(a, emit)


def _broadcasts(shape, space):
    """Whether ``shape`` broadcasts to ``space`` (right-aligned, size-1 dims stretch)."""
    return len(shape) <= len(space) and all(a in (1, b) for a, b in zip(reversed(shape), reversed(space)))


def _rows_kept(source, shape):
    """Whether a reshape of ``source`` to ``shape`` keeps the last dim (merging or splitting the others)."""
    return prod(source) == prod(shape) and len(source) >= 1 and source[-1] == shape[-1]


def _stats(graph, x, shape, emit):
    op = registry.OPS["_log_softmax_stats"]
    node = Node(op, (x, len(shape) - 1))
    kept = TensorType(shape[:-1] + (1,), x.type.dtype, x.type.device)
    node.outputs.extend(Value(graph._fresh(), kept, node, i) for i in range(2))
    emit(node)
    return node.outputs


def _normalised(graph, v, m, n, emit):
    return emit_op(graph, "sub", [emit_op(graph, "sub", [v, m], emit), n], emit)


def _candidates(graph):
    """{log_softmax node: (its input, shape)} for those whose result only pointwise nodes, reductions and row
    gathers read and the graph does not keep."""
    readers = {}
    for node in graph.nodes:
        for v in dict.fromkeys(node.input_tuple()):
            readers.setdefault(v, []).append(node)
    kept = set(graph.output_values()) | {v for _, v in graph.mutations} | set(graph.layouts)
    found = {}
    for node in graph.nodes:
        row = _row_log_softmax(node)
        if row is None or node.outputs[0] in kept:
            continue
        lp = node.outputs[0]
        if all(kind_of(r) in ("pointwise", "reduction") and not has_effects(r) or _row_gather(r, lp, row[1])
               for r in readers.get(lp, ())):
            found[node] = row
    return found


@graph_pass("lse", "kept %d log_softmax results out of memory")
def run(graph):
    """Rewrite each log_softmax whose log-probs need not be written (module docstring); returns how many."""
    found = _candidates(graph)
    if not found:
        return 0
    rw = Rewriter(graph)
    stats = {}  # the log-probs -> (the copier of their input's cone, the input, m, n)
    standing = {}  # the value standing for rewritten log-probs -> the log-probs
    nodes, count = [], 0
    for node in graph.nodes:
        rw.update_args(node)
        made = []
        if node in found:
            # (its input as updated: a gather an earlier log_softmax's rewrite replaced is gone from the graph)
            x, shape = node.args[0], found[node][1]
            cone = _Cone(graph, shape, graph.layouts)
            m, n = _stats(graph, x, shape, made.append)
            copied = cone.copy(x, cone.over_rows, made.append)
            if copied is not None and rw.replace_node(node, [_normalised(graph, copied, m, n, made.append)]):
                stats[node.outputs[0]] = (cone, x, m, n)
                standing[rw.resolve(node.outputs[0])] = node.outputs[0]
                nodes += made
                count += 1
                continue
        elif node.op.name == "gather" and rw.resolve(node.args[0]) in standing:
            cone, x, m, n = stats[standing[rw.resolve(node.args[0])]]
            copied = cone.copy(x, partial(cone.picked, node.args[2]), made.append)
            if copied is not None and rw.replace_node(node, [_normalised(graph, copied, m, n, made.append)]):
                nodes += made
                continue
        nodes.append(node)
    graph.nodes = nodes
    rw.finish()
    dce.run(graph)  # (the log-probs' copy where only gathers read them)
    return count
