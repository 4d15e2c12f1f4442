"""Muon (``torch.optim.Muon``): momentum orthogonalised by a Newton-Schulz iteration, for 2-D parameters."""

from __future__ import annotations

import math

from .optimizer import Optimizer, step_down

__all__ = ["Muon"]

EPS = 1e-7
DEFAULT_A, DEFAULT_B, DEFAULT_C = 3.4445, -4.7750, 2.0315
DEFAULT_NS_STEPS = 5


def zeropower_via_newtonschulz(grad, ns_coefficients, ns_steps, eps):
    """An approximate orthogonalisation of the matrix ``grad`` (``U S' V^T`` with ``S'`` near 1, ``U S V^T`` its
    SVD) by ``ns_steps`` quintic Newton-Schulz iterations in bfloat16, as torch's."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(grad.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    from .. import addmm
    a, b, c = ns_coefficients
    tall = grad.size(0) > grad.size(1)
    ortho = grad.bfloat16()
    if tall:
        ortho = ortho.T
    ortho.div_(ortho.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = ortho @ ortho.T
        ortho = addmm(ortho, addmm(gram, gram, gram, beta=b, alpha=c), ortho, beta=a)
    return ortho.T if tall else ortho


def _adjust_lr(lr, adjust_lr_fn, shape):
    """The learning rate scaled for the matrix's shape: ``sqrt(max(1, A / B))`` ("original", the default), or
    ``0.2 sqrt(max(A, B))`` ("match_rms_adamw": the RMS of AdamW's updates)."""
    A, B = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, A / B))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(A, B))
    return lr


class Muon(Optimizer):
    """Muon, step for step as ``torch.optim.Muon``: ``buf = lerp(buf, g, 1 - momentum)``; the update (Nesterov's
    ``lerp(g, buf, momentum)`` or ``buf``) orthogonalised (`zeropower_via_newtonschulz`, in bfloat16);
    ``p *= 1 - lr * weight_decay``; ``p -= adjusted_lr * update``. 2-D parameters only."""

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(DEFAULT_A, DEFAULT_B, DEFAULT_C), eps=EPS, ns_steps=DEFAULT_NS_STEPS,
                 adjust_lr_fn=None):
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                        ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter with size: "
                                     f"{p.size()}")

    def _update(self, group, params):
        from .. import compiler, zeros_like
        for p in params:
            if p.is_complex():
                raise RuntimeError("Muon does not support complex parameters")
            state = self.state[p]
            if "momentum_buffer" not in state:
                with compiler.eager_state():
                    state["momentum_buffer"] = zeros_like(p)
            self._update_one(p, state["momentum_buffer"], group)

    @staticmethod
    def _update_one(p, buf, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        grad, lr, momentum = p.grad, group["lr"], group["momentum"]
        buf.lerp_(grad, 1 - momentum)
        update = grad.lerp(buf, momentum) if group["nesterov"] else buf
        update = zeropower_via_newtonschulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
        p.mul_(1 - lr * group["weight_decay"])
        # (the bfloat16 update widened exactly: its product with the rate rounds in p's dtype, as torch's add_)
        step_down(p, update.to(p.dtype), _adjust_lr(lr, group["adjust_lr_fn"], p.shape))
