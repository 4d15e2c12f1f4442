"""Recomputation: a pointwise value read across an external node or a reduction is computed again where it is read.

In a training step compiled as one graph, the backward reads values the forward computed pointwise: GELU's
backward reads ``0.5 * h``, ``1 + erf(h / sqrt 2)`` and ``exp(-h * h / 2)`` of its input ``h = x + b``. The
forward's kernel and the backward's cannot be one kernel (the products between them run as external steps),
so without this pass each such value is one more output of the forward's kernel, written there and read back
by the backward's: four outputs of the whole size where GELU's forward makes one.

The same holds across a reduction (`BARRIERS`): a kernel computes the nodes over a reduction's input before its
result exists, so a value the reduction's prologue reads and a node after the reduction reads again is written out
by one kernel and read back by the next. A layer norm's backward reads ``g * w`` in two row sums and in the
gradient after them: one kernel wrote ``g * w``, ``g * w * rstd`` and its negation (three whole-size outputs) for
the three kernels after it (a compile(model) GPT's backward graph, where the saved ``rstd`` is an input and no
external node lies between); its forward wrote ``x - mean`` for the normalisation after the variance's sum.

The same holds where fusion keeps two kernels apart so that two products may run at once as a pair, or two
reductions share a loop (`fusion.tie_points`): GPT's MLP backward (compile(model)) reads ``h = a + b``, its
``cdf`` and ``pdf`` in the GELU's backward, whose kernel reads the c_proj input gradient's product, while the GELU
that the c_proj weight gradient's product reads comes from ``h`` and ``cdf`` too: the backward computes them again
rather than reading three values the GELU's kernel wrote (`_ties`).

For a pointwise node ``n`` whose value some node ``c`` reads that ``n`` also reaches through an external node or a
reduction (so fusion could never put ``n`` and ``c`` in one group), or where ``n``'s cone reaches one tie point and
``c`` reads another's result (which fusion keeps apart), this pass gives ``c`` a copy of ``n`` and of the
pointwise nodes it is computed from (its cone), back to values that lie in memory anyway (graph inputs and
constants, the results of nodes that are not pointwise, values an external node reads, directly or through a
view) and small views (of fewer than an eighth of the value's elements: a batch norm's per-channel
``rsqrt(var + eps)`` viewed to broadcast, read where its kernel writes it; a view of a computed value
refuses the cone otherwise). The copies sit
just before the first such reader, where fusion joins them to its kernel; the original computes on for the
readers before the external node, and is dropped where none is left. A cone is copied only when

* it holds at most `MAX_CONE` nodes, none of them random or a check (`rewrite.has_effects`),
* the value is not returned, written back, laid out by the graph, nor read by an external node (it is in
  memory then anyway), and
* the bytes of its cone's leaves, leaves of less than an eighth of the value's elements (a broadcast bias)
  not counted, are at most the value's: the reader reads no more than it read before.

Every copy computes the same ops on the same operands as the original, in the same dtypes (a kernel rounds
each node's result to its dtype), so the values read are the same bits. All readers across external nodes and
reductions share one copy of each node.

Reductions (`REDUCTIONS`). A reduction that reads a permutation of a pointwise value (a batch norm's
statistics and its backward's sums read the batch-first view of values the batch-last kernels between two
convolutions compute, `sink`) cannot take the value as its prologue: the view needs the value in memory, so
another kernel wrote it and the reduction read it back (the batch norm backward's kernel wrote five such
products). Such a reduction gets its own copy of the value's cone computed over the permuted shape, each leaf
read through the same permutation (a view of a leaf copied too, so the reduction's kernel folds it and no
kernel writes it), where

* the value is neither kept by the call nor read by an external node, and every node of its cone is over
  the value's shape (a permuted copy computes nothing else),
* its leaves of at least an eighth of its elements hold at most `REDUCTION_LEAF_BYTES` times its bytes (a
  value another kernel writes costs its bytes written and read again), a leaf that another reduction of the same
  shape and dims reads too not counted (`_reduction_reads`: fusion joins such sums in one kernel, which reads the
  leaf once; a ReLU batch norm's backward in the dcgan generator wrote two products of its gradient, input and
  output, 3x their bytes in leaves, in a kernel of their own and summed each in another, until session 51), and
* each leaf of its size lies in memory in the value's order over the reduced dims (`_strides`), so the
  reduction's loops, nested by the widest leaf's strides, walk every leaf as they walked the value.

The elements summed are the same bits; a sum's kernel may reassociate (the vectoriser's partial sums follow the
loop body), so a sum is equal to the one without the copies within rounding, a max or min bit for bit.
"""

