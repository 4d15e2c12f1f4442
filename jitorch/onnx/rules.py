"""The lowering table: one ONNX rule per jitorch IR op, declared once with `rule`.

A rule is ``lower(b, node, *args) -> name | [name or None per output]``: ``b`` is the `builder.Builder`,
``args`` the node's arguments in schema order (Values, Python literals, and `symbolic.SymInt` sizes where
a literal moves with a dynamic axis). Rules read sizes only through ``b.dims``, ``b.static`` and
``b.example`` (the strided ops, which check the other sizes too), so that a size that depends on a dynamic
axis is computed at run time or refused, never baked in. Composite ops never reach a graph (their parts are
recorded), so they need no rule.
"""

from __future__ import annotations

import math

import numpy as np

from ..ops.registry import OPS
from ..runtime import dtypes as _dt
from .builder import onnx_type, spec
from .errors import OnnxExporterError
from .strided import Geometry, flat_indices, split_trailing
from .symbolic import SymInt

RULES: dict = {}        # op name -> lowering function
INT64_MAX = 2 ** 63 - 1


def rule(*names):
    """Declare the lowering of the ops ``names`` (which must be registry ops)."""
    def register(fn):
        for name in names:
            if name not in OPS:
                raise KeyError(f"onnx rule for {name!r}, which is not a registry op")
            RULES[name] = fn
        return fn
    return register


def out_dtype(node, i=0):
    return node.outputs[i].type.dtype


def axis(d, ndim):
    return d % ndim if ndim else 0


# Pointwise ---------------------------------------------------------------------------------------------

def _unary(*ops):
    def lower(b, node, x, *_):
        name = b.operand(x, out_dtype(node))
        for op in ops:
            name = b.node(op, [name])
        return name
    return lower


for _name, _ops in {"neg": ("Neg",), "abs": ("Abs",), "exp": ("Exp",), "log": ("Log",), "sqrt": ("Sqrt",),
                    "rsqrt": ("Sqrt", "Reciprocal"), "relu": ("Relu",), "sigmoid": ("Sigmoid",), "tanh": ("Tanh",),
                    "erf": ("Erf",), "reciprocal": ("Reciprocal",), "sin": ("Sin",), "cos": ("Cos",),
                    "tan": ("Tan",), "floor": ("Floor",), "ceil": ("Ceil",), "sign": ("Sign",)}.items():
    rule(_name)(_unary(*_ops))


@rule("round")
def _round(b, node, x, decimals=None):
    name = b.operand(x, out_dtype(node))
    if not b.static(decimals, "round's decimals"):
        return b.node("Round", [name])
    scale = b.scalar(10.0 ** decimals, out_dtype(node))
    return b.node("Div", [b.node("Round", [b.node("Mul", [name, scale])]), scale])


@rule("log1p")
def _log1p(b, node, x):
    dt = out_dtype(node)
    return b.node("Log", [b.node("Add", [b.operand(x, dt), b.scalar(1, dt)])])


@rule("expm1")
def _expm1(b, node, x):
    dt = out_dtype(node)
    return b.node("Sub", [b.node("Exp", [b.operand(x, dt)]), b.scalar(1, dt)])


@rule("exp2")
def _exp2(b, node, x):
    dt = out_dtype(node)
    return b.node("Pow", [b.scalar(2, dt), b.operand(x, dt)])


@rule("_normal_cdf")
def _normal_cdf(b, node, x):
    # ONNX has no Phi: (1 + Erf(x / sqrt(2))) / 2, torch's spelling of GELU's in its exports
    dt = out_dtype(node)
    erf = b.node("Erf", [b.node("Mul", [b.operand(x, dt), b.scalar(math.sqrt(0.5), dt)])])
    return b.node("Mul", [b.node("Add", [erf, b.scalar(1, dt)]), b.scalar(0.5, dt)])


@rule("_normal_pdf")
def _normal_pdf(b, node, x):
    dt = out_dtype(node)
    name = b.operand(x, dt)
    exp = b.node("Exp", [b.node("Mul", [b.node("Mul", [name, name]), b.scalar(-0.5, dt)])])
    return b.node("Mul", [exp, b.scalar(1 / math.sqrt(2 * math.pi), dt)])


@rule("logical_not")
def _logical_not(b, node, x):
    return b.node("Not", [b.operand(x, _dt.bool)])


def _scaled(b, name, alpha, dtype):
    return name if alpha == 1 else b.node("Mul", [name, b.scalar(alpha, dtype)])


