"""Adamax (``torch.optim.Adamax``), and the check of ``betas`` the Adam variants share."""

from __future__ import annotations

from .. import float64
from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_grad

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
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        for p in params:
            state = self._lazy_state(p, ["exp_avg", "exp_inf"])
            step = self._step_counter(p).to(float64)
            grad = step_grad(p, group)
            exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_inf.copy_(exp_inf.mul_(beta2).maximum(grad.abs().add_(eps)))
            clr = lr / (1 - beta1 ** step)
            p.sub_((exp_avg / exp_inf).mul_(clr))
