"""Constant folding: nodes computed only from creation ops (``zeros``, ``arange``, ``full``...)
and other folded nodes run now with the eager kernels and become graph constants.

Graph inputs and existing constants are never folded: a captured tensor is read
at call time and may change between calls. Random ops are never folded (each
call draws anew). Results larger than `MAX_NUMEL` elements stay computed at run
time, and so do the creation ops themselves (making ``zeros`` costs no more than
reading a constant), which dead code elimination removes once unused.
"""

from __future__ import annotations

from math import prod

from ...ops import registry
from ...ops.views import contiguous_format
from ...tensor import Tensor
from ..graph import TensorType, substitute
from .rewrite import Rewriter, graph_pass, has_effects
from .simplify import BROADCASTS

MAX_NUMEL = 4096

# Creation ops that read only the type of their tensor input, never its values: ``ones_like(loss)``
# in a traced backward folds although ``loss`` is computed at run time.
TYPE_ONLY = {"zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones", "new_empty", "new_full",
             "fill.Scalar", "zero"}


def _evaluate(node, known):
    """The node's results as compact tensors of its output types, or None where eager fails
    (the error is left to the call that runs the node)."""
    args = substitute(node.args, lambda v: known[v] if v in known else Tensor._empty(v.type.shape, v.type.dtype,
                                                                                      v.type.device))
    try:
        result = registry.call(node.op, args)
    except Exception:  # whatever eager raises, it raises at run time, not while compiling
        return None
    results = [result] if isinstance(result, Tensor) else list(result)
    if len(results) != len(node.outputs):
        return None
    # fresh compact copies: a view's result shares memory with its input
    results = [t.clone(memory_format=contiguous_format) for t in results]
    if any(TensorType(tuple(t.shape), t.dtype, t.device) != o.type for t, o in zip(results, node.outputs)):
        return None
    return results


def _foldable(node, known):
    return (not has_effects(node)
            and (node.op.name in TYPE_ONLY or all(v in known for v in node.input_tuple()))
            and all(prod(o.type.shape) <= MAX_NUMEL for o in node.outputs))


@graph_pass("fold", "folded %d nodes into constants")
def run(graph):
    """Replace nodes whose value is known now by constants holding it."""
    rw = Rewriter(graph)
    known: dict = {}  # Value -> its tensor, for creation results, folded results and their constants
    folded = 0
    for node in graph.nodes:
        rw.update_args(node)
        if not _foldable(node, known):
            continue
        results = _evaluate(node, known)
        if results is None:
            continue
        known.update(zip(node.outputs, results))
        # a node of literals alone (a creation op) stays; so does a returned value (as a
        # constant, every call would hand back the same tensor), and a broadcast, a view whose readers
        # read its source's few elements where a constant would be every element in memory
        if not node.input_tuple() or any(o in rw.returned for o in node.outputs) or node.op.name in BROADCASTS:
            continue
        constants = [graph.add_constant(f"fold_{o.name}", t, o.type) for o, t in zip(node.outputs, results)]
        known.update(zip(constants, results))
        rw.replace_node(node, constants)
        folded += 1
    rw.finish()
    return folded
