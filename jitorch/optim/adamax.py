"""Adamax (``torch.optim.Adamax``), and the check of ``betas`` the Adam variants share."""

from __future__ import annotations

import numpy as np

from .. import float64
from ..runtime import fp_errors
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, bump, numpy_begin, numpy_grad, numpy_lerp,
                        numpy_power, numpy_step_allowed, step_grad)

__all__ = ["Adamax"]


def _check_betas(betas):
    """Raise torch's ValueError for the first of ``betas`` outside [0, 1)."""
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")


class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm), step for step as ``torch.optim.Adamax``.

    Per parameter: ``m = lerp(m, g, 1 - beta1)``, ``u = max(beta2 * u, |g| +
    eps)``, ``p -= lr / (1 - beta1**t) * m / u``.
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        _check_nonnegative(lr=lr, eps=eps)
        _check_betas(betas)
        _check_nonnegative(weight_decay=weight_decay)
        _check_unsupported(foreach, None, differentiable)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _update(self, group, params):
        numpy = numpy_step_allowed(group["lr"], group["eps"], group["weight_decay"], *group["betas"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params)
        for p in params:
            state = self._lazy_state(p, ["exp_avg", "exp_inf"])
            if not (numpy and self._numpy_update(p, state, group)):
                self._update_one(p, state, group)


    def _foreach_update(self, group, params):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.adamax(self, group))
    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        step = self._step_counter(p).to(float64)
        grad = step_grad(p, group)
        exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_inf.copy_(exp_inf.mul_(beta2).maximum(grad.abs().add_(eps)))
        clr = lr / (1 - beta1 ** step)
        p.sub_((exp_avg / exp_inf).mul_(clr))

    def _numpy_update(self, p, state, group):
        """`_update_one` on the NumPy arrays of ``p``, its gradient and state, as the ops' CPU kernels compute
        each op (the same bits, the same version counts); False, having done nothing, where `numpy_begin`
        refuses or ``p`` is 0-d (where ``clr``, a 0-d float64 tensor, would promote the product)."""
        begun = numpy_begin(p, state, ["exp_avg", "exp_inf"], written=(0, 2, 3), zero_dim=False)
        if begun is None:
            return False
        (param, grad, exp_avg, exp_inf), step = begun
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        clr = param.dtype.type(lr / (1 - numpy_power(beta1, step)))
        token = fp_errors.enter()
        try:
            grad = numpy_grad(p, param, grad, group)
            scratch = np.empty_like(param)
            numpy_lerp(exp_avg, grad, 1 - beta1, scratch)
            np.multiply(exp_inf, beta2, out=exp_inf)
            np.maximum(exp_inf, np.add(np.abs(grad, out=scratch), eps, out=scratch), out=exp_inf)
            update = np.multiply(np.true_divide(exp_avg, exp_inf, out=scratch), clr, out=scratch)
            np.subtract(param, update, out=param)
        finally:
            fp_errors.leave(token)
        bump(p, state["exp_avg"], state["exp_inf"], state["exp_inf"])
        return True
