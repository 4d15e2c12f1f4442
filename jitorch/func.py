"""Functional transforms: ``grad`` and ``value_and_grad`` return functions (which compile).

    dloss = jitorch.func.grad(loss_fn)            # d loss / d first argument
    value, grads = jitorch.func.value_and_grad(loss_fn, argnums=(0, 1))(w, b, x)
"""

from __future__ import annotations

import functools

from .autograd.gradients import grad as _grad
from .runtime.grad_mode import enable_grad


def _argnums(argnums):
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def value_and_grad(fn, argnums=0, has_aux=False):
    """A function returning ``(fn(*args), gradients of it w.r.t. args[argnums])``; with ``has_aux``,
    ``fn`` returns ``(value, aux)`` and the result is ``((value, aux), gradients)``."""
    nums = _argnums(argnums)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        args = list(args)
        with enable_grad():
            for i in nums:
                args[i] = args[i].detach().requires_grad_()
            out = fn(*args, **kwargs)
            value, aux = out if has_aux else (out, None)
            if value.numel() != 1:
                raise RuntimeError(f"grad: expected fn to return a scalar tensor, got shape {list(value.shape)}")
            grads = _grad(value, [args[i] for i in nums], allow_unused=True, materialize_grads=True)
        grads = grads[0] if isinstance(argnums, int) else grads
        value = value.detach()
        return ((value, aux) if has_aux else value), grads

    return wrapped


def grad(fn, argnums=0, has_aux=False):
    """A function returning the gradient of scalar ``fn`` w.r.t. ``args[argnums]`` (a tuple for
    several argnums; with ``has_aux``, ``(gradients, aux)``)."""
    vg = value_and_grad(fn, argnums, has_aux)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapped
