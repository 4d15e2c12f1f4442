"""Adagrad (``torch.optim.Adagrad``)."""

from __future__ import annotations

from .. import compiler, float32, float64, full_like
from .. import tensor as _tensor
from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_grad

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """Adagrad, step for step as ``torch.optim.Adagrad``.

    Per parameter: ``sum += g * g`` and ``p -= lr / (1 + (t - 1) * lr_decay) * g
    / (sqrt(sum) + eps)``. As in torch, the state (``step`` and ``sum``, which
    starts at ``initial_accumulator_value``) is made when the optimizer is
    constructed, not on the first step.
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check_nonnegative(lr=lr)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        _check_nonnegative(weight_decay=weight_decay)
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        _check_nonnegative(eps=eps)
        _check_unsupported(foreach, fused, differentiable)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group)

    def _init_state(self, p, group):
        # Also reached from _update for parameters that add_param_group brought after construction.
        state = self.state[p]
        if not state:
            with compiler.eager_state():  # real tensors even when the step is traced
                state["step"] = _tensor(0.0, dtype=float32)
                state["sum"] = full_like(p, group["initial_accumulator_value"])
        return state

    def _update(self, group, params):
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        for p in params:
            state = self._init_state(p, group)
            step = self._step_counter(p).to(float64)
            grad = step_grad(p, group)
            # a tensor of the step (float64, as torch's Python-float arithmetic), so a trace reads no value
            clr = lr / (1 + (step - 1) * lr_decay)
            state_sum = state["sum"]
            state_sum.add_(grad * grad)
            std = state_sum.sqrt().add_(eps)
            p.sub_((grad / std).mul_(clr))
