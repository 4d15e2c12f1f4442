"""Adam and AdamW (``torch.optim.Adam``, ``torch.optim.AdamW``)."""

from __future__ import annotations

import math

import numpy as np

from ..ops.pointwise_scaled import multiplier
from ..runtime import fp_errors, ufunc_parts
from ..tensor import Tensor
from . import foreach
from .optimizer import (Optimizer, _check_nonnegative, _check_unsupported, bump, moment_passes, numpy_begin, numpy_grad,
                        numpy_step_allowed, step_grad)

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam, step for step as ``torch.optim.Adam`` (``amsgrad``, ``maximize``, decoupled decay for AdamW).

    Per parameter: ``m = lerp(m, g, 1 - beta1)``, ``v = beta2 * v + (1 -
    beta2) * g * g``, ``p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 -
    beta2**t) + eps)`` with ``v`` replaced by its running maximum under
    ``amsgrad``. ``state["step"]`` is a 0-d float32 tensor; the bias
    corrections are Python floats from its value, as torch's: in eager steps
    at once, in a compiled step before each call (`Optimizer._bias_corrections`).
    An eager step updates the whole group in one generated kernel call per dtype
    (`jitorch.optim.foreach`), whatever ``foreach`` and ``fused`` say: the same
    values as the per-parameter step, bit for bit. ``capturable=True`` raises
    on the CPU as torch's does, unless ``fused``.
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
        if group["capturable"] and not group["fused"]:
            _check_capturable(params)
        amsgrad = group["amsgrad"]
        buffers = ["exp_avg", "exp_avg_sq"] + ["max_exp_avg_sq"] * amsgrad
        numpy = numpy_step_allowed(group["lr"], group["eps"], group["weight_decay"], *group["betas"])
        if numpy:  # (the group in one kernel call per dtype; what it leaves takes the per-parameter step)
            params = self._foreach_update(group, params, buffers)
        for p in params:
            state = self._lazy_state(p, buffers)
            if not (numpy and self._numpy_update(p, state, group, buffers)):
                self._update_one(p, state, group)

    def _foreach_update(self, group, params, buffers):
        """The step of the group's ``params`` in one generated kernel call per dtype (`foreach.group_step`: the
        values of `_numpy_update` bit for bit); returns the parameters it leaves to the per-parameter step."""
        return foreach.group_step(params, foreach.adam(self, group, buffers))

    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        (beta1, beta2), eps = group["betas"], group["eps"]
        step_size, bias_correction2_sqrt = self._bias_corrections(p, group)
        grad = step_grad(p, group)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        if group["amsgrad"]:
            second = state["max_exp_avg_sq"]
            second.copy_(second.maximum(exp_avg_sq))
        else:
            second = exp_avg_sq
        denom = (second.sqrt() / bias_correction2_sqrt).add_(eps)
        if isinstance(step_size, Tensor):
            p.sub_((exp_avg / denom).mul_(step_size))
        else:
            p.addcdiv_(exp_avg, denom, value=-step_size)

    def _numpy_update(self, p, state, group, buffers):
        """`_update_one` computed on the NumPy arrays of ``p``, its gradient and state, as the ops' CPU
        kernels compute each op (the same NumPy calls, the same result bit for bit), each write counted
        on the tensor's version as the op counts it; False, having done nothing, where `numpy_operands`
        refuses. It spares the ops' dispatch, about ten calls per parameter."""
        begun = numpy_begin(p, state, buffers, written=(0, 2, 3, 4))
        if begun is None:
            return False
        arrays, step = begun
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        param, grad, exp_avg, exp_avg_sq = arrays[:4]
        token = fp_errors.enter()
        try:
            grad = numpy_grad(p, param, grad, group)
            # Each op's NumPy calls as its kernel makes them, written over two scratch arrays and the state
            # rather than into new ones (a result is rounded the same wherever it is stored); Python numbers
            # as the NumPy scalars of the parameter's dtype that NumPy converts them to.
            scratch, other = np.empty_like(param), np.empty_like(param)
            number = param.dtype.type
            passes = moment_passes(exp_avg, exp_avg_sq, grad, beta1, beta2, scratch)
            step_size = lr / (1 - beta1 ** step)
            bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
            second = exp_avg_sq
            if group["amsgrad"]:
                second = arrays[4]
                passes.append((np.maximum, (second, exp_avg_sq, second)))
                bump(state["max_exp_avg_sq"])
            passes += [(np.sqrt, (second, scratch)),
                       (np.true_divide, (scratch, number(bias_correction2_sqrt), scratch)),
                       (np.add, (scratch, number(eps), scratch)),
                       # addcdiv_ (`_addcdiv`): param + value * exp_avg / denom, value in the parameter's dtype
                       (np.multiply, (multiplier(-step_size, p.dtype), exp_avg, other)),
                       (np.true_divide, (other, scratch, other)), (np.add, (param, other, param))]
            ufunc_parts.run_passes(param.size, passes)
        finally:
            fp_errors.leave(token)
        bump(p, state["exp_avg"], state["exp_avg_sq"], state["exp_avg_sq"])
        return True


_CAPTURABLE_DEVICES = ["cuda", "xpu", "hpu", "privateuseone", "xla"]


def _check_capturable(params):
    """torch's check of an eager ``capturable=True`` step (its fused kernels excepted): the parameters on a
    device whose steps a graph may capture, which the CPU is not."""
    from .. import compiler
    if not compiler.is_compiling() and any(p.device.type not in _CAPTURABLE_DEVICES for p in params):
        raise AssertionError(f"If capturable=True, params and state_steps must be on supported devices: "
                             f"{_CAPTURABLE_DEVICES}.")


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the update), as ``torch.optim.AdamW``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
