"""torch made to compute from the old values where an op's input overlaps the memory it writes.

Where an input of an in-place or ``out=`` op shares memory with the tensor it writes, torch either refuses
(its overlap checks) or computes in whatever order its kernel takes: ``x.addmm_(x, m)``, ``x.div_(x[..., 2])``
(an input torch does not analyse) give results no user can rely on. jitorch raises where torch raises and
otherwise computes from the values before the call (docs/differences-from-torch.md). `OldValues`, a
dispatch mode for the oracle's torch runs, makes torch's result that one: such an op runs once as torch
runs it (so torch's errors still come), its written memory is put back, and it runs again on clones of the
overlapping inputs.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _span(t):
    """(storage pointer, first byte, end byte) of the memory ``t`` can reach, or None (no elements)."""
    if not t.numel():
        return None
    lo = hi = t.storage_offset()
    for n, st in zip(t.shape, t.stride()):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    size = t.element_size()
    return t.untyped_storage().data_ptr(), lo * size, (hi + 1) * size


def _shares(a, b):
    sa, sb = _span(a), _span(b)
    return sa is not None and sb is not None and sa[0] == sb[0] and sa[1] < sb[2] and sb[1] < sa[2]


def _arguments(func, args, kwargs):
    """(schema argument, value) pairs of one call."""
    schema = func._schema
    for i, arg in enumerate(schema.arguments):
        if i < len(args):
            yield arg, args[i]
        elif arg.name in kwargs:
            yield arg, kwargs[arg.name]


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def reads_old_values(T):
    """A context for running a program on library ``T``: `OldValues` for torch, nothing for jitorch."""
    return OldValues() if T is torch else contextlib.nullcontext()


class OldValues(TorchDispatchMode):
    """While active, torch ops whose non-written inputs share memory with a written tensor compute from the
    inputs' values before the call (or raise torch's error). ``overlaps`` counts those calls: the mode sits
    below autograd, whose formulas (forward AD's in-place ones) still see the overlap."""

    def __init__(self):
        super().__init__()
        self.overlaps = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args, kwargs = _materialized(args), _materialized(kwargs)
        if torch.Tag.nondeterministic_seeded in func.tags:  # a second run would draw other numbers
            return func(*args, **kwargs)
        written, read = [], []
        for arg, value in _arguments(func, args, kwargs):
            (written if _is_write(arg) else read).extend(_tensors(value))
        overlapping = {id(t) for t in read if any(_shares(t, w) for w in written)}
        if not overlapping:
            return func(*args, **kwargs)
        self.overlaps += 1
        saved = [(w.untyped_storage(), w.untyped_storage().data_ptr(), w.untyped_storage().clone()) for w in written]
        func(*args, **kwargs)  # torch's own overlap checks raise here
        for storage, ptr, copy in saved:
            if storage.data_ptr() == ptr:
                storage.copy_(copy)
        args, kwargs = _with_clones(func, args, kwargs, overlapping)
        return func(*args, **kwargs)


def _materialized(values):
    """``values`` (a list or dict) with torch's efficient zero tensors made ordinary zeros: redispatched from a
    Python dispatch mode, an op on one can crash the process (torch 2.13: ``torch.func.jvp`` of
    ``torch.add(x, 1.0, alpha=-1)`` under any such mode segfaults in the ``mul.Scalar`` of its zero tangent;
    transform-fuzz seed 7870006). The values are the same."""
    def real(v):
        if isinstance(v, torch.Tensor) and v._is_zerotensor():
            return torch.zeros(v.shape, dtype=v.dtype, device=v.device)
        return v
    if isinstance(values, dict):
        return {k: real(v) for k, v in values.items()}
    return [real(v) for v in values]


def _is_write(arg):
    return arg.alias_info is not None and arg.alias_info.is_write


def _with_clones(func, args, kwargs, ids):
    """The call's arguments with the read tensors whose ids are in ``ids`` cloned."""
    def fresh(value):
        if isinstance(value, torch.Tensor):
            return value.clone() if id(value) in ids else value
        if isinstance(value, (list, tuple)):
            return type(value)(fresh(v) for v in value)
        return value
    args, kwargs = list(args), dict(kwargs)
    for i, arg in enumerate(func._schema.arguments):
        if _is_write(arg):
            continue
        if i < len(args):
            args[i] = fresh(args[i])
        elif arg.name in kwargs:
            kwargs[arg.name] = fresh(kwargs[arg.name])
    return args, kwargs
