"""Common subexpression elimination: a node that repeats an earlier one (same op, same
arguments) is dropped for the earlier one's outputs."""

from __future__ import annotations

import math

from ..graph import Value
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
    first = {}
    merged = 0
    for node in graph.nodes:
        rw.update_args(node)
        if has_effects(node):
            continue
        key = (node.op, literal_key(node.args), tuple(o.type for o in node.outputs))
        earlier = first.setdefault(key, node)
        if earlier is not node and rw.replace_node(node, earlier.outputs):
            merged += 1
    rw.finish()
    return merged
