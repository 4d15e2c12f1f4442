"""Outputs over memory a compiled call makes, returned as eager returns them.

Eagerly ``y = x * 2; return y, y[0]`` gives two tensors over one storage: a write
through either shows in the other, and ``y[0]._base is y``. A graph computes
values, not memory, so the tracer groups such outputs by the storage they lie in
(`Tracer.shared_new_memory`). As AOTAutograd does, the compiled graph returns the
whole of each storage once, at the slots of its leaves (`return_bases`), and the
call rebuilds each leaf as a view of it with its traced geometry
(`jit.compile.returned_aliases`). In a call with a backward the base is the
output of the compiled call's autograd node (`computed_bases`), the leaves are
autograd views of it, and the compiled backward receives the gradient of that
base (`eager_bases`).
"""

from __future__ import annotations

from ..ir.graph import Value
from ..ops.real_identities import history_root
from ..runtime.strided import contiguous_strides
from ..tensor import Tensor
from ..runtime.pytree import tree_flatten, tree_unflatten


def base_slots(graph):
    """{leaf index ``j`` standing for a storage the call makes: the output leaves over it, whose graph
    output is its base}: its leaves and the leaves that are one of them again (``return v, v``)."""
    slots, base_of = {}, {}
    for k, (owner, _) in sorted(graph.output_aliases.items()):
        if not isinstance(owner, tuple):
            continue
        kind, j = owner
        j = j if kind == "output" else base_of.get(j)
        if j is not None:
            base_of[k] = j
            slots.setdefault(j, []).append(k)
    return slots


def return_bases(graph):
    """Make a traced graph return, at each slot of `base_slots`, its storage's base (computed once);
    such a slot requires grad when any leaf over that storage does (its gradient reaches the base)."""
    if not graph.output_bases:
        return
    leaves, spec = tree_flatten(graph.outputs)
    flags = graph.output_requires_grad
    position = {k: n for n, k in enumerate(k for k, leaf in enumerate(leaves) if isinstance(leaf, Value))}
    for j, slots in base_slots(graph).items():
        requires_grad = any(flags[position[k]] for k in slots)
        for k in slots:
            leaves[k] = graph.output_bases[j]
            flags[position[k]] = requires_grad
    graph.outputs = tree_unflatten(leaves, spec)


def computed_bases(graph, leaves):
    """``leaves``, a call's output leaves as returned, with each slot of `base_slots` holding its
    storage's base again (one tensor per storage: what the graph computed there)."""
    leaves = list(leaves)
    for j, slots in base_slots(graph).items():
        geometry = graph.output_aliases[j][1]
        t = leaves[j]
        if geometry is not None:  # leaf j is a view of the base: the base starts its offset earlier
            shape = graph.output_bases[j].type.shape
            t = Tensor._make(t._storage, shape, contiguous_strides(shape), t._offset - geometry[2])
        for k in slots:
            leaves[k] = t
    return leaves


def base_groups(graph):
    """[(the slots of one storage, its base's shape)], for `eager_bases`."""
    return [(slots, graph.output_bases[j].type.shape) for j, slots in base_slots(graph).items()]


def eager_bases(leaves, groups):
    """An eager call's output ``leaves`` with the slots of each of ``groups`` (`base_groups`) holding
    the base of their memory, whole: the tensor that made it (their ``_base``), or as_strided of it
    where it does not show all of it, so that a gradient of the compiled base applies there."""
    leaves = list(leaves)
    for slots, shape in groups:
        members = [leaves[k] for k in slots]
        t = next((m for m in members if m.requires_grad), members[0])
        root = history_root(t)
        if tuple(root.shape) != tuple(shape) or root._offset != 0 or not root.is_contiguous():
            root = root.as_strided(tuple(shape), contiguous_strides(shape), 0)
        for k in slots:
            leaves[k] = root
    return leaves
