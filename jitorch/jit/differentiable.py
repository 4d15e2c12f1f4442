"""A compiled call as one autograd node: forward by the compiled graph, backward by a
compiled vector-Jacobian product of the same function."""

from __future__ import annotations

from ..autograd.function import Function
from ..autograd.grad_mode import no_grad
from ..tensor import Tensor
from ..utils.pytree import tree_flatten


class CompiledCall(Function):
    """``CompiledCall.apply(compiled, entry, n, *inputs, *params) -> the output tensors``: the node a
    compiled call records. The graph runs on the ``n`` inputs; ``params`` (captured tensors that
    require grad) are passed so that the node has edges to them and receives their gradients."""

    @staticmethod
    def forward(ctx, compiled, entry, n, *tensors):
        ctx.entry = entry
        ctx.n = n
        ctx.save_for_backward(*tensors[:n])
        inputs = list(tensors[:n])
        result = entry.executable.run(inputs) if entry.executable is not None else compiled._run_interpreted(
            entry, inputs)
        # the outputs' tensors (the caller puts them back into the graph's output structure)
        return tuple(leaf for leaf in tree_flatten(result)[0] if isinstance(leaf, Tensor))

    @staticmethod
    def backward(ctx, *grads):
        inputs = ctx.saved_tensors
        with no_grad():
            inputs_for_vjp = [t.detach().requires_grad_(t.requires_grad) if t.dtype.is_floating_point else t.detach()
                              for t in inputs]
        gs = ctx.entry.backward(*inputs_for_vjp, *[g.contiguous() for g in grads])
        it = iter(gs)
        input_grads = tuple(next(it) if t.requires_grad else None for t in inputs)
        return (None, None, None) + input_grads + tuple(it)


__all__ = ["CompiledCall"]
