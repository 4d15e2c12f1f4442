"""NumPy transcriptions of torch.optim's documented algorithms (the oracles of the optimizer tests).

Each ``*_reference(param, grads, **options)`` runs one parameter through the
steps whose gradients are ``grads`` and returns the parameter after each step.
"""

from __future__ import annotations

import numpy as np


def sgd_reference(p, grads, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize=False):
    p, buf, out = p.copy(), None, []
    for g in grads:
        g = -g if maximize else g
        if weight_decay:
            g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
        out.append(p)
    return out


def decayed(p, g, lr, weight_decay, decoupled, maximize):
    """(p, g) after torch's maximize and weight decay: L2 added to the gradient, or, decoupled, the
    parameter shrunk first."""
    g = -g if maximize else g
    if weight_decay:
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
    return p, g


def adam_reference(p, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False,
                   maximize=False, decoupled=False):
    b1, b2 = betas
    p, out = p.copy(), []
    m, v, vmax = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        p, g = decayed(p, g, lr, weight_decay, decoupled, maximize)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        second = vmax if amsgrad else v
        p = p - lr / (1 - b1 ** t) * m / (np.sqrt(second) / np.sqrt(1 - b2 ** t) + eps)
        out.append(p)
    return out


def adamw_reference(p, grads, weight_decay=1e-2, **options):
    return adam_reference(p, grads, weight_decay=weight_decay, decoupled=True, **options)


def rmsprop_reference(p, grads, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                      maximize=False):
    p, out = p.copy(), []
    v, gavg, buf = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = -g if maximize else g
        if weight_decay:
            g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        if centered:
            gavg = alpha * gavg + (1 - alpha) * g
            denom = np.sqrt(v - gavg * gavg) + eps
        else:
            denom = np.sqrt(v) + eps
        if momentum > 0:
            buf = momentum * buf + g / denom
            p = p - lr * buf
        else:
            p = p - lr * g / denom
        out.append(p)
    return out
