"""A compiled call as one autograd node. Its forward and backward are two compiled graphs cut from one
joint trace (`partition`), or, for graphs that write into their inputs or return views of memory they
share, the compiled graph and a compiled vector-Jacobian product that recomputes the forward."""

from __future__ import annotations

import weakref
from typing import NamedTuple

from ..autograd import saved_hooks
from ..autograd.engine import gradient_edge
from ..autograd.function import Function
from ..ops.random_ops import Generator, generator_states, replaying_generators
from ..runtime.grad_mode import is_grad_enabled, no_grad
from ..tensor import Tensor
from ..runtime.pytree import tree_flatten
from .output_bases import computed_bases
from .results import captured_parameters


class CompiledCall(Function):
    """``CompiledCall.apply(compiled, entry, n, *inputs, *params) -> the output tensors``: the node a
    compiled call records. The graph runs on the ``n`` inputs; ``params`` (captured tensors that
    require grad) are passed so that the node has edges to them and receives their gradients."""

    @staticmethod
    def forward(ctx, compiled, entry, n, *tensors):
        ctx.entry = entry
        ctx.n = n
        inputs = list(tensors[:n])
        if entry.split is not None:
            return _forward_split(ctx, entry, inputs, tensors)
        # the backward recomputes the forward: its random ops must draw what this call draws
        ctx.generators = generator_states(g for g in entry.graph.objects.values() if isinstance(g, Generator))
        result = entry.executable.run(inputs) if entry.executable is not None else compiled._run_interpreted(
            entry, inputs)
        # The backward recomputes from the inputs and captured tensors as they are after the call's own
        # writes (which no output that requires grad reads); the versions it checks are those of then.
        captured = [t for t in entry.graph.constant_tensors.values() if isinstance(t, Tensor)]
        ctx.save_for_backward(*inputs, *captured)
        ctx.unreached = _unreached(entry.graph, n)
        # the outputs' tensors (the caller puts them back into the graph's output structure, and rebuilds
        # the views of the bases of memory the call made over the ones this node gives)
        leaves = computed_bases(entry.graph, tree_flatten(result)[0])
        outs = tuple(leaf for leaf in leaves if isinstance(leaf, Tensor))
        flags = entry.graph.output_requires_grad
        if flags is not None:  # as eagerly, an output computed without a tensor that requires grad does not
            ctx.mark_non_differentiable(*[o for o, requires_grad in zip(outs, flags) if not requires_grad])
        # the outputs' versions, of which the backward checks those eager's nodes save (an exp's result): weakly
        # held, as a node that held its own outputs would keep each alive until its backward (under saved-tensor
        # hooks, torch packs what its nodes save unchecked)
        ctx.outputs = None if saved_hooks.active() is not None else [
            (weakref.ref(getattr(o._storage, "root", o._storage)), o._version, o.dtype, tuple(o.shape)) for o in outs]
        return outs

    @staticmethod
    def backward(ctx, *grads):
        if ctx.entry.split is not None:
            return _backward_split(ctx, grads)
        saved = ctx.saved_tensors_reading(())
        inputs = saved[:ctx.n]
        with no_grad():
            inputs_for_vjp = [t.detach().requires_grad_(t.requires_grad) if t.dtype.is_floating_point else t.detach()
                              for t in inputs]
        vjp_args = (*inputs_for_vjp, *[g.contiguous() for g in grads])
        positions, outputs = _positions_read(ctx.entry.backward, vjp_args, saved, ctx.n)
        ctx.saved_tensors_reading(positions)
        _check_outputs(ctx.outputs, outputs)
        with replaying_generators(ctx.generators):
            gs = ctx.entry.backward(*vjp_args)
        if is_grad_enabled():  # (as the split's: the compiled product gives them without history)
            gs = _without_double_backward(gs, [*saved, *grads])
        return _node_grads(ctx, [t.requires_grad for t in inputs], gs)


