"""Adadelta (``torch.optim.Adadelta``)."""

from __future__ import annotations

import numpy as np

from ..runtime import fp_errors, ufunc_parts
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, add_passes, bump, numpy_begin,
                        numpy_grad, numpy_step_allowed, step_down, step_grad)

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """Adadelta, step for step as ``torch.optim.Adadelta``.

    Per parameter: ``v = rho * v + (1 - rho) * g * g``, ``d = sqrt(u + eps) /
    sqrt(v + eps) * g``, ``u = rho * u + (1 - rho) * d * d`` and ``p -= lr * d``
    (``v`` is the state's ``square_avg``, ``u`` its ``acc_delta``).
    An eager step updates the whole group in one generated kernel call per dtype
    (`jitorch.optim.foreach`), whatever ``foreach`` says: the same values as the
    per-parameter step, bit for bit.
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
        numpy = numpy_step_allowed(group["lr"], group["rho"], group["eps"], group["weight_decay"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params)
        for p in params:
            state = self._lazy_state(p, ["square_avg", "acc_delta"])
            if not (numpy and self._numpy_update(p, state, group)):
                self._update_one(p, state, group)

    def _foreach_update(self, group, params):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.adadelta(self, group))

    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        self._step_counter(p)
        grad = step_grad(p, group)
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        square_avg.mul_(rho).add_(grad * grad, alpha=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
        acc_delta.mul_(rho).add_(delta * delta, alpha=1 - rho)
        step_down(p, delta, lr)

    def _numpy_update(self, p, state, group):
        """`_update_one` on the NumPy arrays of ``p``, its gradient and state, as the ops' CPU kernels compute
        each op (the same bits, the same version counts); False, having done nothing, where `numpy_begin`
        refuses."""
        begun = numpy_begin(p, state, ["square_avg", "acc_delta"], written=(0, 2, 3))
        if begun is None:
            return False
        (param, grad, square_avg, acc_delta), _ = begun
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        token = fp_errors.enter()
        try:
            grad = numpy_grad(p, param, grad, group)
            scratch, std = np.empty_like(param), np.empty_like(param)
            number = param.dtype.type
            passes = [(np.multiply, (square_avg, number(rho), square_avg)), (np.multiply, (grad, grad, scratch))]
            passes += add_passes(square_avg, scratch, 1 - rho, square_avg)
            passes += [(np.add, (square_avg, number(eps), std)), (np.sqrt, (std, std)),
                       (np.add, (acc_delta, number(eps), scratch)), (np.sqrt, (scratch, scratch)),  # delta
                       (np.true_divide, (scratch, std, scratch)), (np.multiply, (scratch, grad, scratch)),
                       (np.multiply, (acc_delta, number(rho), acc_delta)), (np.multiply, (scratch, scratch, std))]
            passes += add_passes(acc_delta, std, 1 - rho, acc_delta) + add_passes(param, scratch, -lr, param)
            ufunc_parts.run_passes(param.size, passes)
        finally:
            fp_errors.leave(token)
        bump(p, state["square_avg"], state["square_avg"], state["acc_delta"], state["acc_delta"])
        return True
