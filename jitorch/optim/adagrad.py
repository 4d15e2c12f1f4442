"""Adagrad (``torch.optim.Adagrad``)."""

from __future__ import annotations

import numpy as np

from .. import compiler, float32, float64, full_like
from .. import tensor as _tensor
from ..runtime import fp_errors
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, bump, numpy_begin, numpy_grad,
                        numpy_step_allowed, step_grad)

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
        numpy = numpy_step_allowed(group["lr"], group["lr_decay"], group["eps"], group["weight_decay"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params)
        for p in params:
            state = self._init_state(p, group)
            if not (numpy and self._numpy_update(p, state, group)):
                self._update_one(p, state, group)


    def _foreach_update(self, group, params):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.adagrad(self, group))
    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        step = self._step_counter(p).to(float64)
        grad = step_grad(p, group)
        # a tensor of the step (float64, as torch's Python-float arithmetic), so a trace reads no value
        clr = lr / (1 + (step - 1) * lr_decay)
        state_sum = state["sum"]
        state_sum.add_(grad * grad)
        std = state_sum.sqrt().add_(eps)
        p.sub_((grad / std).mul_(clr))

    def _numpy_update(self, p, state, group):
        """`_update_one` on the NumPy arrays of ``p``, its gradient and state, as the ops' CPU kernels compute
        each op (the same bits, the same version counts); False, having done nothing, where `numpy_begin`
        refuses or ``p`` is 0-d (where ``clr``, a 0-d float64 tensor, would promote the product)."""
        begun = numpy_begin(p, state, ["sum"], written=(0, 2), zero_dim=False)
        if begun is None:
            return False
        (param, grad, state_sum), step = begun
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        # the float64 tensor ops' arithmetic (each exactly rounded) in Python floats; the product reads it in
        # the parameter's dtype
        clr = param.dtype.type(lr / (1 + (step - 1) * lr_decay))
        token = fp_errors.enter()
        try:
            grad = numpy_grad(p, param, grad, group)
            scratch, std = np.empty_like(param), np.empty_like(param)
            np.add(state_sum, np.multiply(grad, grad, out=scratch), out=state_sum)
            np.add(np.sqrt(state_sum, out=std), eps, out=std)
            update = np.multiply(np.true_divide(grad, std, out=scratch), clr, out=scratch)
            np.subtract(param, update, out=param)
        finally:
            fp_errors.leave(token)
        bump(p, state["sum"])
        return True
