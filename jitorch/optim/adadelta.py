"""Adadelta (``torch.optim.Adadelta``)."""

from __future__ import annotations

from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_down, step_grad

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """Adadelta, step for step as ``torch.optim.Adadelta``.

    Per parameter: ``v = rho * v + (1 - rho) * g * g``, ``d = sqrt(u + eps) /
    sqrt(v + eps) * g``, ``u = rho * u + (1 - rho) * d * d`` and ``p -= lr * d``
    (``v`` is the state's ``square_avg``, ``u`` its ``acc_delta``).
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        _check_nonnegative(lr=lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check_nonnegative(eps=eps, weight_decay=weight_decay)
        _check_unsupported(foreach, None, differentiable)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize, capturable=capturable,
                        foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    def _update(self, group, params):
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        for p in params:
            state = self._lazy_state(p, ["square_avg", "acc_delta"])
            self._step_counter(p)
            grad = step_grad(p, group)
            square_avg, acc_delta = state["square_avg"], state["acc_delta"]
            square_avg.mul_(rho).add_(grad * grad, alpha=1 - rho)
            std = square_avg.add(eps).sqrt_()
            delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
            acc_delta.mul_(rho).add_(delta * delta, alpha=1 - rho)
            step_down(p, delta, lr)