@rule("add", "sub")
def _add(b, node, x, y, alpha=1):
    dt = out_dtype(node)
    return b.node("Add" if node.op.name == "add" else "Sub",
                  [b.operand(x, dt), _scaled(b, b.operand(y, dt), b.static(alpha, "alpha"), dt)])


@rule("rsub")
def _rsub(b, node, x, y, alpha=1):
    dt = out_dtype(node)
    return b.node("Sub", [b.operand(y, dt), _scaled(b, b.operand(x, dt), b.static(alpha, "alpha"), dt)])


def _binary(op):
    def lower(b, node, x, y):
        dt = out_dtype(node)
        return b.node(op, [b.operand(x, dt), b.operand(y, dt)])
    return lower


for _name, _op in {"mul": "Mul", "true_divide": "Div", "pow": "Pow", "maximum": "Max", "minimum": "Min",
                   "clamp_min": "Max", "clamp_max": "Min"}.items():
    rule(_name)(_binary(_op))


@rule("clamp")
def _clamp(b, node, x, lo=None, hi=None):
    dt = out_dtype(node)
    name = b.operand(x, dt)
    if lo is not None:
        name = b.node("Max", [name, b.operand(lo, dt)])
    if hi is not None:
        name = b.node("Min", [name, b.operand(hi, dt)])
    return name


def _compared(x, y):
    """The dtype torch compares two operands in."""
    operands = [spec(a) if hasattr(a, "type") else (0 if isinstance(a, SymInt) else a) for a in (x, y)]
    return _dt.result_type(*operands)


def _comparison(op, negate=False):
    def lower(b, node, x, y):
        dt = _compared(x, y)
        name = b.node(op, [b.operand(x, dt), b.operand(y, dt)])
        return b.node("Not", [name]) if negate else name
    return lower


for _name, (_op, _neg) in {"eq": ("Equal", False), "ne": ("Equal", True), "lt": ("Less", False),
                           "le": ("LessOrEqual", False), "gt": ("Greater", False),
                           "ge": ("GreaterOrEqual", False)}.items():
    rule(_name)(_comparison(_op, _neg))


def _logical(op):
    def lower(b, node, x, y):
        return b.node(op, [b.operand(x, _dt.bool), b.operand(y, _dt.bool)])
    return lower


for _name, _op in {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}.items():
    rule(_name)(_logical(_op))


def where(b, cond, x, y, dt):
    """``Where`` of operands of ``dt``; bools go through int32, for which onnxruntime has a kernel. ``cond``:
    an operand, or the ONNX name of a bool tensor the rule made."""
    work = _dt.int32 if dt is _dt.bool else dt
    cond = cond if isinstance(cond, str) else b.operand(cond, _dt.bool)
    picked = b.node("Where", [cond, b.operand(x, work), b.operand(y, work)])
    return b.cast(picked, work, dt)


@rule("where.self")
def _where(b, node, cond, x, y):
    return where(b, cond, x, y, out_dtype(node))


@rule("masked_fill", "masked_fill.Tensor")
def _masked_fill(b, node, x, mask, value):
    return where(b, mask, value, x, out_dtype(node))


@rule("_to_copy")
def _to_copy(b, node, x, dtype=None, device=None):
    return b.operand(x, out_dtype(node))


@rule("clone", "alias", "contiguous")
def _identity(b, node, x, *_):
    return b.name(x)


@rule("_check_values")
def _check_values(b, node, *_):
    """Not exported: an ONNX graph cannot raise, so the model skips the value checks a jitorch call makes (as
    torch.onnx drops runtime asserts); its one result (a flag nothing reads) gets no ONNX value."""
    return [None]


# Shapes and views ------------------------------------------------------------------------------------------

@rule("view", "reshape", "view_as", "unflatten", "flatten")
def _reshape(b, node, x, *_):
    dims = b.dims(node.outputs[0])
    attrs = {}
    if 0 in dims:  # Reshape reads a 0 as "keep the input's size" unless allowzero
        if b.opset < 14:
            raise OnnxExporterError("a reshape to a shape with a 0 needs opset 14 or later")
        attrs["allowzero"] = 1
    return b.node("Reshape", [b.name(x), b.shape(dims)], **attrs)


@rule("squeeze")
def _squeeze(b, node, x, dim=None):
    dims = b.dims(x)
    chosen = range(len(dims)) if dim is None else [axis(d, len(dims)) for d in dim]
    axes = [d for d in chosen if dims[d] == 1]
    return b.node("Squeeze", [b.name(x), b.ints(axes)]) if axes else b.name(x)


@rule("unsqueeze")
def _unsqueeze(b, node, x, dim):
    return b.node("Unsqueeze", [b.name(x), b.ints([axis(dim, len(b.dims(node.outputs[0])))])])


