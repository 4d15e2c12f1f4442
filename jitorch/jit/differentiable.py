"""A compiled call as one autograd node: forward by the compiled graph, backward by a
compiled vector-Jacobian product of the same function."""

from __future__ import annotations

from ..autograd.function import Function
from ..autograd.grad_mode import no_grad


class CompiledCall(Function):
    """``CompiledCall.apply(compiled, entry, *inputs)``: the node a compiled call records."""

    @staticmethod
    def forward(ctx, compiled, entry, *inputs):
        ctx.entry = entry
        ctx.save_for_backward(*inputs)
        out = entry.executable.run(list(inputs)) if entry.executable is not None else compiled._run_interpreted(
            entry, inputs)
        return out

    @staticmethod
    def backward(ctx, *grads):
        inputs = ctx.saved_tensors
        with no_grad():
            inputs_for_vjp = [t.detach().requires_grad_(t.requires_grad) if t.dtype.is_floating_point else t.detach()
                              for t in inputs]
        gs = ctx.entry.backward(*inputs_for_vjp, *[g.contiguous() for g in grads])
        it = iter(gs)
        return (None, None) + tuple(next(it) if t.requires_grad else None for t in inputs)


__all__ = ["CompiledCall"]
