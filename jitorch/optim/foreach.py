"""Eager optimizer steps of a whole parameter group in one generated kernel call per dtype and set of options
(`jitorch.codegen.foreach`): torch's ``foreach`` and ``fused`` paths, which jitorch takes whatever those flags
say, because they give the per-parameter step's values bit for bit (each kernel makes the same operations as
its optimizer's NumPy passes, ``_numpy_update``, element by element). torch's own fused CPU kernels compute
Adam's lerp with a fused multiply-add, so ``fused=True`` agrees with torch's within a float32 rounding per
step rather than bit for bit; ``foreach`` and the default agree bit for bit.

One mechanism, `group_step`, serves every optimizer; each describes its kernel by a `Plan`: its state buffers,
its kernel's options, the numbers of each parameter's row and the writes its NumPy step counts. A parameter
goes to the kernel where the NumPy step would take it (`numpy_operands`), with every operand C-contiguous and
no two parameters' tensors sharing memory; the others (0-d ones where the NumPy step refuses them, SGD's first
step with momentum, which makes the buffer) are left to the per-parameter step, whose values are the same.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..runtime.dtypes import float32, float64
from .optimizer import bump, numpy_counter, numpy_operands, numpy_power

__all__ = ["Plan", "group_step", "adam", "sgd", "adadelta", "rmsprop", "adagrad", "adamax", "nadam", "radam"]


@dataclass
class Plan:
    """An optimizer group's step as a kernel: ``kind`` (`codegen.foreach.step_kernel`'s), the state
    ``buffers`` (the kernel's roles after the parameter and its gradient), ``state_of(p)`` (the parameter's
    state, made as the per-parameter step makes it), ``flags(step)`` (the kernel's options for a parameter
    whose count becomes ``step``, a Python float, or None without a count), ``row(state, step, number)``
    (the parameter's float64 numbers, ``number`` the dtype's scalar type; called once its count is
    incremented, it may update the state's scalars as the NumPy step does), ``written(p, state)`` (the
    tensors whose writes the NumPy step counts, one per op, ``state["step"]``'s aside), ``zero_dim``
    (whether it takes 0-d parameters) and ``accepts(state)`` (whether the state allows the kernel)."""
    kind: str
    buffers: list
    state_of: Callable
    flags: Callable
    row: Callable
    written: Callable
    zero_dim: bool = True
    accepts: Callable = lambda state: True


def group_step(params, plan):
    """Take the step of ``params`` (with gradients, of one group) that ``plan`` describes as far as its kernels
    can, one kernel call per dtype and set of options; returns the parameters left to the per-parameter step,
    in their order. Each parameter's writes are counted on its tensors' versions as its NumPy step counts
    them (``state["step"]`` once, then ``plan.written``)."""
    entries, left = _operands(params, plan)
    runs = {}
    for entry in entries:
        counter = entry[3]
        step = None if counter is None else float(counter[()] + counter.dtype.type(1))  # (the count it becomes)
        runs.setdefault((entry[2][0].dtype.name, plan.flags(step)), []).append(entry)
    from ..codegen.foreach import run_blocks, step_kernel
    for (dtype, flags), chosen in runs.items():
        kernel = step_kernel(plan.kind, dtype, flags)
        if kernel is None:
            left.extend(p for p, _, _, _ in chosen)
            continue
        number, rows = np.dtype(dtype).type, []
        for _, state, _, counter in chosen:
            step = None
            if counter is not None:
                np.add(counter, 1, out=counter)
                bump(state["step"])
                step = counter.item()
            rows.append(plan.row(state, step, number))
        run_blocks(kernel, [arrays for _, _, arrays, _ in chosen], rows)
        for p, state, _, _ in chosen:
            bump(*plan.written(p, state))
    return _in_order(params, left)


def _lerp_factor(weight, number):
    """The factor of a lerp by ``weight`` in the dtype of scalar type ``number`` (`optimizer.lerp_passes`):
    ``w`` in its first form (``|w| < 0.5``), else ``1 - w`` computed in the dtype (torch converts the weight
    first)."""
    return weight if abs(weight) < 0.5 else float(number(1) - number(weight))


def _grad_flags(group):
    """The kernel options of `codegen.foreach._step_grad` every kernel takes first: maximize, weight decay on
    (Adam's, NAdam's and RAdam's then take `_decoupled`)."""
    return group["maximize"], group["weight_decay"] != 0


def _decoupled(group):
    return bool(group.get("decoupled_weight_decay")) and group["weight_decay"] != 0


def _decay(group):
    """The weight decay's row number: ``1 - lr * weight_decay`` decoupled, else ``weight_decay``."""
    weight_decay = group["weight_decay"]
    return 1 - group["lr"] * weight_decay if _decoupled(group) else weight_decay


def _decayed(p, group):
    """The parameter's write by decoupled weight decay (`optimizer.numpy_grad`), if any."""
    return [p] if _decoupled(group) else []


def adam(opt, group, buffers):
    """Adam's and AdamW's plan (`jitorch.optim.adam.Adam._numpy_update`); ``buffers`` with max_exp_avg_sq
    under amsgrad."""
    (beta1, beta2), lr, eps, amsgrad = group["betas"], group["lr"], group["eps"], group["amsgrad"]
    flags = _grad_flags(group) + (_decoupled(group), amsgrad, abs(1 - beta1) < 0.5)

    def row(state, step, number):
        return (_decay(group), _lerp_factor(1 - beta1, number), beta2, 1 - beta2, math.sqrt(1 - beta2 ** step), eps,
                -(lr / (1 - beta1 ** step)))

    def written(p, state):
        return _decayed(p, group) + [p, state["exp_avg"], state["exp_avg_sq"]] + [state[name] for name in buffers[1:]]
    return Plan("adam", buffers, lambda p: opt._lazy_state(p, buffers), lambda step: flags, row, written)


def sgd(opt, group):
    """SGD's plan (`jitorch.optim.sgd.SGD._numpy_update`): with momentum, only parameters whose buffer the
    per-parameter step has made (at their first step)."""
    momentum = group["momentum"]
    buffers = ["momentum_buffer"] if momentum != 0 else []
    flags = _grad_flags(group) + (momentum != 0, group["nesterov"])
    row = (group["weight_decay"], momentum, 1 - group["dampening"], -group["lr"])
    return Plan("sgd", buffers, lambda p: opt.state[p] if buffers else {}, lambda step: flags,
                lambda state, step, number: row,
                lambda p, state: [p] + [state[name] for name in buffers for _ in range(2)],
                accepts=lambda state: all(name in state for name in buffers))


def adadelta(opt, group):
    """Adadelta's plan (`jitorch.optim.adadelta.Adadelta._numpy_update`)."""
    buffers = ["square_avg", "acc_delta"]
    rho = group["rho"]
    flags = _grad_flags(group)
    row = (group["weight_decay"], rho, 1 - rho, group["eps"], -group["lr"])
    return Plan("adadelta", buffers, lambda p: opt._lazy_state(p, buffers), lambda step: flags,
                lambda state, step, number: row,
                lambda p, state: [p] + [state["square_avg"], state["acc_delta"]] * 2)


def rmsprop(opt, group):
    """RMSprop's plan (`jitorch.optim.rmsprop.RMSprop._numpy_update`)."""
    buffers = opt._buffers(group)
    alpha, momentum = group["alpha"], group["momentum"]
    flags = _grad_flags(group) + (momentum > 0, group["centered"], abs(1 - alpha) < 0.5)

    def row(state, step, number):
        return (group["weight_decay"], alpha, 1 - alpha, _lerp_factor(1 - alpha, number), group["eps"], momentum,
                -group["lr"])

    def written(p, state):
        return [p] + [state[name] for name in buffers for _ in range(1 + (name != "grad_avg"))]
    return Plan("rmsprop", buffers, lambda p: opt._lazy_state(p, buffers), lambda step: flags, row, written)


def adagrad(opt, group):
    """Adagrad's plan (`jitorch.optim.adagrad.Adagrad._numpy_update`): 0-d parameters left."""
    lr, lr_decay = group["lr"], group["lr_decay"]
    flags = _grad_flags(group)
    return Plan("adagrad", ["sum"], lambda p: opt._init_state(p, group), lambda step: flags,
                lambda state, step, number: (group["weight_decay"], group["eps"], lr / (1 + (step - 1) * lr_decay)),
                lambda p, state: [p, state["sum"]], zero_dim=False)


def adamax(opt, group):
    """Adamax's plan (`jitorch.optim.adamax.Adamax._numpy_update`): 0-d parameters left."""
    buffers = ["exp_avg", "exp_inf"]
    lr, (beta1, beta2) = group["lr"], group["betas"]
    flags = _grad_flags(group) + (abs(1 - beta1) < 0.5,)

    @functools.cache  # (the parameters of a group mostly share their count: one power per step)
    def row(step, number):
        return (group["weight_decay"], _lerp_factor(1 - beta1, number), beta2, group["eps"],
                lr / (1 - numpy_power(beta1, step)))
    return Plan("adamax", buffers, lambda p: opt._lazy_state(p, buffers), lambda step: flags,
                lambda state, step, number: row(step, number),
                lambda p, state: [p, state["exp_avg"], state["exp_inf"], state["exp_inf"]], zero_dim=False)


def nadam(opt, group):
    """NAdam's plan (`jitorch.optim.nadam.NAdam._numpy_update`): 0-d parameters left, and those whose
    ``mu_product`` is not a 0-d float CPU tensor."""
    buffers = ["exp_avg", "exp_avg_sq"]
    lr, (beta1, beta2), momentum_decay = group["lr"], group["betas"], group["momentum_decay"]
    flags = _grad_flags(group) + (_decoupled(group), abs(1 - beta1) < 0.5)

    @functools.cache  # (the parameters of a group mostly share their count: its powers once per step)
    def schedule(step):
        return (beta1 * (1.0 - 0.5 * numpy_power(0.96, step * momentum_decay)),
                beta1 * (1.0 - 0.5 * numpy_power(0.96, (step + 1) * momentum_decay)), 1 - numpy_power(beta2, step))

    def row(state, step, number):
        mu, mu_next, bias_correction2 = schedule(step)
        product = numpy_counter(state["mu_product"], _PRODUCT_DTYPES)
        np.multiply(product, product.dtype.type(mu), out=product)
        mu_product = float(product)
        return (_decay(group), _lerp_factor(1 - beta1, number), beta2, 1 - beta2, bias_correction2,
                group["eps"], lr * (1.0 - mu) / (1.0 - mu_product), lr * mu_next / (1.0 - mu_product * mu_next))

    def written(p, state):
        return _decayed(p, group) + [state["mu_product"], p, p, state["exp_avg"], state["exp_avg_sq"],
                                     state["exp_avg_sq"]]
    return Plan("nadam", buffers, lambda p: opt._lazy_state(p, buffers, [("mu_product", 1.0)]),
                lambda step: flags, row, written, zero_dim=False,
                accepts=lambda state: numpy_counter(state["mu_product"], _PRODUCT_DTYPES) is not None)


_PRODUCT_DTYPES = (float32, float64)


def radam(opt, group):
    """RAdam's plan (`jitorch.optim.radam.RAdam._numpy_update`): 0-d parameters left; a step whose
    ``rho_t`` is above 5 takes the kernel with the adaptive term's operations."""
    buffers = ["exp_avg", "exp_avg_sq"]
    lr, (beta1, beta2) = group["lr"], group["betas"]
    rho_inf = 2 / (1 - beta2) - 1
    flags = _grad_flags(group) + (_decoupled(group), abs(1 - beta1) < 0.5)

    @functools.cache  # (the parameters of a group mostly share their count: its powers once per step)
    def rectification(step):
        """Whether the step is rectified (``rho_t > 5``), and the adaptive term's factor."""
        bias_correction2 = 1 - numpy_power(beta2, step)
        rho_t = rho_inf - 2 * step * numpy_power(beta2, step) / bias_correction2
        if not rho_t > 5.0:
            return False, 0.0
        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        return True, math.sqrt(bias_correction2) * rect

    @functools.cache
    def row(step, number):
        return (_decay(group), _lerp_factor(1 - beta1, number), beta2, 1 - beta2, 1 - numpy_power(beta1, step),
                group["eps"], rectification(step)[1], lr)
    return Plan("radam", buffers, lambda p: opt._lazy_state(p, buffers),
                lambda step: flags + (rectification(step)[0],), lambda state, step, number: row(step, number),
                lambda p, state: _decayed(p, group) + [p, state["exp_avg"], state["exp_avg_sq"], state["exp_avg_sq"]],
                zero_dim=False)


def _operands(params, plan):
    """``([(p, state, arrays, step counter array or None)], left)``: the parameters whose tensors (the
    parameter, its gradient, the plan's buffers of its state) a kernel may update, and the others. A
    parameter whose tensors share memory with another's is left, as are all that share it."""
    chosen, left, storages = [], [], []
    for p in params:
        state = plan.state_of(p)
        if not (plan.zero_dim or p._shape) or not plan.accepts(state):
            left.append(p)
            continue
        tensors = [p, p.grad] + [state[name] for name in plan.buffers]
        arrays = numpy_operands(tensors, written=range(len(tensors)))
        counter = numpy_counter(state["step"]) if "step" in state else None
        if arrays is None or ("step" in state and counter is None):
            left.append(p)
            continue
        storages.append([id(t._storage) for t in tensors])
        chosen.append((p, state, arrays, counter))
    shared = _sharing(storages)
    left += [entry[0] for k, entry in enumerate(chosen) if k in shared]
    return [entry for k, entry in enumerate(chosen) if k not in shared], left


def _sharing(storages):
    """The positions of the lists of storage ids in ``storages`` that share one with another list (the
    lists themselves hold distinct ids, `numpy_operands` checks that)."""
    every = [i for ids in storages for i in ids]
    if len(set(every)) == len(every):
        return set()
    owners = {}
    for k, ids in enumerate(storages):
        for i in ids:
            owners.setdefault(i, []).append(k)
    return {k for sharing in owners.values() if len(sharing) > 1 for k in sharing}


def _in_order(params, left):
    index = {id(p): i for i, p in enumerate(params)}
    return sorted(left, key=lambda p: index[id(p)])