def _transpose(b, x, perm):
    return b.name(x) if list(perm) == sorted(perm) else b.node("Transpose", [b.name(x)], perm=list(perm))


@rule("t")
def _t(b, node, x):
    n = len(b.dims(x))
    return _transpose(b, x, [1, 0] if n == 2 else list(range(n)))


@rule("transpose", "swapaxes", "swapdims")
def _swap(b, node, x, d0, d1):
    n = len(b.dims(x))
    perm = list(range(n))
    if n:
        perm[axis(d0, n)], perm[axis(d1, n)] = perm[axis(d1, n)], perm[axis(d0, n)]
    return _transpose(b, x, perm)


@rule("permute")
def _permute(b, node, x, dims):
    n = len(b.dims(x))
    return _transpose(b, x, [axis(d, n) for d in dims])


@rule("movedim", "moveaxis")
def _movedim(b, node, x, source, destination):
    n = len(b.dims(x))
    source = [source] if isinstance(source, int) else source
    destination = [destination] if isinstance(destination, int) else destination
    perm = [None] * n
    for s, d in zip(source, destination):
        perm[axis(d, n)] = axis(s, n)
    rest = iter(i for i in range(n) if i not in {axis(s, n) for s in source})
    return _transpose(b, x, [p if p is not None else next(rest) for p in perm])


@rule("expand", "broadcast_to", "expand_as")
def _expand(b, node, x, *_):
    return b.node("Expand", [b.name(x), b.shape(b.dims(node.outputs[0]))])


def _bound(b, x, default):
    return b.size(default if x is None else x)


@rule("slice")
def _slice(b, node, x, dim=0, start=None, end=None, step=1):
    n = len(b.dims(x))
    return b.node("Slice", [b.name(x), _bound(b, start, 0), _bound(b, end, INT64_MAX), b.ints([axis(dim, n)]),
                            b.ints([b.static(step, "slice's step")])])


@rule("narrow")
def _narrow(b, node, x, dim, start, length):
    n = len(b.dims(x))
    if isinstance(start, int) and start < 0:
        start += b.static(b.dims(x)[axis(dim, n)], "narrow's negative start")
    end = b.node("Add", [b.size(start), b.size(length)])
    return b.node("Slice", [b.name(x), b.size(start), end, b.ints([axis(dim, n)])])


@rule("select")
def _select(b, node, x, dim, index):
    n = len(b.dims(x))
    return b.node("Gather", [b.name(x), b.operand(index, _dt.int64)], axis=axis(dim, n))


@rule("cat")
def _cat(b, node, tensors, dim=0):
    dt = out_dtype(node)
    n = len(b.dims(node.outputs[0]))
    parts = [b.operand(t, dt) for t in tensors if not (len(b.dims(t)) == 1 and b.dims(t)[0] == 0 and n != 1)]
    return b.node("Concat", parts, axis=axis(dim, n)) if len(parts) > 1 else b.node("Identity", parts)


@rule("stack")
def _stack(b, node, tensors, dim=0):
    dt = out_dtype(node)
    d = axis(dim, len(b.dims(node.outputs[0])))
    parts = [b.node("Unsqueeze", [b.operand(t, dt), b.ints([d])]) for t in tensors]
    return b.node("Concat", parts, axis=d) if len(parts) > 1 else parts[0]


@rule("split", "split_with_sizes", "split.sizes", "chunk", "unbind", "tensor_split.sections",
      "tensor_split.indices")
def _split(b, node, x, *args):
    # every form's last argument is the dim (unbind's only one); the parts' sizes are the outputs'
    dim = axis(args[-1] if args else 0, len(b.dims(x)))
    unbind = node.op.name == "unbind"
    sizes = [1 if unbind else b.static(b.dims(o)[dim], f"{node.op.name}'s part sizes") for o in node.outputs]
    parts = b.node("Split", [b.name(x), b.ints(sizes)], outputs=len(sizes), axis=dim)
    parts = [parts] if len(sizes) == 1 else parts
    if unbind:
        parts = [b.node("Squeeze", [p, b.ints([dim])]) for p in parts]
    return parts


# Indexing ---------------------------------------------------------------------------------------------------

@rule("index_select")
def _index_select(b, node, x, dim, index):
    return b.node("Gather", [b.name(x), b.operand(index, _dt.int64)], axis=axis(dim, max(len(b.dims(x)), 1)))


