"""Stochastic gradient descent, with momentum, dampening, Nesterov and weight decay (``torch.optim.SGD``)."""

from __future__ import annotations

import numpy as np

from .. import compiler, zeros_like
from ..ops.pointwise import _add
from ..runtime import fp_errors, ufunc_parts
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, add_passes, bump, numpy_operands,
                        numpy_step_allowed, step_down, step_grad)

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent, step for step as ``torch.optim.SGD``.

    For each parameter with gradient ``g``: ``g += weight_decay * p``; with
    momentum, ``buf = g`` on the first step and ``buf = momentum * buf +
    (1 - dampening) * g`` after, then ``g = g + momentum * buf`` (Nesterov)
    or ``g = buf``; finally ``p -= lr * g`` (``+=`` with ``maximize``).
    An eager step updates the whole group in one generated kernel call per dtype
    (`jitorch.optim.foreach`), whatever ``foreach`` and ``fused`` say: the same
    values as the per-parameter step, bit for bit.
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
        numpy = numpy_step_allowed(group["lr"], group["momentum"], group["dampening"], group["weight_decay"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params)
        for p in params:
            if not (numpy and self._numpy_update(p, group)):
                self._update_one(p, group)

    def _foreach_update(self, group, params):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.sgd(self, group))

    def _update_one(self, p, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        momentum = group["momentum"]
        grad = step_grad(p, group)
        if momentum != 0:
            buf, fresh = self._momentum_buffer(p)
            if fresh:
                buf.copy_(grad)
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        step_down(p, grad, group["lr"])

    def _momentum_buffer(self, p):
        """``(state["momentum_buffer"], fresh)``: fresh when made now, as zeros, at the parameter's first
        step (which copies the gradient into it)."""
        state = self.state[p]
        buf = state.get("momentum_buffer")
        if buf is not None:
            return buf, False
        with compiler.eager_state():  # a real buffer even when the step is traced
            buf = state["momentum_buffer"] = zeros_like(p)
        return buf, True

    def _numpy_update(self, p, group):
        """`_update_one` computed on the NumPy arrays of ``p``, its gradient and momentum buffer, as the ops'
        CPU kernels compute each op (the same result bit for bit), each write counted on the tensor's version
        as the op counts it; False, having done nothing, where `numpy_operands` refuses."""
        momentum, lr = group["momentum"], group["lr"]
        tensors = [p, p.grad]
        if momentum != 0:
            if "momentum_buffer" not in self.state[p]:
                return False  # the first step: the ops make the buffer and copy the gradient into it
            tensors.append(self.state[p]["momentum_buffer"])
        arrays = numpy_operands(tensors, written=(0, 2))
        if arrays is None:
            return False
        param, grad = arrays[:2]
        weight_decay = group["weight_decay"]
        token = fp_errors.enter()
        try:
            if group["maximize"]:
                grad = np.negative(grad)
            if weight_decay != 0:
                grad = _add(grad, param, weight_decay)
            # the ops' NumPy calls as passes (large parameters split on the thread team), products in scratch
            scratch = np.empty_like(param)
            passes = []
            if momentum != 0:
                buf = arrays[2]
                passes.append((np.multiply, (buf, param.dtype.type(momentum), buf)))
                passes += add_passes(buf, grad, 1 - group["dampening"], buf, scratch)
                bump(tensors[2], tensors[2])
                if group["nesterov"]:  # (grad + momentum * buf, a new array as `_add` makes)
                    nesterov = np.empty_like(param)
                    passes += add_passes(grad, buf, momentum, nesterov, scratch)
                    grad = nesterov
                else:
                    grad = buf
            passes += add_passes(param, grad, -lr, param, scratch)
            ufunc_parts.run_passes(param.size, passes)
        finally:
            fp_errors.leave(token)
        bump(p)
        return True
