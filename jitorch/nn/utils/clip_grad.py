"""Gradient clipping: clip_grad_norm_ (= get_total_norm + clip_grads_with_norm_) and clip_grad_value_.

``foreach`` is accepted for torch compatibility; one implementation serves both settings.
"""

from __future__ import annotations

import math
import warnings

from ...runtime.grad_mode import no_grad
from ...ops.registry import FUNCTIONS as _fn
from ...tensor import Tensor


def _as_list(tensors):
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _grads(parameters):
    return [p.grad for p in _as_list(parameters) if p.grad is not None]


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all ``tensors`` together (as if concatenated into one vector)."""
    tensors = [t for t in _as_list(tensors) if t is not None]
    norm_type = float(norm_type)
    if not tensors:
        return _fn["zeros"](())
    with no_grad():
        norms = _fn["stack"]([t.norm(norm_type) for t in tensors])
        total = norms.max() if norm_type == math.inf else norms.norm(norm_type)
    if error_if_nonfinite and not bool(total.isfinite()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients of ``parameters`` by ``min(1, max_norm / (total_norm + 1e-6))``."""
    grads = _grads(parameters)
    if not grads:
        return
    with no_grad():
        coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.device))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Rescale the gradients of ``parameters`` in place so that their total norm is at most
    ``max_norm``; returns the total norm before clipping."""
    parameters = _as_list(parameters)
    total = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """`clip_grad_norm_`'s deprecated name (a FutureWarning, as in torch)."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient of ``parameters`` to ``[-clip_value, clip_value]`` in place."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(min=-clip_value, max=clip_value)
