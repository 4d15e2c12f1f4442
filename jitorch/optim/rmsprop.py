"""RMSprop (``torch.optim.RMSprop``)."""

from __future__ import annotations

import numpy as np

from ..ops.pointwise import _add_into
from ..runtime import fp_errors
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, bump, numpy_begin, numpy_grad, numpy_lerp,
                        numpy_step_allowed, step_down, step_grad)

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
        numpy = numpy_step_allowed(group["lr"], group["alpha"], group["eps"], group["momentum"],
                                   group["weight_decay"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params)
        for p in params:
            state = self._lazy_state(p, self._buffers(group))
            if not (numpy and self._numpy_update(p, state, group)):
                self._update_one(p, state, group)

    def _foreach_update(self, group, params):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.rmsprop(self, group))

    @staticmethod
    def _buffers(group):
        return ["square_avg"] + ["momentum_buffer"] * (group["momentum"] > 0) + ["grad_avg"] * group["centered"]

    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        momentum = group["momentum"]
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

    def _numpy_update(self, p, state, group):
        """`_update_one` on the NumPy arrays of ``p``, its gradient and state, as the ops' CPU kernels compute
        each op (the same NumPy calls, the same bits), each write counted on the tensor's version as the op
        counts it; False, having done nothing, where `numpy_begin` refuses."""
        buffers = self._buffers(group)
        begun = numpy_begin(p, state, buffers, written=(0, 2, 3, 4))
        if begun is None:
            return False
        arrays, _ = begun
        param, grad, square_avg = arrays[:3]
        named = dict(zip(buffers, arrays[2:]))
        lr, alpha, eps, momentum = group["lr"], group["alpha"], group["eps"], group["momentum"]
        number = param.dtype.type  # (Python numbers as the ops convert them: NumPy 1.x would cast a 0-d array's by value)
        token = fp_errors.enter()
        try:
            grad = numpy_grad(p, param, grad, group)
            scratch = np.empty_like(param)
            np.multiply(square_avg, number(alpha), out=square_avg)
            _add_into(square_avg, np.multiply(grad, grad, out=scratch), 1 - alpha, out=square_avg)
            bump(state["square_avg"], state["square_avg"])
            if group["centered"]:
                grad_avg = named["grad_avg"]
                numpy_lerp(grad_avg, grad, 1 - alpha, scratch)
                bump(state["grad_avg"])
                avg = np.subtract(square_avg, np.multiply(grad_avg, grad_avg, out=scratch), out=scratch)
                np.sqrt(avg, out=avg)
            else:
                avg = np.sqrt(square_avg, out=scratch)
            np.add(avg, number(eps), out=avg)
            if momentum > 0:
                buf = named["momentum_buffer"]
                np.multiply(buf, number(momentum), out=buf)
                np.add(buf, np.true_divide(grad, avg, out=avg), out=buf)
                bump(state["momentum_buffer"], state["momentum_buffer"])
                update = buf
            else:
                update = np.true_divide(grad, avg, out=avg)
            _add_into(param, update, -lr, out=param)
        finally:
            fp_errors.leave(token)
        bump(p)
        return True
