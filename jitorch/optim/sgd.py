"""Stochastic gradient descent, with momentum, dampening, Nesterov and weight decay (``torch.optim.SGD``)."""

from __future__ import annotations

from .. import compiler, zeros_like
from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_down, step_grad

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent, step for step as ``torch.optim.SGD``.

    For each parameter with gradient ``g``: ``g += weight_decay * p``; with
    momentum, ``buf = g`` on the first step and ``buf = momentum * buf +
    (1 - dampening) * g`` after, then ``g = g + momentum * buf`` (Nesterov)
    or ``g = buf``; finally ``p -= lr * g`` (``+=`` with ``maximize``).
    ``foreach`` and ``fused`` are accepted for compatibility: jitorch has one
    implementation (compile the training step to fuse it).
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        _check_nonnegative(lr=lr, momentum=momentum, weight_decay=weight_decay)
        _check_unsupported(foreach, fused, differentiable)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach, differentiable=differentiable,
                        fused=fused)
        super().__init__(params, defaults)

    def _update(self, group, params):
        lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
        nesterov = group["nesterov"]
        for p in params:
            grad = step_grad(p, group)
            if momentum != 0:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    with compiler.eager_state():  # a real buffer even when the step is traced
                        buf = state["momentum_buffer"] = zeros_like(p)
                    buf.copy_(grad)
                else:
                    buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                grad = grad.add(buf, alpha=momentum) if nesterov else buf
            step_down(p, grad, lr)
