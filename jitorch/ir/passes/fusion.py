"""Fusion: partition a graph's nodes into groups, each of which becomes one kernel.

`fuse(graph)` returns `Group`s in an order that respects the dataflow: every
group reads only graph inputs, constants and outputs of earlier groups. Each
node is in exactly one group (nothing is recomputed here: `recompute` copies nodes before). How a node is treated
comes from `jitorch.ir.lowerable.kind_of` (the code generator's rule):

* pointwise nodes over one iteration space fuse into maximal groups; a node
  over a smaller shape that broadcasts to the space (``1 - w`` in
  ``a*(1-w) + b*w``) joins as long as its value is needed only inside;
* a reduction absorbs its pointwise prologue (the nodes it depends on, over
  its input shape or broadcasting to it) and an epilogue over its output
  shape; its kernel visits every input element once, so the prologue may also
  write values other groups need (``e`` in a softmax), and pointwise siblings
  over its input shape that the reduction does not read may join it as more
  such values (`reduction_sides`: a producer writing a value the reduction
  sums and another it does not, one kernel rather than two reading the
  producer's operands); not a full reduction's, whose kernel would then not
  split across threads; and, where it reduces each row of its input's
  trailing dims (keeping them, of size 1) and a row holds at most
  `ROW_EPILOGUE_MAX` elements, a row epilogue: pointwise nodes over its
  input that read its result (``g - exp(out) * g.sum(-1, keepdim=True)``),
  computed in a second pass over each row while the row is in cache, unless
  a reduction outside reads what they write, or a view of it (its prologue
  computes them rather than reading them from memory);
* reductions over one input space that reduce the same dims to the same
  output (`same_reduction`: sums, means, maxima and minima with one result,
  not full reductions) share a group where none depends on another
  (`dependent_reductions`): a layer norm's backward sums ``g * w`` and
  ``g * w * xhat`` over each row, and ``g`` and ``g * xhat`` over each
  column, each pair reading its input once; the epilogue and the row
  epilogue read all their results. Row reductions (`row_reduction`) share
  one where one depends on another too (`DEPENDENT_ROW_REDUCTIONS`): a layer
  norm's mean and variance, whose kernel reduces each row by each in turn,
  the row in cache;
* a view of a value from outside the group (or of such a view) folds into the
  group that consumes it as index maths; a view of a value computed in the
  group would need that value in memory, so it starts a later group; a view
  nobody can fold is a ``"view"`` group (a compact copy);
* a gather (an indexed load: ``gather``, ``index_select``) is pointwise over
  its output, but reads its source and its index where they lie, as a view
  reads its input: both come from outside the group (or through views of such
  values), and the gather joins the group of its consumers, where views of
  its result fold as views of its operands do, where they can: the kernel
  builder's rule (`jitorch.ir.lowerable.folds`) says whether the index maths
  around a gather folds; an ``as_strided`` of its result (a pool's windows of a
  replicate pad), a reshape across its gathered dim or a gather of it does not,
  and starts a later group, which reads the gather's result from memory;
* every other node (matmul, sort, indexing, anything the code generator
  cannot lower) is an ``"external"`` group of its own.

No merge makes a tie point depend on another it did not depend on (`tie_points`, `_Partition.ties`): two matrix
products the executor could run at once as a pair (GPT's MLP backward: the GELU the c_proj weight gradient reads,
computed in the GELU backward's kernel, which reads the c_proj input gradient's product), or two reductions that
may share a loop (a hand-written RMSNorm step: ``x * rstd``, after the forward's mean of squares, in one pointwise
kernel with ``g * w * x``, before the backward's row mean), except by the merge that puts reductions in one loop;
the recompute pass gives a reader the copy of a pointwise value that such a merge would have shared
(`recompute`). After fusion, a group that computes the same value twice (a recompute copy beside its original:
a column sum's copy of ``relu(x @ w)`` and its pointwise siblings', which joined its group) computes it once
(`merge_repeats`).

Groups grow by merging, most valuable first: producer and consumer over the
same space, then reductions with their prologue and epilogue, then any other
legal producer-consumer pair (broadcast inputs), then siblings over one space
that read a common value (a pointwise cluster and a reduction over its input
among them, and reductions that may share a group), then pointwise groups of
one element that share nothing (an optimizer's step counters, one per
parameter: a kernel call costs more than their arithmetic). A merge happens when the merged group still has one
kernel form (`_Partition.union_form`) and at most `MAX_GROUP_NODES` nodes, and
the graph of groups stays acyclic (checked against a topological order of the
groups kept up to date, so a merge costs time in proportion to the groups
between the two, not to the graph).
"""

from __future__ import annotations

from dataclasses import dataclass

import heapq
import logging
from math import prod

import numpy as np

from ..lowerable import folds, kind_of
from ...runtime.logs import log
from .cse import literal_key
from .rewrite import Rewriter, has_effects


@dataclass(eq=False)
class Group:
    """Nodes that run as one kernel (or one external call).

    ``kind``: "pointwise", "reduction", "view" or "external". ``nodes`` in
    dataflow order; ``inputs``: values read from outside the group, in
    first-use order; ``outputs``: values of the group needed outside it (by
    later groups, as graph outputs or as mutations), in definition order;
    ``shape``: the iteration space (the output shape of a pointwise or view
    group, the input shape of a reduction, the first output's shape of an
    external call).
    """

    kind: str
    nodes: list
    inputs: list
    outputs: list
    shape: tuple

    @property
    def reduction(self):
        """The (first) reduction node of a reduction group, else None."""
        if self.kind != "reduction":
            return None
        return next(n for n in self.nodes if kind_of(n) == "reduction")

    @property
    def reductions(self):
        """The reduction nodes of a reduction group (several over one space: `same_reduction`), in dataflow
        order; empty for another group."""
        if self.kind != "reduction":
            return []
        return [n for n in self.nodes if kind_of(n) == "reduction"]

    def __str__(self):
        return f"{self.kind}[{', '.join(map(str, self.shape))}]: {', '.join(n.op.name for n in self.nodes)}"


def fuse(graph, prologue_outputs=True):
    """Partition ``graph.nodes`` into `Group`s in a valid execution order.

    With ``prologue_outputs=False`` a reduction's prologue holds only values
    nothing outside the group needs (for kernels that cannot write them).
    """
    return fuse_with_plan(graph, prologue_outputs)[0]


