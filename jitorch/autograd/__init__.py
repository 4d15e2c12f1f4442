"""Autograd: derivative rules per op, the backward engine, gradcheck.

Importing this package switches recording on: every registry op on tensors
that require grad attaches a backward node to its result.
"""

from ..ops import registry
from ..tensor import Tensor
from . import engine, rules  # noqa: F401  (rules: declares every op's derivative)
from .function import Function, FunctionCtx
from .gradients import backward, grad, tensor_backward
from ..runtime.grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from . import functional  # noqa: F401  (torch.autograd.functional: jacobian, hessian, vjp, ...)
from . import forward_ad  # noqa: F401  (torch.autograd.forward_ad: dual tensors)
from . import graph  # noqa: F401  (torch.autograd.graph: saved-tensor hooks, Node, GradientEdge, ...)
from .anomaly_mode import detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled, set_detect_anomaly
from .variable import Variable, set_multithreading_enabled

registry.AUTOGRAD = engine
Tensor.backward = tensor_backward

__all__ = ["Function", "FunctionCtx", "backward", "grad", "enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled",
           "gradcheck", "gradgradcheck", "GradcheckError", "functional", "forward_ad", "graph", "detect_anomaly", "set_detect_anomaly",
           "is_anomaly_enabled", "is_anomaly_check_nan_enabled", "Variable", "set_multithreading_enabled"]
