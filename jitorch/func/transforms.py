"""torch.func's differentiating transforms: grad, value_and_grad, vjp, jvp, linearize, jacrev, jacfwd, hessian.

    dloss = jitorch.func.grad(loss_fn)            # d loss / d first argument
    value, grads = jitorch.func.value_and_grad(loss_fn, argnums=(0, 1))(w, b, x)
    per_sample = jitorch.func.vmap(jitorch.func.grad(loss_fn), in_dims=(None, 0, 0))(w, xs, ys)

Reverse mode runs the autograd engine on stand-ins of the differentiated arguments: new leaves, or views
that keep the history of arguments that require grad outside (then the gradients keep theirs, so
transforms nest: ``grad(grad(f))``, ``jacrev(jacrev(f))``). Forward mode uses `autograd.forward_ad`'s dual
tensors; tangents ride on the stand-ins too, so forward over reverse (``hessian``) works. Jacobians map a
vjp or jvp over the rows of an identity with `vmap`, as torch's do.
"""

from __future__ import annotations

import functools

from ..autograd import forward_ad
from ..autograd.gradients import grad as _grad
from ..ops import registry
from ..runtime.grad_mode import enable_grad, is_grad_enabled
from ..runtime.pytree import tree_flatten, tree_unflatten
from ..tensor import Tensor
from .vmap import vmap


def _argnums(argnums):
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def _stand_ins(values):
    """Leaves of a new graph for ``values`` (a list of tensors), and whether their gradients must keep history
    (some value requires grad outside, as in ``grad(grad(f))``)."""
    outer = is_grad_enabled() and any(isinstance(v, Tensor) and v.requires_grad for v in values)
    return [forward_ad.stand_in(v, outer) if isinstance(v, Tensor) else v for v in values], outer


def _result(t, outer):
    return t if outer or not isinstance(t, Tensor) else forward_ad.detached(t)


def value_and_grad(fn, argnums=0, has_aux=False):
    """A function returning ``(fn(*args), gradients of it w.r.t. args[argnums])``; with ``has_aux``,
    ``fn`` returns ``(value, aux)`` and the result is ``((value, aux), gradients)``."""
    nums = _argnums(argnums)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        args = list(args)
        flat, spec = tree_flatten(tuple(args[i] for i in nums))  # (each argument a tree of tensors)
        with enable_grad():
            leaves, outer = _stand_ins(flat)
            for i, arg in zip(nums, tree_unflatten(leaves, spec)):
                args[i] = arg
            out = fn(*args, **kwargs)
            value, aux = out if has_aux else (out, None)
            if not isinstance(value, Tensor) or value.numel() != 1:
                shape = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise RuntimeError(f"grad: expected fn to return a scalar tensor, got shape {shape}")
            grads = _grad(value, leaves, allow_unused=True, materialize_grads=True, create_graph=outer)
        grads = tree_unflatten([_result(g, outer) for g in grads], spec)
        grads = grads[0] if isinstance(argnums, int) else grads
        value = _result(value, outer)
        return ((value, aux) if has_aux else value), grads

    return wrapped


def grad(fn, argnums=0, has_aux=False):
    """A function returning the gradient of scalar ``fn`` w.r.t. ``args[argnums]`` (a tuple for
    several argnums; with ``has_aux``, ``(gradients, aux)``)."""
    vg = value_and_grad(fn, argnums, has_aux)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapped


