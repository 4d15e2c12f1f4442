"""Recomputation: a pointwise value read across an external node is computed again where it is read.

In a training step compiled as one graph, the backward reads values the forward computed pointwise: GELU's
backward reads ``0.5 * h``, ``1 + erf(h / sqrt 2)`` and ``exp(-h * h / 2)`` of its input ``h = x + b``. The
forward's kernel and the backward's cannot be one kernel (the products between them run as external steps),
so without this pass each such value is one more output of the forward's kernel, written there and read back
by the backward's: four outputs of the whole size where GELU's forward makes one.

For a pointwise node ``n`` whose value some node ``c`` reads that ``n`` also reaches through an external node
(so fusion could never put ``n`` and ``c`` in one group), this pass gives ``c`` a copy of ``n`` and of the
pointwise nodes it is computed from (its cone), back to values that lie in memory anyway: graph inputs and
constants, the results of nodes that are not pointwise, and values an external node reads. The copies sit
just before the first such reader, where fusion joins them to its kernel; the original computes on for the
readers before the external node, and is dropped where none is left. A cone is copied only when

* it holds at most `MAX_CONE` nodes, none of them random or a check (`rewrite.has_effects`),
* the value is not returned, written back, laid out by the graph, nor read by an external node (it is in
  memory then anyway), and
* the bytes of its cone's leaves, leaves of less than an eighth of the value's elements (a broadcast bias)
  not counted, are at most the value's: the reader reads no more than it read before.

Every copy computes the same ops on the same operands as the original, in the same dtypes (a kernel rounds
each node's result to its dtype), so the values read are the same bits. All readers across external nodes
share one copy of each node.
"""

from __future__ import annotations

from math import prod

from ..graph import Node, Value
from ..lowerable import kind_of
from . import dce
from .rewrite import graph_pass, has_effects, substitute

# The most pointwise nodes one recomputed value's cone may hold.
MAX_CONE = 12
# Leaves with fewer elements than the value's divided by this are broadcast operands, read from cache.
SMALL_LEAF = 8


def _elements(value):
    return prod(value.type.shape)


def _bytes(value):
    return _elements(value) * value.type.dtype.itemsize


def _pointwise(node, kind):
    return kind(node) == "pointwise" and not has_effects(node) and len(node.outputs) == 1


def _readers(graph):
    """{value: [nodes that read it, in graph order, each once]}."""
    readers = {}
    for node in graph.nodes:
        for v in dict.fromkeys(node.input_values()):
            readers.setdefault(v, []).append(node)
    return readers


