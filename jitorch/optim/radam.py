"""RAdam (``torch.optim.RAdam``)."""

from __future__ import annotations

from .. import float64, where
from .adamax import _check_betas
from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_grad

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
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        rho_inf = 2 / (1 - beta2) - 1
        for p in params:
            state = self._lazy_state(p, ["exp_avg", "exp_avg_sq"])
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
