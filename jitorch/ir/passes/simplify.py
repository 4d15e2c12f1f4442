"""Algebraic simplification: rewrites that give bit-identical results for every input,
NaN, infinities and signed zeros included, and keep the node's type.

    x * 1, 1 * x, x / 1, x ** 1, x - 0       -> x
    x + 0, 0 + x                             -> x      (integer and bool results only:
                                                        -0.0 + 0 is +0.0)
    -(-x)                                    -> x
    alias, clone, _to_copy, views, reshapes  -> x      (when x has the result's type)
    copy(self, src)                          -> src    (when src has the result's type)
    x ** 2                                   -> x * x  (dtypes where eager gives the same bits)

A rewrite to ``x`` applies only when ``x`` has the node's type: ``x * 1.0`` on
an integer ``x`` is a float tensor and stays.
"""

from __future__ import annotations

import math
from numbers import Number

from ...ops import registry
from ...runtime import dtypes as _dt
from ..graph import Value
from .rewrite import Rewriter, graph_pass

# ops whose result is their first argument whenever its type is unchanged: reshapes and
# broadcasts to the same shape, same-dtype casts, copies (values are logical: no aliasing)
SAME_TYPE_IDENTITIES = "alias clone _to_copy view view_as unflatten squeeze expand expand_as broadcast_to narrow slice"
# dtypes where eager's pow(x, 2) equals mul(x, x) bit for bit (tests/ir/test_passes.py checks it)
SQUARE_AS_PRODUCT = frozenset({
    _dt.uint8, _dt.int8, _dt.int16, _dt.int32, _dt.int64, _dt.uint16, _dt.uint32, _dt.uint64,
    _dt.float16, _dt.bfloat16, _dt.float32, _dt.float64,
})


def _is(a, number):
    """Whether the argument ``a`` is the Python literal ``number`` (``1``, ``1.0`` and ``True`` all are 1)."""
    return isinstance(a, Number) and not isinstance(a, complex) and a == number


def _is_plus_zero(a):
    return _is(a, 0) and math.copysign(1.0, a) > 0


def _unit_operand(node, unit):
    """The value operand of a binary ``node`` whose other operand is the literal ``unit``."""
    a, b = node.args[:2]
    if isinstance(a, Value) and _is(b, unit):
        return a
    if isinstance(b, Value) and _is(a, unit):
        return b
    return None


def _mul(node):
    return _unit_operand(node, 1)


def _divide(node):
    x, y = node.args
    return x if isinstance(x, Value) and _is(y, 1) else None


def _add(node):
    x, y, alpha = node.args
    if node.outputs[0].type.dtype.is_floating_point or not _is(alpha, 1):
        return None
    return _unit_operand(node, 0)


def _sub(node):
    x, y, alpha = node.args
    # x - (+0.0) is x for every float, -0.0 included; x - (-0.0) is x + 0.0, which is not
    return x if isinstance(x, Value) and _is_plus_zero(y) and _is(alpha, 1) else None


def _neg(node):
    (x,) = node.args
    inner = x.node if isinstance(x, Value) else None
    if inner is not None and inner.op.pieces.get("simplification") is _neg and isinstance(inner.args[0], Value):
        return inner.args[0]
    return None


def _pow(node):
    x, exponent = node.args
    return x if isinstance(x, Value) and _is(exponent, 1) else None


def _first(node):
    return node.args[0] if isinstance(node.args[0], Value) else None


def _copy_source(node):
    # copy(self, src) is src cast and broadcast to self's type: src itself when it has that type
    src = node.args[1]
    return src if isinstance(src, Value) else None


# each op's rewrite is its "simplification" piece in the registry: node -> the value replacing it, or None
for _names, _rule in (("mul", _mul), ("true_divide", _divide), ("add", _add), ("sub", _sub), ("pow", _pow),
                      ("neg", _neg), ("copy", _copy_source), (SAME_TYPE_IDENTITIES, _first)):
    registry.attach("simplification", _names, _rule)


def _square_as_product(node):
    """Rewrite ``pow(x, 2)`` into ``mul(x, x)`` in place where that is exact; returns whether done."""
    x, exponent = node.args
    if not (isinstance(x, Value) and _is(exponent, 2)):
        return False
    if x.type != node.outputs[0].type or x.type.dtype not in SQUARE_AS_PRODUCT:
        return False
    node.op = registry.OPS["mul"]
    node.args = (x, x)
    return True


@graph_pass("simplify", "rewrote %d nodes")
def run(graph):
    """Apply the rewrites above to every node, in one sweep."""
    rw = Rewriter(graph)
    rewrites = 0
    for node in graph.nodes:
        rw.update_args(node)
        rule = node.op.pieces.get("simplification")
        replacement = rule(node) if rule is not None else None
        if replacement is not None and rw.replace_node(node, [replacement]):
            rewrites += 1
        elif rule is _pow and _square_as_product(node):
            rewrites += 1
    rw.finish()
    return rewrites