def _across_external(graph, readers, kind):
    """{node: bit set (over node positions) of the nodes it reaches through at least one external node}."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    below, across = {}, {}  # below: every node reached; across: those reached through an external node
    for node in reversed(graph.nodes):
        reach = through = 0
        for out in node.outputs:
            for reader in readers.get(out, ()):
                reach |= (1 << position[reader]) | below[reader]
                through |= ((1 << position[reader]) | below[reader]) if kind(reader) == "external" \
                    else across[reader]
        below[node], across[node] = reach, through
    return across, position


def _pinned(graph):
    """Values whose memory the call keeps: returned, written back, or laid out as the graph records."""
    pinned = set(graph.output_values())
    pinned.update(v for _, v in graph.mutations)
    pinned.update(graph.layouts)
    return pinned


def _in_memory(value, readers, pinned, kind):
    """Whether ``value`` lies in memory whatever fusion does: a graph input or constant, a result of an
    external node or a reduction, a value the call keeps or an external node reads, or a view of one."""
    node = value.node
    while node is not None and kind(node) == "view":
        value = node.args[0]
        node = value.node
    return node is None or kind(node) in ("external", "reduction") or value in pinned or \
        any(kind(r) == "external" for r in readers.get(value, ()))


def _cone(value, readers, pinned, kind):
    """The pointwise nodes ``value`` is computed from and the values they read that lie in memory anyway (the
    leaves, `_in_memory`); (None, None) where the cone holds more than `MAX_CONE` nodes or reads a value
    computed otherwise (a gather's, a view's of a computed value: a copy could not fold them)."""
    nodes, leaves, stack, seen = [], [], [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v is not value and _in_memory(v, readers, pinned, kind):
            leaves.append(v)
            continue
        if not _pointwise(v.node, kind) or len(nodes) == MAX_CONE:
            return None, None
        nodes.append(v.node)
        stack.extend(v.node.input_values())
    return nodes, leaves


@graph_pass("recompute", "recomputed %d pointwise values across external nodes")
def run(graph):
    """Copy pointwise cones into their readers across external nodes (see the module docstring); returns
    the number of values recomputed."""
    made, count = copies(graph)
    if count:
        apply(graph, made)
    return count


def copies(graph):
    """(the copies `run` makes, the number of values they recompute): a list of (reader, original node),
    one per copy, in the order `apply` makes them."""
    readers = _readers(graph)
    kinds = {node: kind_of(node) for node in graph.nodes}  # (asked ~10 times a node: 36 -> 12 ms on a GPT step)
    kind = kinds.__getitem__
    across, position = _across_external(graph, readers, kind)
    pinned = _pinned(graph)
    made, wanted = [], {}  # wanted: reader -> the originals it has a copy of
    count = 0
    for node in graph.nodes:
        if not _pointwise(node, kind):
            continue
        value = node.outputs[0]
        if value in pinned or any(kind(r) == "external" for r in readers.get(value, ())):
            continue
        cone, leaves = _cone(value, readers, pinned, kind)
        if cone is None:
            continue
        reached = 0
        for original in cone:
            reached |= across[original]
        far = [r for r in readers.get(value, ()) if reached >> position[r] & 1]
        small = _elements(value) / SMALL_LEAF
        if not far or sum(_bytes(v) for v in leaves if _elements(v) >= small) > _bytes(value):
            continue
        for r in far:
            own = wanted.setdefault(r, set())
            for original in cone:
                if original not in own:
                    own.add(original)
                    made.append((r, original))
        count += 1
    return made, count


def refused(graph, made):
    """Why ``made`` (a list of (reader, original node), as `copies` gives it; from a cache, so any list) would
    not keep ``graph``'s meaning, or None: each original must be a pointwise node of one output without
    effects, whose value the call does not keep (a copy then computes the same value, and no output's memory
    changes), placed before its reader, and each (reader, original) listed once."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    pinned = _pinned(graph)
    seen = set()
    for r, original in made:
        if position[original] >= position[r]:
            return f"a copy of node {position[original]} for node {position[r]}, which comes before it"
        if (r, original) in seen:
            return f"node {position[original]} copied twice for node {position[r]}"
        seen.add((r, original))
        if not _pointwise(original, kind_of) or original.outputs[0] in pinned:
            return f"node {position[original]} ({original.op.name}) is not a pointwise value the call may recompute"
    return None


def apply(graph, made):
    """Make the copies ``made`` (a list of (reader, original node), `copies`'s) in ``graph``: each just before
    its reader, in the originals' order, which reads them in place of the originals; then drop the originals
    left unread."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    own = {}  # reader -> {original node: its copy for that reader}
    for r, original in made:
        copy = Node(original.op, original.args)
        copy.outputs.append(Value(graph._fresh(), original.outputs[0].type, copy, 0))
        own.setdefault(r, {})[original] = copy
    nodes = []
    for node in graph.nodes:
        mine = own.get(node)
        if mine:
            made_values = {original.outputs[0]: copy.outputs[0] for original, copy in mine.items()}
            for original, copy in sorted(mine.items(), key=lambda item: position[item[0]]):
                copy.args = substitute(copy.args, lambda v: made_values.get(v, v))
                nodes.append(copy)
            node.args = substitute(node.args, lambda v: made_values.get(v, v))
        nodes.append(node)
    graph.nodes = nodes
    dce.run(graph)
