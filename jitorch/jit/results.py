"""What a traced graph's call hands back to its caller, as the eager call would have: new tensors laid
out as eager's, outputs that alias inputs or captured tensors made so, in-place geometry changes and
values written back into the real tensors, gradients set, captured state refreshed before the call.
Shared by both backends (`run_graph` for the interpreter, `jit.executor` for compiled graphs)."""

from __future__ import annotations

from ..ops.real_identities import untracked
from ..runtime import grad_mode as _grad_mode
from ..runtime.pytree import tree_flatten, tree_unflatten
from ..runtime.strided import contiguous_strides
from ..tensor import Tensor
from .tracer import ALIAS, CUT, UNSAFE_SPLIT, VIEW_OF_UNSAFE_SPLIT


def run_graph(graph, args, kwargs, executable=None):
    """Run a traced graph (compiled, or with the interpreter) on a call's arguments; write
    input mutations back."""
    from ..ir.interpreter import interpret
    leaves, _ = tree_flatten((args, kwargs))
    inputs = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    if executable is not None:
        return executable.run(inputs)
    refresh_captured_state(graph)
    outputs, mutations = interpret(graph, inputs)
    write_back(graph, inputs, mutations)
    return set_grads(graph, inputs, outputs)


def set_grads(graph, inputs, outputs, laid_out=False):
    """A traced backward() set inputs' or captured parameters' .grad: set the real ones; the user's
    result is returned, with the inputs and captured tensors it returned as themselves, and its new
    tensors laid out as eager's (``laid_out``: they are already, as a compiled graph's `_outputs` makes
    them; checking again cost a GPT step 53 storages' checks, ~0.1 ms)."""
    if not laid_out:
        outputs = eager_layouts(graph, outputs)
    if graph.output_aliases:
        outputs = returned_aliases(graph, inputs, outputs)
    change_geometry(graph, inputs)
    if not graph.grad_targets:
        return outputs
    result, grads = outputs
    for target, g in zip(graph.grad_targets, grads):
        owner = inputs[target] if isinstance(target, int) else graph.constant_tensors[target]
        owner.grad = g
    return result


def eager_layouts(graph, outputs, groups=None):
    """``outputs`` with their new tensors laid out as eager's (`Tracer.output_layouts`): each storage's
    leaves (of ``groups``, default all) that a backend gave other strides, offsets or memory are copied
    into new memory of eager's size, at eager's places (memory eager's leaves do not show is zeros). Leaves
    that require grad keep their history, and so their layout."""
    groups = graph.output_layouts if groups is None else groups
    if not groups:
        return outputs
    leaves, spec = tree_flatten(outputs)
    for size, members in groups:
        tensors = [leaves[k] for k, _, _ in members]
        if not _as_eager(tensors, size, members) and not any(t.requires_grad for t in tensors) \
                and len({t.dtype for t in tensors}) == 1:
            with _grad_mode.no_grad():
                storage = Tensor._empty((size,), tensors[0].dtype, tensors[0].device).zero_()._storage
                for t, (k, strides, offset) in zip(tensors, members):
                    leaves[k] = Tensor._make(storage, t._shape, strides, offset)
                    leaves[k]._write(t)
    return tree_unflatten(leaves, spec)


def _as_eager(tensors, size, members):
    """Whether ``tensors`` lie in one storage of ``size`` elements at eager's places (``members``); those
    that do with other strides only where they address nothing (size-1 dims, empty tensors) take eager's
    strides there (torch's results keep them: a copy of ``ones(1, 5).t()`` has strides (1, 5)). The tensors
    are new (the call made them), so no other tensor sees their geometry change."""
    storage = tensors[0]._storage
    for t, (_, strides, offset) in zip(tensors, members):
        if t._storage is not storage or t._storage.size != size:
            return False
        if t.numel() and (t._offset != offset or any(n != 1 and a != b for n, a, b in zip(t._shape, t._stride,
                                                                                             strides))):
            return False
    for t, (_, strides, _) in zip(tensors, members):
        if t._stride != strides:
            t._stride, t._arr = tuple(strides), None
    return True


def returned_aliases(graph, inputs, outputs):
    """``outputs`` with each leaf that eager returns over an input's or captured tensor's memory
    made so (see `Tracer.output_aliases`): the real tensor itself, or `returned_view` of it; the
    leaves over memory the call made, views of its base (see `jit.output_bases`); and a leaf that
    is another again, that one. Run after the call's writes into its inputs, which such a view shows."""
    leaves, spec = tree_flatten(outputs)
    computed, bases, pieces = list(leaves), {}, {}
    # (an unsafe split's output before the views of it, which view that tensor: `tracer.alias_history`)
    for k, (owner, geometry) in sorted(graph.output_aliases.items(), key=_pieces_first):
        if isinstance(owner, tuple) and owner[0] == "leaf":
            leaves[k] = leaves[owner[1]]
            continue
        if isinstance(owner, tuple):
            if owner[1] not in bases:  # views count from a contiguous base (made once for all of its leaves)
                bases[owner[1]] = _contiguous_base(computed[owner[1]])
            real = bases[owner[1]]
        else:
            real = inputs[owner] if isinstance(owner, int) else graph.constant_tensors[owner]
        leaves[k] = real if geometry is None else returned_view(real, geometry, pieces)
    return tree_unflatten(leaves, spec)