def fuse_with_plan(graph, prologue_outputs=True, plan=None):
    """(groups as `fuse` gives them, their plan, whether ``plan`` made them).

    A plan is the partition itself: for each node of ``graph.nodes``, in order,
    the number of its group. Taking a plan skips the search for merges, most of
    fusion's time, but not its rules: each group of the plan must have a kernel
    form (`_Partition.adopt` checks what the search checks merge by merge: one
    kind of kernel, its size, no view of a value computed inside), and the
    groups must not depend on each other in a cycle, so a plan from elsewhere
    can only give a legal partition. A ``plan`` that breaks a rule is dropped
    (logged) and the graph fused anew."""
    if plan is not None:
        part = _Partition(graph, prologue_outputs, searching=False)
        refused = part.adopt(plan)
        if refused is None:
            return _logged(graph, part.groups()), plan, True
        log("fusion", "the fusion plan given does not apply (%s): fusing anew", refused)
    part = _Partition(graph, prologue_outputs)
    while part.grow():
        pass
    numbers = {}
    plan = [numbers.setdefault(part.owner[n], len(numbers)) for n in graph.nodes]
    return _logged(graph, part.groups()), plan, False


def merge_repeats(graph, groups):
    """Drop from ``graph`` and ``groups`` each pointwise node that repeats an earlier one of its group (same op,
    same arguments): the kernel computes the value once. The recompute pass gives a reduction its own copy of a
    pointwise value that other kernels read too (so that no kernel writes it), and fusion may then put the copy
    and the original in one group (a column sum taking the pointwise cluster beside it as siblings): the kernel
    computed ``relu(mm)`` twice. The later node's readers read the earlier one's value; a group's inputs and
    outputs name the values that stand in. Returns the number of nodes dropped (none unless `MERGE_REPEATS`)."""
    if not MERGE_REPEATS:
        return 0
    index = {n: i for i, g in enumerate(groups) for n in g.nodes}
    # (group, op, arguments, types) -> the first nodes so (one per side of its group's reduction, in graph order):
    # a node repeats the one of its side. The sides are made only for the groups where a node repeats another so
    # (making them for every group was a third of this pass's time on a GPT step: 200 groups, 70 repeats), of
    # the values each node read before the merges began (the walk below rewrites the arguments it passes).
    reads = {n: n.input_tuple() for n in index}
    sides = {}  # group index -> its `_reduction_sides_of`
    rw = Rewriter(graph)
    first = {}
    for node in graph.nodes:
        rw.update_args(node)
        if kind_of(node) != "pointwise" or has_effects(node):
            continue
        i = index[node]
        key = (i, node.op, literal_key(node.args), tuple(o.type for o in node.outputs))
        earlier = first.get(key)
        if earlier is None:
            first[key] = [node]
            continue
        group_sides = sides.get(i)
        if group_sides is None:
            group_sides = sides[i] = _reduction_sides_of(groups[i], reads.__getitem__)
        side = _side(node, group_sides)
        same = next((e for e in earlier if _side(e, group_sides) == side), None)
        if same is None:
            earlier.append(node)
        else:
            rw.replace_node(node, same.outputs)
    if not rw.dropped:
        return 0
    rw.finish()
    order = {n: i for i, n in enumerate(graph.nodes)}
    for g in groups:
        g.nodes = [n for n in g.nodes if n not in rw.dropped]
        g.inputs = list(dict.fromkeys(rw.resolve(v) for v in g.inputs))
        g.outputs = sorted(dict.fromkeys(rw.resolve(v) for v in g.outputs),
                           key=lambda v: (order[v.node], v.index))
    log("fusion", "%d repeated nodes dropped from their groups", len(rw.dropped))
    return len(rw.dropped)


def _reduction_sides_of(group, reads=None):
    """`reduction_sides` of a reduction group (``reads``: node -> the values it reads, as `reduction_sides`
    takes it), () for a pointwise one."""
    reds = [n for n in group.nodes if n.op.view is None and kind_of(n) == "reduction"]
    return reduction_sides(reds, group.nodes, reads) if reds else ()


def _side(node, sides):
    """Whether ``node`` is in its group's epilogue (`reduction_sides`), which a kernel evaluates over the
    reduction's output in a loop of its own: a value there and on the input side is computed in each (where the
    reduction keeps the shape, a 0-d std's, the input side's value is not at hand in the epilogue's loop). The
    row epilogue runs over the input's rows and evaluates an input-side value again from its leaves."""
    return bool(sides) and node in sides[1]


def _logged(graph, groups):
    if logging.getLogger("jitorch.fusion").isEnabledFor(logging.INFO):  # (the listing takes milliseconds to build)
        log("fusion", "%d nodes in %d groups:\n%s", len(graph.nodes), len(groups),
            "\n".join(f"  {i}: {g}" for i, g in enumerate(groups)))
    return groups


def _shape(value):
    return tuple(value.type.shape)


def reduction_sides(red, nodes, reads=None, users=None):
    """(input side, epilogue, row epilogue) of a reduction group: ``nodes`` (with ``red``, its reduction, or its
    reductions, a collection of several over one input space: `same_reduction`) split by where its kernel
    evaluates them. The epilogue is what the reductions' results feed (through ``nodes``) and the nodes only
    that needs, computed over the output after the reduction loop; of it, where the reductions are row
    reductions (`row_reduction`), the row epilogue is what holds values over the reductions' input (a value
    over the output broadcast back over the reduced dims: ``g - exp(out) * s`` after ``s = g.sum(-1,
    keepdim=True)``), computed in a second pass over each row once its results are known. Every other node
    (what the reductions read, their prologue, and the siblings they do not read) is evaluated at each input
    element inside the loop. ``reads``: node -> the values it reads (``Node.input_tuple`` by default);
    ``users``: value -> the nodes reading it (any: those of ``nodes`` count; by default found among
    ``nodes``). The walks start from the reductions and the epilogue, which are few, not from the whole group.
    (Where one of several reductions depends on another, the other is in its prologue, its result read there as
    a value over the output: `dependent_reductions` says so, and such a group has a kernel form only where they
    are row reductions, `DEPENDENT_ROW_REDUCTIONS`.)"""
    reds = set(red) if isinstance(red, (list, tuple, set, frozenset)) else {red}
    members = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    reads = reads or (lambda n: n.input_tuple())
    if users is None:
        readers = {}
        for n in members:
            for v in reads(n):
                readers.setdefault(v, []).append(n)
        users = lambda v: readers.get(v, ())  # noqa: E731

    def up(starts):
        found, stack = set(), list(starts)
        while stack:
            for v in reads(stack.pop()):
                m = v.node
                if m in members and m not in found and m not in reds:
                    found.add(m)
                    stack.append(m)
        return found

    def down(starts):
        found, stack = set(starts), list(starts)
        while stack:
            for v in stack.pop().outputs:
                for m in users(v):
                    if m in members and m not in found:
                        found.add(m)
                        stack.append(m)
        return found
    prologue = up(reds)
    after = down(reds) - reds
    # (the walk up from the epilogue stops at the reductions: what they read is the prologue)
    epilogue = (after | up(after)) - prologue if after else set()
    first = next(iter(reds))
    in_space, out_space = _shape(first.args[0]), _shape(first.outputs[0])
    rows = set()
    if epilogue and row_reduction(in_space, out_space):
        rows = down([n for n in epilogue if any(_shape(v) == in_space for v in n.outputs)])
    return members - epilogue - reds, epilogue - rows, rows


