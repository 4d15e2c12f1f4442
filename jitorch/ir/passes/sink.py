"""Batch-first views sink below pointwise ops: a convolution's batch-last layout flows on to the next.

A convolution computes its result batch innermost, ``(C, *spatial, N)`` (the product's layout), and returns
the batch-first view ``permute(y, (n-1, 0, ..., n-2))``; the next convolution reads its input batch innermost
again (``permute(x, (1, ..., n-1, 0))``). Between them, batchnorm, activations and their backward are pointwise
ops, each of whose kernels wrote a batch-first result: the first read the product's layout across (a transposing
kernel), and the next convolution's padded copy or reshape transposed back (a second one).

A pointwise op gives the same elements whatever the layout its operands lie in, so

    op(permute(a, P), permute(b, P), w)  ->  permute(op(a, b, w'), P)

where ``P`` moves the last dim first, every operand of the result's shape is such a view (of any value), and
every other tensor operand (``w``: a per-channel weight, a scalar tensor) broadcasts, read as ``w'`` through a
view that adds its missing leading dims and permutes it the other way. The rewritten op runs over the
batch-last space and writes its result there; the view moves on to its readers, so the whole chain between two
convolutions runs batch-last, and ``simplify`` composes the next convolution's ``permute(., (1, ..., 0))`` with
it into nothing (a value read as it lies). Reductions (batchnorm's statistics and its weight's gradient) are not
rewritten: they read the view, summing in the order they did, so their bits do not change; nor do a pointwise
op's, element by element.

Only that rotation sinks (rank 3 and up): other permutes (attention's heads, a matrix's transpose) keep the
layouts their kernels are chosen for. A value the graph returns or writes back, or whose layout the graph
records, keeps its node (its memory is eager's); so does one that a reader needs compact (a flatten before a
Linear layer: its kernel writing batch-first saves a transposing copy), and every op whose result only such
values read.
"""

from __future__ import annotations

from ...ops import registry
from ..graph import Node, Value
from ..lowerable import kind_of
from ..values import TensorType
from .rewrite import Rewriter, graph_pass, has_effects
from .simplify import BROADCASTS, permutation, permutation_chain


def batch_first(ndim):
    """The dims a batch-first view takes of a ``(C, *spatial, N)`` value of ``ndim`` dims."""
    return [ndim - 1, *range(ndim - 1)]


def _operands(node, dims, sinking):
    """``node``'s arguments as the batch-last op reads them: a batch-first view (of the permutation ``dims``)
    by its base, a broadcast tensor as ``("broadcast", value)`` and a result-shaped value computed pointwise
    from broadcasts alone (batchnorm backward's ``expand(w) / n``) as ``("again", node, operands)``, to be
    computed again batch-last; with the number of views read by their bases, or None where some argument
    cannot be read batch-last. ``sinking``: whether ``node`` is the op rewritten (else a value it reads)."""
    out = node.outputs[0].type
    operands, bases = [], 0
    for a in node.args:
        if not isinstance(a, Value):
            if isinstance(a, (list, tuple, dict)):  # (a shape or dims: not an elementwise argument)
                return None
            operands.append(a)
        elif a.type.ndim == 0:
            operands.append(a)
        elif a.type.shape != out.shape or a.node is not None and a.node.op.name in BROADCASTS:
            operands.append(("broadcast", a))
        elif (chain := permutation_chain(a.node) if a.node is not None else None) is not None and chain[1] == dims:
            operands.append(chain[0])
            bases += 1
        elif sinking and _pointwise(a.node) and (again := _operands(a.node, dims, False)) is not None \
                and again[1] == 0:
            operands.append(("again", a.node, again[0]))
        else:
            return None
    return operands, bases


def _pointwise(node):
    return node is not None and len(node.outputs) == 1 and not has_effects(node) and kind_of(node) == "pointwise"


def _view(graph, op, x, args, shape, emit):
    node = Node(registry.OPS[op], [x, *args])
    node.outputs.append(Value(graph._fresh(), TensorType(tuple(shape), x.type.dtype, x.type.device), node, 0))
    emit(node)
    return node.outputs[0]