@rule("gather")
def _gather(b, node, x, dim, index, sparse_grad=False):
    return b.node("GatherElements", [b.name(x), b.operand(index, _dt.int64)], axis=axis(dim, max(len(b.dims(x)), 1)))


# Matrix products --------------------------------------------------------------------------------------------

@rule("matmul", "mm", "bmm", "mv", "dot")
def _matmul(b, node, x, y):
    dt = out_dtype(node)
    return b.node("MatMul", [b.operand(x, dt), b.operand(y, dt)])


@rule("addmm", "baddbmm")
def _addmm(b, node, c, x, y, beta=1, alpha=1):
    dt = out_dtype(node)
    product = _scaled(b, b.node("MatMul", [b.operand(x, dt), b.operand(y, dt)]), b.static(alpha, "alpha"), dt)
    if beta == 0:
        return product
    return b.node("Add", [_scaled(b, b.operand(c, dt), b.static(beta, "beta"), dt), product])


@rule("linear")
def _linear(b, node, x, w, bias=None):
    dt = out_dtype(node)
    wt = b.node("Transpose", [b.operand(w, dt)], perm=[1, 0]) if len(b.dims(w)) == 2 else b.operand(w, dt)
    y = b.node("MatMul", [b.operand(x, dt), wt])
    return y if bias is None else b.node("Add", [y, b.operand(bias, dt)])


# Softmax and reductions --------------------------------------------------------------------------------------

@rule("softmax", "log_softmax")
def _softmax(b, node, x, dim, dtype=None):
    n = len(b.dims(x))
    return b.node("Softmax" if node.op.name == "softmax" else "LogSoftmax", [b.operand(x, out_dtype(node))],
                  axis=axis(dim, max(n, 1)))


def reduce(b, op, name, axes, keepdim):
    """``op`` (ReduceSum, ReduceMean, ...) over ``axes`` (None: all), as the opset takes its axes."""
    keep = int(bool(keepdim))
    if axes is None:
        return b.node(op, [name], keepdims=keep)
    if op == "ReduceSum" or b.opset >= 18:
        return b.node(op, [name, b.ints(axes)], keepdims=keep)
    return b.node(op, [name], axes=list(axes), keepdims=keep)


def _axes(b, x, dim):
    n = len(b.dims(x))
    if dim is None or isinstance(dim, (list, tuple)) and len(dim) == 0:
        return None
    dim = [dim] if isinstance(dim, int) else dim
    return sorted(axis(d, n) for d in dim) if n else None


def _reduction(op):
    def lower(b, node, x, dim=None, keepdim=False, dtype=None):
        return reduce(b, op, b.operand(x, out_dtype(node)), _axes(b, x, dim), keepdim)
    return lower


for _name, _op in {"sum": "ReduceSum", "mean": "ReduceMean", "amax": "ReduceMax", "amin": "ReduceMin",
                   "max": "ReduceMax", "min": "ReduceMin", "prod": "ReduceProd"}.items():
    if _name in OPS:
        rule(_name)(_reduction(_op))


@rule("all", "any")
def _all(b, node, x, dim=None, keepdim=False):
    as_int = b.operand(x, _dt.int32)
    reduced = reduce(b, "ReduceMin" if node.op.name == "all" else "ReduceMax", as_int, _axes(b, x, dim), keepdim)
    return b.cast(reduced, _dt.int32, _dt.bool)


@rule("max.dim", "min.dim")
def _max_dim(b, node, x, dim, keepdim=False):
    name = b.name(x)
    d = axis(dim, max(len(b.dims(x)), 1))
    values = reduce(b, "ReduceMax" if node.op.name == "max.dim" else "ReduceMin", name, [d], keepdim)
    indices = b.node("ArgMax" if node.op.name == "max.dim" else "ArgMin", [name], axis=d, keepdims=int(keepdim))
    return [values, indices]


@rule("argmax", "argmin")
def _argmax(b, node, x, dim=None, keepdim=False):
    op = "ArgMax" if node.op.name == "argmax" else "ArgMin"
    if dim is None:
        flat = b.node("Reshape", [b.name(x), b.ints([-1])])
        found = b.node(op, [flat], axis=0, keepdims=0)
        return b.node("Reshape", [found, b.shape(b.dims(node.outputs[0]))])
    return b.node(op, [b.name(x)], axis=axis(dim, max(len(b.dims(x)), 1)), keepdims=int(keepdim))


