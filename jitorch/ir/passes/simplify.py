"""Algebraic simplification: rewrites that give bit-identical results for every input,
NaN, infinities and signed zeros included, and keep the node's type.

    x * 1, 1 * x, x / 1, x ** 1, x - 0       -> x
    x + 0, 0 + x                             -> x      (integer and bool results only:
                                                        -0.0 + 0 is +0.0)
    -(-x)                                    -> x
    alias, clone, _to_copy, views, reshapes  -> x      (when x has the result's type)
    copy(self, src)                          -> src    (when src has the result's type)
    t(t(x)), permute chains undoing themselves -> x
    permute(permute(x, a), b)                -> permute(x, a composed with b)   (any of t, transpose, permute)
    x ** n, n a number                       -> the ops eager computes it by (below)
    f(expand(x), y), f pointwise             -> f(x, y)   (when f's operands still broadcast to its result's
                                                         shape and give its dtype)

Eager computes a float's power by 2, 3, -1, -2, 0.5 and -0.5 by other ops, as torch's kernel does
(``x * x * x``, ``1 / (x * x)``, ``sqrt``, ``rsqrt``; see ``ops.pointwise.POW_BY_OTHER_OPS`` for the
dtypes): the pass writes those ops. An integer's power by a small n is a chain of products, exact in
any order (products wrap modulo 2**bits); ``x ** 0`` is ``ones_like(x)``.

A rewrite to ``x`` applies only when ``x`` has the node's type: ``x * 1.0`` on
an integer ``x`` is a float tensor and stays.

A pointwise op broadcasts its operands itself: an operand that is an ``expand`` (``expand_as``, ``broadcast_to``)
of ``x`` reads ``x`` instead where the op's result keeps its shape, as the same elements broadcast. A mean's
backward is an ``expand`` of the incoming gradient over the row; read through the view, the row's value had to
be in memory (a view in a kernel folds into index maths over a buffer), so a layer norm's backward kept a row
sum apart from the one beside it (`fusion.same_reduction`); read as ``x`` it is the row's value broadcast, which
the kernel computing it evaluates at each element. A 0-d ``x`` (a full reduction's gradient, which eager expands
in one step) too, where the op's result keeps its dtype as well: a 0-d operand takes part in type promotion below
one with dims (``mul(expand(x), y)`` of a float32 ``x`` and a float16 ``y`` is float32, ``mul(x, y)`` float16),
which the op's meta on the operands says (`_same_result`).

A chain of dim permutations becomes one ``permute`` of the chain's base, and is the base itself where the
permutations undo each other: a Linear weight's gradient is traced ``t(transpose(dy.t() @ x))`` (the backward
of ``matmul``, then of ``t``), read so as the product it is, compact, where the transpose pass would make the
inner transpose a transposed product and leave a transposed view of it that its readers (autograd's ``.grad``,
the optimizer) copied. Where the base may not stand for the chain (a returned chain over an input), the
chain still becomes one ``permute``: a view of the base, as eager's result is.
"""

from __future__ import annotations

import math
from numbers import Number

from ...ops import registry
from ...ops.pointwise import POW_BY_OTHER_OPS
from ...runtime import dtypes as _dt
from ..fake import fake_tensor
from ..graph import Node, Value
from .rewrite import Rewriter, graph_pass

# ops whose result is their first argument whenever its type is unchanged: reshapes and
# broadcasts to the same shape, same-dtype casts, copies (values are logical: no aliasing)
SAME_TYPE_IDENTITIES = "alias clone _to_copy view view_as unflatten squeeze expand expand_as broadcast_to narrow slice"
# integer powers up to this are rewritten into products (at most 2 log2(n) of them)
MAX_INTEGER_POWER = 16
_PERMUTATIONS = ("t", "transpose", "permute")  # views that only reorder their input's dims
_INTEGERS = frozenset(_dt.INTEGRAL)


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


def permutation(node):
    """The dims of its input that a view node's output takes, in order, where the node only permutes them
    (``t``, ``transpose``, ``permute``); else None."""
    name = node.op.name
    if name not in _PERMUTATIONS or not node.args or not isinstance(node.args[0], Value):
        return None
    ndim = node.args[0].type.ndim
    dims = list(range(ndim))
    if ndim == 0:
        return dims
    if name == "t":
        return dims[::-1]
    if name == "transpose":
        a, b = (d % ndim for d in node.args[1:3])
        dims[a], dims[b] = dims[b], dims[a]
        return dims
    return [d % ndim for d in node.args[1]]


def permutation_chain(node):
    """``(base, dims)``: the value that the chain of permutation views ending at ``node`` (followed through
    its inputs' nodes) starts from, and the dims of it that ``node``'s output takes; None where ``node`` is
    no permutation."""
    dims = permutation(node)
    if dims is None:
        return None
    base = node.args[0]
    while base.node is not None and (inner := permutation(base.node)) is not None:
        dims = [inner[d] for d in dims]
        base = base.node.args[0]
    return base, dims


def _undone_permutation(node):
    base, dims = permutation_chain(node)
    return base if dims == sorted(dims) else None


def _composed_permutation(node):
    """Rewrite a permutation of a permutation in place into one ``permute`` of the chain's base; returns
    whether done."""
    base, dims = permutation_chain(node)
    if base is node.args[0]:
        return False
    node.op, node.args = registry.OPS["permute"], (base, tuple(dims))
    return True