def dependent_reductions(reds, nodes, reads=None):
    """Whether one of the reductions ``reds`` depends on another through ``nodes`` (a layer norm's variance on
    its mean): they cannot share one loop."""
    reds = set(reds)
    if len(reds) < 2:
        return False
    members = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    reads = reads or (lambda n: n.input_tuple())
    for red in reds:
        seen, stack = set(), [red]
        while stack:
            for v in reads(stack.pop()):
                m = v.node
                if m in reds:
                    return True
                if m in members and m not in seen:
                    seen.add(m)
                    stack.append(m)
    return False


def reduced_dims(red):
    """(input shape, the reduced dims as a sorted tuple, output shape) of reduction node ``red``."""
    in_space = _shape(red.args[0])
    dims = red.args[1] if len(red.args) > 1 and red.op.name not in ("max", "min") else None
    if isinstance(dims, int):
        dims = (dims,)
    rank = max(1, len(in_space))
    reduced = tuple(sorted({d % rank for d in dims})) if dims else tuple(range(len(in_space)))
    return in_space, reduced, _shape(red.outputs[0])


# The reductions that may share a kernel with others over the same space (`same_reduction`): one result each, no
# index kept beside it.
SHARED_LOOP_OPS = ("sum", "mean", "nansum", "amax", "amin", "prod")
# Whether reductions over one input space and the same dims join one group (`same_reduction`); benchmarks/multiout.py
# compares the steps built with and without.
SHARED_REDUCTIONS = True


# Whether row reductions (`row_reduction`) of which one reads another's result (a layer norm's variance, the
# sum of ``(x - mean)**2``, after its mean) join one group, whose kernel reduces each row by each in turn, the
# later ones reading the earlier ones' results (`dependent_reductions`); benchmarks/multiout.py
# (--forms 50) compares the steps built with and without.
DEPENDENT_ROW_REDUCTIONS = True


def same_reduction(a, b):
    """Whether reduction nodes ``a`` and ``b`` may share a kernel: both of `SHARED_LOOP_OPS`, over one input
    shape, reducing the same dims to the same output shape, which holds more than one element (a full reduction's
    kernel splits across threads for one result only), and one thread each in a row's or column's loop."""
    if not SHARED_REDUCTIONS or a.op.name not in SHARED_LOOP_OPS or b.op.name not in SHARED_LOOP_OPS:
        return False
    if len(a.outputs) != 1 or len(b.outputs) != 1:
        return False
    shape = reduced_dims(a)
    return shape == reduced_dims(b) and prod(shape[2]) > 1


def row_reduction(in_space, out_space):
    """The number of leading dims a reduction from ``in_space`` to ``out_space`` keeps, where it reduces the
    trailing dims to size 1 (``keepdim``) and its rows (the reduced dims) hold at most `ROW_EPILOGUE_MAX`
    elements: the reductions whose groups may hold a row epilogue (`reduction_sides`); else 0."""
    if len(in_space) != len(out_space):
        return 0
    kept = 0
    while kept < len(in_space) and in_space[kept] == out_space[kept]:
        kept += 1
    if not kept or any(d != 1 for d in out_space[kept:]) or prod(in_space[kept:]) > ROW_EPILOGUE_MAX:
        return 0
    return kept


# Whether pointwise siblings over a reduction's input join its group (`reduction_sides`); benchmarks/multiout.py
# compares the steps built with and without them.
REDUCTION_SIBLINGS = True
# The most elements of a row that a row epilogue reads again (`reduction_sides`): 64K float32, 256 KB, stay in
# a core's L2 cache between the reduction's pass and the epilogue's (0: no row epilogue).
ROW_EPILOGUE_MAX = 1 << 16


def _broadcasts_to(shape, space):
    """Whether ``shape`` broadcasts to ``space`` (right-aligned, size-1 dims stretch)."""
    return len(shape) <= len(space) and all(a in (1, b) for a, b in zip(reversed(shape), reversed(space)))


def _broadcast(a, b):
    """The broadcast of two shapes (either may be None: no shape), or False if they do not broadcast."""
    if a is None or b is None:
        return a if b is None else b
    if a == b:  # (the common case, without NumPy's broadcast: a sixth of adopting a cached plan)
        return tuple(a)
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return False


# The most nodes in one group. LLVM's optimiser takes superlinear time in a kernel's size: a pointwise
# chain of 20,000 nodes compiled (optimise, fuse, build, LLVM, executor) in 259 s as one kernel, and in
# 7.6-9.6, 6.4-6.6, 6.7-7.1 and 8.7 s (CPU) in groups of at most 64, 128, 256 and 512 nodes. Smaller
# kernels also ran faster: a 2,048-node chain over 2^20 floats (one thread) took 43, 62, 87 and 136 ms,
# as LLVM interleaves the iterations of small loop bodies only. Splitting costs one write and read of a
# value per group.
MAX_GROUP_NODES = 128
# Matrix products whose order matters to fusion (`tie_points`): the executor runs two independent ones at once
# (`jit.interop.pair_products`), which a kernel reading one's result and writing the other's operand forbids.
PRODUCT_OPS = ("matmul", "mm", "bmm")
# Products of fewer multiply-adds are never paired (`jit.interop.PAIR_MIN_WORK`): fusion may tie them.
PRODUCT_MIN_WORK = 1 << 17
# Whether fusion keeps independent products, and independent reductions that may share a loop, from depending on
# each other through a kernel (`tie_points`); benchmarks/multiout.py compares the steps built without.
UNTIED_PRODUCTS = True
UNTIED_REDUCTIONS = True
# Whether a group computes a value once that the recompute pass's copy and its original both compute in it
# (`merge_repeats`); benchmarks/multiout.py compares the steps built without.
MERGE_REPEATS = True


