"""Adam and AdamW (``torch.optim.Adam``, ``torch.optim.AdamW``)."""

from __future__ import annotations

import math

from ..tensor import Tensor
from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_grad

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam, step for step as ``torch.optim.Adam`` (``amsgrad``, ``maximize``, decoupled decay for AdamW).

    Per parameter: ``m = lerp(m, g, 1 - beta1)``, ``v = beta2 * v + (1 -
    beta2) * g * g``, ``p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 -
    beta2**t) + eps)`` with ``v`` replaced by its running maximum under
    ``amsgrad``. ``state["step"]`` is a 0-d float32 tensor; the bias
    corrections are Python floats from its value in eager steps, as torch's,
    and float64 tensor ops on it in a traced step, which reads no tensor value.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        _check_nonnegative(lr=lr, eps=eps)
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        _check_nonnegative(weight_decay=weight_decay)
        _check_unsupported(foreach, fused, differentiable)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable, differentiable=differentiable,
                        fused=fused, decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _update(self, group, params):
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        amsgrad = group["amsgrad"]
        for p in params:
            state = self._lazy_state(p, ["exp_avg", "exp_avg_sq"] + ["max_exp_avg_sq"] * amsgrad)
            step = self._step_number(p)
            grad = step_grad(p, group)
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
            step_size = lr / (1 - beta1 ** step)
            bias_correction2 = 1 - beta2 ** step
            bias_correction2_sqrt = (bias_correction2.sqrt() if isinstance(bias_correction2, Tensor)
                                     else math.sqrt(bias_correction2))
            if amsgrad:
                second = state["max_exp_avg_sq"]
                second.copy_(second.maximum(exp_avg_sq))
            else:
                second = exp_avg_sq
            denom = (second.sqrt() / bias_correction2_sqrt).add_(eps)
            if isinstance(step_size, Tensor):
                p.sub_((exp_avg / denom).mul_(step_size))
            else:
                p.addcdiv_(exp_avg, denom, value=-step_size)


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the update), as ``torch.optim.AdamW``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
