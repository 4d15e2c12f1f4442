"""Eager Adam, AdamW, SGD and Adadelta steps of a whole parameter group in one generated kernel call per dtype
(`jitorch.codegen.foreach`): torch's ``foreach`` and ``fused`` paths, which jitorch takes whatever those flags
say, because they give the per-parameter step's values bit for bit (the kernel makes the same operations
as the NumPy passes of `Adam._numpy_update`, `SGD._numpy_update` and `Adadelta._numpy_update`, element by
element). torch's own fused CPU kernels compute Adam's lerp with a fused multiply-add, so ``fused=True``
agrees with torch's within a float32 rounding per step rather than bit for bit; ``foreach`` and the default
agree bit for bit.

A parameter goes to the kernel where the NumPy step would take it (`numpy_operands`), with every operand
C-contiguous and no two parameters' tensors sharing memory; the others (and SGD's first step with momentum,
which makes the buffer) are left to the per-parameter step, whose values are the same.
"""

from __future__ import annotations

import math

import numpy as np

from .optimizer import bump, numpy_counter, numpy_operands


def adam_step(opt, group, params, buffers):
    """Take Adam's step of ``params`` (with gradients, of ``group``) whose state has ``buffers``, as far as the
    kernel can; returns the parameters left to the per-parameter step, in their order."""
    (beta1, beta2), lr, eps, weight_decay = group["betas"], group["lr"], group["eps"], group["weight_decay"]
    decoupled = bool(group.get("decoupled_weight_decay"))
    weight = 1 - beta1
    entries, left = _operands(params, lambda p: opt._lazy_state(p, buffers), buffers)
    decay = 1 - lr * weight_decay if decoupled else weight_decay
    from ..codegen.foreach import adam_kernel, run_blocks
    for dtype, chosen in entries.items():
        kernel = adam_kernel(dtype, group["maximize"], weight_decay != 0, decoupled, group["amsgrad"],
                             abs(weight) < 0.5)
        if kernel is None:
            left.extend(p for p, _, _, _ in chosen)
            continue
        # lerp's second form multiplies by 1 - w computed in the dtype (torch converts the weight first)
        number = np.dtype(dtype).type
        lerp = weight if abs(weight) < 0.5 else float(number(1) - number(weight))
        rows = [(decay, lerp, beta2, 1 - beta2, math.sqrt(1 - beta2 ** step), eps, -(lr / (1 - beta1 ** step)))
                for step in _count_steps(chosen)]
        run_blocks(kernel, [arrays for _, _, arrays, _ in chosen], rows)
        for p, state, _, _ in chosen:
            if weight_decay != 0 and decoupled:
                bump(p)
            if group["amsgrad"]:
                bump(state["max_exp_avg_sq"])
            bump(p, state["exp_avg"], state["exp_avg_sq"], state["exp_avg_sq"])
    return _in_order(params, left)


def adadelta_step(opt, group, params):
    """Take Adadelta's step of ``params`` as far as the kernel can; returns the parameters left to the
    per-parameter step, in their order."""
    buffers = ["square_avg", "acc_delta"]
    rho, weight_decay = group["rho"], group["weight_decay"]
    entries, left = _operands(params, lambda p: opt._lazy_state(p, buffers), buffers)
    row = (weight_decay, rho, 1 - rho, group["eps"], -group["lr"])
    from ..codegen.foreach import adadelta_kernel, run_blocks
    for dtype, chosen in entries.items():
        kernel = adadelta_kernel(dtype, group["maximize"], weight_decay != 0)
        if kernel is None:
            left.extend(p for p, _, _, _ in chosen)
            continue
        _count_steps(chosen)
        run_blocks(kernel, [arrays for _, _, arrays, _ in chosen], [row] * len(chosen))
        for p, state, _, _ in chosen:
            bump(p, state["square_avg"], state["square_avg"], state["acc_delta"], state["acc_delta"])
    return _in_order(params, left)


def sgd_step(opt, group, params):
    """Take SGD's step of ``params`` as far as the kernel can; returns the parameters left to the
    per-parameter step (with momentum, those without a buffer yet), in their order."""
    momentum, lr, weight_decay = group["momentum"], group["lr"], group["weight_decay"]
    buffers = ["momentum_buffer"] if momentum != 0 else []
    waiting = [p for p in params if buffers and "momentum_buffer" not in opt.state[p]]
    ready = [p for p in params if not (buffers and "momentum_buffer" not in opt.state[p])]
    entries, left = _operands(ready, lambda p: opt.state[p] if buffers else {}, buffers)
    row = (weight_decay, momentum, 1 - group["dampening"], -lr)
    from ..codegen.foreach import run_blocks, sgd_kernel
    for dtype, chosen in entries.items():
        kernel = sgd_kernel(dtype, group["maximize"], weight_decay != 0, momentum != 0, group["nesterov"])
        if kernel is None:
            left.extend(p for p, _, _, _ in chosen)
            continue
        run_blocks(kernel, [arrays for _, _, arrays, _ in chosen], [row] * len(chosen))
        for p, state, _, _ in chosen:
            if buffers:
                bump(state["momentum_buffer"], state["momentum_buffer"])
            bump(p)
    return _in_order(params, left + waiting)


def _count_steps(chosen):
    """Increment each chosen parameter's ``state["step"]`` as `optimizer.numpy_begin` does; returns the new
    counts, as Python floats."""
    steps = []
    for _, state, _, counter in chosen:
        np.add(counter, 1, out=counter)
        bump(state["step"])
        steps.append(counter.item())
    return steps


def _operands(params, state_of, buffers):
    """``({dtype name: [(p, state, arrays, step counter array or None)]}, left)``: the parameters whose
    tensors (the parameter, its gradient, ``buffers`` of its state) a kernel may update, by dtype, and the
    others. A parameter whose tensors share memory with another's is left, as are all that share it."""
    chosen, left, storages = [], [], []
    for p in params:
        state = state_of(p)
        tensors = [p, p.grad] + [state[name] for name in buffers]
        arrays = numpy_operands(tensors, written=range(len(tensors)))
        counter = numpy_counter(state["step"]) if "step" in state else None
        if arrays is None or ("step" in state and counter is None):
            left.append(p)
            continue
        storages.append([id(t._storage) for t in tensors])
        chosen.append((p, state, arrays, counter))
    shared = _sharing(storages)
    entries = {}
    for k, entry in enumerate(chosen):
        if k in shared:
            left.append(entry[0])
        else:
            entries.setdefault(entry[2][0].dtype, []).append(entry)
    return {dtype.name: entry for dtype, entry in entries.items()}, left


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
