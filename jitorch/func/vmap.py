"""``vmap``: a function mapped over a dimension of its inputs, run batched (see `batching`)."""

from __future__ import annotations

import functools

from ..ops import registry
from ..runtime.pytree import tree_flatten, tree_unflatten
from ..tensor import Tensor
from .batching import BatchingHook, Level, level_of, levels, physical, wrap


def _name(func):
    return getattr(func, "__name__", repr(func))


def _broadcast(dims, spec):
    """``dims`` (an int or None for a whole subtree, or a tree of them) as one per leaf of ``spec``, or None
    where their structures differ."""
    if dims is None or isinstance(dims, int):
        return [dims] * spec.num_leaves
    if isinstance(dims, dict) and spec.kind == "dict" and set(dims) == set(spec.context):
        parts = [_broadcast(dims[k], c) for k, c in zip(spec.context, spec.children)]
    elif isinstance(dims, (tuple, list)) and spec.kind in ("tuple", "list", "namedtuple") \
            and len(dims) == len(spec.children):
        parts = [_broadcast(d, c) for d, c in zip(dims, spec.children)]
    else:
        return None
    if any(p is None for p in parts):
        return None
    return [d for p in parts for d in p]


def _inputs(func, in_dims, args):
    """(batch size, flat in_dims, flat args, spec), checked as torch checks them."""
    head = f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): "
    if not isinstance(in_dims, (int, tuple)):
        raise ValueError(head + f"expected `in_dims` to be int or a (potentially nested) tuple matching the "
                                f"structure of inputs, got: {type(in_dims)}.")
    if not args:
        raise ValueError(f"vmap({_name(func)})(<inputs>): got no inputs. Maybe you forgot to add inputs, or you "
                         "are trying to vmap over a function with no inputs. The latter is unsupported.")
    flat, spec = tree_flatten(args)
    dims = _broadcast(in_dims, spec)
    if dims is None:
        raise ValueError(head + f"in_dims is not compatible with the structure of `inputs`. in_dims has "
                                f"structure {tree_flatten(in_dims)[1]} but inputs has structure {spec}.")
    for i, (arg, d) in enumerate(zip(flat, dims)):
        if d is not None and not isinstance(d, int):
            raise ValueError(head + f"Got in_dim={d} for an input but in_dim must be either an integer dimension "
                                    "or None.")
        if d is None:
            continue
        if not isinstance(arg, Tensor):
            raise ValueError(head + f"Got in_dim={d} for an input but the input is of type {type(arg)}. We cannot "
                                    "vmap over non-Tensor arguments, please use None as the respective in_dim")
        if not -arg.ndim <= d < arg.ndim:
            raise ValueError(head + f"Got in_dim={d} for some input, but that input is a Tensor of dimensionality "
                                    f"{arg.ndim} so expected in_dim to satisfy -{arg.ndim} <= in_dim < {arg.ndim}.")
        dims[i] = d % arg.ndim
    sizes = [a.shape[d] for a, d in zip(flat, dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return sizes[0], dims, flat, spec


def _outputs(func, out_dims, out, level):
    """The function's result with ``level``'s batch dimension at ``out_dims``."""
    flat, spec = tree_flatten(out)
    head = f"vmap({_name(func)}, ..., out_dims={out_dims})(<inputs>): "
    if isinstance(out, Tensor) and isinstance(out_dims, tuple) and len(out_dims) == 1:
        dims = list(out_dims)
    else:
        dims = _broadcast(out_dims, spec) if isinstance(out_dims, (int, tuple, list, dict)) or out_dims is None \
            else None
    if dims is None:
        raise ValueError(head + f"out_dims is not compatible with the structure of `outputs`. out_dims has "
                                f"structure {tree_flatten(out_dims)[1]} but outputs has structure {spec}.")
    name = _name(func)
    result = []
    for leaf, d in zip(flat, dims):
        if d is None:
            if isinstance(leaf, Tensor) and level_of(leaf) is level:
                raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim is None")
            result.append(leaf)
            continue
        if not isinstance(d, int):
            raise ValueError(f"vmap({name}, ..., out_dims={out_dims}): `out_dims` must be an int, None or a python "
                             "collection of ints representing where in the outputs the vmapped dimension should "
                             "appear.")
        if not isinstance(leaf, Tensor):
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(leaf)}. Did you "
                             "mean to set out_dims= to None for output?")
        if level_of(leaf) is level:
            result.append(registry.FUNCTIONS["movedim"](physical(leaf), 0, d))
        else:  # the same for every sample
            shape = list(leaf.shape)
            at = d % (leaf.ndim + 1)
            result.append(leaf.unsqueeze(at).expand(shape[:at] + [level.size] + shape[at:]))
    return tree_unflatten(result, spec)


def _run(func, kwargs, out_dims, randomness, size, dims, flat, spec):
    """One vmap level: the inputs batched, ``func`` run through the hook, the outputs unbatched."""
    level = Level(len(levels()) + 1, size, randomness)
    hook = BatchingHook(level)
    copied = []
    levels().append(level)
    registry.DISPATCH_HOOKS.insert(0, hook)
    try:
        inputs = []
        for arg, d in zip(flat, dims):
            if d is None:
                inputs.append(arg)
                continue
            moved = registry.FUNCTIONS["movedim"](arg, d, 0) if d else arg
            t = wrap(moved, level)
            if t._storage.physical is not moved:  # a copy: writes to it go back to the input at the end
                copied.append((moved, t._storage.physical, t._storage.physical._storage._version))
            inputs.append(t)
        out = func(*tree_unflatten(inputs, spec), **kwargs)
        result = _outputs(func, out_dims, out, level)
    finally:
        level.active = False
        levels().pop()
        registry.DISPATCH_HOOKS.remove(hook)
    for target, copy, version in copied:
        if copy._storage._version != version:
            target.copy_(copy)
    return result


def _chunks(size, chunk_size):
    return [(s, min(chunk_size, size - s)) for s in range(0, size, chunk_size)]


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func`` mapped over dimension ``in_dims`` of its inputs (torch.func.vmap): ops with a batching rule run
    once on the whole batch, others once per sample (see `batching`). ``in_dims``/``out_dims``: an int, None
    (not mapped), or a tree of them matching the inputs/outputs; ``randomness``: 'error', 'different' or 'same';
    ``chunk_size``: map that many samples at a time."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got "
                           f"{randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        size, dims, flat, spec = _inputs(func, in_dims, args)
        if chunk_size is None or chunk_size >= size:
            return _run(func, kwargs, out_dims, randomness, size, dims, flat, spec)
        parts = []
        for start, length in _chunks(size, chunk_size):
            chunk = [a if d is None else a.narrow(d, start, length) for a, d in zip(flat, dims)]
            parts.append(_run(func, kwargs, out_dims, randomness, length, dims, chunk, spec))
        return _concatenated(func, out_dims, parts)

    return wrapped


def _concatenated(func, out_dims, parts):
    """The chunks' outputs joined along their batch dimensions (an unmapped output: the first chunk's)."""
    flats = [tree_flatten(p) for p in parts]
    spec = flats[0][1]
    dims = [out_dims[0]] if isinstance(parts[0], Tensor) and isinstance(out_dims, tuple) else \
        _broadcast(out_dims, spec)
    joined = [leaves[0] if d is None else registry.FUNCTIONS["cat"](list(leaves), d)
              for d, leaves in zip(dims, zip(*(f[0] for f in flats)))]
    return tree_unflatten(joined, spec)
