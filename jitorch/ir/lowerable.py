"""How the code generator treats a node, as the passes need to know it (fusion groups, decompositions):
"pointwise", "reduction", "view", "gather" (an indexed load, pointwise but for its operands, which it reads
where they lie, as a view does), "index" (a value computed from each element's position, as ``arange``'s,
which views and gathers in its kernel read as they read an input) or "external" (runs as an eager step, not
in a kernel).

The code generator, a layer above, registers its rule (`jitorch.codegen.lowering.kind_of`) when it is
imported, so the passes ask here without importing it. Until then every node that is not a view is
external: nothing fuses. Its kernel builder registers whether a group's index maths (its views, gathers and
index expressions) folds (`jitorch.codegen.kernel.index_maths_folds`): fusion asks before it puts a view of a
gather's result beside the gather (an ``as_strided`` of it, a reshape across its gathered dim, a gather of it
do not fold; the builder would refuse the whole group)."""

from __future__ import annotations

_kind_of = None
_folds = None


def register(kind_of):
    """Use ``kind_of(node)`` (the code generator's) for every later question."""
    global _kind_of
    _kind_of = kind_of


def kind_of(node):
    """"pointwise", "reduction", "view", "gather", "index" or "external": how fusion treats ``node``."""
    if _kind_of is not None:
        return _kind_of(node)
    return "view" if node.op.view is not None else "external"


def register_folds(folds):
    """Use ``folds(nodes)`` (the kernel builder's) for every later question."""
    global _folds
    _folds = folds


def folds(nodes):
    """Whether the views, gathers and index expressions ``nodes`` (in dataflow order, each reading values from
    outside them or the results of those before it) fold into one kernel's index maths. Until the kernel
    builder registers its rule, no: fusion keeps views of a gather's result out of its group."""
    return _folds is not None and _folds(nodes)