class SplitCall(NamedTuple):
    """A call's forward and backward graphs (`partition.Split`), compiled."""

    forward: object   # CompiledGraph: the call's tensors -> the outputs, then the saved values
    backward: object  # CompiledGraph: the inputs it reads, the saved values, the cotangents -> the gradients
    inputs_read: tuple  # positions among the call's tensors of the inputs the backward reads
    saved: int
    # what eager's nodes save that the backward graph does not read (a layer norm's input, whose statistics it
    # reads instead): positions among the call's tensors, and captured tensors; their versions are checked alone
    checked: tuple = ()
    checked_captured: tuple = ()
    checked_outputs: tuple = ()  # positions among the outputs (a cumprod's result, which eager's node saves)


def _forward_split(ctx, entry, inputs, tensors):
    split = entry.split
    result = split.forward.run(inputs)
    n_saved = split.saved
    outs, saved = tuple(result[:len(result) - n_saved]), result[len(result) - n_saved:]
    # versions checked in the backward: the inputs and captured tensors it reads, and the saved values (an
    # output the caller may write into)
    captured = [t for t in split.backward.graph.constant_tensors.values() if isinstance(t, Tensor)]
    ctx.save_for_backward(*[inputs[i] for i in split.inputs_read], *captured, *saved,
                          *[inputs[i] for i in split.checked], *split.checked_captured,
                          *[outs[k] for k in split.checked_outputs])
    ctx.captured = len(captured)
    ctx.needs_grad = [t.requires_grad for t in inputs]
    # where the node's gradients go (the edges its own node will have): a double backward must find its raising node
    # on the way to them, as the backward graph may read none of them (`_without_double_backward`)
    ctx.edges = tuple((gradient_edge(t), getattr(t, "_output_nr", 0)) for t in tensors if t.requires_grad)
    ctx.unreached = _unreached(entry.graph, len(inputs))
    flags = entry.graph.output_requires_grad
    if flags is not None:
        ctx.mark_non_differentiable(*[o for o, requires_grad in zip(outs, flags) if not requires_grad])
    return outs


def _backward_split(ctx, grads):
    split = ctx.entry.split
    saved = ctx.saved_tensors
    k = len(split.inputs_read)
    end = len(saved) - len(split.checked) - len(split.checked_captured) - len(split.checked_outputs)
    args = [t.contiguous() for t in saved[:k]] + list(saved[k + ctx.captured:end]) + [g.contiguous() for g in grads]
    gradients = split.backward.run(args)
    if is_grad_enabled():  # (backward(create_graph=True)): the graph computed the gradients without history
        gradients = _without_double_backward(gradients, [*saved, *grads], ctx.edges)
    return _node_grads(ctx, ctx.needs_grad, gradients)


def _without_double_backward(gradients, read, edges=()):
    """The backward graph's (or compiled vector-Jacobian product's) ``gradients`` given a history whose backward raises, as torch.compile's
    (AOTAutograd's) do, where a tensor the backward ``read`` requires grad (torch's test): differentiating
    them again would otherwise see constants and silently give no second-order term (a gradient penalty
    added to a loss would move nothing). ``edges``: the call's own node's edges (to its inputs and parameters), which
    the raising node takes too, so that ``autograd.grad(penalty, x)`` reaches it: an engine asked for ``x``'s gradient
    runs only the nodes on a way to ``x``."""
    positions = [i for i, g in enumerate(gradients) if isinstance(g, Tensor)]
    if not positions:
        return gradients
    # where the backward read nothing that requires grad (an exp's saved result and a cotangent of ones), a leaf of
    # its own: the gradients were given without history all the same, and a penalty of them silently lost its
    # second-order term (d/dx of exp(x)'s gradient squared: tests/fuzz/test_fuzz47_models.py)
    anchors = [t for t in read if isinstance(t, Tensor) and t.requires_grad] or \
        [gradients[positions[0]].new_zeros(()).requires_grad_()]
    marked = _NoDoubleBackward.apply(len(positions), *[gradients[i] for i in positions], *anchors)
    # (only the way to them matters: the node raises before it would pass a gradient along them)
    marked[0].grad_fn.next_functions += edges
    marked = iter(marked)
    return [next(marked) if isinstance(g, Tensor) else g for g in gradients]


