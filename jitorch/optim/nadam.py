"""NAdam (``torch.optim.NAdam``)."""

from __future__ import annotations

from .. import float64
from .adamax import _check_betas
from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_grad

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
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        momentum_decay = group["momentum_decay"]
        for p in params:
            state = self._lazy_state(p, ["exp_avg", "exp_avg_sq"], [("mu_product", 1.0)])
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