@rule("var.correction", "std.correction")
def _var(b, node, x, dim=None, correction=None, keepdim=False):
    dt = out_dtype(node)
    name = b.operand(x, dt)
    axes = _axes(b, x, dim)
    dims = b.dims(x)
    count = math.prod(b.static(dims[d], "the size a variance divides by")
                      for d in (range(len(dims)) if axes is None else axes))
    deviation = b.node("Sub", [name, reduce(b, "ReduceMean", name, axes, True)])
    total = reduce(b, "ReduceSum", b.node("Mul", [deviation, deviation]), axes, keepdim)
    divisor = max(count - (1 if correction is None else b.static(correction, "correction")), 0)
    var = b.node("Div", [total, b.scalar(divisor, dt)])
    return var if node.op.name == "var.correction" else b.node("Sqrt", [var])


@rule("logsumexp")
def _logsumexp(b, node, x, dim, keepdim=False):
    dt = out_dtype(node)
    name = b.operand(x, dt)
    axes = _axes(b, x, dim)
    top = reduce(b, "ReduceMax", name, axes, True)
    top = b.node("Where", [b.node("IsInf", [top]), b.scalar(0, dt), top])
    total = reduce(b, "ReduceSum", b.node("Exp", [b.node("Sub", [name, top])]), axes, True)
    out = b.node("Add", [b.node("Log", [total]), top])
    if keepdim:
        return out
    return b.node("Squeeze", [out, b.ints(list(range(len(b.dims(x)))) if axes is None else axes)])


# Creation ------------------------------------------------------------------------------------------------

def _filled(b, node, value):
    dt = out_dtype(node)
    array = np.array([value], dtype=dt.np)
    if dt is _dt.bfloat16:
        array = array.view(np.uint16)
    filler = b.onnx.helper.make_tensor("value", onnx_type(b.onnx, dt), [1], array.tobytes(), raw=True)
    return b.node("ConstantOfShape", [b.shape(b.dims(node.outputs[0]))], value=filler)


@rule("zeros", "new_zeros", "zeros_like", "empty", "new_empty", "empty_like")
def _zeros(b, node, *_):
    return _filled(b, node, 0)


@rule("ones", "new_ones", "ones_like")
def _ones(b, node, *_):
    return _filled(b, node, 1)


@rule("full", "full_like")
def _full(b, node, x, value, *_):
    return _filled(b, node, b.static(value, "a fill value"))


@rule("new_full")
def _new_full(b, node, x, size, value, *_):
    return _filled(b, node, b.static(value, "a fill value"))


@rule("arange")
def _arange(b, node, start=0, end=None, step=1, *_):
    dt = out_dtype(node)
    if end is None:
        start, end = 0, start
    (length,) = b.dims(node.outputs[0])
    if not isinstance(length, SymInt):
        values = np.float64(start) + np.float64(step) * np.arange(length, dtype=np.float64) \
            if dt.is_floating_point else start + step * np.arange(length, dtype=np.int64)
        return b.const(np.asarray(values).astype(dt.np), dt, "arange")
    return b.node("Range", [b.operand(start, dt), b.operand(end, dt), b.operand(b.static(step, "step"), dt)])


@rule("triu", "tril")
def _triu(b, node, x, diagonal=0):
    dims = b.dims(x)
    rows, cols = (b.node("Range", [b.scalar(0, _dt.int64), b.operand(n, _dt.int64), b.scalar(1, _dt.int64)])
                  for n in dims[-2:])
    offset = b.node("Sub", [b.node("Unsqueeze", [cols, b.ints([0])]), b.node("Unsqueeze", [rows, b.ints([1])])])
    k = b.scalar(b.static(diagonal, "the diagonal"), _dt.int64)
    keep = b.node("GreaterOrEqual" if node.op.name == "triu" else "LessOrEqual", [offset, k])
    return where(b, keep, x, 0, out_dtype(node))


# Strided views and scatters (convolutions and pools gather their windows so) --------------------------------

def _geometry(b, node, base, size, stride, offset):
    """``(geometry, refined)``: the `Geometry` of a strided node over its base, or over the base reshaped to
    ``refined`` (rows of the view's last dim: `strided.split_trailing`, symbolic dims included); the same at
    the other sizes of the dynamic axes, with every symbolic size in an identity dim."""
    example = b.example((size, stride, offset or 0))
    others = [(sizes, other.input_values()[0].type.shape, other.args[-3:]) for sizes, other in b.alternatives(node)]
    found = _checked_geometry(base.type.shape, example, [(shape, args) for _, shape, args in others], b.dims(base))
    if found is not None:
        return found, None
    refined = split_trailing(math.prod(base.type.shape), *example)
    moved = [(sizes, split_trailing(math.prod(shape), o_size, o_stride, o_offset or 0))
             for sizes, shape, (o_size, o_stride, o_offset) in others]
    if refined is not None and all(r is not None and len(r) == len(refined) for _, r in moved):
        dims = _fitted(b, refined, moved)
        found = _checked_geometry(refined, example, [(r, args) for (_, r), (_, _, args) in zip(moved, others)], dims)
        if found is not None:
            return found, dims
    raise OnnxExporterError(f"{node.op.name} addresses memory in a way that changes with a dynamic axis (size "
                            f"{size}, stride {stride}); export with fewer dynamic_axes")


