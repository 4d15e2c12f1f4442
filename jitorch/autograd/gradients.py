"""``backward`` and ``grad``: the user-facing entry points of the engine (torch.autograd.backward, .grad)."""

from __future__ import annotations

import numpy as np

from ..ops import registry
from ..runtime import dtypes
from . import engine


def _as_tuple(x):
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (tuple, list)) and not hasattr(x, "_fields") else (x,)  # (a GradientEdge: one)


def _ones_like(out):
    """The implicit gradient of a scalar output, ``ones_like(out)``: a fresh one-element array where the op would
    make only that (a plain CPU float tensor with values, no dispatch hook to see the call: a trace, a profile,
    vmap), the op otherwise. Its dispatch took a third of a small ``loss.backward()``'s time (session 54)."""
    if (not registry.DISPATCH_HOOKS and out.__class__ is registry.Tensor and out.dtype in _PLAIN_ONES
            and out._storage._data is not None and out.device.type == "cpu"):
        return registry.Tensor._fresh(np.ones(out._shape, out.dtype.np), out.dtype)
    return registry.FUNCTIONS["ones_like"](out)


_PLAIN_ONES = (dtypes.float32, dtypes.float64)


def _root_grads(outputs, grad_outputs):
    grads = []
    for i, out in enumerate(outputs):
        g = grad_outputs[i] if i < len(grad_outputs) else None
        if g is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = _ones_like(out)
        elif tuple(g.shape) != tuple(out.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {list(g.shape)} and "
                               f"output[{i}] has a shape of {list(out.shape)}.")
        grads.append(g)
    return grads


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the leaves they depend on
    (only ``inputs`` if given)."""
    tensors = _as_tuple(tensors)
    grads = _root_grads(tensors, _as_tuple(grad_tensors))
    retain = create_graph if retain_graph is None else retain_graph
    if inputs is not None:
        inputs = _as_tuple(inputs)
        def accumulate(captured):
            for t in inputs:
                g = captured.get(id(engine.capture_edge(t)[0]))
                if g is not None:
                    engine._accumulate(t, g, create_graph)
        engine.run_backward(tensors, grads, retain, create_graph, capture=inputs, then=accumulate)
        return
    engine.run_backward(tensors, grads, retain, create_graph)


def tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradient of this tensor into the ``.grad`` of the leaves it depends on."""
    backward(self, gradient, retain_graph, create_graph, inputs)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False,
         materialize_grads=False):
    """The gradients of ``outputs`` with respect to ``inputs``, without touching any ``.grad``."""
    outputs, inputs = _as_tuple(outputs), _as_tuple(inputs)
    if not inputs:  # (before any backward runs, as torch)
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    grads = _root_grads(outputs, _as_tuple(grad_outputs))
    retain = create_graph if retain_graph is None else retain_graph
    for i, t in enumerate(inputs):
        if not isinstance(t, tuple) and not t.requires_grad:  # (a tuple: a GradientEdge)
            raise RuntimeError(f"One of the differentiated Tensors does not require grad")
    captured = engine.run_backward(outputs, grads, retain, create_graph, capture=inputs)
    result = []
    for i, t in enumerate(inputs):
        g = captured.get(id(engine.capture_edge(t)[0]))
        if g is None:
            if materialize_grads:
                g = registry.FUNCTIONS["zeros_like"](t)
            elif not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                                   "Set allow_unused=True if this is the desired behavior.")
        result.append(g)
    return tuple(result)


def zero_grad_(params, set_to_none=True):
    """Reset the ``.grad`` of ``params``: to None (default) or, keeping the tensors, to zeros
    (detached from any graph first, as torch's ``Module.zero_grad`` and ``Optimizer.zero_grad``)."""
    for p in params:
        if set_to_none:  # (without reading .grad: a traced step then does not depend on it)
            p.grad = None
            continue
        grad = p.grad
        if grad is None:
            continue
        if grad.grad_fn is not None:
            grad.detach_()
        else:
            grad.requires_grad_(False)
        grad.zero_()
