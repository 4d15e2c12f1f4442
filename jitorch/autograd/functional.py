"""torch.autograd.functional: vjp, jvp, jacobian, hessian, vhp and hvp of a function, by reverse mode.

Each takes ``func`` and ``inputs`` (a tensor or a tuple of tensors) and differentiates ``func`` at
``inputs`` with `gradients.grad`. The inputs are detached first (kept in the graph only with
``create_graph``), and without ``create_graph`` the results are detached, as torch's are. ``jvp`` uses
the double-backward trick (a reverse-mode gradient of a reverse-mode gradient), so every op with a
derivative rule serves it; ``hvp`` is ``vhp``, the Hessian of a twice differentiable function being
symmetric. ``vectorize`` and ``strategy`` choose how torch batches the work: the results do not depend
on them, and jitorch computes the rows one by one either way.
"""

from __future__ import annotations

from ..ops import registry
from ..runtime.grad_mode import enable_grad
from .gradients import grad

_STRATEGIES = ("forward-mode", "reverse-mode")


def _as_tuple(name, what, x):
    """``x`` as a tuple of tensors, and whether it was a tuple."""
    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    for i, t in enumerate(items):
        if not isinstance(t, registry.Tensor):
            kind = f"The {what} given to {name} must be either a Tensor or a tuple of Tensors"
            raise TypeError(f"{kind} but the value at index {i} has type {type(t)}." if is_tuple else
                            f"{kind} but the given {what} has type {type(t)}.")
    return items, is_tuple


def _prepare(inputs, create_graph):
    """The inputs as leaves of a new graph (views of themselves when their graph is kept)."""
    return tuple(t.view_as(t) if create_graph and t.requires_grad else t.detach().requires_grad_(True)
                 for t in inputs)


def _finish(values, create_graph):
    return tuple(v if create_graph or v is None else v.detach() for v in values)


