"""RAdam (``torch.optim.RAdam``)."""

from __future__ import annotations

import math

import numpy as np

from .. import float64, where
from ..runtime import fp_errors, ufunc_parts
from .adamax import _check_betas
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, bump, moment_passes, numpy_begin,
                        numpy_grad, numpy_power, numpy_step_allowed, step_grad)

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """Rectified Adam, step for step as ``torch.optim.RAdam``.

    Per parameter: ``m`` and ``v`` as Adam's, ``rho_inf = 2 / (1 - beta2) -
    1``, ``rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t)``; while ``rho_t <=
    5`` the step is SGD with momentum, ``p -= lr * m / (1 - beta1**t)``; after
    it is multiplied by the rectification ``r_t = sqrt((rho_t - 4)(rho_t - 2)
    rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))`` and the adaptive term
    ``sqrt(1 - beta2**t) / (sqrt(v) + eps)``. ``decoupled_weight_decay`` as NAdam's.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        _check_nonnegative(lr=lr, eps=eps)
        _check_betas(betas)
        _check_nonnegative(weight_decay=weight_decay)
        _check_unsupported(foreach, None, differentiable)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _update(self, group, params):
        numpy = numpy_step_allowed(group["lr"], group["eps"], group["weight_decay"], *group["betas"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params)
        for p in params:
            state = self._lazy_state(p, ["exp_avg", "exp_avg_sq"])
            if not (numpy and self._numpy_update(p, state, group)):
                self._update_one(p, state, group)


    def _foreach_update(self, group, params):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.radam(self, group))
    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        rho_inf = 2 / (1 - beta2) - 1
        step = self._step_counter(p).to(float64)
        grad = step_grad(p, group)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        bias_correction2 = 1 - beta2 ** step
        rho_t = rho_inf - 2 * step * beta2 ** step / bias_correction2
        # Which branch applies depends on the step, a tensor: select with `where` (torch's
        # capturable form) so a trace needs no value. The rectification is NaN where it is not
        # selected (2 < rho_t < 4); `where` drops it.
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)).sqrt()
        adaptive = exp_avg_sq.sqrt().add_(eps).reciprocal_().mul_(bias_correction2.sqrt() * rect)
        scale = where(rho_t > 5.0, adaptive, 1.0)
        p.sub_((exp_avg / (1 - beta1 ** step)).mul_(scale).mul_(lr))

    def _numpy_update(self, p, state, group):
        """`_update_one` on the NumPy arrays of ``p``, its gradient and state, as the ops' CPU kernels compute
        each op (the same bits, the same version counts); False, having done nothing, where `numpy_begin`
        refuses or ``p`` is 0-d (where the step's 0-d float64 tensors would promote the products)."""
        begun = numpy_begin(p, state, ["exp_avg", "exp_avg_sq"], written=(0, 2, 3), zero_dim=False)
        if begun is None:
            return False
        (param, grad, exp_avg, exp_avg_sq), step = begun
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        # the float64 tensor ops' arithmetic in Python floats (each op exactly rounded; powers as `numpy_power`)
        rho_inf = 2 / (1 - beta2) - 1
        bias_correction2 = 1 - numpy_power(beta2, step)
        rho_t = rho_inf - 2 * step * numpy_power(beta2, step) / bias_correction2
        number = param.dtype.type
        token = fp_errors.enter()
        try:
            grad = numpy_grad(p, param, grad, group)
            scratch, adaptive = np.empty_like(param), np.empty_like(param)
            ufunc_parts.run_passes(param.size, moment_passes(exp_avg, exp_avg_sq, grad, beta1, beta2, scratch))
            update = np.true_divide(exp_avg, number(1 - numpy_power(beta1, step)), out=scratch)
            if rho_t > 5.0:  # (else `where` picks 1.0, and the product by it changes nothing)
                rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                np.add(np.sqrt(exp_avg_sq, out=adaptive), eps, out=adaptive)
                np.reciprocal(adaptive, out=adaptive)
                np.multiply(adaptive, number(math.sqrt(bias_correction2) * rect), out=adaptive)
                np.multiply(update, adaptive, out=update)
            np.multiply(update, lr, out=update)
            np.subtract(param, update, out=param)
        finally:
            fp_errors.leave(token)
        bump(p, state["exp_avg"], state["exp_avg_sq"], state["exp_avg_sq"])
        return True