from __future__ import annotations

import collections
from math import prod

from ...ops import registry
from ...runtime.strided import contiguous_strides
from ..graph import Node, Value, substitute
from ..lowerable import kind_of
from ..values import TensorType
from . import dce, fusion
from .rewrite import graph_pass, has_effects
from .simplify import permutation_chain

# The most pointwise nodes one recomputed value's cone may hold.
MAX_CONE = 12
# Leaves with fewer elements than the value's divided by this are broadcast operands, read from cache.
SMALL_LEAF = 8
# The kinds of node that no kernel holds both sides of: an external call, and a reduction, whose result the nodes
# over its input shape cannot read in its own kernel (a reduction's prologue value read after it is written out)
BARRIERS = ("external", "reduction")
# Whether a reduction computes the pointwise value it reads (its prologue) again rather than reading it.
REDUCTIONS = True
# A recomputed prologue's leaves may hold this many times the bytes of the value it computes.
REDUCTION_LEAF_BYTES = 2
# Whether a pointwise value that a node reads across an external node, and that is not copied for it, is a leaf of
# later cones: its kernel writes it for that reader anyway (`copies`).
WRITTEN_LEAVES = True


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
        for v in dict.fromkeys(node.input_tuple()):
            readers.setdefault(v, []).append(node)
    return readers