def _contiguous_base(t):
    """``t`` contiguous, an empty one with contiguous strides too: ``contiguous()`` keeps an empty tensor's strides
    (torch's test finds any empty tensor contiguous), and the interpreter's kernels give an empty result the strides
    of their operands' order (``minimum`` of a ``[1, 0, 1, 3]`` slice: (0, 3, 0, 1)), where eager wrote into an
    ``out=`` buffer of contiguous ones (fuzz seed 5200262 of ``--regions 0.3``). The base is memory the call made,
    which no other tensor sees. Likewise a size-1 dim's stride, which addresses nothing: the interpreter's
    ``negative`` of a transposed expand has strides (3, 9, 9, 1) at shape (3, 1, 1, 3), where eager wrote into an
    ``out=`` buffer of (3, 3, 3, 1) (fuzz seed 5601810 of ``--edges 0.4 --out-views 0.4 --regions 0.2``)."""
    base = t.contiguous()
    strides = contiguous_strides(base._shape)
    if base._stride != strides:
        base._stride, base._arr = strides, None
    return base


def _pieces_first(item):
    k, (_, geometry) = item
    return geometry is not None and views_a_piece(geometry), k


def views_a_piece(geometry):
    """Whether an output leaf of this `returned_view` geometry is a view of an unsafe split's output (made
    together with the other leaves over that one)."""
    history = geometry[3]
    return isinstance(history, tuple) and history[0] == VIEW_OF_UNSAFE_SPLIT


def change_geometry(graph, inputs):
    """Give the inputs and captured tensors an in-place view op reshaped (``x.t_()``) their new
    geometry, as eager does. Run after `returned_aliases`, whose view offsets count from the old."""
    for owner, (shape, strides, offset) in graph.geometry_changes.items():
        real = inputs[owner] if isinstance(owner, int) else graph.constant_tensors[owner]
        real._set_geometry(shape, strides, real._offset + offset)


def returned_view(real, geometry, pieces=None):
    """The tensor over ``real``'s memory a traced function returned: ``geometry`` is (shape, strides,
    offset from ``real``'s own, its history: `tracer.alias_history`). A view that requires grad records
    its view in autograd, as eager's does, and so does one of a ``real`` that does not require grad (an
    in-place op on ``real`` may give both a history later); a view without history of a ``real`` that has
    one, or one of a detached alias, is a view of ``real`` detached; an alias is ``real`` detached; an
    unsafe split's output is such a view that autograd does not track as one (`ops.real_identities.untracked`),
    and a view of one an autograd view of it. ``pieces``: {number: the split output made} for the call's
    leaves over one such output (one tensor for all, as eager's)."""
    shape, strides, offset, history = geometry
    offset += real._offset
    if history is True or history is False and not real._requires_grad:
        return real.as_strided(shape, strides, offset)
    if isinstance(history, tuple):
        pieces = {} if pieces is None else pieces
        if history[0] == UNSAFE_SPLIT:
            piece = pieces[history[1]] = untracked(real.as_strided(shape, strides, offset))
            return piece
        piece = pieces.get(history[1])
        if piece is None:
            piece_shape, piece_strides, piece_offset = history[2]
            piece = pieces[history[1]] = untracked(real.as_strided(piece_shape, piece_strides,
                                                                   real._offset + piece_offset))
        return piece.as_strided(shape, strides, offset)
    if history == ALIAS:
        return Tensor._make(real._storage, shape, strides, offset)
    if history == CUT:  # (its backward ends at a tensor of its own, which no caller holds: as eager's, at none)
        return real.detach().requires_grad_(True).as_strided(shape, strides, offset)
    return Tensor._view_of(real.detach(), shape, strides, offset)


def refresh_captured_state(graph):
    """Before a call: point the graph's ``p.grad`` constants at the parameters' current ``.grad``
    tensors, and give captured scalars their current values (`jitorch.compiler.dynamic_scalar`)."""
    for refresh in graph.refreshers:
        refresh()
    tensors = graph.constant_tensors
    for name, owner in graph.grad_constants.items():
        if name in tensors:  # (unless optimisation found it unused)
            tensors[name] = owner.__dict__.get("_grad")


def python_guards_hold(graph):
    """Whether the Python state the trace assumed (captured ``.grad`` being None, an optimizer's
    learning rate, see `jitorch.compiler.guard`) still holds."""
    return all(check() for check in graph.python_guards)


def write_back(graph, inputs, mutations):
    """Write the values of in-place ops on inputs and constants back into them."""
    by_input = dict(zip(graph.inputs, inputs))
    targets = [by_input.get(t) if t in by_input else graph.constant_tensors[t.name] for t, _ in mutations]
    storages = {id(t.untyped_storage()) for t in targets}
    # a written value may be another target's own tensor (w.copy_(x) with x written too): read all first
    values = [v.clone() if id(v.untyped_storage()) in storages else v for _, v in mutations]
    for real, value in zip(targets, values):
        real._write(value)


def captured_parameters(graph):
    """The captured tensors the traced function read that require grad (a module's parameters), by constant
    name, including those whose reads the graph's passes folded away (fuzz seed 7203079: ``fill(c0, -1)``
    gives ``c0`` a zero gradient eagerly, None when the compiled call's node did not take it)."""
    captured = graph.traced_constants if graph.traced_constants is not None else graph.constant_tensors
    return {name: t for name, t in captured.items() if getattr(t, "requires_grad", False)}