class _NoDoubleBackward(Function):
    """``apply(n, *gradients, *anchors)``: the ``n`` gradients (the same memory), whose backward raises."""

    @staticmethod
    def forward(ctx, n, *tensors):
        return tuple(t.detach() for t in tensors[:n])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("jitorch.compile does not currently support double backward: a compiled call's backward "
                           "graph gives its gradients without history (torch.compile with aot_autograd raises "
                           "the same)")


def _node_grads(ctx, needs_grad, gradients):
    """The node's gradients, per argument of `CompiledCall.apply`: ``gradients`` are those of the inputs that
    require grad, then of the captured parameters."""
    it = iter(gradients)
    tensor_grads = [next(it) if needed else None for needed in needs_grad] + list(it)
    return (None, None, None) + tuple(None if k in ctx.unreached else g for k, g in enumerate(tensor_grads))


def _unreached(graph, n):
    """The positions among the node's tensors (the ``n`` inputs, then the captured parameters) whose
    gradient no output reaches: eagerly their ``.grad`` stays None rather than becoming zeros."""
    reaches = graph.gradient_reaches
    if reaches is None:
        return frozenset()
    params = list(captured_parameters(graph))
    return frozenset(k for k, key in enumerate([*range(n), *params]) if key not in reaches)


def _positions_read(vjp, vjp_args, saved, n):
    """The positions among ``saved`` (the ``n`` inputs, then the captured tensors) of the tensors the
    compiled backward reads: as torch checks the versions of only the tensors its nodes saved, a
    write into one the gradients do not depend on (an integer index tensor) is no error; and the positions
    among the call's outputs of those eager's nodes save (an exp's result), which the backward recomputes."""
    entry = vjp._entry(vjp_args, {})
    if entry is None or entry.graph is None:  # the backward runs eagerly: it may read any of them
        return range(len(saved)), ()
    graph = entry.graph
    live = _reaching_outputs(graph)
    # and those eager's nodes saved, which its backward checks even where the gradients do not read them
    eager = graph.saved_eagerly or ()
    captured = {id(graph.constant_tensors[name]) for name, v in graph.constants.items() if v in live or name in eager}
    return ([i for i, t in enumerate(saved) if (graph.inputs[i] in live or i in eager if i < n else id(t) in captured)],
            sorted(key[1] for key in eager if isinstance(key, tuple)))


def _check_outputs(versions, positions):
    """Raise torch's error where an output at ``positions`` (its ``versions``: the call's (weak reference to its
    memory, version, dtype, shape)) was written since the call: eager's node saved it, and its backward would
    have refused what the recomputing backward gives."""
    for k in positions if versions is not None else ():
        memory, version, dtype, shape = versions[k]
        st = memory()
        if st is not None and st._version != version:
            raise RuntimeError(f"one of the variables needed for gradient computation has been modified by an "
                               f"inplace operation: [{dtype}{list(shape)}], which is output {k} of a compiled call, "
                               f"is at version {st._version}; expected version {version} instead.")


def _reaching_outputs(graph):
    """The values the graph's outputs depend on (computed once per graph: calls ask each time)."""
    key = id(graph)
    cached = _LIVE.get(key)
    if cached is not None and cached[0]() is graph:
        return cached[1]
    live = set(graph.output_values())
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs):
            live.update(node.input_values())
    _LIVE[key] = (weakref.ref(graph, lambda _: _LIVE.pop(key, None)), live)
    return live


_LIVE: dict = {}  # id(graph) -> (a weak reference to it, the values its outputs depend on); graphs compare by value


def outputs_read_overwritten(graph):
    """Whether the graph's outputs depend on a value of an input or captured tensor from before the
    graph wrote into it (then a backward that recomputes the forward after the call would see the new
    values)."""
    live = _reaching_outputs(graph)
    return any(target in live for target, _ in graph.mutations)


__all__ = ["CompiledCall", "SplitCall", "outputs_read_overwritten"]