def _checked_geometry(shape, example, others, dims):
    """The geometry over ``shape`` if it is the same over the other sizes' shapes and reads its symbolic
    ``dims`` whole; else None."""
    geometry = Geometry(shape, *example)
    if not geometry.valid and not others:
        return geometry  # static: the flat fallbacks take it
    if not geometry.valid or any(Geometry(s, a[0], a[1], a[2] or 0).key() != geometry.key() for s, a in others):
        return None
    if any(isinstance(n, SymInt) and geometry.identity[i] is None for i, n in enumerate(dims)):
        return None
    return geometry


def _fitted(b, shape, moved):
    """``shape``'s dims as ints and SymInts, from the same shape at the other sizes."""
    return tuple(b.symbolic.fit(n, [other[k] for _, other in moved], "a strided view's base")
                 for k, n in enumerate(shape))


@rule("as_strided")
def _as_strided(b, node, x, size, stride, offset=None):
    g, refined = _geometry(b, node, x, size, stride, offset)
    out = node.outputs[0]
    if not g.valid:
        flat = b.node("Reshape", [b.name(x), b.ints([-1])])
        return b.node("Gather", [flat, b.const(flat_indices(size, stride, offset or 0))], axis=0)
    name, order = b.name(x) if refined is None else b.node("Reshape", [b.name(x), b.shape(refined)]), []
    for d in reversed(range(len(g.base_shape))):
        if g.identity[d] is None:
            name = b.node("Gather", [name, b.const(g.index(d))], axis=d)
    for d in range(len(g.base_shape)):
        order += [g.identity[d]] if g.identity[d] is not None else [k for k, _ in g.groups[d]]
    missing = [k for k in range(len(size)) if k not in order]
    if missing:
        name = b.node("Unsqueeze", [name, b.ints(list(range(len(order), len(order) + len(missing))))])
        order += missing
    perm = [order.index(k) for k in range(len(size))]
    if perm != list(range(len(perm))):
        name = b.node("Transpose", [name], perm=perm)
    if any(size[k] > 1 for k in g.broadcast):
        name = b.node("Expand", [name, b.shape(b.dims(out))])
    return name


@rule("as_strided_scatter", "_as_strided_add")
def _as_strided_scatter(b, node, x, src, size, stride, offset=None):
    adds = node.op.name == "_as_strided_add"
    attrs = {}
    if adds:
        if b.opset < 16:
            raise OnnxExporterError(f"{node.op.name} (a transposed convolution's accumulation) needs opset 16 or later")
        attrs["reduction"] = "add"
    g, refined = _geometry(b, node, x, size, stride, offset)
    dt = out_dtype(node)
    if not g.valid:
        flat = b.node("Reshape", [b.operand(x, dt), b.ints([-1])])
        indices = b.const(flat_indices(size, stride, offset or 0)[..., None])
        scattered = b.node("ScatterND", [flat, indices, b.operand(src, dt)], **attrs)
        return b.node("Reshape", [scattered, b.shape(b.dims(node.outputs[0]))])
    t = g.trailing_identities()
    if any(isinstance(n, SymInt) for n in list(b.dims(src))[:len(size) - t]):
        raise OnnxExporterError(f"{node.op.name} writes along a dynamic axis other than whole; export with fewer "
                                "dynamic_axes")
    base = b.operand(x, dt) if refined is None else b.node("Reshape", [b.operand(x, dt), b.shape(refined)])
    scattered = b.node("ScatterND", [base, b.const(g.lead_indices(t)), b.operand(src, dt)], **attrs)
    return scattered if refined is None else b.node("Reshape", [scattered, b.shape(b.dims(node.outputs[0]))])


# Recurrences --------------------------------------------------------------------------------------------------

