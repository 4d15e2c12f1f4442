"""parameters_to_vector and vector_to_parameters: a model's parameters as one flat vector and back."""

from __future__ import annotations

from ...ops.registry import FUNCTIONS as _fn
from ...tensor import Tensor


def _check_param_device(param, old_device):
    """The device of the parameters seen so far; torch's TypeError when ``param`` is on another one."""
    if old_device is not None and param.device != old_device:
        raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return param.device


def parameters_to_vector(parameters):
    """The parameters, flattened and concatenated in order into one vector (differentiable)."""
    device = None
    pieces = []
    for param in parameters:
        device = _check_param_device(param, device)
        pieces.append(param.view(-1))
    return _fn["cat"](pieces)


def _typename(obj):
    """torch.typename of a non-tensor: the qualified class name, without the module for builtins."""
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def vector_to_parameters(vec, parameters):
    """Point each parameter's data at its consecutive slice of ``vec`` (shared, as torch: writing to
    ``vec`` afterwards changes the parameters)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {_typename(vec)}")
    device = None
    pointer = 0
    for param in parameters:
        device = _check_param_device(param, device)
        count = param.numel()
        param.data = vec[pointer:pointer + count].view_as(param).data
        pointer += count
