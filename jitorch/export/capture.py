"""`export(fn_or_module, args)`: trace, find the symbolic dims, and build an `ExportedProgram`."""

from __future__ import annotations

from ..ir.graph import Value
from ..jit.errors import TraceError
from ..jit.tracer import input_names, trace_with_inputs
from ..tensor import Tensor
from ..runtime.pytree import tree_flatten, tree_unflatten
from . import dynamic
from .errors import ExportError
from .graphs import check_generators, copy_graph, rename_constants
from .signature import DimRange, LeafSpec, Signature, TreeSignature
from .views import input_views, written_expanded


def export(fn, args, kwargs=None, dynamic_shapes=None):
    """Trace ``fn`` (a function or a module) on ``args`` and ``kwargs`` into an `ExportedProgram`.

    A module's parameters and buffers (``named_parameters()``/``named_buffers()``)
    and every tensor the function captures become named constants, copied now.
    ``dynamic_shapes`` names the dims that stay symbolic, as in ``torch.export``:
    ``{"x": {0: Dim("batch", min=1, max=64)}}`` (or a sequence by position);
    every other dim is fixed. Raises ExportError where the function cannot be
    traced or a dim cannot be symbolic.
    """
    from .program import ExportedProgram
    if not callable(fn):
        raise TypeError(f"jitorch.export expected a function or a module, got {type(fn).__name__}")
    if not isinstance(args, tuple):
        raise TypeError(f"jitorch.export expected args as a tuple, got {type(args).__name__}")
    kwargs = dict(kwargs or {})
    target = _forward_of(fn)
    per_leaf = dynamic.leaf_dims(target, args, kwargs, dynamic_shapes)
    base = _trace(fn, args, kwargs)
    if base.one_shot:
        raise ExportError("the function created persistent state while it was traced (an optimizer's buffers on "
                          "its first step): call it once before exporting, so the exported graph is the steady one")
    check_generators(base)
    rename_constants(base, module_tensor_names(fn))
    leaves, tree = tree_flatten((args, kwargs))
    _check_geometry_kept(base, leaves)
    examples = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    written = written_expanded(base, examples)
    if written is not None:
        raise ExportError(f"the function writes into input {written} ({list(examples[written].shape)}), expanded "
                          f"(strides {list(examples[written].stride())}): an exported program's write-back is the "
                          f"input's whole value, which other layouts do not share as the example does; export on a "
                          f"clone")
    names = input_names(target, args, kwargs)
    if len(names) != len(leaves):
        names = [f"arg{i}" for i in range(len(leaves))]
    dims, where = _dims(per_leaf, leaves)
    params, singles = _symbolic_params(fn, base, dims, where, leaves, tree)
    inputs = TreeSignature(tree, [_input_leaf(name, leaf, dims_of)
                                  for name, leaf, dims_of in zip(names, leaves, per_leaf)])
    outputs = _output_signature(base, singles, dims)
    signature = Signature(inputs, outputs, {d.name: d for d in dims.values()})
    constants = {name: t.detach().clone() for name, t in base.constant_tensors.items()}
    base.constant_tensors = constants
    return ExportedProgram(copy_graph(base), signature, constants, params, views=input_views(base, examples))


def _check_geometry_kept(graph, leaves):
    """An in-place view op on an input or captured tensor (``x.t_()``, ``x.as_strided_(...)``) gives the caller's
    tensor a new shape or strides, which a program called from a file cannot: ExportError naming it, as
    ``torch.export`` refuses metadata mutations of its inputs (fuzz seed 3000022: the exported program had left
    the input's geometry as it was)."""
    if not graph.geometry_changes:
        return
    tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    owner, (shape, strides, _) = next(iter(graph.geometry_changes.items()))
    what = f"input {owner} ({list(tensors[owner].shape)})" if isinstance(owner, int) else f"captured tensor {owner!r}"
    raise ExportError(f"the function changes the geometry of {what} in place, to shape {list(shape)} and strides "
                      f"{list(strides)} (an in-place view op such as t_() or as_strided_()): an exported program "
                      f"cannot; return the view instead")


def _forward_of(fn):
    forward = getattr(fn, "forward", None)
    return forward if callable(forward) and hasattr(fn, "named_parameters") else fn


def module_tensor_names(fn):
    """id(tensor) -> qualified name for a module's parameters and buffers (duck-typed)."""
    names = {}
    for method in ("named_parameters", "named_buffers"):
        named = getattr(fn, method, None)
        if callable(named):
            for name, t in named():
                names.setdefault(id(t), name)
    return names


def _trace(fn, args, kwargs):
    try:
        graph, _ = trace_with_inputs(fn, args, kwargs)
    except TraceError as e:
        raise ExportError(f"the function cannot be traced: {e}") from None
    return graph