def _grads(outputs, inputs, grad_outputs, create_graph, strict, name, both=False):
    """The gradients of ``outputs`` (weighted by ``grad_outputs``) for each input: zeros where an input
    takes no part (an error in strict mode)."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    found = [None] * len(inputs)
    if pairs:
        found = list(grad([o for o, _ in pairs], inputs, [g for _, g in pairs], retain_graph=True,
                          create_graph=create_graph, allow_unused=True))
    for i, (t, g) in enumerate(zip(inputs, found)):
        if g is None:
            if strict:
                raise RuntimeError(f"The output of the user-provided function is independent of input {i}. This "
                                   f"is not allowed in strict mode{' when create_graph=True' * both}.")
            found[i] = registry.FUNCTIONS["zeros_like"](t)
    return tuple(found)


def _call(func, inputs, name):
    return _as_tuple(name, "outputs of the user-provided function", func(*inputs))


def _vector(v, like, name, what):
    """``v`` checked against ``like`` (its shapes), or ones for a single one-element tensor."""
    if v is None:
        if len(like) != 1 or like[0].numel() != 1:
            raise RuntimeError(f"The vector v can only be None if the {what} is a single Tensor with a single "
                               "element.")
        return (registry.FUNCTIONS["ones_like"](like[0]),)
    v, _ = _as_tuple(name, "v", v)
    if len(v) != len(like):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(like)} but got {len(v)}.")
    for i, (a, b) in enumerate(zip(v, like)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f"Entry {i} in v has invalid size: should be {list(b.shape)} but got "
                               f"{list(a.shape)}.")
    return v


def _shaped(values, is_tuple):
    return values if is_tuple else values[0]


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product of ``func`` at ``inputs``."""
    inputs, in_tuple = _as_tuple("vjp", "inputs", inputs)
    with enable_grad():
        inputs = _prepare(inputs, create_graph)
        outputs, out_tuple = _call(func, inputs, "vjp")
        v = _vector(v, outputs, "vjp", "user-provided function returns")
        result = _grads(outputs, inputs, v, create_graph, strict, "vjp")
    return _shaped(_finish(outputs, create_graph), out_tuple), _shaped(_finish(result, create_graph), in_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``: the Jacobian-vector product of ``func`` at ``inputs`` (by double backward)."""
    inputs, in_tuple = _as_tuple("jvp", "inputs", inputs)
    with enable_grad():
        inputs = _prepare(inputs, create_graph)
        v = _vector(v, inputs, "jvp", "input to the user-provided function")
        outputs, out_tuple = _call(func, inputs, "jvp")
        # u -> J^T u is linear in u: the gradient of its dot with v, for u, is J v
        dummies = tuple(registry.FUNCTIONS["zeros_like"](o).requires_grad_(True) for o in outputs)
        transposed = _grads(outputs, inputs, dummies, True, strict, "jvp")
        result = _grads(transposed, dummies, v, create_graph, strict, "jvp", both=True)
    return _shaped(_finish(outputs, create_graph), out_tuple), _shaped(_finish(result, create_graph), out_tuple)


def _check_strategy(strategy, vectorize):
    if strategy not in _STRATEGIES:
        raise ValueError(f'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
                         f'function has more outputs than inputs, "forward-mode" tends to be more performant. '
                         f'Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError("torch.autograd.functional.jacobian: `strategy=\"forward-mode\"` only works "
                                  "when `vectorize=True`.")


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for each output and input, a tensor of shape
    ``output.shape + input.shape`` (nested as torch nests them when either side is a tuple)."""
    _check_strategy(strategy, vectorize)
    inputs, in_tuple = _as_tuple("jacobian", "inputs", inputs)
    with enable_grad():
        inputs = _prepare(inputs, create_graph)
        outputs, out_tuple = _call(func, inputs, "jacobian")
        blocks = []
        for out in outputs:
            flat = out.reshape(-1)
            rows = [_grads((flat[j],), inputs, (registry.FUNCTIONS["ones_like"](flat[j]),), create_graph, strict,
                           "jacobian") for j in range(flat.shape[0])]
            per_input = []
            for i, t in enumerate(inputs):
                shape = tuple(out.shape) + tuple(t.shape)
                stacked = registry.FUNCTIONS["stack"]([r[i] for r in rows]) if rows else \
                    registry.FUNCTIONS["zeros"](shape, dtype=t.dtype, device=t.device)
                per_input.append(stacked.reshape(shape))
            blocks.append(_shaped(_finish(per_input, create_graph), in_tuple))
    return _shaped(tuple(blocks), out_tuple)


def _scalar_function(func, name):
    def single(*inputs):
        out = func(*inputs)
        if isinstance(out, (tuple, list)):
            if len(out) != 1:
                raise RuntimeError(f"The function given to {name} should return a single Tensor")
            out = out[0]
        if not isinstance(out, registry.Tensor):
            raise RuntimeError(f"The function given to {name} should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to {name} should contain a single "
                               f"element")
        return out.reshape(())
    return single


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The Hessian of scalar ``func`` at ``inputs``: the Jacobian of its gradient (for tuple inputs, a
    tuple of tuples, block ``[i][j]`` of shape ``inputs[i].shape + inputs[j].shape``)."""
    _check_strategy(outer_jacobian_strategy, vectorize)
    inputs, in_tuple = _as_tuple("hessian", "inputs", inputs)
    single = _scalar_function(func, "hessian")

    def gradient(*args):
        return jacobian(single, args if in_tuple else args[0], create_graph=True, strict=strict)

    return jacobian(gradient, inputs if in_tuple else inputs[0], create_graph, strict)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)``: the vector-Hessian product of scalar ``func`` at ``inputs``."""
    inputs, in_tuple = _as_tuple("vhp", "inputs", inputs)
    with enable_grad():
        inputs = _prepare(inputs, create_graph)
        v = _vector(v, inputs, "vhp", "input to the user-provided function")
        out = _scalar_function(func, "vhp")(*inputs)
        first = _grads((out,), inputs, (registry.FUNCTIONS["ones_like"](out),), True, strict, "vhp")
        result = _grads(first, inputs, v, create_graph, strict, "vhp", both=True)
    return _finish((out,), create_graph)[0], _shaped(_finish(result, create_graph), in_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)``: the Hessian-vector product, equal to `vhp` (the Hessian is symmetric)."""
    return vhp(func, inputs, v, create_graph, strict)


__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]