# The kinds that read their operands where they lie (in memory, through index maths: an operand computed in
# the same kernel would have to be stored first). A gather's result is a leaf of its kernel, as a view's is:
# its shape need not broadcast to the kernel's space (only the nodes reading it, or its views, evaluate there);
# so is an index expression's (arange's), which views and gathers in its kernel read as if it lay in memory.
_READS_IN_PLACE = ("view", "gather")
_LEAVES = ("gather", "index")
_INDEX_MATHS = ("view", "gather", "index")


def _read_in_place(kind, by_gather):
    """Whether a view or gather (``by_gather``) in a kernel may read a value a node of ``kind`` computes in it: a
    view's or an index's result (index maths over their own leaves), or, by a view, a gather's (a view of its
    source and index); any other value would have to be in memory."""
    return kind in ("view", "index") or (kind == "gather" and not by_gather)


class _Cluster:
    """A group being grown: its nodes and a summary that makes merging it cheap.

    The summary is kept by counts, so that a merge costs time in proportion to the values crossing
    between the two clusters rather than to their size (a traced backward's forward cluster has as many
    values needed outside as it has nodes)."""

    __slots__ = ("first", "nodes", "reduction", "reductions", "external", "pointwise", "gather", "escaping", "reads",
                 "view_reads", "gather_reads", "shapes", "space", "feeds", "fed_by")

    def __init__(self, node, kind):
        self.first = node                    # its node of lowest graph order
        self.nodes = {node}
        self.reduction = node if kind == "reduction" else None  # its first reduction
        self.reductions = (node,) if kind == "reduction" else ()
        self.external = kind == "external"
        # the broadcast of its pointwise values' shapes (None: no pointwise node, or a reduction group)
        self.pointwise = _shape(node.outputs[0]) if kind == "pointwise" else None
        self.gather = kind in _LEAVES        # it holds a gather or an index (a pointwise kernel, no view's copy)
        self.escaping = {}                   # value needed outside it -> its uses outside (+1 if a sink)
        self.reads = {}                      # value computed in another cluster -> its uses here
        self.view_reads = set()              # the values of ``reads`` that a view or gather node here reads
        self.gather_reads = set()            # the values of ``reads`` that a gather node here reads
        self.shapes = {}                     # shape -> how many values of ``escaping`` have it
        self.space = None                    # iteration space (None: none common to its outputs)
        self.feeds = _NONE                   # the tie points its values reach (`tie_links`)
        self.fed_by = _NONE                  # the tie points whose results reach it (`tie_links`)

    @property
    def kind(self):
        if self.external:
            return "external"
        if self.reduction is not None:
            return "reduction"
        return "view" if self.pointwise is None and not self.gather else "pointwise"


_NONE = frozenset()


def product_work(node):
    """A matrix product node's multiply-adds (batch × m × n × k from its operands' shapes)."""
    a, b = (_shape(arg) for arg in node.args[:2])
    if len(a) < 2 or len(b) < 2:  # (a vector's product: no pair)
        return 0
    batch = max(prod(a[:-2]), prod(b[:-2]))
    return batch * a[-2] * a[-1] * b[-1]


def tie_points(nodes, kind):
    """The nodes that fusion keeps from coming to depend on each other through a kernel (`_Partition.ties`): the
    products of `PRODUCT_OPS` of at least `PRODUCT_MIN_WORK` multiply-adds (where `UNTIED_PRODUCTS`), which the
    executor pairs, and the reductions that may share a loop with another (`same_reduction`, where
    `UNTIED_REDUCTIONS`), none where there are not two of a kind."""
    products, reductions = [], {}
    for n in nodes:
        k = kind(n)
        if k == "external" and UNTIED_PRODUCTS and n.op.name in PRODUCT_OPS and product_work(n) >= PRODUCT_MIN_WORK:
            products.append(n)
        elif k == "reduction" and UNTIED_REDUCTIONS and SHARED_REDUCTIONS and n.op.name in SHARED_LOOP_OPS \
                and len(n.outputs) == 1:
            reductions.setdefault(reduced_dims(n), []).append(n)
    points = set(products) if len(products) > 1 else set()
    for key, same in reductions.items():
        if len(same) > 1 and prod(key[2]) > 1:
            points.update(same)
    return points


def tied(p, q):
    """Whether tie points ``p`` and ``q`` (`tie_points`) lose by one depending on the other: two products (no
    longer a pair run at once), two reductions that may share a loop (no longer one kernel)."""
    if p.op.name in PRODUCT_OPS:
        return q.op.name in PRODUCT_OPS
    return q.op.name not in PRODUCT_OPS and same_reduction(p, q)


def tie_links(nodes, users, kind):
    """({node: the tie points (`tie_points`) its value reaches through pointwise nodes and views}, {node: the tie
    points whose results reach it so}, a `Reach` of the tie points: whether one reaches another at all), nodes
    without any left out of the dicts. ``nodes`` in dataflow order; ``users``: value -> the nodes reading it;
    ``kind``: node -> its kind (`lowerable.kind_of`). A kernel holding a node that reaches one point and a node
    that another reaches makes the one depend on the other (`_Partition.ties`)."""
    points = tie_points(nodes, kind)
    if not points:
        return {}, {}, Reach({}, {})
    through = ("pointwise", "view")
    # (what each node reaches is a bit set over the points, an int: as sets, each node's copy of all the points
    # below it made this quadratic: 1.1 s a call on generate()'s unrolled graph of 64 decode steps, 0.12-0.4 now)
    bit = {p: 1 << i for i, p in enumerate(points)}  # (any numbering: only the bits' sets are compared)
    feeds, fed_by, below = {}, {}, {}
    for n in reversed(nodes):
        found, reached = set(), 0
        for v in n.outputs:
            for u in users.get(v, ()):
                b = bit.get(u)
                if b is not None:
                    found.add(u)
                    reached |= b
                elif u in feeds and kind(u) in through:
                    found |= feeds[u]
                reached |= below.get(u, 0)
        if found:
            feeds[n] = found
        if reached:
            below[n] = reached
    for n in nodes:
        found = set()
        for v in n.input_values():
            m = v.node
            if m in points:
                found.add(m)
            elif m in fed_by and kind(m) in through:
                found |= fed_by[m]
        if found:
            fed_by[n] = found
    return feeds, fed_by, Reach(bit, {p: below.get(p, 0) for p in points})


