"""Matrix products read transposed, computed transposed: ``t(a @ b)`` becomes ``t(b) @ t(a)``.

The backward of ``x @ w.t()`` (every Linear layer) gives ``w``'s gradient as the transpose of ``dy.t() @ x``
(traced as ``t``, ``transpose`` or an ``as_strided`` with the swapped strides). Its readers (gradient
clipping, the optimizer) are kernels that read operands compact, so the transposed view was copied into
compact memory on every call. The same product with its operands swapped and transposed gives the
transpose directly, compact; the transposed operands cost nothing, as BLAS reads them through its
transpose flags. The rewrite applies when the product has no other reader, so it still runs once, and
when the transpose is not itself an output of the graph or a value written back (whose memory eager
shares with the product's). The sum over the inner dim is the same, accumulated by BLAS in its own order
either way.
"""

from __future__ import annotations

from collections import Counter

from ...ops import registry
from ..graph import Node, Value, iter_values
from ..values import TensorType
from .rewrite import graph_pass
from .simplify import permutation

_PRODUCTS = ("mm", "matmul")


def _transposed_matrix(node):
    """The 2-D value ``node`` transposes (a view swapping its two dims), or None."""
    if not node.args or not isinstance(node.args[0], Value):
        return None
    x = node.args[0]
    if x.type.ndim != 2:
        return None
    if permutation(node) == [1, 0]:
        return x
    name, rest = node.op.name, node.args[1:]
    if name == "as_strided":
        size, stride = tuple(rest[0]), tuple(rest[1])
        offset = rest[2] if len(rest) > 2 else None
        m, n = x.type.shape
        return x if size == (n, m) and stride == (1, n) and offset in (None, 0) else None
    return None


def _matrix_product(x):
    """The (a, b) of the 2-D product ``a @ b`` that defines ``x``, or None."""
    node = x.node
    if node is None or node.op.name not in _PRODUCTS or len(node.args) != 2:
        return None
    a, b = node.args
    if not all(isinstance(v, Value) and v.type.ndim == 2 for v in (a, b)):
        return None
    return a, b


def _transpose_node(graph, v):
    """A new ``t(v)`` node."""
    node = Node(registry.OPS["t"], [v])
    shape = tuple(reversed(v.type.shape))
    node.outputs.append(Value(graph._fresh(), TensorType(shape, v.type.dtype, v.type.device), node, 0))
    return node


@graph_pass("transpose", "computed %d products transposed")
def run(graph):
    """Rewrite each transposed read of a matrix product that nothing else reads (see the module docstring)."""
    readers = Counter(v for node in graph.nodes for v in iter_values(node.args))
    kept = set(graph.output_values()) | {v for _, v in graph.mutations} | {t for t, _ in graph.mutations}
    rewrites = 0
    nodes = []
    for node in graph.nodes:
        x = _transposed_matrix(node)
        operands = _matrix_product(x) if x is not None else None
        if operands is not None and readers[x] == 1 and x not in kept and node.outputs[0] not in kept \
                and node.outputs[0].type.dtype == x.type.dtype:
            a, b = operands
            bt, at = _transpose_node(graph, b), _transpose_node(graph, a)
            nodes += [bt, at]
            node.op, node.args = x.node.op, (bt.outputs[0], at.outputs[0])
            rewrites += 1  # the product itself is left without readers: dce removes it
        nodes.append(node)
    graph.nodes = nodes
    return rewrites
