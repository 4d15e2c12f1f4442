"""Common subexpression elimination: a node that repeats an earlier one (same op, same
arguments) is dropped for the earlier one's outputs. A reduction that repeats an earlier one but for
``keepdim`` (a batch norm's backward takes the mean with ``keepdim=True`` that its forward took without) is
a view of the earlier one's result: the same elements, reshaped, where its own kernel would read the whole
input again."""

from __future__ import annotations

import math

from ...ops import registry
from ..graph import Node, Value
from .rewrite import Rewriter, graph_pass, has_effects


def literal_key(a):
    """A hashable key equal for two arguments exactly when the op cannot tell them apart:
    values by identity, literals by type and value (``1``, ``1.0`` and ``True`` differ, and so
    do ``0.0`` and ``-0.0``; NaN equals NaN)."""
    cls = a.__class__
    if cls is Value:
        return a
    if cls is int or cls is bool or a is None:  # (most arguments: the tests below, by class, give the same)
        return (cls, a)
    if isinstance(a, Value):
        return a
    if isinstance(a, (list, tuple)):
        return (type(a), tuple(literal_key(x) for x in a))
    if isinstance(a, float):
        return (float, "nan" if math.isnan(a) else a.hex())
    try:
        hash(a)
    except TypeError:
        return (type(a), id(a))
    return (type(a), a)


@graph_pass("cse", "merged %d nodes")
def run(graph):
    """Merge repeated nodes into their first occurrence; random ops are never merged
    (each draws anew)."""
    rw = Rewriter(graph)
    first, kept_dims = {}, {}
    merged = 0
    nodes = []
    for node in graph.nodes:
        rw.update_args(node)
        nodes.append(node)
        if has_effects(node):
            continue
        key = (node.op, literal_key(node.args), tuple(o.type for o in node.outputs))
        earlier = first.setdefault(key, node)
        if earlier is not node and rw.replace_node(node, earlier.outputs):
            merged += 1
            continue
        reduced = _without_keepdim(node)
        if reduced is None:
            continue
        earlier = kept_dims.setdefault(reduced, node)
        if earlier is not node:
            view = _view_as(graph, earlier.outputs[0], node.outputs[0].type)
            if rw.replace_node(node, [view.outputs[0]]):
                nodes.insert(len(nodes) - 1, view)
                merged += 1
    graph.nodes = nodes
    rw.finish()
    return merged


def _without_keepdim(node):
    """The key of a one-output node whose op takes ``keepdim`` (a reduction), its ``keepdim`` argument left
    out, with the output's dtype and element count; None for other nodes."""
    names = node.op.arg_names or ()
    if "keepdim" not in names or len(node.outputs) != 1 or node.op.view is not None:
        return None
    at = names.index("keepdim")
    args = list(node.args[:at]) + list(node.args[at + 1:])
    while len(args) > at and args[-1] is None:  # (a trailing dtype=None is the default)
        args.pop()
    out = node.outputs[0].type
    return (node.op, literal_key(tuple(args)), out.dtype, out.device, math.prod(out.shape))


def _view_as(graph, value, typ):
    """A node viewing ``value`` as ``typ``'s shape (a reduction's result with or without its kept dims)."""
    node = Node(registry.OPS["view"], (value, list(typ.shape)))
    node.outputs.append(Value(graph._fresh(), typ, node, 0))
    return node
