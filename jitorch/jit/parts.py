"""Independent parts of a fusion group: kernels that repeat instead of one kernel per group.

Fusion merges siblings over one space that read a common value (`ir.passes.fusion`), so an
optimizer step's updates of every parameter of one shape, which all read the learning rate,
become one kernel with an output per parameter, and each count of parameters makes another
kernel's code. Where the parts of such a group share only broadcast operands (fewer elements than the
space, or one: the learning rate), the CPU executor lowers each part as a kernel of its own: the
kernels of equal parts are equal but for their names and sizes, and the code generator compiles
them once (`codegen.cpu.link_batch` compiles one text per distinct kernel; a flat loop's length is
its call's bounds), so the optimizer's update costs LLVM one kernel per pattern, not one per group.
A group of one element stays whole (fusion merges the optimizer's step counters into one): its parts'
calls would cost more than their arithmetic, and its kernel is cheap to compile whatever its size.
"""

from __future__ import annotations

from math import prod

from ..ir.passes.fusion import Group


def independent_parts(group):
    """The groups of ``group``'s parts that no dataflow inside the group connects, in the group's
    node order; ``[group]`` where it is not pointwise, is one part, is over one element, or its parts share
    an input as large as the space (siblings reading one tensor: one kernel reads it once)."""
    if group.kind != "pointwise" or len(group.outputs) < 2 or prod(group.shape) == 1:
        return [group]
    parent = {node: node for node in group.nodes}

    def root(node):
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node
    for node in group.nodes:
        for v in node.input_values():
            if v.node in parent:
                parent[root(node)] = root(v.node)
    members = {}
    for node in group.nodes:
        members.setdefault(root(node), []).append(node)
    if len(members) < 2:
        return [group]
    parts = [_part(group, nodes) for nodes in members.values()]
    space = prod(group.shape)
    seen, shared = set(), set()
    for part in parts:
        shared.update(v for v in part.inputs if v in seen)
        seen.update(part.inputs)
    if any(1 < _numel(v) >= space for v in shared):
        return [group]
    return parts


def _part(group, nodes):
    inside = set(nodes)
    inputs = list(dict.fromkeys(v for n in nodes for v in n.input_values() if v.node not in inside))
    made = {v for n in nodes for v in n.outputs}
    return Group(group.kind, nodes, inputs, [v for v in group.outputs if v in made], group.shape)


def _numel(value):
    return prod(value.type.shape)