def _dims(per_leaf, leaves):
    """The Dims in use (name -> DimRange) and where each occurs ([(leaf index, dim)])."""
    dims, where, objects = {}, {}, {}
    for i, (dmap, leaf) in enumerate(zip(per_leaf, leaves)):
        for d, dim in dmap.items():
            size = leaf.shape[d]
            known = objects.setdefault(dim.__name__, dim)
            if known is not dim and (known.min, known.max) != (dim.min, dim.max):
                raise ExportError(f"two different Dims are named {dim.__name__!r}")
            if not dim.min <= size <= dim.max:
                raise ExportError(f"dim {d} of the example input {i} has size {size}, outside the range "
                                  f"[{dim.min}, {dim.max}] of Dim {dim.__name__!r}")
            rng = dims.setdefault(dim.__name__, DimRange(dim.__name__, dim.min, dim.max, size))
            if rng.example != size:
                raise ExportError(f"Dim {dim.__name__!r} has size {rng.example} in one example input and {size} "
                                  f"in another")
            where.setdefault(dim.__name__, []).append((i, d))
    return dims, where


def _resized(leaves, tree, where, sizes):
    """The example arguments with the dims in ``sizes`` (name -> size) changed (new, empty tensors)."""
    out = list(leaves)
    for name, size in sizes.items():
        for i, d in where[name]:
            t = out[i]
            shape = list(t.shape)
            shape[d] = size
            out[i] = _blank(t, shape)
    return tree_unflatten(out, tree)


def _blank(t, shape):
    """An uninitialised tensor like ``t`` (dtype, device, requires_grad, a .grad) of ``shape``:
    tracing reads no data."""
    x = Tensor._empty(tuple(shape), t.dtype, t.device)
    if t.requires_grad:
        x.requires_grad_(True)
        if t.grad is not None:
            x.grad = Tensor._empty(tuple(shape), t.grad.dtype, t.grad.device)
    return x


def _symbolic_params(fn, base, dims, where, leaves, tree):
    """The graph's size-dependent literals, and the single-dim traces (name -> (graph, size))."""
    if not dims:
        return [], {}
    singles, joint_sizes = {}, {}
    for name, rng in dims.items():
        alts = dynamic.alternative_sizes(rng, rng.example, {n for leaf in leaves if isinstance(leaf, Tensor)
                                                             for n in leaf.shape})
        if not alts:
            continue
        graph = _retrace(fn, leaves, tree, where, {name: alts[0]}, name)
        dynamic.check_same_structure(base, graph, name)
        singles[name] = (graph, alts[0])
        joint_sizes[name] = alts[-1]
    joint = None
    if len(singles) > 1 or any(joint_sizes[n] != singles[n][1] for n in singles):
        joint = _retrace(fn, leaves, tree, where, joint_sizes, ", ".join(joint_sizes))
        dynamic.check_same_structure(base, joint, ", ".join(joint_sizes))
    full_sizes = {n: joint_sizes.get(n, d.example) for n, d in dims.items()}
    return dynamic.fit_params(base, singles, joint, dims, full_sizes), singles


def _retrace(fn, leaves, tree, where, sizes, label):
    new_args, new_kwargs = _resized(leaves, tree, where, sizes)
    try:
        graph, _ = trace_with_inputs(fn, new_args, new_kwargs)
    except Exception as e:  # any failure at the other size means the dim is not free
        raise ExportError(f"dim {label} cannot be symbolic: tracing with size {sizes} failed: "
                          f"{type(e).__name__}: {e}") from None
    rename_constants(graph, module_tensor_names(fn))  # as the base trace, so their constants compare equal
    return graph


def _input_leaf(name, leaf, dims_of):
    if isinstance(leaf, Tensor):
        shape = tuple(dims_of[d].__name__ if d in dims_of else n for d, n in enumerate(leaf.shape))
        return LeafSpec("tensor", name, shape, leaf.dtype, leaf.device, leaf.requires_grad)
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return LeafSpec("value", name, value=leaf)
    raise ExportError(f"input {name!r} is a {type(leaf).__name__}; exported programs take tensors and "
                      "None, bools, numbers and strings in tuples, lists and dicts")


def _output_signature(graph, singles, dims):
    """Output specs; a dim that moves with symbolic dims is written as their affine combination."""
    def result(g):  # a traced backward() adds the inputs' new grads, which set .grad instead
        return g.outputs[0] if g.grad_targets else g.outputs
    leaves, tree = tree_flatten(result(graph))
    others = {name: (tree_flatten(result(g))[0], size) for name, (g, size) in singles.items()}
    specs = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Value):
            t = leaf.type
            shape = tuple(_dim_expression(n, [(name, outs[i].type.shape[d], size, dims[name].example)
                                               for name, (outs, size) in others.items()])
                          for d, n in enumerate(t.shape))
            specs.append(LeafSpec("tensor", f"output{i}", shape, t.dtype, t.device))
        else:
            specs.append(LeafSpec("value", f"output{i}", value=leaf))
    return TreeSignature(tree, specs)


def _dim_expression(n, moves):
    """``n``, or text such as ``2*batch+1`` when the dim changes with symbolic dims."""
    terms, const = [], n
    for name, moved, size, example in moves:
        c = (moved - n) // (size - example)
        if c:
            terms.append(name if c == 1 else f"{c}*{name}")
            const -= c * example
    if not terms:
        return n
    return "+".join(terms) + (f"{const:+d}" if const else "")
