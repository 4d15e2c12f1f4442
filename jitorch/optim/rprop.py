"""Resilient backpropagation (``torch.optim.Rprop``)."""

from __future__ import annotations

from .optimizer import Optimizer, _check_nonnegative, _check_unsupported

__all__ = ["Rprop"]


class Rprop(Optimizer):
    """Rprop, step for step as ``torch.optim.Rprop``: each element's step size grows by ``etas[1]`` while its
    gradient keeps its sign and shrinks by ``etas[0]`` when the sign flips (clamped to ``step_sizes``);
    ``p -= sign(g) * step_size``, and after a flip that element's gradient counts as zero."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
                 maximize=False, differentiable=False):
        _check_nonnegative(lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        _check_unsupported(foreach, None, differentiable)
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _update(self, group, params):
        for p in params:
            state = self.state[p]
            if not state:
                from .. import compiler, full
                with compiler.eager_state():
                    step_size = full(tuple(p.shape), self._own_lr(p), dtype=p.dtype, device=p.device)
                self._lazy_state(p, ["prev"])["step_size"] = step_size
            self._update_one(p, state, group)

    def _update_one(self, p, state, group):
        """The step of parameter ``p`` through jitorch's ops (traced in a compiled step)."""
        from .. import where
        (etaminus, etaplus), (step_size_min, step_size_max) = group["etas"], group["step_sizes"]
        grad = -p.grad if group["maximize"] else p.grad
        prev, step_size = state["prev"], state["step_size"]
        self._step_counter(p)
        sign = grad.mul(prev).sign()
        flipped = sign.lt(0)
        # torch writes etaplus, etaminus and 1 over the signs: the same factors, selected
        factor = where(sign.gt(0), etaplus, where(flipped, etaminus, where(sign.eq(0), 1.0, sign)))
        step_size.mul_(factor).clamp_(step_size_min, step_size_max)
        grad = where(flipped, 0.0, grad)
        p.addcmul_(grad.sign(), step_size, value=-1)
        prev.copy_(grad)