def _split_aux(out, has_aux, name):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{name}(f, ...): output of function f should be a tuple: (output, aux) if has_aux is True")
    return out


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)`` (and ``aux`` with ``has_aux``): ``vjp_fn(cotangents)`` gives the
    vector-Jacobian products for each primal, as a tuple; it may be called many times."""
    flat, spec = tree_flatten(primals)
    with enable_grad():
        leaves, outer = _stand_ins(flat)
        out, aux = _split_aux(func(*tree_unflatten(leaves, spec)), has_aux, "vjp")
    outs, out_spec = tree_flatten(out)
    for o in outs:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"vjp(f, *primals): Expected f to be a function that has only Tensors as outputs, "
                               f"got {type(o)}")
    inputs = [leaf for leaf in leaves if isinstance(leaf, Tensor)]

    def vjp_fn(cotangents, retain_graph=True, create_graph=None):
        cots, cot_spec = tree_flatten(cotangents)
        if cot_spec != out_spec:
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as pytree structure of "
                               f"outputs to the function. cotangents: {cot_spec}, primal output: {out_spec}")
        for c, o in zip(cots, outs):
            if tuple(c.shape) != tuple(o.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {list(c.shape)} and output[0] "
                                   f"has a shape of {list(o.shape)}.")
        keep = outer if create_graph is None else create_graph
        pairs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
        grads = [registry.FUNCTIONS["zeros_like"](t) for t in inputs]
        if pairs and inputs:
            with enable_grad():
                grads = _grad([o for o, _ in pairs], inputs, [c for _, c in pairs], retain_graph=retain_graph,
                              create_graph=keep, allow_unused=True, materialize_grads=True)
        found = iter(_result(g, keep) for g in grads)
        return tuple(tree_unflatten([next(found) if isinstance(v, Tensor) else None for v in flat], spec))

    result = tree_unflatten([_result(o, outer) for o in outs], out_spec)
    return (result, vjp_fn, aux) if has_aux else (result, vjp_fn)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J tangents)`` (and ``aux`` with ``has_aux``): the Jacobian-vector product by
    forward-mode AD (`autograd.forward_ad`)."""
    head = "jvp(f, primals, tangents): "
    if not isinstance(primals, tuple):
        raise RuntimeError(head + "Expected primals to be a tuple. E.g. it should be valid to call f(*primals).")
    flat, spec = tree_flatten(primals)
    flat_t, spec_t = tree_flatten(tangents)
    if spec != spec_t:
        raise RuntimeError(head + f"Expected primals and tangents to have the same python structure. For example, "
                                  f"if primals is a tuple of 3 tensors, tangents also must be. Got primals with "
                                  f"structure {spec} and tangents with structure {spec_t}")
    for p, t in zip(flat, flat_t):
        if not isinstance(p, Tensor) or not isinstance(t, Tensor):
            raise RuntimeError(head + f"Expected primals and tangents to only contain Tensors, got "
                                      f"{type(p if not isinstance(p, Tensor) else t)}")
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(p, t) for p, t in zip(flat, flat_t)]
        out, aux = _split_aux(func(*tree_unflatten(duals, spec)), has_aux, "jvp")
        outs, out_spec = tree_flatten(out)
        primal_out, tangent_out = [], []
        for o in outs:
            if not isinstance(o, Tensor):
                raise RuntimeError(head + f"Expected f(*primals) to return only tensors, got unsupported type "
                                          f"{type(o)}")
            p, t = forward_ad.unpack_dual(o)
            primal_out.append(p)
            tangent_out.append(registry.FUNCTIONS["zeros_like"](p) if t is None else t)
    result = (tree_unflatten(primal_out, out_spec), tree_unflatten(tangent_out, out_spec))
    return result + (aux,) if has_aux else result


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)``: ``jvp_fn(*tangents)`` is the Jacobian-vector product at ``primals`` (each
    call runs ``func`` forward again: jitorch keeps no linearised graph)."""
    out = func(*primals)

    def jvp_fn(*tangents):
        return jvp(func, primals, tangents)[1]

    return out, jvp_fn


def _partial(func, args, nums):
    """``func`` as a function of ``args[nums]`` alone."""
    def inner(*diff):
        full = list(args)
        for i, v in zip(nums, diff):
            full[i] = v
        return func(*full)
    return inner


def _basis(tensors):
    """The rows of an identity as many as ``tensors`` have elements, split per tensor: ``[n, *t.shape]`` each."""
    total = sum(t.numel() for t in tensors)
    rows, start = [], 0
    for t in tensors:
        eye = registry.FUNCTIONS["eye"](total, dtype=t.dtype, device=t.device)
        rows.append(eye[:, start:start + t.numel()].reshape((total,) + tuple(t.shape)))
        start += t.numel()
    return rows


def _blocks(columns, outs, ins, out_spec, int_argnums, lead):
    """The Jacobian's blocks from the stacked products: ``columns[k]`` holds output ``k``'s (``lead``: whether
    the stacked dimension comes first and runs over inputs (forward mode) or outputs (reverse mode))."""
    result = []
    for k, o in enumerate(outs):
        per_input, start = [], 0
        for i, t in enumerate(ins):
            if lead:  # forward: columns[k] is [N_in, *o.shape]
                part = columns[k][start:start + t.numel()]
                block = part.movedim(0, -1).reshape(tuple(o.shape) + tuple(t.shape))
                start += t.numel()
            else:     # reverse: columns[i] is [N_out, *t.shape], rows of output k at its offset
                offset = sum(x.numel() for x in outs[:k])
                block = columns[i][offset:offset + o.numel()].reshape(tuple(o.shape) + tuple(t.shape))
            per_input.append(block)
        result.append(per_input[0] if int_argnums else tuple(per_input))
    return tree_unflatten(result, out_spec)


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """A function returning the Jacobian of ``func`` w.r.t. ``args[argnums]`` by reverse mode: a vjp mapped
    over the rows of an identity (``chunk_size`` rows at a time)."""
    nums = _argnums(argnums)

    @functools.wraps(func)
    def wrapped(*args):
        primals = [args[i] for i in nums]
        got = vjp(_partial(func, args, nums), *primals, has_aux=has_aux)
        out, vjp_fn = got[0], got[1]
        outs, out_spec = tree_flatten(out)
        basis = tree_unflatten(_basis(outs), out_spec)
        columns = vmap(vjp_fn, chunk_size=chunk_size)(basis)
        jac = _blocks(columns, outs, primals, out_spec, isinstance(argnums, int), lead=False)
        return (jac, got[2]) if has_aux else jac

    return wrapped


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """A function returning the Jacobian of ``func`` w.r.t. ``args[argnums]`` by forward mode: a jvp mapped over
    the rows of an identity."""
    nums = _argnums(argnums)

    @functools.wraps(func)
    def wrapped(*args):
        primals = tuple(args[i] for i in nums)
        inner = _partial(func, args, nums)
        aux = None
        if has_aux:
            aux = _split_aux(func(*args), True, "jacfwd")[1]
            inner = _partial(lambda *a: func(*a)[0], args, nums)

        def push(*tangents):
            return tree_flatten(jvp(inner, primals, tangents)[1])[0]

        outs, out_spec = tree_flatten(inner(*primals))
        columns = vmap(push, randomness=randomness)(*_basis(list(primals)))
        jac = _blocks(columns, outs, primals, out_spec, isinstance(argnums, int), lead=True)
        return (jac, aux) if has_aux else jac

    return wrapped


def hessian(func, argnums=0):
    """A function returning the Hessian of scalar ``func`` w.r.t. ``args[argnums]``: forward over reverse,
    ``jacfwd(jacrev(func))``, as torch's."""
    return jacfwd(jacrev(func, argnums), argnums)
