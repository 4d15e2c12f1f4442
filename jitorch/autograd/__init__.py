"""Autograd: derivative rules per op, the backward engine, gradcheck.

Importing this package switches recording on: every registry op on tensors
that require grad attaches a backward node to its result.
"""

from ..ops import registry
from ..tensor import Tensor
from . import engine, rules  # noqa: F401  (rules: declares every op's derivative)
from .function import Function, FunctionCtx
from .functional import backward, grad, tensor_backward
from ..runtime.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .gradcheck import GradcheckError, gradcheck, gradgradcheck

registry.AUTOGRAD = engine
Tensor.backward = tensor_backward

__all__ = ["Function", "FunctionCtx", "backward", "grad", "enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled",
           "gradcheck", "gradgradcheck", "GradcheckError"]