@rule("_rnn_layer")
def _rnn_layer(b, node, mode, x, hx, cx, w_hh, b_hh, w_hr, reverse):
    """The layer unrolled over its (static) length: one cell per step, in torch's gate order and formulas."""
    dt = out_dtype(node)
    length = b.static(b.dims(x)[0], "a recurrence's sequence length")
    hidden = b.static(b.dims(w_hh)[0], "the gates' width") // {"LSTM": 4, "GRU": 3}.get(mode, 1)
    w_t = b.node("Transpose", [b.operand(w_hh, dt)], perm=[1, 0])
    proj = None if w_hr is None else b.node("Transpose", [b.operand(w_hr, dt)], perm=[1, 0])
    h, c = b.operand(hx, dt), None if cx is None else b.operand(cx, dt)
    steps = {}
    for t in (reversed(range(length)) if reverse else range(length)):
        xt = b.node("Gather", [b.name(x), b.scalar(t, _dt.int64)], axis=0)
        hh = b.node("MatMul", [h, w_t])
        if b_hh is not None:
            hh = b.node("Add", [hh, b.operand(b_hh, dt)])
        if mode == "LSTM":
            i, f, g, o = b.node("Split", [b.node("Add", [xt, hh]), b.ints([hidden] * 4)], outputs=4, axis=1)
            c = b.node("Add", [b.node("Mul", [b.node("Sigmoid", [f]), c]),
                               b.node("Mul", [b.node("Sigmoid", [i]), b.node("Tanh", [g])])])
            h = b.node("Mul", [b.node("Sigmoid", [o]), b.node("Tanh", [c])])
            if proj is not None:
                h = b.node("MatMul", [h, proj])
        elif mode == "GRU":
            xr, xz, xn = b.node("Split", [xt, b.ints([hidden] * 3)], outputs=3, axis=1)
            hr, hz, hn = b.node("Split", [hh, b.ints([hidden] * 3)], outputs=3, axis=1)
            r = b.node("Sigmoid", [b.node("Add", [xr, hr])])
            z = b.node("Sigmoid", [b.node("Add", [xz, hz])])
            n = b.node("Tanh", [b.node("Add", [xn, b.node("Mul", [r, hn])])])
            h = b.node("Add", [n, b.node("Mul", [z, b.node("Sub", [h, n])])])
        else:
            h = b.node("Tanh" if mode == "RNN_TANH" else "Relu", [b.node("Add", [xt, hh])])
        steps[t] = b.node("Unsqueeze", [h, b.ints([0])])
    ordered = [steps[t] for t in range(length)]
    output = b.node("Concat", ordered, axis=0) if len(ordered) > 1 else ordered[0]
    return [output, h, c, None]


# More reductions, scans, orderings and integer arithmetic ------------------------------------------------------

