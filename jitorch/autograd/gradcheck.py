"""gradcheck and gradgradcheck: analytical gradients against float64 finite differences.

Same signature and tolerances as torch.autograd.gradcheck: for every input
that requires grad and every output, the Jacobian from the backward pass
(one ``grad`` call per output element) must match central differences with
step ``eps`` within ``atol + rtol * |numerical|``. With ``fast_mode=True``, as
torch's, only ``v^T J u`` is compared for random unit vectors ``u`` (per
input) and ``v`` (per output): one directional difference per input and one
``grad`` call per output instead of one of each per element.
"""

from __future__ import annotations

import numpy as np

from ..ops import registry
from ..runtime.pytree import tree_leaves
from .gradients import grad
from ..runtime.grad_mode import enable_grad, no_grad


class GradcheckError(RuntimeError):
    """Raised by gradcheck when analytical and numerical gradients differ."""


def _outputs(fn, inputs):
    return [o for o in tree_leaves(fn(*inputs)) if isinstance(o, registry.Tensor) and o.dtype.is_floating_point]


def _numerical(fn, inputs, i, eps):
    """d(outputs)/d(inputs[i]) by central differences: a list (per output) of (out numel, in numel) arrays."""
    x = inputs[i]
    flat = x.detach()
    n = x.numel()
    # A CPU float tensor is perturbed through the NumPy array that shares its memory (an indexed write is an op
    # per element, most of a small function's check), its version bumped as the write would.
    host = flat.numpy() if flat.device.type == "cpu" and flat.dtype.name in ("float32", "float64") else None
    columns = []
    with no_grad():
        for k in range(n):
            idx = np.unravel_index(k, tuple(x.shape)) if x.ndim else ()
            orig = (host[idx] if host is not None else flat[idx] if x.ndim else flat).item()
            differences = []
            for value in (orig + eps, orig - eps):
                if host is not None:
                    host[idx] = value
                    flat._bump_version()
                else:
                    flat[idx] = value
                differences.append([o.detach().double().reshape(-1).numpy().copy() for o in _outputs(fn, inputs)])
            if host is not None:
                host[idx] = orig
                flat._bump_version()
            else:
                flat[idx] = orig
            plus, minus = differences
            columns.append([(p - m) / (2 * eps) for p, m in zip(plus, minus)])
    outs = _outputs(fn, inputs)
    return [np.stack([c[j] for c in columns], axis=1) if columns else np.zeros((o.numel(), 0))
            for j, o in enumerate(outs)]


def _analytical(fn, inputs, diff):
    """d(outputs)/d(inputs[i]) for each i in ``diff`` from the backward pass: one forward and one ``grad`` call
    per output element for all of them. A dict {i: list (per output) of (out numel, in numel) arrays}."""
    outs = _outputs(fn, inputs)
    result = {i: [] for i in diff}
    for out in outs:
        rows = {i: [] for i in diff}
        if out.requires_grad:  # as in torch, an output cut from the graph has a zero Jacobian
            for k in range(out.numel()):
                # contiguous, so that writing through reshape(-1) reaches it (zeros_like keeps a view's strides)
                seed = registry.FUNCTIONS["zeros"](tuple(out.shape), dtype=out.dtype, device=out.device)
                seed.reshape(-1)[k] = 1.0
                grads = grad(out, [inputs[i] for i in diff], grad_outputs=seed, retain_graph=True, allow_unused=True)
                for i, g in zip(diff, grads):
                    rows[i].append(np.zeros(inputs[i].numel()) if g is None else g.double().reshape(-1).numpy().copy())
        for i in diff:
            result[i].append(np.stack(rows[i]) if rows[i] else np.zeros((out.numel(), inputs[i].numel())))
    return result


def _directional(fn, inputs, i, eps, u):
    """The outputs' derivatives along ``u`` (flat, of ``inputs[i]``'s numel) by central differences: a list (per
    output) of flat arrays, ``J u``."""
    flat = inputs[i].detach()
    host = flat.numpy() if flat.device.type == "cpu" and flat.dtype.name in ("float32", "float64") else None
    orig = host.copy() if host is not None else flat.clone()
    step = u.reshape(tuple(flat.shape)) * eps
    differences = []
    with no_grad():
        for sign in (1, -1):
            if host is not None:
                host[...] = orig + sign * step
                flat._bump_version()
            else:
                flat.copy_(orig + registry.Tensor._from_array(sign * step).to(device=flat.device))
            differences.append([o.detach().double().reshape(-1).numpy().copy() for o in _outputs(fn, inputs)])
        if host is not None:
            host[...] = orig
            flat._bump_version()
        else:
            flat.copy_(orig)
    plus, minus = differences
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