class Reach:
    """Which tie points reach which (`tie_links`): ``reach(p, q)``, whether a path of the graph leads from point
    ``p``'s results to point ``q``."""

    __slots__ = ("bit", "below")

    def __init__(self, bit, below):
        self.bit, self.below = bit, below  # point -> its bit; point -> the bits of the points it reaches

    def __call__(self, p, q):
        return bool(self.below[p] & self.bit[q])


@dataclass
class _Union:
    """Two clusters merged: its kernel form, the shapes of its escaping values (shape -> count), and
    the values computed in one and read by the other, with their uses there."""

    pointwise: object
    space: tuple
    shapes: dict
    crossing: list


def _common(producer, reader):
    """The keys of both dicts, found by scanning the smaller."""
    small, large = (producer, reader) if len(producer) <= len(reader) else (reader, producer)
    return [k for k in small if k in large]


def _add_counts(p, q):
    """``p`` and ``q`` (value -> count) summed, into the larger of the two."""
    small, large = (p, q) if len(p) <= len(q) else (q, p)
    for k, n in small.items():
        large[k] = large.get(k, 0) + n
    return large


def _union(p, q):
    """The union of two sets, into the larger."""
    small, large = (p, q) if len(p) <= len(q) else (q, p)
    large |= small
    return large


class _Dag:
    """The graph of clusters: a minimal directed graph. (networkx would do, but importing it costs
    about 150 ms, which every first compile in a process would pay.)"""

    def __init__(self):
        self.succ, self.pred = {}, {}

    def add_nodes_from(self, nodes):
        for n in nodes:
            self.succ.setdefault(n, {})
            self.pred.setdefault(n, {})

    def add_edges_from(self, edges):
        for a, b in edges:
            self.add_nodes_from((a, b))
            self.succ[a][b] = None
            self.pred[b][a] = None

    def successors(self, n):
        return iter(self.succ[n])

    def predecessors(self, n):
        return iter(self.pred[n])

    def remove_node(self, n):
        for s in self.succ.pop(n):
            del self.pred[s][n]
        for p in self.pred.pop(n):
            del self.succ[p][n]

    def topological_order(self, key):
        """Kahn's algorithm, taking the ready node of smallest ``key`` first (deterministic)."""
        indegree = {n: len(p) for n, p in self.pred.items()}
        ready = [(key(n), i, n) for i, n in enumerate(self.succ) if not indegree[n]]
        heapq.heapify(ready)
        counter = len(ready)
        order = []
        while ready:
            _, _, n = heapq.heappop(ready)
            order.append(n)
            for s in self.succ[n]:
                indegree[s] -= 1
                if not indegree[s]:
                    counter += 1
                    heapq.heappush(ready, (key(s), counter, s))
        return order