def _batch_last(graph, node, operands, emit):
    """The value of pointwise ``node`` computed batch-last from its ``operands`` (`_operands`), its nodes
    passed to ``emit`` in order."""
    out = node.outputs[0].type
    args = []
    for a in operands:
        if isinstance(a, tuple) and a[0] == "broadcast":
            a = _broadcast_operand(graph, a[1], out.ndim, emit)
        elif isinstance(a, tuple):
            a = _batch_last(graph, a[1], a[2], emit)
        args.append(a)
    inner = Node(node.op, args)
    shape = tuple(out.shape[1:]) + (out.shape[0],)
    inner.outputs.append(Value(graph._fresh(), TensorType(shape, out.dtype, out.device), inner, 0))
    emit(inner)
    return inner.outputs[0]


def _broadcast_operand(graph, w, ndim, emit):
    """``w`` (broadcasting to a batch-first result of ``ndim`` dims) as read by the batch-last op."""
    shape = (1,) * (ndim - w.type.ndim) + tuple(w.type.shape)
    if len(shape) != w.type.ndim:
        w = _view(graph, "view", w, [list(shape)], shape, emit)
    last = list(range(1, ndim)) + [0]  # (the inverse of `batch_first`)
    return _view(graph, "permute", w, [last], [shape[d] for d in last], emit)


def _has_batch_first_view(graph):
    """Whether a pointwise node of 3 dims or more reads a batch-first view (the end of a chain of permutations
    whose dims are `batch_first`'s) of its own shape: each rewrite reads one so (`_operands`), and only a rewrite
    makes another, so without one the pass rewrites nothing and is not run over the graph (a GPT's permutes are
    its attention heads': the pass's walks were 3 ms of its warm first call)."""
    rotated = set()
    for node in graph.nodes:
        if node.op.view is not None:
            chain = permutation_chain(node)
            if chain is not None and len(chain[1]) >= 3 and chain[1] == batch_first(len(chain[1])):
                rotated.add(node.outputs[0])
        elif rotated and len(node.outputs) == 1 and node.outputs[0].type.ndim >= 3 and \
                any(v in rotated and v.type.shape == node.outputs[0].type.shape for v in node.input_tuple()) and \
                _pointwise(node):
            return True
    return False


def _sinkable(graph, kept):
    """The pointwise nodes that may run batch-last: each reader of each one's result reads a view where it lies
    (a reduction, a permutation) or may itself run batch-last. Another reader (a flatten before a Linear layer)
    needs the result compact, which a kernel writing it batch-first makes it; so does a returned value's or a
    written-back one's memory (eager's)."""
    readers = {}
    for node in graph.nodes:
        for v in node.input_tuple():
            readers.setdefault(v, []).append(node)
    sinkable = set()
    for node in reversed(graph.nodes):  # (readers first)
        if len(node.outputs) == 1 and node.outputs[0].type.ndim >= 3 and node.outputs[0] not in kept \
                and _pointwise(node) and all(r in sinkable or kind_of(r) == "reduction" or permutation(r) is not None
                                             for r in readers.get(node.outputs[0], ())):
            sinkable.add(node)
    return sinkable


@graph_pass("sink", "ran %d pointwise nodes batch-last")
def run(graph):
    """Sink batch-first views below the pointwise nodes that read them (see the module docstring)."""
    if not _has_batch_first_view(graph):
        return 0
    kept = set(graph.output_values()) | {v for pair in graph.mutations for v in pair} | set(graph.layouts)
    sinkable = _sinkable(graph, kept)
    rw = Rewriter(graph)
    rewrites, nodes = 0, []
    for node in graph.nodes:
        rw.update_args(node)
        if node in sinkable and (found := _operands(node, batch_first(node.outputs[0].type.ndim), True)) \
                is not None and found[1]:
            out = node.outputs[0].type
            emitted = []
            inner = _batch_last(graph, node, found[0], emitted.append)
            view = _view(graph, "permute", inner, [batch_first(out.ndim)], out.shape, emitted.append)
            if rw.replace_node(node, [view]):
                nodes += emitted
                rewrites += 1
                continue
        nodes.append(node)
    graph.nodes = nodes
    rw.finish()
    return rewrites
