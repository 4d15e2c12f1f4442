"""RMSprop (``torch.optim.RMSprop``)."""

from __future__ import annotations

from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_down, step_grad

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop, step for step as ``torch.optim.RMSprop``.

    Per parameter: ``v = alpha * v + (1 - alpha) * g * g``; centered, ``a =
    lerp(a, g, 1 - alpha)`` and the denominator is ``sqrt(v - a * a) + eps``,
    else ``sqrt(v) + eps``; with momentum ``buf = momentum * buf + g / denom``
    and ``p -= lr * buf``, else ``p -= lr * g / denom``.
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_nonnegative(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha)
        _check_unsupported(foreach, None, differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _update(self, group, params):
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        momentum = group["momentum"]
        for p in params:
            state = self._lazy_state(p, ["square_avg"] + ["momentum_buffer"] * (group["momentum"] > 0)
                                     + ["grad_avg"] * group["centered"])
            self._step_counter(p)
            grad = step_grad(p, group)
            square_avg = state["square_avg"]
            square_avg.mul_(alpha).add_(grad * grad, alpha=1 - alpha)
            if group["centered"]:
                grad_avg = state["grad_avg"]
                grad_avg.lerp_(grad, 1 - alpha)
                avg = (square_avg - grad_avg * grad_avg).sqrt_()
            else:
                avg = square_avg.sqrt()
            avg.add_(eps)
            if momentum > 0:
                buf = state["momentum_buffer"]
                buf.mul_(momentum).add_(grad / avg)
                step_down(p, buf, lr)
            else:
                step_down(p, grad / avg, lr)
