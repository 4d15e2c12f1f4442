"""Decompositions: composite reductions the code generator cannot lower, rewritten into ops it can.

A node the code generator cannot put in a kernel runs as an eager step, a break
in fusion and a NumPy call of its own. Several such reductions are compositions
of ops that do lower (as in PyTorch's ``torch._decomp``, which Inductor applies
before lowering):

    var.correction, std.correction   mean, sub, mul, sum, div (and sqrt)
    nanmean                          nansum / the number of elements that are not NaN
    logsumexp                        amax, where, sub, exp, sum, log, add
    norm (vector orders)             abs, amax / amin / sum (mul, pow, sqrt)

Each decomposition is ordinary jitorch code, run by a `Tracer` on fake tensors
standing for the node's input values, so the nodes it records are built by the
ops' own meta rules; they replace the node where it stood. A node is rewritten
only when every node of its decomposition lowers and the results have the
node's types; otherwise (and where a decomposition returns None: a matrix
norm, a logsumexp over no elements) the node stays as it is.

Numerics: each decomposition follows its eager kernel's formula in
jitorch/ops/reductions.py step by step, in the same compute dtype (float32 for
the half types, cast back at the end). The variance is eager's two passes: the
mean, then the sum of squared deviations from it, divided by
`ops.reductions.moment_divisor` (``correction >= N`` or no elements give inf or NaN
as eager does). Compiled sums add in another order than NumPy's pairwise sums, so
results agree with eager to the rounding of a reassociated sum, not bit for bit.
The interpreter backend runs the traced graph unoptimised, with the eager
kernels themselves.
"""

from __future__ import annotations

from math import inf

from ..graph import Node, Value, substitute
from ..lowerable import kind_of
from ...ops.meta import opmath, reduced_shape, reduction_dims
from ...ops.reductions import moment_divisor, norm_order, reduced_count
from ...ops.registry import attach
from ...runtime import dtypes as _dt
from .rewrite import Rewriter, graph_pass

# the tracer decompositions run under (`jitorch.jit.tracer.Tracer`, registered by jit at import, a layer
# above): they are traced as user code is; without it the pass decomposes nothing
TRACER = None


def decomposition(names):
    """Attach the decorated function as the decomposition of the ops ``names`` (full names separated by
    spaces): the op's "decomposition" piece in the registry, ``fn(*args)`` with a node's arguments in
    schema order (tensors as fakes), returning its results as tensors, or None where it does not apply."""
    def register(fn):
        return attach("decomposition", names, fn)
    return register


def _count(x, dims):
    """How many elements each result element reduces over (eager's count: every element of a 0-d
    tensor or when ``dims`` is empty)."""
    return reduced_count(x.shape, dims if dims and x.ndim else None)


def _as_kept(t, x, dims):
    """``t``, a reduction of ``x`` over ``dims``, viewed with the reduced dims kept as size 1."""
    return t.view(reduced_shape(x.shape, dims, True))


def _variance(x, dim, correction, keepdim):
    """var.correction in the compute dtype."""
    dims = reduction_dims(x, dim)
    dof = moment_divisor(_count(x, dims), correction)
    a = x.to(opmath(x.dtype))
    # the mean as a reduction of its own with keepdim as asked: var_mean's mean is then the same node
    # (common subexpressions merge them) and one reduction serves both
    deviation = a - _as_kept(a.mean(dim, keepdim=keepdim), x, dims)
    return (deviation * deviation).sum(dim, keepdim=keepdim) / dof


@decomposition("var.correction")
def _var(x, dim, correction, keepdim):
    return _variance(x, dim, correction, keepdim).to(x.dtype)


@decomposition("std.correction")
def _std(x, dim, correction, keepdim):
    return _variance(x, dim, correction, keepdim).sqrt().to(x.dtype)


@decomposition("nanmean")
def _nanmean(x, dim, keepdim, dtype):
    out = dtype or x.dtype
    a = x.to(opmath(out))
    # eager divides the sum by an integer count array, which NumPy promotes to float64: so does this
    total = a.nansum(dim, keepdim=keepdim).to(_dt.float64)
    count = a.isnan().logical_not().sum(dim, keepdim=keepdim, dtype=_dt.float64)
    return (total / count).to(out)


@decomposition("logsumexp")
def _logsumexp(x, dim, keepdim):
    dims = reduction_dims(x, dim)
    if _count(x, dims) == 0:
        return None  # eager's maximum starts from -inf; amax has no identity and refuses
    out = x.dtype if x.dtype.is_floating_point else _dt.get_default_dtype()
    a = x.to(opmath(out))
    # shift by the finite maximum only: rows of -inf stay -inf, rows holding +inf give +inf
    m = a.amax(list(dims), keepdim=True)
    m = m.where(m.isfinite(), 0.0)
    total = (a - m).exp().sum(dim, keepdim=keepdim)
    return (total.log() + m.view(total.shape)).to(out)


@decomposition("norm")
def _norm(x, p, dim, keepdim, dtype):
    order = norm_order(p, dim)
    if order == "matrix":
        return None
    out = dtype or x.dtype
    a = x.to(out).to(opmath(out))
    dims = list(reduction_dims(x, dim))
    if order == inf:
        r = a.abs().amax(dims, keepdim=keepdim)
    elif order == -inf:
        r = a.abs().amin(dims, keepdim=keepdim)
    elif order == 0:
        r = a.ne(0).sum(dims, keepdim=keepdim, dtype=a.dtype)
    elif order == 1:
        r = a.abs().sum(dims, keepdim=keepdim)
    elif order == 2:
        r = (a * a).sum(dims, keepdim=keepdim).sqrt()
    else:
        r = (a.abs() ** order).sum(dims, keepdim=keepdim) ** (1 / order)
    return r.to(out)


