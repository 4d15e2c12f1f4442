"""Module backward hooks, as torch's ``BackwardHook``.

``nn.Module.register_full_backward_hook`` and ``register_full_backward_pre_hook``
work as in torch: a module's tensor inputs and outputs pass through
`BackwardHookFunction`, an identity custom Function, and hooks on those two
backward nodes see the gradients with respect to the module's outputs and then
to its inputs, and may replace them. Because the hooks live in the backward
graph, a traced backward (``jitorch.compile`` of a training step) runs them
too, recording the ops they call.
"""

from __future__ import annotations

import warnings

from ...autograd.function import Function
from ...runtime.grad_mode import is_grad_enabled
from ...runtime.hooks import user_stacklevel
from ...tensor import Tensor


class BackwardHookFunction(Function):
    """The identity, as a custom Function: its backward node is where module backward hooks attach."""

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *grads):
        return grads


class BackwardHook:
    """One call of a module with full backward (pre-)hooks: wraps its tensor inputs and outputs
    and calls ``hook(module, grad_input, grad_output)`` once the gradients of both are known.

    Gradients are passed as tuples with one entry per positional input (per output), None for
    non-tensors; a hook's non-None result replaces them."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs = None
        self.n_outputs = -1
        self.output_tensors_index = None
        self.n_inputs = -1
        self.input_tensors_index = None

    @staticmethod
    def _pack_with_none(indices, values, size):
        res = [None] * size
        for idx, val in zip(indices, values):
            res[idx] = val
        return tuple(res)

    def _input_hook(self, grad_input, _):
        if self.grad_outputs is None:
            # the gradient reached the inputs without passing through the outputs (double backward)
            return None
        res = self._pack_with_none(self.input_tensors_index, grad_input, self.n_inputs)
        for hook in self.user_hooks:
            out = hook(self.module, res, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(res):
                raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                   f"got {len(out)}, but expected {len(res)}")
            res = out
        self.grad_outputs = None
        return tuple(res[i] for i in self.input_tensors_index)

    def _output_hook(self, _, grad_output):
        self.grad_outputs = self._pack_with_none(self.output_tensors_index, grad_output, self.n_outputs)
        expected = len(self.grad_outputs)
        for hook in self.user_pre_hooks:
            replaced = hook(self.module, self.grad_outputs)
            if replaced is None:
                continue
            if len(replaced) != expected:
                raise RuntimeError("Backward pre hook returned an invalid number of grad_output, "
                                   f"got {len(replaced)}, but expected {expected}")
            self.grad_outputs = replaced
        grad_outputs = self.grad_outputs
        if self.input_tensors_index is None:
            # no input requires grad: no input node will fire, so the hooks run here
            warnings.warn("Full backward hook is firing when gradients are computed with respect to module "
                          "outputs since no inputs require gradients. See the documentation of "
                          "torch.nn.Module.register_full_backward_hook for more details.",
                          stacklevel=user_stacklevel())
            grad_inputs = (None,) * self.n_inputs
            for hook in self.user_hooks:
                res = hook(self.module, grad_inputs, self.grad_outputs)
                if res is not None and not (isinstance(res, tuple) and all(g is None for g in res)):
                    raise RuntimeError("Backward hook for Modules where no input requires gradient should always "
                                       "return None or None for all gradients.")
            self.grad_outputs = None
        return tuple(grad_outputs[i] for i in self.output_tensors_index)

    def _apply_on_tensors(self, node_hook, args):
        """``args`` with its tensors passed through one BackwardHookFunction whose node gets
        ``node_hook``, and the tensors' positions; ``args`` and None when none needs a gradient."""
        index = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in index]
        if not (is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return args, None
        wrapped = BackwardHookFunction.apply(*tensors)
        node = next(t.grad_fn for t in wrapped if t.grad_fn is not None)
        node.register_hook(node_hook)
        items = list(args)
        for i, t in zip(index, wrapped):
            items[i] = t
        return (tuple(items) if type(args) is tuple else type(args)(*items)), index

    def setup_input_hook(self, args):
        """The module's positional arguments, with its tensors wrapped."""
        res, self.input_tensors_index = self._apply_on_tensors(self._input_hook, args)
        self.n_inputs = len(args)
        return res

    def setup_output_hook(self, result):
        """The module's result (a tensor or a tuple), with its tensors wrapped."""
        is_tuple = isinstance(result, tuple)
        items = result if is_tuple else (result,)
        res, self.output_tensors_index = self._apply_on_tensors(self._output_hook, items)
        self.n_outputs = len(items)
        return res if is_tuple else res[0]


__all__ = ["BackwardHook", "BackwardHookFunction"]
