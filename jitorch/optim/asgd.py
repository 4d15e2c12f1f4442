"""Averaged SGD (``torch.optim.ASGD``)."""

from __future__ import annotations

from .. import compiler
from .optimizer import Optimizer, _check_nonnegative, _check_unsupported, step_grad

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """Averaged SGD, step for step as ``torch.optim.ASGD``.

    Per parameter: ``p *= 1 - lambd * eta``, ``p -= eta * g``; the average ``ax`` follows ``p``
    (``ax += mu * (p - ax)``, a copy while ``mu`` is 1); then ``eta = lr / (1 + lambd * lr * t)**alpha``
    and ``mu = 1 / max(1, t - t0)``, both kept as 0-d float32 tensors as torch keeps them.
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
                 maximize=False, differentiable=False, capturable=False):
        _check_nonnegative(lr=lr, weight_decay=weight_decay)
        _check_unsupported(foreach, None, differentiable)
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _update(self, group, params):
        for p in params:
            self._update_one(p, self._lazy_state(p, ["ax"], (("eta", self._own_lr(p)), ("mu", 1.0))), group)

    def _update_one(self, p, state, group):
        """The step of parameter ``p`` (torch's single-tensor step; in a traced step its capturable form,
        which reads no value into Python)."""
        lr, lambd, alpha, t0 = group["lr"], group["lambd"], group["alpha"], group["t0"]
        eta, mu, ax = state["eta"], state["mu"], state["ax"]
        step_t = self._step_counter(p)
        grad = step_grad(p, group)
        if compiler.is_compiling():
            from .. import float64, maximum, ones_like
            # in float64, as eager's Python floats: torch's capturable form computes ``1 - lambd * eta`` and the
            # new eta in the float32 state's dtype, 1e-7 off eager's steps of a float64 parameter
            eta64, step64 = eta.to(float64), step_t.to(float64)
            p.mul_(1 - lambd * eta64)
            p.addcmul_(grad, eta64, value=-1)
            ax.add_(p.sub(ax).mul_(mu))
            eta.copy_(lr / ((1 + lambd * lr * step64) ** alpha))
            mu.copy_(1 / maximum(step64 - t0, ones_like(step64)))
            return
        eta_value = eta.item()
        p.mul_(1 - lambd * eta_value)
        p.add_(grad, alpha=-eta_value)
        if mu.item() != 1:
            ax.add_(p.sub(ax).mul_(mu))
        else:
            ax.copy_(p)
        step = step_t.item()
        # (through tensors of the default dtype, as torch's as_tensor: float32 roundings also where the state
        # is float64, as a loaded state dict makes it)
        from .. import as_tensor
        eta.copy_(as_tensor(lr / ((1 + lambd * lr * step) ** alpha)))
        mu.copy_(as_tensor(1 / max(1, step - t0)))