class _Partition:
    """The clusters being grown, and the graph of clusters in a topological order."""

    def __init__(self, graph, prologue_outputs, searching=True):
        self.prologue_outputs = prologue_outputs
        self.order = {n: i for i, n in enumerate(graph.nodes)}
        self.kind = {n: kind_of(n) for n in graph.nodes}
        self.reads = {n: n.input_tuple() for n in graph.nodes}  # read at every sweep over the edges
        self.users = {}    # Value -> nodes reading it
        for n in graph.nodes:
            for v in self.reads[n]:
                self.users.setdefault(v, []).append(n)
        # values needed whatever the partition: graph outputs and values written back into inputs
        self.sinks = set(graph.output_values()) | {v for _, v in graph.mutations}
        self.folded = {}   # the index-maths nodes asked of `folds` (in graph order) -> its answer
        # (a plan adopted was searched with them)
        self.feeds, self.fed_by, self.reach = tie_links(graph.nodes, self.users, self.kind.__getitem__) \
            if searching else ({}, {}, Reach({}, {}))
        if not searching:  # the clusters and their graph are `adopt`'s
            return
        self.owner = {n: self.single_cluster(n) for n in graph.nodes}
        self.topo = [self.owner[n] for n in graph.nodes]
        self.pos = {c: i for i, c in enumerate(self.topo)}
        self.dag = _Dag()
        self.dag.add_nodes_from(self.topo)
        self.dag.add_edges_from((self.owner[v.node], self.owner[u]) for v, users in self.users.items()
                                if v.node is not None for u in users)

    def single_cluster(self, node):
        """The cluster of ``node`` alone, with its summary."""
        c = _Cluster(node, self.kind[node])
        for v in node.outputs:
            uses = len(self.users.get(v, ())) + (v in self.sinks)
            if uses:
                c.escaping[v] = uses
                c.shapes[_shape(v)] = c.shapes.get(_shape(v), 0) + 1
        for v in self.reads[node]:
            if v.node is not None:
                c.reads[v] = c.reads.get(v, 0) + 1
        if self.kind[node] in _READS_IN_PLACE:
            c.view_reads = set(c.reads)
        if self.kind[node] == "gather":
            c.gather_reads = set(c.reads)
        c.space = self.single_space(c)
        if self.feeds and node in self.feeds:
            c.feeds = self.feeds[node]
        if self.fed_by and node in self.fed_by:
            c.fed_by = self.fed_by[node]
        return c

    def ties(self, a, b):
        """Whether merging clusters ``a`` and ``b`` makes a tie point (`tie_points`) depend on another it did not
        depend on, where the two lose by it (`tied`): one of them reads the one's result, the other reaches the
        other. GPT's MLP backward: the GELU that the c_proj weight's gradient reads, in the kernel of the GELU's
        backward, which reads the c_proj input gradient's product: the two products then ran one after the other
        rather than as a pair. A hand-written RMSNorm step: ``x * rstd`` (after the forward's mean of squares) in
        one pointwise kernel with the backward's ``g * w * x`` (before its row mean): the two means, which may share
        a loop, took two kernels. Reductions that share a loop by the merge merge all the same: that is the gain
        the rule keeps for others (a layer norm backward's row sums, one of which reads the forward's mean that the
        other could share a loop with), and a kernel less is worth more than a pair of products run at once, which
        only more than one thread gains."""
        if a.reductions and b.reductions:
            return False
        for x, y in ((a, b), (b, a)):
            if not x.feeds or not y.fed_by:
                continue
            for p1 in y.fed_by - x.fed_by:
                for p2 in x.feeds - y.feeds:
                    if p1 is p2 or self.reach(p1, p2) or self.reach(p2, p1) or not tied(p1, p2):
                        continue
                    c1, c2 = self.owner[p1], self.owner[p2]
                    if c1 in (a, b) and c2 in (a, b):  # (both in the merged cluster: a shared loop)
                        continue
                    if not self.reaches(c1, c2):
                        return True
        return False

    def reaches(self, p, q):
        """Whether cluster ``p`` reaches cluster ``q`` in the graph of clusters (searched between them in the
        topological order)."""
        lo, hi = self.pos[p], self.pos[q]
        if lo >= hi:
            return False
        stack, seen = [p], {p}
        while stack:
            for t in self.dag.succ[stack.pop()]:
                if t is q:
                    return True
                if t not in seen and self.pos[t] < hi:
                    seen.add(t)
                    stack.append(t)
        return False

    def single_space(self, c):
        """The iteration space of a one-node cluster (None for an external call)."""
        if c.external:
            return None
        if c.reduction is not None:
            return _shape(c.reduction.args[0])
        form = self.pointwise_form(set(c.shapes), c.pointwise)
        return form[1] if form else None

    # Kernel forms ------------------------------------------------------------------------------

    @staticmethod
    def pointwise_form(shapes, pointwise):
        """(pointwise shape, space) of a group without reduction whose escaping values have ``shapes``,
        or None if it has no kernel form: the values it writes must share one shape that its computed
        values broadcast to."""
        if pointwise is False or len(shapes) > 1:
            return None
        space = shapes.pop() if shapes else pointwise
        if pointwise is not None and not _broadcasts_to(pointwise, space):
            return None
        return pointwise, space

    def reduction_form(self, reds, nodes, escaping):
        """(None, space) of a group with reductions ``reds`` (one, or several over one space: `same_reduction`),
        or None if it has no kernel form.

        The input side (`reduction_sides`: what the reductions depend on and their siblings) runs over the
        reductions' input, the epilogue over their output after the reduction loop, where input-side values
        are gone. No reduction of several may depend on another (`dependent_reductions`) but row reductions
        (`DEPENDENT_ROW_REDUCTIONS`), each reduced over the row in turn."""
        red = reds[0]
        in_space, out_space = _shape(red.args[0]), _shape(red.outputs[0])
        if len(reds) > 1 and dependent_reductions(reds, nodes, self.reads.__getitem__) \
                and not (DEPENDENT_ROW_REDUCTIONS and row_reduction(in_space, out_space)):
            return None
        pro, _, rows = reduction_sides(reds, nodes, self.reads.__getitem__, self.users_of)
        if not self.prologue_outputs and any(v.node in pro for v in escaping):
            return None
        if (prod(out_space) == 1 or not REDUCTION_SIBLINGS) and pro - self.feeding(reds, pro):
            return None  # (siblings: a full reduction writing them would not split across threads)
        for n in nodes:
            space = in_space if n in pro or n in rows else out_space
            for v in n.outputs:
                if v in escaping:
                    if _shape(v) != space:
                        return None
                    if n in rows and self.reduced_elsewhere(v, nodes):
                        return None  # (better that reduction's prologue: computed there, not written and read)
                elif self.kind[n] == "pointwise" and not _broadcasts_to(_shape(v), space):
                    return None
                if n in pro and any(u in nodes and u not in reds and u not in pro and u not in rows
                                    for u in self.users.get(v, ())):
                    return None  # an input-side value read by the epilogue (the row epilogue computes it again)
        return None, in_space

    def users_of(self, value):
        return self.users.get(value, ())

    def reduced_elsewhere(self, value, nodes):
        """Whether a reduction outside ``nodes`` reads ``value``, or a view of it."""
        stack = [value]
        while stack:
            for u in self.users.get(stack.pop(), ()):
                if u not in nodes and self.kind[u] == "reduction":
                    return True
                if self.kind[u] == "view":
                    stack += u.outputs
        return False

    def feeding(self, reds, nodes):
        """The nodes of ``nodes`` that the reductions ``reds`` depend on (through nodes of ``nodes``)."""
        found, stack = set(), list(reds)
        while stack:
            for v in self.reads[stack.pop()]:
                if v.node in nodes and v.node not in found:
                    found.add(v.node)
                    stack.append(v.node)
        return found

    def union_form(self, a, b):
        """The `_Union` of clusters ``a`` and ``b``, or None if the merged group would have no kernel
        form (acyclicity is checked apart)."""
        if a.external or b.external:
            return None
        if a.reduction is not None and b.reduction is not None and not same_reduction(a.reduction, b.reduction):
            return None
        crossing, internal, in_place = [], [], []
        for x, y in ((a, b), (b, a)):
            for v in _common(x.escaping, y.reads):
                if v in y.view_reads:
                    if not _read_in_place(self.kind[v.node], v in y.gather_reads):
                        return None
                    in_place += [u for u in self.users[v] if u in y.nodes and self.kind[u] in _READS_IN_PLACE]
                crossing.append((v, y.reads[v]))
                if x.escaping[v] == y.reads[v]:  # every use outside x is in y, and v is no sink
                    internal.append(v)
        shapes = dict(a.shapes)
        for s, k in b.shapes.items():
            shapes[s] = shapes.get(s, 0) + k
        for v in internal:
            shapes[_shape(v)] -= 1
        shapes = {s: k for s, k in shapes.items() if k}
        reds = self.ordered(a.reductions + b.reductions)
        if not reds:
            form = self.pointwise_form(set(shapes), _broadcast(a.pointwise, b.pointwise))
        else:
            escaping = (a.escaping.keys() | b.escaping.keys()) - set(internal)
            form = self.reduction_form(reds, a.nodes | b.nodes, escaping)
        if form is None or (in_place and not self.index_maths_folds(in_place, lambda n: n in a.nodes or n in b.nodes)):
            return None
        return _Union(*form, shapes, crossing)

    def index_maths_folds(self, starts, inside):
        """Whether the index maths that views or gathers ``starts`` join, in the group of the nodes for which
        ``inside``, folds (`lowerable.folds`): they, the views and gathers reading them (and so on), and the
        views, gathers and index expressions all those read (and so on). Asked only where a gather is among
        them: a view of an input's view depends on the input's layout, which fusion does not know (the builder
        decides; a group it refuses is split)."""
        region, stack = set(), list(starts)
        while stack:
            n = stack.pop()
            if n not in region:
                region.add(n)
                stack += [u for w in n.outputs for u in self.users.get(w, ())
                          if self.kind[u] in _READS_IN_PLACE and inside(u)]
        stack = list(region)
        while stack:
            for w in self.reads[stack.pop()]:
                n = w.node
                if n is not None and n not in region and self.kind.get(n) in _INDEX_MATHS and inside(n):
                    region.add(n)
                    stack.append(n)
        if not any(self.kind[n] == "gather" for n in region):
            return True
        nodes = tuple(sorted(region, key=self.order.__getitem__))
        if nodes not in self.folded:
            self.folded[nodes] = folds(nodes)
        return self.folded[nodes]

    @staticmethod
    def absorb(keep, gone, union):
        """Make ``keep``'s summary that of ``keep`` and ``gone`` merged into ``union``."""
        keep.escaping = _add_counts(keep.escaping, gone.escaping)
        keep.reads = _add_counts(keep.reads, gone.reads)
        keep.view_reads = _union(keep.view_reads, gone.view_reads)
        keep.gather_reads = _union(keep.gather_reads, gone.gather_reads)
        for v, uses in union.crossing:  # computed in one, read by the other: no longer read from outside
            left = keep.escaping.pop(v) - uses
            if left:
                keep.escaping[v] = left
            del keep.reads[v]
            keep.view_reads.discard(v)
            keep.gather_reads.discard(v)
        keep.pointwise, keep.space, keep.shapes = union.pointwise, union.space, union.shapes
        keep.gather = keep.gather or gone.gather
        if gone.feeds:
            keep.feeds = keep.feeds | gone.feeds
        if gone.fed_by:
            keep.fed_by = keep.fed_by | gone.fed_by

    # Merging ---------------------------------------------------------------------------------------

    def linked_between(self, p, q):
        """The clusters after ``p`` and before ``q`` in the topological order that ``p`` reaches
        (``forward``) or that reach ``q`` (not ``forward``), and ``forward``; or None if ``p`` reaches
        ``q`` through one of them (merging them would close a cycle). The search starts from the end
        with fewer edges: a cluster that many others read (a traced backward's forward pass) is
        often ``p``, and scanning its edges at every merge would cost time quadratic in its size."""
        lo, hi = self.pos[p], self.pos[q]
        forward = len(self.dag.succ[p]) <= len(self.dag.pred[q])
        start, end, edges = (p, q, self.dag.succ) if forward else (q, p, self.dag.pred)
        stack = [s for s in edges[start] if s is not end and lo < self.pos[s] < hi]
        found = set(stack)
        while stack:
            for t in edges[stack.pop()]:
                if t is end:
                    return None
                if t not in found and lo < self.pos[t] < hi:
                    found.add(t)
                    stack.append(t)
        return found, forward

    def try_merge(self, a, b):
        """Merge clusters ``a`` and ``b`` if legal; returns whether it did."""
        if a is b or len(a.nodes) + len(b.nodes) > MAX_GROUP_NODES:
            return False
        form = self.union_form(a, b)
        if form is None or self.ties(a, b):
            return False
        p, q = (a, b) if self.pos[a] < self.pos[b] else (b, a)
        linked = self.linked_between(p, q)
        if linked is None:
            return False
        found, forward = linked
        keep, gone = (a, b) if len(a.nodes) >= len(b.nodes) else (b, a)
        # The topological order stays valid with the merged cluster where q was, p's descendants
        # after it and q's ancestors before it; Nones fill the freed slots so that later positions hold.
        i, j = self.pos[p], self.pos[q]
        between = [c for c in self.topo[i + 1:j] if c is not None]
        before = [c for c in between if (c in found) != forward]
        new = before + [keep] + [c for c in between if (c in found) == forward]
        self.topo[i:j + 1] = [None] * (j + 1 - i - len(new)) + new
        del self.pos[gone]
        for k in range(j + 1 - len(new), j + 1):
            self.pos[self.topo[k]] = k
        self.dag.add_edges_from([(s, keep) for s in self.dag.predecessors(gone) if s is not keep])
        self.dag.add_edges_from([(keep, s) for s in self.dag.successors(gone) if s is not keep])
        self.dag.remove_node(gone)
        for n in gone.nodes:
            self.owner[n] = keep
        keep.nodes |= gone.nodes
        keep.first = min(keep.first, gone.first, key=self.order.__getitem__)
        keep.reductions = self.ordered(keep.reductions + gone.reductions)
        keep.reduction = keep.reductions[0] if keep.reductions else None
        self.absorb(keep, gone, form)
        return True

    def adopt(self, plan):
        """Make the clusters of ``plan`` (see `fuse_with_plan`) and their graph; None when every group has a
        kernel form and the graph has no cycle, else why not."""
        nodes = list(self.order)
        if type(plan) is not list or len(plan) != len(nodes) or \
                not all(type(k) is int and 0 <= k < len(nodes) for k in plan):
            return f"it is not a group number below {len(nodes)} for each of the {len(nodes)} nodes"
        members = {}
        for n, k in zip(nodes, plan):
            members.setdefault(k, []).append(n)
        self.owner = {}
        for k, group in members.items():
            c = self.single_cluster(group[0]) if len(group) == 1 else self.cluster_of(group)
            if isinstance(c, str):
                return f"group {k} ({', '.join(n.op.name for n in group[:4])}{', ...' if len(group) > 4 else ''}) {c}"
            for n in group:
                self.owner[n] = c
        clusters = list(dict.fromkeys(self.owner[n] for n in nodes))
        self.dag = _Dag()
        self.dag.add_nodes_from(clusters)
        self.dag.add_edges_from((self.owner[v.node], self.owner[u]) for v, users in self.users.items()
                                if v.node is not None for u in users if self.owner[v.node] is not self.owner[u])
        if len(self.dag.topological_order(key=lambda c: self.order[c.first])) != len(clusters):
            return "its groups depend on each other in a cycle"
        return None

    def ordered(self, nodes):
        """``nodes`` as a tuple in graph order."""
        return tuple(sorted(nodes, key=self.order.__getitem__))

    def same_space(self, a, b):
        """Both clusters pointwise or views over one space."""
        return a.kind in ("pointwise", "view") and b.kind in ("pointwise", "view") and \
            a.space is not None and a.space == b.space

    @staticmethod
    def one_reduction(a, b):
        return (a.reduction is None) != (b.reduction is None)

    def merge_edges(self, wanted):
        """Try to merge producer and consumer clusters of every dataflow edge for which ``wanted``."""
        merged = False
        for n in self.order:
            for v in self.reads[n]:
                if v.node is not None:
                    a, b = self.owner[v.node], self.owner[n]
                    if a is not b and wanted(a, b):
                        merged |= self.try_merge(a, b)
        return merged

    def sibling_space(self, a, b):
        """Both clusters over one space, pointwise or views, or one of them a reduction over its input, or both
        reductions that may share a loop (`same_reduction`)."""
        if a.reduction is not None and b.reduction is not None:
            return same_reduction(a.reduction, b.reduction)
        if self.one_reduction(a, b):
            other = b if a.reduction is not None else a
            return other.kind == "pointwise" and a.space is not None and a.space == b.space
        return self.same_space(a, b)

    def merge_siblings(self):
        """Merge clusters over one space that read a common value (one kernel, several outputs)."""
        merged = False
        for users in self.users.values():
            for i, u in enumerate(users):
                for w in users[i + 1:]:
                    a, b = self.owner[u], self.owner[w]
                    if a is not b and self.sibling_space(a, b):
                        merged |= self.try_merge(a, b)
        return merged

    def merge_one_element(self):
        """Merge the pointwise clusters over one space of one element (unrelated: ``step.add_(1)`` per
        parameter), each into the first over its space that it may join."""
        merged, first = False, {}
        for c in list(self.pos):
            if c not in self.pos or c.kind != "pointwise" or c.space is None or prod(c.space) != 1:
                continue
            into = first.setdefault(c.space, c)
            if into is not c and self.try_merge(into, c):
                merged = True
                first[c.space] = self.owner[c.first]
        return merged

    def grow(self):
        """One round of merges, most valuable first; returns whether anything merged."""
        merged = self.merge_edges(self.same_space)
        merged |= self.merge_edges(self.one_reduction)
        merged |= self.merge_edges(lambda a, b: True)
        merged |= self.merge_siblings()
        merged |= self.merge_one_element()
        return merged

    def cluster_of(self, group):
        """The cluster of the nodes ``group`` (two or more, in graph order), with the summary merging them
        one by one would give it; or, where merges could not make it, why not (a string)."""
        if len(group) > MAX_GROUP_NODES:
            return f"has more than {MAX_GROUP_NODES} nodes"
        members = set(group)
        kinds = [self.kind[n] for n in group]
        if "external" in kinds:
            return "holds an external call"
        reductions = tuple(n for n, k in zip(group, kinds) if k == "reduction")
        if any(not same_reduction(reductions[0], r) for r in reductions[1:]):
            return "holds reductions that cannot share a loop"
        c = _Cluster(group[0], kinds[0])
        c.nodes, c.reductions = members, reductions
        c.reduction = reductions[0] if reductions else None
        c.gather = any(k in _LEAVES for k in kinds)
        pointwise = None
        for n, kind in zip(group, kinds):
            for v in n.outputs:
                uses = sum(u not in members for u in self.users.get(v, ())) + (v in self.sinks)
                if uses:
                    c.escaping[v] = uses
                    c.shapes[_shape(v)] = c.shapes.get(_shape(v), 0) + 1
            for v in self.reads[n]:
                if v.node is None:
                    continue
                if v.node not in members:
                    c.reads[v] = c.reads.get(v, 0) + 1
                    if kind in _READS_IN_PLACE:
                        c.view_reads.add(v)
                    if kind == "gather":
                        c.gather_reads.add(v)
                elif kind in _READS_IN_PLACE and not _read_in_place(self.kind[v.node], kind == "gather"):
                    return f"has a {kind} of a value computed in it"
            if kind == "pointwise" and pointwise is not False:
                pointwise = _broadcast(pointwise, _shape(n.outputs[0]))
        if c.reduction is not None:
            form = self.reduction_form(reductions, members, c.escaping.keys())
        else:
            form = self.pointwise_form(set(c.shapes), pointwise)
        if form is None:
            return "has no kernel form"
        gathers = [n for n, kind in zip(group, kinds) if kind == "gather"]
        if gathers and not self.index_maths_folds(gathers, members.__contains__):
            return "has views of a gather's result whose index maths does not fold"
        c.pointwise, c.space = form
        return c

    # Result ----------------------------------------------------------------------------------------

    def group(self, c):
        nodes = sorted(c.nodes, key=self.order.__getitem__)
        inputs = list(dict.fromkeys(v for n in nodes for v in self.reads[n] if v.node not in c.nodes))
        outputs = [v for n in nodes for v in n.outputs if v in c.escaping]
        shape = c.space
        if shape is None:  # an external call, or one view with outputs of several shapes
            shape = _shape(nodes[0].outputs[0]) if nodes[0].outputs else ()
        return Group(c.kind, nodes, inputs, outputs, shape)

    def groups(self):
        order = self.dag.topological_order(key=lambda c: self.order[c.first])
        return [self.group(c) for c in order]


__all__ = ["Group", "Reach", "dependent_reductions", "fuse", "fuse_with_plan", "merge_repeats", "product_work",
           "reduced_dims", "reduction_sides", "row_reduction", "same_reduction", "tie_links", "tie_points", "tied"]