# each op's rewrite is its "simplification" piece in the registry: node -> the value replacing it, or None
for _names, _rule in (("mul", _mul), ("true_divide", _divide), ("add", _add), ("sub", _sub), ("pow", _pow),
                      ("neg", _neg), ("copy", _copy_source), (SAME_TYPE_IDENTITIES, _first),
                      (" ".join(_PERMUTATIONS), _undone_permutation)):
    registry.attach("simplification", _names, _rule)


# The views that broadcast their source (`_unbroadcast` reads that source; sink and fold keep them views)
BROADCASTS = ("expand", "expand_as", "broadcast_to")
# Whether a pointwise op reads ``x`` for its operand ``expand(x)`` (`_unbroadcast`); benchmarks/multiout.py compares
# the steps built with and without.
BROADCAST_READS = True


def _unbroadcast(node):
    """Make ``node``, a pointwise op, read ``x`` for each operand ``expand(x)`` that its result's shape allows
    (the module docstring); returns whether it changed an operand."""
    if not BROADCAST_READS or node.op.kind != "pointwise" or any(is_list for _, is_list in node.op.tensor_args):
        return False
    positions = [i for i, _ in node.op.tensor_args if i < len(node.args)]
    args, changed = list(node.args), False
    for i in positions:
        a = args[i]
        if not isinstance(a, Value) or a.node is None or a.node.op.name not in BROADCASTS:
            continue
        x = a.node.args[0]
        if not isinstance(x, Value) or x.type.dtype != a.type.dtype \
                or x.type.device != a.type.device:
            continue
        trial = args[:i] + [x] + args[i + 1:]
        if _same_result(node, trial):
            args, changed = trial, True
    if changed:
        node.args = tuple(args)
    return changed


def _same_result(node, args):
    """Whether ``node``'s op on ``args`` (its operands, one of them replaced) gives the node's result type: its
    meta (shape, dtype, device), which also says where the op refuses such operands (an error)."""
    fakes = [fake_tensor(a.type.shape, a.type.dtype, a.type.device) if isinstance(a, Value) else a for a in args]
    try:
        spec = registry.quiet_meta(node.op, fakes)
    except (TypeError, ValueError, RuntimeError, IndexError):
        return False
    out = node.outputs[0].type
    return len(node.outputs) == 1 and not isinstance(spec, tuple) and tuple(spec.shape) == tuple(out.shape) \
        and spec.dtype == out.dtype and spec.device == out.device


def _product_steps(n):
    """``x ** n`` (n >= 2) by squaring and multiplying: steps ``(op, i, j)`` on values numbered from ``x`` (0),
    each step's result the next number."""
    steps = []
    for bit in bin(n)[3:]:
        steps.append(("mul", len(steps), len(steps)))
        if bit == "1":
            steps.append(("mul", len(steps), 0))
    return steps


# the steps of eager's formula for each exponent of POW_BY_OTHER_OPS
_FLOAT_POWER_STEPS = {2: _product_steps(2), 3: _product_steps(3), -1: [("reciprocal", 0)],
                      -2: [("mul", 0, 0), ("reciprocal", 1)], 0.5: [("sqrt", 0)], -0.5: [("rsqrt", 0)]}


def _power_steps(dtype, exponent):
    """The steps computing ``x ** exponent`` exactly as eager does for ``x`` of ``dtype``, or None."""
    if isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        return None
    if dtype.is_floating_point:
        known = POW_BY_OTHER_OPS.get(exponent)
        return _FLOAT_POWER_STEPS[exponent] if known is not None and dtype in known[0] else None
    if dtype in _INTEGERS and exponent.__class__ is int and 2 <= exponent <= MAX_INTEGER_POWER:
        return _product_steps(exponent)
    return None


def _power_by_other_ops(graph, node, emit):
    """Rewrite ``pow(x, number)`` in place into the ops eager computes it by, its intermediate nodes passed to
    ``emit`` (in order, to go before it); returns whether done."""
    x, exponent = node.args
    if not isinstance(x, Value) or x.type != node.outputs[0].type:
        return False
    if _is(exponent, 0) and not isinstance(exponent, bool):
        node.op, node.args = registry.OPS["ones_like"], (x, None, None, False, None)
        return True
    steps = _power_steps(x.type.dtype, exponent)
    if steps is None:
        return False
    values = [x]
    for name, *operands in steps[:-1]:
        step = Node(registry.OPS[name], [values[i] for i in operands])
        step.outputs.append(Value(graph._fresh(), x.type, step, 0))
        emit(step)
        values.append(step.outputs[0])
    name, *operands = steps[-1]
    node.op, node.args = registry.OPS[name], tuple(values[i] for i in operands)
    return True


@graph_pass("simplify", "rewrote %d nodes")
def run(graph):
    """Apply the rewrites above to every node, in one sweep."""
    rw = Rewriter(graph)
    rewrites = 0
    nodes = []
    for node in graph.nodes:
        rw.update_args(node)
        rule = node.op.pieces.get("simplification")
        replacement = rule(node) if rule is not None else None
        if replacement is None and _unbroadcast(node):
            rewrites += 1
        if replacement is not None and rw.replace_node(node, [replacement]):
            rewrites += 1
        elif rule is _pow and _power_by_other_ops(graph, node, nodes.append) or \
                rule is _undone_permutation and _composed_permutation(node):
            rewrites += 1
        nodes.append(node)
    graph.nodes = nodes
    rw.finish()
    return rewrites
