"""torch.func.functional_call and stack_module_state: a module run with other parameters and buffers."""

from __future__ import annotations

from ..ops import registry
from ..tensor import Tensor


def _tables(module, name):
    """(owner module, its ``_parameters`` or ``_buffers`` dict holding ``name``'s last part, that part)."""
    prefix, _, leaf = name.rpartition(".")
    owner = module.get_submodule(prefix) if prefix else module
    for table in ("_parameters", "_buffers"):
        if leaf in owner.__dict__[table]:
            return owner.__dict__[table], leaf
    return None, leaf


def _merged(parameter_and_buffer_dicts):
    dicts = parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, (tuple, list)) else \
        (parameter_and_buffer_dicts,)
    merged = {}
    for d in dicts:
        for k, v in d.items():
            if k in merged:
                raise ValueError(f"{k} appeared in multiple dictionaries; behavior of functional call is ambiguous")
            merged[k] = v
    return merged


def _tied_names(module):
    """{name: [every name of the same parameter or buffer]}, for the tensors the module holds under several."""
    by_id = {}
    for name, t in list(module.named_parameters(remove_duplicate=False)) + \
            list(module.named_buffers(remove_duplicate=False)):
        by_id.setdefault(id(t), []).append(name)
    return {n: names for names in by_id.values() if len(names) > 1 for n in names}


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True,
                    strict=False):
    """``module(*args, **kwargs)`` with its parameters and buffers named in ``parameter_and_buffer_dicts``
    (a dict, or a tuple of dicts) replaced by the given tensors for the call. ``tie_weights``: a tensor the
    module holds under several names is replaced under all of them; ``strict``: every parameter and buffer
    must be given, and nothing else."""
    given = _merged(parameter_and_buffer_dicts)
    if tie_weights:
        tied = _tied_names(module)
        for name in list(given):
            for other in tied.get(name, ()):
                if other in given and given[other] is not given[name]:
                    raise ValueError(f"functional_call got multiple values for keys {sorted([name, other])}, which "
                                     f"are tied. Consider using tie_weights=False")
                given.setdefault(other, given[name])
    if strict:
        known = {n for n, _ in module.named_parameters(remove_duplicate=False)} | \
            {n for n, _ in module.named_buffers(remove_duplicate=False)}
        missing, unexpected = sorted(known - set(given)), sorted(set(given) - known)
        if missing or unexpected:
            lines = ([f"\tUnexpected key(s): {', '.join(repr(k) for k in unexpected)}."] if unexpected else []) + \
                    ([f"\tMissing key(s): {', '.join(repr(k) for k in missing)}."] if missing else [])
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n" + "\n".join(lines))
    swapped = []
    try:
        for name, value in given.items():
            table, leaf = _tables(module, name)
            if table is None:  # (not a parameter or buffer: torch sets it as a plain attribute)
                prefix = name.rpartition(".")[0]
                owner = module.get_submodule(prefix) if prefix else module
                swapped.append((owner.__dict__, leaf, owner.__dict__.get(leaf, _ABSENT)))
                owner.__dict__[leaf] = value
                continue
            swapped.append((table, leaf, table[leaf]))
            table[leaf] = value
        args = () if args is None else args if isinstance(args, tuple) else (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for table, leaf, old in reversed(swapped):
            if old is _ABSENT:
                del table[leaf]
            else:
                table[leaf] = old


_ABSENT = object()


def stack_module_state(models):
    """``(params, buffers)``: each name's tensors of the ``models`` (of one structure) stacked, for vmap over an
    ensemble; stacked parameters are new leaves that require grad where the originals do."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or not any(m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    names = [n for n, _ in models[0].named_parameters()]
    if any([n for n, _ in m.named_parameters()] != names for m in models):
        raise RuntimeError("stack_module_state: Expected all models to have the same structure.")
    stack = registry.FUNCTIONS["stack"]
    params = {}
    for name in names:
        tensors = [dict(m.named_parameters())[name] for m in models]
        params[name] = stack([t.detach() for t in tensors]).requires_grad_(tensors[0].requires_grad)
    buffers = {name: stack([dict(m.named_buffers())[name] for m in models])
               for name, b in models[0].named_buffers() if isinstance(b, Tensor)}
    return params, buffers
