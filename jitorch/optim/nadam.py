"""NAdam (``torch.optim.NAdam``)."""

from __future__ import annotations

import numpy as np

from .. import float32, float64
from ..runtime import fp_errors, ufunc_parts
from .adamax import _check_betas
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, bump, moment_passes, numpy_begin,
                        numpy_counter, numpy_grad, numpy_power, numpy_step_allowed, step_grad)

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """Adam with Nesterov momentum, step for step as ``torch.optim.NAdam``.

    Per parameter, with ``mu_t = beta1 * (1 - 0.5 * 0.96**(t * momentum_decay))``
    and ``mu_product`` their running product (state, float32 as in torch):
    ``m = lerp(m, g, 1 - beta1)``, ``v = beta2 * v + (1 - beta2) * g * g``,
    ``d = sqrt(v / (1 - beta2**t)) + eps`` and ``p -= lr * (1 - mu_t) / (1 -
    mu_product) * g / d + lr * mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / d``.
    ``decoupled_weight_decay`` decays ``p`` by ``1 - lr * weight_decay`` (NAdamW)
    instead of adding ``weight_decay * p`` to the gradient.
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        _check_nonnegative(lr=lr, eps=eps)
        _check_betas(betas)
        _check_nonnegative(weight_decay=weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        _check_unsupported(foreach, None, differentiable)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    def _update(self, group, params):
        numpy = numpy_step_allowed(group["lr"], group["eps"], group["weight_decay"], group["momentum_decay"],
                                   *group["betas"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params)
        for p in params:
            state = self._lazy_state(p, ["exp_avg", "exp_avg_sq"], [("mu_product", 1.0)])
            if not (numpy and self._numpy_update(p, state, group)):
                self._update_one(p, state, group)


    def _foreach_update(self, group, params):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.nadam(self, group))
    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        momentum_decay = group["momentum_decay"]
        step = self._step_counter(p).to(float64)
        grad = step_grad(p, group)
        # The momentum schedule is a tensor of the step (float64, as torch's Python floats), so a
        # trace reads no value. torch multiplies mu_product by mu in mu_product's dtype (float32
        # unless loaded into a float64 parameter's): cast mu first to round as torch does.
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * momentum_decay))
        mu_product = state["mu_product"]
        mu_product.mul_(mu.to(mu_product.dtype))
        mu_product = mu_product.to(float64)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt_().add_(eps)
        p.sub_((grad / denom).mul_(lr * (1.0 - mu) / (1.0 - mu_product)))
        p.sub_((exp_avg / denom).mul_(lr * mu_next / (1.0 - mu_product * mu_next)))

    def _numpy_update(self, p, state, group):
        """`_update_one` on the NumPy arrays of ``p``, its gradient and state, as the ops' CPU kernels compute
        each op (the same bits, the same version counts); False, having done nothing, where `numpy_begin`
        refuses, ``mu_product`` is not a 0-d float CPU tensor, or ``p`` is 0-d (where the schedule's 0-d
        float64 tensors would promote the products)."""
        product = numpy_counter(state["mu_product"], (float32, float64))
        if product is None:
            return False
        begun = numpy_begin(p, state, ["exp_avg", "exp_avg_sq"], written=(0, 2, 3), zero_dim=False)
        if begun is None:
            return False
        (param, grad, exp_avg, exp_avg_sq), step = begun
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        momentum_decay = group["momentum_decay"]
        # the float64 tensor ops' arithmetic in Python floats (each op exactly rounded; powers as `numpy_power`)
        mu = beta1 * (1.0 - 0.5 * numpy_power(0.96, step * momentum_decay))
        mu_next = beta1 * (1.0 - 0.5 * numpy_power(0.96, (step + 1) * momentum_decay))
        np.multiply(product, product.dtype.type(mu), out=product)
        mu_product = float(product)
        number = param.dtype.type
        token = fp_errors.enter()
        try:
            grad = numpy_grad(p, param, grad, group)
            scratch, denom = np.empty_like(param), np.empty_like(param)
            ufunc_parts.run_passes(param.size, moment_passes(exp_avg, exp_avg_sq, grad, beta1, beta2, scratch))
            np.true_divide(exp_avg_sq, number(1 - numpy_power(beta2, step)), out=denom)
            np.add(np.sqrt(denom, out=denom), eps, out=denom)
            update = np.true_divide(grad, denom, out=scratch)
            np.multiply(update, number(lr * (1.0 - mu) / (1.0 - mu_product)), out=update)
            np.subtract(param, update, out=param)
            update = np.true_divide(exp_avg, denom, out=scratch)
            np.multiply(update, number(lr * mu_next / (1.0 - mu_product * mu_next)), out=update)
            np.subtract(param, update, out=param)
        finally:
            fp_errors.leave(token)
        bump(state["mu_product"], p, p, state["exp_avg"], state["exp_avg_sq"], state["exp_avg_sq"])
        return True