# A model's graph decomposes the same node again and again (a layer norm's variance per layer, forward and
# backward): (op, its arguments with values as their types and first positions, the default dtype) -> the
# nodes its decomposition recorded, as a template over those positions (None: it does not apply). The
# decomposition is a function of what the key holds (its fakes have the values' types; the default dtype is
# the one global it reads), so a copy of the template is the nodes a new trace would record.
_templates: dict = {}
TEMPLATES_LIMIT = 1024


class _Slot:
    """In a template: argument ``i`` of the decomposed node's values (``node`` None), or output ``i`` of the
    template's node ``node``."""

    __slots__ = ("node", "i")

    def __init__(self, node, i):
        self.node, self.i = node, i


def _template_key(node):
    """(the template key of ``node``, its values in first-position order), or (None, ...) where an argument
    is no value, literal or list of them with an exact hash."""
    positions = {}
    try:
        return (node.op, tuple(_keyed(a, positions) for a in node.args), _dt.get_default_dtype()), list(positions)
    except TypeError:
        return None, list(positions)


# (`_template_key`'s and `_instantiate`'s recursions are module functions: a nested function
# calling itself is a reference cycle, with all it closes over left to the cyclic collector)
def _keyed(a, positions):
    if isinstance(a, Value):
        return ("v", positions.setdefault(a, len(positions)), a.type)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, tuple(_keyed(x, positions) for x in a))
    if a is None or type(a) in (bool, int, str, _dt.dtype):
        return (type(a).__name__, a)
    if type(a) is float:
        return ("float", a.hex())  # (-0.0 and 0.0 differ; NaN equals NaN)
    raise TypeError(type(a).__name__)


def _make_template(inputs, nodes, values):
    """The template of a decomposition's ``nodes`` and result ``values`` over ``inputs`` (None where a node
    reads a value neither of them defines)."""
    slots = {v: _Slot(None, i) for i, v in enumerate(inputs)}
    try:
        made = []
        for k, n in enumerate(nodes):
            made.append((n.op, substitute(n.args, slots.__getitem__), [o.type for o in n.outputs]))
            slots.update((o, _Slot(k, j)) for j, o in enumerate(n.outputs))
        return made, [slots[v] for v in values]
    except KeyError:
        return None


def _instantiate(graph, template, inputs):
    """The nodes and result values of a template over ``inputs``, named in ``graph``."""
    made_nodes, results = template
    nodes = []
    for op, args, types in made_nodes:
        node = Node(op, [_filled(a, inputs, nodes) for a in args])
        node.outputs = [Value(graph._fresh(), t, node, j) for j, t in enumerate(types)]
        nodes.append(node)
    return nodes, [_filled(r, inputs, nodes) for r in results]


def _filled(a, inputs, nodes):
    if isinstance(a, _Slot):
        return inputs[a.i] if a.node is None else nodes[a.node].outputs[a.i]
    if isinstance(a, (list, tuple)):
        return type(a)(_filled(x, inputs, nodes) for x in a)
    return a


def _trace(graph, node, decompose):
    """The nodes and result values of ``decompose`` on ``node``'s arguments, named in ``graph``;
    None where the decomposition does not apply or does not lower as a whole. A node like one decomposed
    before takes a copy of that one's nodes (`_templates`)."""
    key, inputs = _template_key(node)
    if key is not None and key in _templates:
        template = _templates[key]
        return None if template is None else _instantiate(graph, template, inputs)
    traced = _traced(graph, node, decompose)
    if key is not None:
        template = None if traced is None else _make_template(inputs, *traced)
        if traced is None or template is not None:
            if len(_templates) >= TEMPLATES_LIMIT:
                _templates.clear()
            _templates[key] = template
    return traced


def _traced(graph, node, decompose):
    """`_trace`, by tracing ``decompose``."""
    tracer = TRACER()
    args = substitute(node.args, tracer.new_fake)
    with tracer:
        result = decompose(*args)
        if result is None:
            return None
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        values = [tracer.value_of(t) for t in results]
    nodes = tracer.graph.nodes
    if ([v.type for v in values] != [o.type for o in node.outputs] or tracer.graph.constants
            or any(kind_of(n) == "external" for n in nodes)):
        return None
    for n in nodes:
        for v in n.outputs:
            v.name = graph._fresh()
    return nodes, values


@graph_pass("decompose", "decomposed %d nodes")
def run(graph):
    """Replace each node the code generator cannot lower by its decomposition, where that lowers."""
    rw = Rewriter(graph)
    nodes = []
    decomposed = 0
    for node in graph.nodes:
        rw.update_args(node)
        decompose = node.op.pieces.get("decomposition")
        traced = (_trace(graph, node, decompose) if TRACER is not None and decompose is not None
                  and kind_of(node) == "external" else None)
        if traced is not None and rw.replace_node(node, traced[1]):
            nodes.extend(traced[0])
            decomposed += 1
        nodes.append(node)
    graph.nodes = nodes
    rw.finish()
    return decomposed


__all__ = ["decomposition", "run"]