def _across_barriers(graph, readers, kind):
    """({node: bit set (over node positions) of the nodes it reaches through at least one external node or reduction
    (`BARRIERS`)}, {node: its position}, {node: bit set of every node it reaches})."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    below, across = {}, {}  # below: every node reached; across: those reached through a barrier
    for node in reversed(graph.nodes):
        reach = through = 0
        for out in node.outputs:
            for reader in readers.get(out, ()):
                reach |= (1 << position[reader]) | below[reader]
                through |= ((1 << position[reader]) | below[reader]) if kind(reader) in BARRIERS \
                    else across[reader]
        below[node], across[node] = reach, through
    return across, position, below


def _ties(feeds, fed_by, below, position):
    """Whether one kernel computing a value that reaches the tie points ``feeds`` and a node that the tie points
    ``fed_by`` reach would make a point depend on another it does not depend on (`fusion.tie_links`, `fusion.tied`;
    fusion then keeps them in two kernels, `fusion._Partition.ties`, and the copy lets the second read no more)."""
    return any(p1 is not p2 and not (below[p1] >> position[p2] & 1) and not (below[p2] >> position[p1] & 1)
               and fusion.tied(p1, p2) for p1 in fed_by for p2 in feeds)


def _pinned(graph):
    """Values whose memory the call keeps: returned, written back, or laid out as the graph records."""
    pinned = set(graph.output_values())
    pinned.update(v for _, v in graph.mutations)
    pinned.update(graph.layouts)
    return pinned


def _read_by_external(value, readers, kind):
    """Whether an external node reads ``value`` or a view of it (a reshape a product reads)."""
    return any(kind(r) == "external" or kind(r) == "view" and _read_by_external(r.outputs[0], readers, kind)
               for r in readers.get(value, ()))


def _in_memory(value, readers, pinned, kind):
    """Whether ``value`` lies in memory whatever fusion does: a graph input or constant, a result of an
    external node or a reduction, a value the call keeps or an external node reads, or a view of one."""
    node = value.node
    while node is not None and kind(node) == "view":
        value = node.args[0]
        node = value.node
    return node is None or kind(node) in ("external", "reduction") or value in pinned or \
        _read_by_external(value, readers, kind)


def _cone(value, readers, pinned, kind, written=frozenset()):
    """The pointwise nodes ``value`` is computed from and the values they read that lie in memory anyway or
    are small views (the leaves: `_in_memory`, a value of ``written`` (`copies`), or a view of fewer than an
    `SMALL_LEAF`th of ``value``'s elements, a batch norm's per-channel ``rsqrt(var + eps)`` viewed to broadcast,
    read where its kernel writes it); (None, None) where the cone holds more than `MAX_CONE` nodes or reads a value computed
    otherwise (a gather's, a larger view's of a computed value: a copy could not fold them). A small value
    computed pointwise with no view between stays in the cone (a layer norm's ``rstd``: fusion joins its
    copy to the reader's kernel as a broadcast node, where reading it would split the kernel)."""
    nodes, leaves, stack, seen = [], [], [value], set()
    small = _elements(value) / SMALL_LEAF
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v is not value and (v in written or _in_memory(v, readers, pinned, kind) or
                               _elements(v) < small and kind(v.node) == "view"):
            leaves.append(v)
            continue
        if not _pointwise(v.node, kind) or len(nodes) == MAX_CONE:
            return None, None
        nodes.append(v.node)
        stack.extend(v.node.input_tuple())
    return nodes, leaves


@graph_pass("recompute", "recomputed %d pointwise values across external nodes or into reductions")
def run(graph):
    """Copy pointwise cones into their readers across external nodes, and into reductions over their
    permutations (see the module docstring); returns the number of values recomputed."""
    made, count = copies(graph)
    if count:
        apply(graph, made)
    if REDUCTIONS:
        count += into_reductions(graph)
    return count


def copies(graph):
    """(the copies across external nodes `run` makes, the number of values they recompute): a list of
    (reader, original node), one per copy, in the order `apply` makes them."""
    readers = _readers(graph)
    kinds = {node: kind_of(node) for node in graph.nodes}  # (asked ~10 times a node: 36 -> 12 ms on a GPT step)
    kind = kinds.__getitem__
    across, position, below = _across_barriers(graph, readers, kind)
    external = _across_barriers(graph, readers, lambda n: "external" if kind(n) == "external" else "pointwise")[0] \
        if WRITTEN_LEAVES else {}
    feeds, fed_by, _ = fusion.tie_links(graph.nodes, readers, kind)
    pinned = _pinned(graph)
    made, wanted = [], {}  # wanted: reader -> the originals it has a copy of
    # Values a node reads across an external node that get no copy for it: their kernel writes them, and a later
    # cone reads them there (`WRITTEN_LEAVES`). A transformer's residual stream is one: each block's sum reads
    # the last one, so its cone runs back through every block and is refused; without it as a leaf, the layer
    # norm's ``x - mean`` and ``xhat`` that its backward reads were each one more whole-size output of the
    # forward's kernel (GPT: 4 of them where the sum and the normalised output are 2).
    written = set()
    count = 0
    for node in graph.nodes:
        if not _pointwise(node, kind):
            continue
        value = node.outputs[0]
        if value in pinned or _read_by_external(value, readers, kind):
            continue
        cone, leaves = _cone(value, readers, pinned, kind, written)
        if cone is None:
            if WRITTEN_LEAVES and any(external[node] >> position[r] & 1 for r in readers.get(value, ())):
                written.add(value)
            continue
        reached, reaching = 0, set()
        for original in cone:
            reached |= across[original]
            reaching.update(feeds.get(original, ()))
        far = [r for r in readers.get(value, ()) if reached >> position[r] & 1
               or reaching and r in fed_by and _ties(reaching, fed_by[r], below, position)]
        small = _elements(value) / SMALL_LEAF
        if not far or sum(_bytes(v) for v in leaves if _elements(v) >= small) > _bytes(value):
            if WRITTEN_LEAVES and any(external[node] >> position[r] & 1 for r in readers.get(value, ())):
                written.add(value)
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


def _reduced_order(strides, shape, reduced):
    """The reduced dims longer than one in the order the reduction kernel nests their loops: by decreasing
    stride, ties in dim order (`jitorch.codegen.kernel._memory_order`)."""
    return [d for d in sorted(reduced, key=lambda d: -abs(strides[d])) if shape[d] != 1]


def _compact(strides, shape):
    """Whether ``strides`` lay ``shape`` out row-major (dims of one element, which any stride steps, aside)."""
    return all(s == c for s, c, n in zip(strides, contiguous_strides(shape), shape) if n != 1)


def _strides(value, graph):
    """``value``'s element strides as the IR says them (the layout the graph records for it; an input or a
    computed result otherwise compact; a reshape, a permutation or an ``as_strided`` of a compact value),
    else None. (A guess at worst: the strides order the reduction's loops, never what it computes.)"""
    layout = graph.layouts.get(value)
    if layout is not None:
        return tuple(layout)
    node = value.node
    if node is None or node.op.view is None:
        return contiguous_strides(value.type.shape)
    base = _strides(node.args[0], graph) if node.args and isinstance(node.args[0], Value) else None
    compact = base is not None and _compact(base, node.args[0].type.shape)
    if node.op.name in ("view", "reshape") and compact:
        return contiguous_strides(value.type.shape)
    chain = permutation_chain(node)
    if chain is not None:
        base = _strides(chain[0], graph)
        return None if base is None else tuple(base[d] for d in chain[1])
    if node.op.name == "as_strided" and compact:
        return tuple(node.args[2])
    return None


def _reduced_dims(reduction, ndim):
    dims = reduction.args[1] if len(reduction.args) > 1 and reduction.op.name not in ("max", "min") else None
    if dims is None or dims == [] or dims == () or ndim == 0:  # (a 0-d tensor's dim 0 or -1 is its only element)
        return list(range(ndim))
    return sorted({d % ndim for d in ([dims] if isinstance(dims, int) else dims)})


def _view_node(graph, op, x, arg, shape):
    node = Node(registry.OPS[op], (x, arg))
    node.outputs.append(Value(graph._fresh(), TensorType(tuple(shape), x.type.dtype, x.type.device), node, 0))
    return node


def _own_views(graph, leaf, kind, made):
    """``leaf``, where it is a view (of a view ...) of a value, as a copy of those views appended to ``made``:
    the reduction's kernel folds its own views as index maths, where the original views' kernel would write
    the leaf for it."""
    if leaf.node is None or kind(leaf.node) != "view":
        return leaf
    base = _own_views(graph, leaf.node.args[0], kind, made)
    made.append(Node(leaf.node.op, (base,) + tuple(leaf.node.args[1:])))
    made[-1].outputs.append(Value(graph._fresh(), leaf.type, made[-1], 0))
    return made[-1].outputs[0]


def _read_permuted(graph, leaf, dims, shape, kind, made):
    """``leaf`` (of ``shape`` or broadcasting to it) as read where ``permute(., dims)`` of ``shape`` reads:
    the view nodes to add, appended to ``made``; the value to read."""
    if leaf.type.ndim == 0:
        return leaf
    leaf = _own_views(graph, leaf, kind, made)
    if leaf.type.ndim < len(shape):
        padded = (1,) * (len(shape) - leaf.type.ndim) + tuple(leaf.type.shape)
        made.append(_view_node(graph, "view", leaf, list(padded), padded))
        leaf = made[-1].outputs[0]
    made.append(_view_node(graph, "permute", leaf, list(dims), [leaf.type.shape[d] for d in dims]))
    return made[-1].outputs[0]


def _prologue_copy(graph, cone, leaves, value, dims, position, kind):
    """Copies of ``cone`` (computing ``value``) over ``permute(value, dims)``'s shape, each leaf read through
    a permuting view: the nodes in dataflow order (views first) and the copy of ``value``; None where a node of
    the cone is not over ``value``'s shape or takes a non-tensor list argument (a permuted copy could not
    compute it)."""
    shape = tuple(value.type.shape)
    if any(n.outputs[0].type.shape != shape or any(isinstance(a, (list, tuple, dict)) for a in n.args)
           for n in cone):
        return None
    made, views = {}, []
    for leaf in leaves:
        made[leaf] = _read_permuted(graph, leaf, dims, shape, kind, views)
    copies = []
    for original in sorted(cone, key=position.__getitem__):
        out = original.outputs[0].type
        copy = Node(original.op, substitute(original.args, lambda v: made.get(v, v)))
        copy.outputs.append(Value(graph._fresh(), TensorType(tuple(out.shape[d] for d in dims), out.dtype,
                                                             out.device), copy, 0))
        made[original.outputs[0]] = copy.outputs[0]
        copies.append(copy)
    return views + copies, made[value]


def into_reductions(graph):
    """Give each reduction that reads a permutation of a pointwise value that another kernel would write
    (`_prologue_value`) its own copy of the value's cone, computed over the permuted shape, so fusion makes
    it the reduction's prologue; returns how many. See the module docstring."""
    readers = _readers(graph)
    kinds = {node: kind_of(node) for node in graph.nodes}
    kind = kinds.__getitem__
    pinned = _pinned(graph)
    position = {node: i for i, node in enumerate(graph.nodes)}
    reads = _reduction_reads(graph, readers, pinned, kind)
    by_key = {}
    for key, bases in reads.values():
        by_key.setdefault(key, collections.Counter()).update(bases)
    before, count = {}, 0
    for node in graph.nodes:
        key, bases = reads.get(node, (None, ()))
        # (the leaves another reduction of its key reads too: read once where fusion joins the two)
        shared = {b for b, n in by_key[key].items() if n > (b in bases)} if key is not None else set()
        found = _prologue_value(graph, node, readers, pinned, kind, position, shared)
        if found is None:
            continue
        nodes, copy = found
        before[node] = nodes
        node.args = (copy,) + tuple(node.args[1:])
        count += 1
    if count:
        graph.nodes = [m for node in graph.nodes for m in [*before.get(node, ()), node]]
        dce.run(graph)
    return count


def _base(value, kind):
    """The value that a chain of views of ``value`` starts from (``value`` where it is no view)."""
    while value.node is not None and kind(value.node) == "view":
        value = value.node.args[0]
    return value


def _reduction_reads(graph, readers, pinned, kind):
    """{reduction: ((its read shape, its reduced dims), the values in memory its prologue reads, as `_base`s)}
    for each reduction whose key another reduction has, one of them reading a permutation: a pointwise value it
    reads (through permutations) is read through its cone's leaves (`_cone`), any other value itself.
    Reductions of one key over the same leaves are the sums one kernel can take together (a batch norm
    backward's sums all read its gradient, its input and its output), reading each leaf once."""
    keys, chains = {}, {}
    for node in graph.nodes:
        if kind(node) == "reduction" and node.args and isinstance(node.args[0], Value):
            read = node.args[0]
            keys[node] = (tuple(read.type.shape), tuple(_reduced_dims(node, read.type.ndim)))
            chains[node] = permutation_chain(read.node) if read.node is not None else None
    alike = collections.Counter(keys.values())
    permuted = {keys[node] for node, chain in chains.items() if chain is not None}
    reads = {}
    for node, key in keys.items():
        # (no other reduction to share a leaf with, or none that reads a permutation: the cones' walk is spared)
        if alike[key] == 1 or key not in permuted:
            continue
        read, chain = node.args[0], chains[node]
        value = chain[0] if chain is not None else read
        leaves = [value]
        if value.node is not None and _pointwise(value.node, kind) and value not in pinned:
            cone, found = _cone(value, readers, pinned, kind)
            leaves = found if cone is not None else [value]
        reads[node] = (key, {_base(v, kind) for v in leaves})
    return reads


def _prologue_value(graph, reduction, readers, pinned, kind, position, shared=frozenset()):
    """For a reduction reading ``permute(value, dims)`` (through a chain of permutations), ``value`` pointwise
    and neither kept nor read by an external node (fusion cannot make ``value`` the reduction's prologue: the
    view would need it in memory): (the nodes computing it again over the read shape, their last result),
    where its cone (`_cone`) reads at most `REDUCTION_LEAF_BYTES` times the value's bytes in its leaves of at
    least an `SMALL_LEAF`th of its elements, those in ``shared`` (as `_base`s: read by another reduction of its
    shape and dims) not counted (a value another kernel writes costs its bytes written and read again), and
    the leaves of the value's size lie in memory in the value's order over the reduced dims (`_strides`), so
    the reduction's loops walk each of them as they walked the value; else None."""
    if kind(reduction) != "reduction" or not reduction.args or not isinstance(reduction.args[0], Value):
        return None
    read = reduction.args[0]
    chain = permutation_chain(read.node) if read.node is not None else None
    if chain is None:
        return None
    value, dims = chain
    if value.node is None or not _pointwise(value.node, kind) or value in pinned or \
            _read_by_external(value, readers, kind):
        return None
    cone, leaves = _cone(value, readers, pinned, kind)
    if cone is None:
        return None
    small = _elements(value) / SMALL_LEAF
    if sum(_bytes(v) for v in leaves if _elements(v) >= small and _base(v, kind) not in shared) > \
            REDUCTION_LEAF_BYTES * _bytes(value):
        return None
    shape = read.type.shape
    reduced = _reduced_dims(reduction, len(shape))
    order = _reduced_order([contiguous_strides(value.type.shape)[d] for d in dims], shape, reduced)
    for leaf in leaves:
        if _elements(leaf) == _elements(value):
            strides = _strides(leaf, graph)
            if strides is None or tuple(leaf.type.shape) != tuple(value.type.shape) or \
                    _reduced_order([strides[d] for d in dims], shape, reduced) != order:
                return None
    return _prologue_copy(graph, cone, leaves, value, dims, position, kind)