def _unit(rng, n):
    u = rng.standard_normal(n)
    return u / max(np.linalg.norm(u), 1e-300)


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, fast_mode=False, **ignored):
    """Check ``func``'s gradients at ``inputs`` (a tensor or tuple) against finite differences (``fast_mode``:
    ``v^T J u`` only, see the module docstring)."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    return _check(func, func, inputs, eps, atol, rtol, raise_exception, fast_mode)


def _diff_inputs(inputs):
    diff = [i for i, x in enumerate(inputs) if isinstance(x, registry.Tensor) and x.requires_grad]
    for i in diff:
        if inputs[i].dtype.name != "float64":
            import warnings
            warnings.warn("Input #%d requires gradient and is not a double precision floating point. "
                          "This check will likely fail if all the inputs are not of double precision floating "
                          "point." % i, UserWarning, stacklevel=4)
    return diff


def _mismatch(raise_exception, message):
    if raise_exception:
        raise GradcheckError(message)
    return False


def _check(func, numerical_func, inputs, eps, atol, rtol, raise_exception, fast_mode):
    """gradcheck of ``func``, whose finite differences are taken of ``numerical_func``: the same values as
    ``func``'s, computed without the graph the backward pass needs."""
    diff = _diff_inputs(inputs)
    if fast_mode:
        return _fast_check(func, numerical_func, inputs, diff, eps, atol, rtol, raise_exception)
    analytical = _analytical(func, inputs, diff) if diff else {}
    for i in diff:
        numerical = _numerical(numerical_func, inputs, i, eps)
        for j, (a, n) in enumerate(zip(analytical[i], numerical)):
            if a.shape != n.shape or not np.allclose(a, n, rtol=rtol, atol=atol, equal_nan=True):
                return _mismatch(raise_exception, f"Jacobian mismatch for output {j} with respect to input {i},\n"
                                                  f"numerical:{n}\nanalytical:{a}\n")
    return True


def _fast_check(func, numerical_func, inputs, diff, eps, atol, rtol, raise_exception):
    """`_check` of ``v^T J u`` per (input, output), torch's fast mode: ``u`` a random unit vector per input, ``v``
    per output (seeded, so a check is repeatable); numerically ``v . (J u)`` from one directional difference per
    input, analytically ``u . (J^T v)`` from one ``grad`` call per output."""
    rng = np.random.default_rng(0)
    outs = _outputs(func, inputs)
    vs = [_unit(rng, o.numel()) for o in outs]
    us = {i: _unit(rng, inputs[i].numel()) for i in diff}
    vjps = []
    for out, v in zip(outs, vs):  # (J_j^T v_j per input; an output cut from the graph has a zero Jacobian)
        seed = registry.Tensor._from_array(v.reshape(tuple(out.shape))).to(device=out.device, dtype=out.dtype)
        grads = grad(out, [inputs[i] for i in diff], grad_outputs=seed, retain_graph=True, allow_unused=True) \
            if out.requires_grad else [None] * len(diff)
        vjps.append([np.zeros(inputs[i].numel()) if g is None else g.double().reshape(-1).numpy()
                     for i, g in zip(diff, grads)])
    for k, i in enumerate(diff):
        for j, (ju, v) in enumerate(zip(_directional(numerical_func, inputs, i, eps, us[i]), vs)):
            n, a = float(v @ ju), float(us[i] @ vjps[j][k])
            if not np.isclose(a, n, rtol=rtol, atol=atol, equal_nan=True):
                return _mismatch(raise_exception, f"Jacobian mismatch for output {j} with respect to input {i} "
                                                  f"(fast mode, v^T J u):\nnumerical:{n}\nanalytical:{a}\n")
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
                  fast_mode=False, **ignored):
    """Check the second derivatives of ``func``: gradcheck of its vector-Jacobian product (``fast_mode`` as
    `gradcheck`'s)."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff = [i for i, x in enumerate(inputs) if isinstance(x, registry.Tensor) and x.requires_grad]
    outs = _outputs(func, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = [registry.Tensor._from_array(rng.standard_normal(tuple(o.shape)).astype(np.float64))
                        for o in outs]
    grad_outputs = [g.detach().requires_grad_() for g in grad_outputs]

    def vjp(*args, create_graph=True):
        xs, gs = args[:len(inputs)], args[len(inputs):]
        with enable_grad():  # the numerical side calls vjp under no_grad; it needs func's graph anyway
            # outputs cut from the graph (no input they depend on requires grad) take no part, as in torch
            pairs = [(r, g.to(r.dtype)) for r, g in zip(_outputs(func, xs), gs) if r.requires_grad]
            grads = grad([r for r, _ in pairs], [xs[i] for i in diff], grad_outputs=[g for _, g in pairs],
                         create_graph=create_graph, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    # The finite differences need only the gradients' values: recording the backward pass's own graph for each
    # of their two calls per input element was a sixth of the CPU of six registry ops' gradgradchecks (4.9 -> 4.0 s).
    return _check(vjp, lambda *args: vjp(*args, create_graph=False), inputs + tuple(grad_outputs), eps, atol,
                  rtol, raise_exception, fast_mode)