@rule("norm")
def _norm(b, node, x, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector norms: 2 (and "fro" over at most two dims), 1, inf, -inf, 0 and other orders."""
    dt = out_dtype(node)
    if isinstance(p, str) and (p != "fro" or dim is not None and len(dim) > 2) or isinstance(p, complex):
        raise OnnxExporterError(f"norm of order {p!r} over dims {dim} (a matrix norm) has no ONNX form here")
    order = 2.0 if p is None or isinstance(p, str) else float(b.static(p, "norm's order"))
    name, axes = b.operand(x, dt), _axes(b, x, dim)
    if order == 2.0:
        return reduce(b, "ReduceL2", name, axes, keepdim)
    if order == 1.0:
        return reduce(b, "ReduceL1", name, axes, keepdim)
    magnitude = b.node("Abs", [name])
    if order in (math.inf, -math.inf):
        return reduce(b, "ReduceMax" if order > 0 else "ReduceMin", magnitude, axes, keepdim)
    if order == 0.0:
        nonzero = b.cast(b.node("Not", [b.node("Equal", [name, b.scalar(0, dt)])]), _dt.bool, dt)
        return reduce(b, "ReduceSum", nonzero, axes, keepdim)
    total = reduce(b, "ReduceSum", b.node("Pow", [magnitude, b.scalar(order, dt)]), axes, keepdim)
    return b.node("Pow", [total, b.scalar(1.0 / order, dt)])


@rule("cumsum")
def _cumsum(b, node, x, dim, dtype=None):
    n = max(len(b.dims(x)), 1)
    return b.node("CumSum", [b.operand(x, out_dtype(node)), b.scalar(axis(dim, n), _dt.int64)])


@rule("topk")
def _topk(b, node, x, k, dim=-1, largest=True, sorted=True):
    n = max(len(b.dims(x)), 1)
    values, indices = b.node("TopK", [b.name(x), b.size(k)], outputs=2, axis=axis(dim, n), largest=int(largest),
                             sorted=1)
    return [values, indices]


@rule("sort")
def _sort(b, node, x, dim=-1, descending=False, stable=False):
    """A full TopK along ``dim``, which orders ties by index as a stable sort does."""
    n = max(len(b.dims(x)), 1)
    d = axis(dim, n)
    size = b.dims(x)[d] if b.dims(x) else 1
    values, indices = b.node("TopK", [b.name(x), b.size(size)], outputs=2, axis=d, largest=int(descending), sorted=1)
    return [values, indices]


@rule("flip")
def _flip(b, node, x, dims):
    n = len(b.dims(x))
    axes = [axis(d, n) for d in dims]
    if not axes:
        return b.name(x)
    return b.node("Slice", [b.name(x), b.ints([-1] * len(axes)), b.ints([-INT64_MAX] * len(axes)), b.ints(axes),
                            b.ints([-1] * len(axes))])


@rule("roll")
def _roll(b, node, x, shifts, dims=()):
    name, sizes = b.name(x), b.dims(x)
    if not dims:  # rolls the flattened tensor
        flat = b.node("Reshape", [name, b.ints([-1])])
        total = b.static(math.prod(sizes), "roll's length")
        rolled = _rolled(b, flat, 0, b.static(shifts[0], "roll's shift") % max(total, 1))
        return b.node("Reshape", [rolled, b.shape(sizes)])
    for shift, d in zip(shifts, dims):
        d = axis(d, len(sizes))
        length = b.static(sizes[d], "roll's length")
        name = _rolled(b, name, d, b.static(shift, "roll's shift") % max(length, 1))
    return name


def _rolled(b, name, d, shift):
    if not shift:
        return name
    head = b.node("Slice", [name, b.ints([-shift]), b.ints([INT64_MAX]), b.ints([d])])
    tail = b.node("Slice", [name, b.ints([0]), b.ints([-shift]), b.ints([d])])
    return b.node("Concat", [head, tail], axis=d)


@rule("repeat")
def _repeat(b, node, x, repeats):
    name, n = b.name(x), len(b.dims(x))
    repeats = b.static(list(repeats), "repeat's counts")
    if len(repeats) > n:
        name = b.node("Reshape", [name, b.shape([1] * (len(repeats) - n) + list(b.dims(x)))])
    return b.node("Tile", [name, b.ints(repeats)])


@rule("index")
def _index(b, node, x, indices):
    """``x[i]`` with one integer index tensor (the other dims taken whole): a Gather along its dim."""
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(given) != 1 or given[0][1].type.dtype is _dt.bool:
        raise OnnxExporterError("indexing with several index tensors or a boolean mask has no ONNX form here "
                                "(index with one integer tensor, or use index_select/gather)")
    d, index = given[0]
    return b.node("Gather", [b.name(x), b.operand(index, _dt.int64)], axis=d)


@rule("floor_divide", "remainder")
def _floor_divide(b, node, x, y):
    """Rounding toward minus infinity, as torch: ``Mod`` (the divisor's sign) for integers, ``Floor`` for floats."""
    dt = out_dtype(node)
    a, c = b.operand(x, dt), b.operand(y, dt)
    if dt.is_floating_point:
        quotient = b.node("Floor", [b.node("Div", [a, c])])
        if node.op.name == "floor_divide":
            return quotient
        return b.node("Sub", [a, b.node("Mul", [quotient, c])])
    rest = b.node("Mod", [a, c], fmod=0)
    return rest if node.op.name == "remainder" else b.node("Div", [b.node("Sub", [a, rest]), c])


@rule("fmod")
def _fmod(b, node, x, y):
    dt = out_dtype(node)
    return b.node("Mod", [b.operand(x, dt), b.operand(y, dt)], fmod=1)


def _bitwise(logical, bitwise):
    def lower(b, node, *operands):
        dt = out_dtype(node)
        if dt is _dt.bool:
            return b.node(logical, [b.operand(o, dt) for o in operands])
        if b.opset < 18:
            raise OnnxExporterError(f"{node.op.name} of integers needs opset 18 or later")
        return b.node(bitwise, [b.operand(o, dt) for o in operands])
    return lower


for _name, (_logical_op, _bitwise_op) in {"bitwise_and": ("And", "BitwiseAnd"), "bitwise_or": ("Or", "BitwiseOr"),
                                          "bitwise_xor": ("Xor", "BitwiseXor"),
                                          "bitwise_not": ("Not", "BitwiseNot")}.items():
    rule(_name)(_bitwise(_logical_op, _bitwise_op))


@rule("isnan", "isinf")
def _isnan(b, node, x):
    if not x.type.dtype.is_floating_point:
        return _filled(b, node, False)
    return b.node("IsNaN" if node.op.name == "isnan" else "IsInf", [b.name(x)])
