"""Fusion: partition a graph's nodes into groups, each of which becomes one kernel.

`fuse(graph)` returns `Group`s in an order that respects the dataflow: every
group reads only graph inputs, constants and outputs of earlier groups. Each
node is in exactly one group (nothing is recomputed). How a node is treated
comes from `jitorch.codegen.lowering.kind_of`:

* pointwise nodes over one iteration space fuse into maximal groups; a node
  over a smaller shape that broadcasts to the space (``1 - w`` in
  ``a*(1-w) + b*w``) joins as long as its value is needed only inside;
* a reduction absorbs its pointwise prologue (the nodes it depends on, over
  its input shape, or broadcasting to it) and an epilogue over its output
  shape; its kernel visits every input element once, so the prologue may also
  write values other groups need (``e`` in a softmax);
* a view of a value that comes from outside the group (or of such a view)
  folds into the group that consumes it as index maths; a view of a value
  computed in the group would need a buffer, so it goes to a later group;
  a view nobody can fold is a ``"view"`` group (a compact copy);
* every other node (matmul, sort, indexing, anything the code generator
  cannot lower) is an ``"external"`` group of its own.

Groups grow by merging, most valuable first: producer and consumer over the
same space, then reductions with their prologue and epilogue, then any other
legal producer-consumer pair (broadcast inputs), then siblings that read a
common value over the same space. A merge is legal when the merged group
still has one kernel form (`_Partition.legal`) and the graph of groups stays
acyclic.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ...codegen.lowering import kind_of
from ...jit.logs import log


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
        """The reduction node of a reduction group, else None."""
        return next((n for n in self.nodes if self.kind == "reduction" and kind_of(n) == "reduction"), None)

    def __str__(self):
        return f"{self.kind}[{', '.join(map(str, self.shape))}]: {', '.join(n.op.name for n in self.nodes)}"


def fuse(graph, prologue_outputs=True):
    """Partition ``graph.nodes`` into `Group`s in a valid execution order.

    With ``prologue_outputs=False`` a reduction's prologue holds only values
    nothing outside the group needs (for kernels that cannot write them).
    """
    part = _Partition(graph, prologue_outputs)
    while part.grow():
        pass
    groups = part.groups()
    log("fusion", "%d nodes in %d groups:\n%s", len(graph.nodes), len(groups),
        "\n".join(f"  {i}: {g}" for i, g in enumerate(groups)))
    return groups


def _broadcasts_to(shape, space):
    """Whether ``shape`` broadcasts to ``space`` (right-aligned, size-1 dims stretch)."""
    return len(shape) <= len(space) and all(a in (1, b) for a, b in zip(reversed(shape), reversed(space)))


class _Partition:
    """The groups being grown: members per group and the graph of groups (networkx)."""

    def __init__(self, graph, prologue_outputs):
        self.prologue_outputs = prologue_outputs
        self.order = {n: i for i, n in enumerate(graph.nodes)}
        self.kind = {n: kind_of(n) for n in graph.nodes}
        self.users = {}    # Value -> nodes reading it
        for n in graph.nodes:
            for v in n.input_values():
                self.users.setdefault(v, []).append(n)
        # values needed whatever the partition: graph outputs and values written back into inputs
        self.sinks = set(graph.output_values()) | {v for _, v in graph.mutations}
        self.owner = {n: n for n in graph.nodes}   # node -> its group's key (its first node)
        self.members = {n: {n} for n in graph.nodes}
        self.dag = nx.DiGraph()   # the graph of groups, one vertex per key
        self.dag.add_nodes_from(graph.nodes)
        self.dag.add_edges_from((v.node, n) for v, users in self.users.items() if v.node is not None
                                for n in users)

    # The shape of a group -------------------------------------------------------------------

    def escapes(self, value, nodes):
        """Whether ``value`` is needed outside the node set ``nodes``."""
        return value in self.sinks or any(u not in nodes for u in self.users.get(value, ()))

    def fits(self, part, space, nodes):
        """Whether the nodes ``part`` of ``nodes`` can run over ``space``: values needed outside
        are exactly that shape, computed ones broadcast to it (view outputs read nothing themselves)."""
        for n in part:
            for v in n.outputs:
                if self.escapes(v, nodes):
                    if tuple(v.type.shape) != tuple(space):
                        return False
                elif self.kind[n] == "pointwise" and not _broadcasts_to(v.type.shape, space):
                    return False
        return True

    def space(self, nodes):
        """The iteration space of a group without reduction: the shape of its outputs
        (of all its values broadcast together if none is needed outside), or None if it has none."""
        shapes = {tuple(v.type.shape) for n in nodes for v in n.outputs if self.escapes(v, nodes)}
        if not shapes:
            try:
                shapes = {np.broadcast_shapes(*(tuple(v.type.shape) for n in nodes for v in n.outputs))}
            except ValueError:
                return None
        if len(shapes) != 1:
            return None
        (space,) = shapes
        return space if self.fits(nodes, space, nodes) else None

    @staticmethod
    def prologue(red, nodes):
        """The nodes of ``nodes`` that ``red`` depends on (through nodes of ``nodes``)."""
        found, stack = set(), [red]
        while stack:
            for v in stack.pop().input_values():
                if v.node in nodes and v.node not in found:
                    found.add(v.node)
                    stack.append(v.node)
        return found

    def legal(self, nodes):
        """Whether the node set ``nodes`` has a kernel form (acyclicity is checked apart)."""
        kinds = [self.kind[n] for n in nodes]
        if "external" in kinds or kinds.count("reduction") > 1:
            return False
        for n in nodes:
            if self.kind[n] == "view" and any(v.node in nodes and self.kind[v.node] != "view"
                                              for v in n.input_values()):
                return False  # a view of a value computed in the kernel would need that value stored
        red = next((n for n in nodes if self.kind[n] == "reduction"), None)
        if red is None:
            return self.space(nodes) is not None
        pro = self.prologue(red, nodes)
        epi = nodes - pro - {red}
        if any(v.node in pro for n in epi for v in n.input_values()):
            return False  # the epilogue runs after the reduction loop, where prologue values are gone
        if not self.prologue_outputs and any(self.escapes(v, nodes) for n in pro for v in n.outputs):
            return False
        return self.fits(pro, red.args[0].type.shape, nodes) and self.fits(epi | {red}, red.outputs[0].type.shape,
                                                                           nodes)

    # Merging -------------------------------------------------------------------------------------

    def closes_cycle(self, a, b):
        """Whether merging groups ``a`` and ``b`` would make the graph of groups cyclic: a path
        between them through a third group."""
        for src, dst in ((a, b), (b, a)):
            starts = [s for s in self.dag.successors(src) if s is not dst]
            seen = set(starts)
            while starts:
                g = starts.pop()
                if g is dst:
                    return True
                for s in self.dag.successors(g):
                    if s not in seen:
                        seen.add(s)
                        starts.append(s)
        return False

    def try_merge(self, a, b):
        """Merge groups ``a`` and ``b`` if legal; returns whether it did."""
        if a is b:
            return False
        nodes = self.members[a] | self.members[b]
        if not self.legal(nodes) or self.closes_cycle(a, b):
            return False
        if self.order[b] < self.order[a]:
            a, b = b, a
        nx.contracted_nodes(self.dag, a, b, self_loops=False, copy=False)
        for n in self.members.pop(b):
            self.owner[n] = a
        self.members[a] = nodes
        return True

    def group_kind(self, key):
        kinds = {self.kind[n] for n in self.members[key]}
        for kind in ("external", "reduction", "pointwise"):
            if kind in kinds:
                return kind
        return "view"

    def same_space(self, a, b):
        """Both groups pointwise or views over one space."""
        if not {self.group_kind(a), self.group_kind(b)} <= {"pointwise", "view"}:
            return False
        sa = self.space(self.members[a])
        return sa is not None and sa == self.space(self.members[b])

    def one_reduction(self, a, b):
        return (self.group_kind(a) == "reduction") != (self.group_kind(b) == "reduction")

    def edges(self):
        """(producer group, consumer group) of every dataflow edge, consumers in graph order."""
        for n in self.order:
            for v in n.input_values():
                if v.node is not None:
                    yield self.owner[v.node], self.owner[n]

    def merge_edges(self, wanted):
        merged = False
        for a, b in self.edges():
            if a is not b and self.group_kind(a) != "external" and self.group_kind(b) != "external" \
                    and wanted(a, b):
                merged |= self.try_merge(a, b)
        return merged

    def merge_siblings(self):
        """Merge pointwise groups over one space that read a common value (one kernel, several outputs)."""
        merged = False
        for users in self.users.values():
            for i, u in enumerate(users):
                for w in users[i + 1:]:
                    a, b = self.owner[u], self.owner[w]
                    if a is not b and self.same_space(a, b):
                        merged |= self.try_merge(a, b)
        return merged

    def grow(self):
        """One round of merges, most valuable first; returns whether anything merged."""
        merged = self.merge_edges(self.same_space)
        merged |= self.merge_edges(self.one_reduction)
        merged |= self.merge_edges(lambda a, b: True)
        merged |= self.merge_siblings()
        return merged

    # Result ----------------------------------------------------------------------------------------

    def group(self, key):
        nodes = sorted(self.members[key], key=self.order.__getitem__)
        members = self.members[key]
        inputs = list(dict.fromkeys(v for n in nodes for v in n.input_values() if v.node not in members))
        outputs = [v for n in nodes for v in n.outputs if self.escapes(v, members)]
        kind = self.group_kind(key)
        shape = self.space(members) if kind in ("pointwise", "view") else None
        if kind == "reduction":
            shape = next(n for n in nodes if self.kind[n] == "reduction").args[0].type.shape
        elif shape is None:  # an external call, or one view with outputs of several shapes
            shape = nodes[0].outputs[0].type.shape if nodes[0].outputs else ()
        return Group(kind, nodes, inputs, outputs, tuple(shape))

    def groups(self):
        order = nx.lexicographical_topological_sort(self.dag, key=self.order.__getitem__)
        return [self.group(key) for key in order]


__all__ = ["Group", "fuse"]
