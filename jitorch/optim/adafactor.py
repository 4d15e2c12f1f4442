"""Adafactor (``torch.optim.Adafactor``)."""

from __future__ import annotations

from ..runtime.dtypes import finfo
from .optimizer import Optimizer

__all__ = ["Adafactor"]


class Adafactor(Optimizer):
    """Adafactor, step for step as ``torch.optim.Adafactor``: the second moment of a matrix's gradient
    kept factored (row and column means of ``g * g``, over the last two dims), a vector's in full; the
    step is relative to the parameter's RMS and clipped by ``d``. Its step sizes are read into Python
    (norms, as torch's), so a compiled step runs it eagerly."""

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False):
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize)
        super().__init__(params, defaults)

    def _update(self, group, params):
        eps1, eps2 = group["eps"]
        for p in params:
            if p.is_complex():
                raise RuntimeError("Adafactor does not support complex parameters")
            state = self.state[p]
            if not state:
                self._lazy_state(p, ())
                shape = tuple(p.grad.shape)
                if len(shape) > 1:
                    self._zeros(state, p, row_var=shape[:-1] + (1,), col_var=shape[:-2] + (1, shape[-1]))
                else:
                    self._zeros(state, p, variance=shape)
            if eps1 is None:  # (the group's first parameter's dtype serves them all, as in torch)
                eps1 = finfo(p.dtype).eps
            self._update_one(p, state, group, eps1, eps2)

    @staticmethod
    def _zeros(state, p, **shapes):
        """Zero state tensors of ``shapes`` like ``p``'s gradient: real tensors even while a step is traced."""
        from .. import compiler, zeros
        with compiler.eager_state():
            for name, shape in shapes.items():
                state[name] = zeros(shape, dtype=p.grad.dtype, device=p.grad.device)

    def _update_one(self, p, state, group, eps1, eps2):
        """The step of parameter ``p``, with torch's ops in torch's order."""
        from .. import norm
        lr, d, weight_decay = group["lr"], group["d"], group["weight_decay"]
        lr = lr.item() if hasattr(lr, "item") else lr
        grad = -p.grad if group["maximize"] else p.grad
        step = self._step_counter(p).item()
        one_minus_beta2_t = step ** group["beta2_decay"]
        rho_t = min(lr, 1 / (step ** 0.5))
        alpha = max(eps2, p.norm(2).item() / (p.numel() ** 0.5)) * rho_t
        if weight_decay != 0:
            p.mul_(1 - lr * weight_decay)
        if grad.dim() > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            # (the means of g * g along a dim, without g * g in memory)
            row_var.lerp_(norm(grad, dim=-1, keepdim=True).square_().div_(grad.size(-1)), one_minus_beta2_t)
            col_var.lerp_(norm(grad, dim=-2, keepdim=True).square_().div_(grad.size(-2)), one_minus_beta2_t)
            var_estimate = row_var @ col_var
            var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
        else:
            variance = state["variance"]
            variance.lerp_(grad * grad, one_minus_beta2_t)
            var_estimate = variance.clone()
        update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_()
        update.mul_(grad)
        denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * d))
        p.add_(update, alpha=-alpha / denom)
