"""``torch.autograd.grad_mode``'s path: the grad-mode switches, which live in ``runtime.grad_mode``."""

from ..runtime.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled

__all__ = ["enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled"]
