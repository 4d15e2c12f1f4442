"""vmap's machinery: batched tensors and the dispatch hook that runs ops on them.

A batched tensor (of one vmap level) is a tensor of the per-sample ("logical") shape over a `BatchedStorage`,
a storage with no data of its own that holds the *physical* tensor: every sample's elements, the batch
dimension first, each sample laid out compactly. A view of a batched tensor is an ordinary view of its
storage (views need no batching rule: their geometry is per sample), so writes through views reach the
physical tensor as they reach memory eagerly. The physical value of a batched tensor is
``as_strided`` of the physical tensor with the batch stride in front of the tensor's own geometry.

The hook (`BatchingHook`, in `registry.DISPATCH_HOOKS` while a vmap runs) takes every other op on a
batched tensor: a batching rule (`rules.RULES`, one per op kind, in JAX's style) gives the same op, or
another, on physical arguments; its result must have the meta rule's per-sample shape and dtype behind the
batch size, or the call falls back to running the op once per sample and stacking the results, as torch's
own fallback does. `STATS` counts which path each op took. The result's backward node is recorded on the
logical tensors, so ``grad`` inside ``vmap`` differentiates per sample; the physical ops record their own
history, so ``grad`` of a ``vmap`` differentiates through it. Nested vmaps nest: the physical tensor of an
inner level's batched tensor is a batched tensor of the level outside it.
"""

from __future__ import annotations

import threading
from collections import Counter
from math import prod

from ..ops import registry
from ..ops.random_ops import Generator, default_generator
from ..runtime.grad_mode import no_grad
from ..runtime.storage import Storage
from ..runtime.strided import contiguous_strides
from ..tensor import Tensor
from . import rules

STATS = {"batched": Counter(), "per_sample": Counter()}  # op name -> calls, by the path they took

_READ_ERROR = ("vmap: It looks like you're reading the values of a batched Tensor (.item(), bool(), .tolist(), "
               ".numpy(), or data-dependent control flow). We don't support vmap over reading a Tensor's values; "
               "please try to rewrite what you're doing with other operations.")
_INPLACE_ERROR = ("vmap: inplace arithmetic(self, *extra_args) is not possible because there exists a Tensor "
                  "`other` in extra_args that has more elements than `self`. This happened due to `other` being "
                  "vmapped over but `self` not being vmapped over in a vmap. Please try to use out-of-place "
                  "operators instead of inplace arithmetic. If said operator is being called inside the PyTorch "
                  "framework, please file a bug report instead.")
_ESCAPED_ERROR = ("vmap: a batched tensor was used after the vmap that made it returned (it escaped through a "
                  "closure or a side effect); return it from the function instead")
_RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either use the 'same' or "
                 "'different' randomness flags on vmap or perform the randomness operation out of vmap")


class Level:
    """One running vmap: its batch size and randomness mode; ``active`` until it returns."""

    __slots__ = ("depth", "size", "randomness", "active", "drawing")

    def __init__(self, depth, size, randomness):
        self.depth, self.size, self.randomness, self.active = depth, size, randomness, True
        self.drawing = False  # while a random op on no batched tensor is drawn once per sample


class BatchedStorage(Storage):
    """The storage of a level's batched tensors: ``physical`` holds every sample (``[B, *shape]``, each sample
    compact), ``size`` is one sample's element count; no data (reading it raises vmap's error)."""

    __slots__ = ("level", "physical")

    def __init__(self, level, physical):
        super().__init__(None, physical.dtype, physical.device, prod(physical.shape[1:]))
        self.level = level
        self.physical = physical

    def no_data_error(self, tensor):
        return RuntimeError(_READ_ERROR if self.level.active else _ESCAPED_ERROR)

    def data_ptr(self):
        raise RuntimeError(_READ_ERROR)  # (a kernel handed address 0 would crash the process)


class _State(threading.local):
    def __init__(self):
        self.levels = []  # the running vmaps of this thread, outermost first


_STATE = _State()


def levels():
    """The running vmaps of this thread, outermost first."""
    return _STATE.levels


def level_of(t):
    """The level ``t`` is batched at, or None."""
    st = t._storage
    return st.level if isinstance(st, BatchedStorage) else None


def _sample_compact(p):
    shape = tuple(p.shape[1:])
    return p.numel() == 0 or tuple(p.stride()[1:]) == tuple(contiguous_strides(shape))


def wrap(physical, level):
    """The batched tensor of ``level`` whose samples are ``physical``'s (batch dimension first)."""
    if not _sample_compact(physical):
        physical = physical.contiguous()
    shape = tuple(physical.shape[1:])
    return Tensor._make(BatchedStorage(level, physical), shape, tuple(contiguous_strides(shape)), 0)


def physical(t):
    """The physical value of batched ``t``: ``[B, *t.shape]``, a view of its storage's physical tensor."""
    st = t._storage
    p = st.physical
    if t._offset == 0 and tuple(t._shape) == tuple(p.shape[1:]) and tuple(t._stride) == tuple(p.stride()[1:]):
        return p
    return registry.FUNCTIONS["as_strided"](p, (p.shape[0],) + tuple(t._shape), (p.stride(0),) + tuple(t._stride),
                                             p.storage_offset() + t._offset)


def _tensors(op, args):
    return list(registry.tensors_of(op, args))


def _top_level(op, args):
    """The innermost level any tensor argument is batched at (raising for one whose vmap has returned)."""
    top = None
    for t in _tensors(op, args):
        lv = level_of(t)
        if lv is None:
            continue
        if not lv.active:
            raise RuntimeError(_ESCAPED_ERROR)
        if top is None or lv.depth > top.depth:
            top = lv
    return top


def _specs(spec):
    return [spec] if isinstance(spec, registry.TensorSpec) else list(spec)


def _fitting(op, args, specs, size):
    """``args`` converted for ``op`` if ``op(*args)`` has, by its meta rule, the batch size before the shapes and
    the dtypes of ``specs``; else None."""
    try:
        args = op.convert(args)
        got = _specs(registry.quiet_meta(op, args))
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    fits = len(got) == len(specs) and all(
        g.dtype is s.dtype and tuple(g.shape) == (size,) + tuple(s.shape) for g, s in zip(got, specs))
    return args if fits else None


def _generator(op, args):
    if "generator" in op.arg_names:
        g = args[op.arg_names.index("generator")]
        if isinstance(g, Generator):
            return g
    return default_generator


def _per_sample(op, args, level):
    """``op`` run once per sample on the samples' arguments, the results stacked (torch's fallback). Under
    ``randomness='same'`` each sample draws the same numbers."""
    STATS["per_sample"][op.name] += 1
    if level.size == 0:
        raise RuntimeError(f"vmap: {op.public_name} has no batching rule for these arguments, and its per-sample "
                           "fallback needs at least one sample (the batch size is 0)")
    same = op.kind == "random" and level.randomness == "same"
    gen = _generator(op, args) if same else None
    state = gen.get_state() if same else None
    phys = {id(t): physical(t) for t in _tensors(op, args) if level_of(t) is level}
    results = []
    for b in range(level.size):
        if same:
            gen.set_state(state)
        sample = registry.map_tensors(op, args, lambda t: phys[id(t)][b] if id(t) in phys else t)
        results.append(registry.call(op, sample))
    if isinstance(results[0], Tensor):
        return [registry.FUNCTIONS["stack"](results)]
    if not isinstance(results[0], (tuple, list)) or not all(isinstance(r, Tensor) for r in results[0]):
        raise RuntimeError(_READ_ERROR)
    return [registry.FUNCTIONS["stack"]([r[i] for r in results]) for i in range(len(results[0]))]


def _compute(op, args, level):
    """``op`` on ``args`` (some batched at ``level``), by its rule or per sample: the logical results, shaped
    as the op returns them (a tensor, a list, a tuple or named tuple)."""
    spec = registry.quiet_meta(op, args)
    if spec is not None and not isinstance(spec, (registry.TensorSpec, list, tuple)):
        raise RuntimeError(_READ_ERROR)
    specs = _specs(spec)
    results = None
    # (a result whose size depends on the values, as unique's, is never batched: the batch would be one sample)
    sized = all(n is not None for sp in specs for n in sp.shape)
    rule = rules.rule_for(op) if sized and op.kind != "random" else None
    if rule is not None:
        planned = rule(op, args, level.size, lambda t: level_of(t) is level, physical)
        fitting = planned and _fitting(planned[0], planned[1], specs, level.size)
        if fitting is not None:
            STATS["batched"][op.name] += 1
            result = registry.call(planned[0], fitting)
            results = [result] if isinstance(result, Tensor) else list(result)
    if results is None:
        results = _per_sample(op, args, level)
    return registry.returned_as(op, spec, [wrap(r, level) for r in results])


def _random(op, args, level):
    """A random op inside ``level``'s vmap, as its randomness mode says."""
    if level.randomness == "error":
        raise RuntimeError(_RANDOM_ERROR)
    batched = any(level_of(t) is level for t in _tensors(op, args))
    if level.randomness == "same" and not batched:
        return NotImplemented
    level.drawing = not batched
    try:
        results = _per_sample(op, args, level)
    finally:
        level.drawing = False
    wrapped = [wrap(r, level) for r in results]
    return wrapped[0] if len(wrapped) == 1 else tuple(wrapped)


def _history_copy(t):
    """A batched tensor with ``t``'s history and a copy of its values (what the backward of an in-place op
    on ``t`` reads), copied physically: a batched tensor has no data of its own."""
    with no_grad():
        copy = wrap(physical(t).clone(), t._storage.level)
    copy.grad_fn = t.grad_fn
    copy._requires_grad = t._requires_grad
    if "_output_nr" in t.__dict__:
        copy._output_nr = t._output_nr
    return copy


class BatchingHook(registry.TransformHook):
    """The dispatch hook of one vmap level (see the module's docstring): it takes the ops on tensors batched
    at its level, and random ops while its level is the innermost. Hooks sit innermost first, with forward-AD
    levels' hooks between them, so that a level's tangents live on the tensors of its own vmap level."""

    def _level(self, op, args):
        if threading.get_ident() != self.thread:
            return None
        top = _top_level(op, args)  # (raises for a tensor of a vmap that returned)
        if top is not None:
            return self.level if any(level_of(t) is self.level for t in _tensors(op, args)) else None
        if op.kind == "random" and levels() and levels()[-1] is self.level and not self.level.drawing:
            return self.level
        return None

    def call(self, op, args, out):
        level = self._level(op, args)
        if level is None:
            return NotImplemented
        if out is not None:
            result = self.call(op, args, None)
            return registry.write_out(op, out, registry.out_grad(op, args, out, result), args)
        if op.view is not None and not op.attrs.get("reinterprets"):
            # a view of the storage, per sample: the registry's own path, here so that no later hook sees it
            return registry.with_history(op, args, registry.execute(op, args))
        if op.kind == "random":
            return self._random(op, args, level)
        return registry.with_history(op, args, _compute(op, args, level))

    def _random(self, op, args, level):
        result = _random(op, args, level)
        return result if result is NotImplemented else registry.with_history(op, args, result)

    def call_inplace(self, op, args):
        level = self._level(op, args)
        if level is None:
            return NotImplemented
        target = args[0]
        if level_of(target) is not level:
            raise RuntimeError(_INPLACE_ERROR)
        if op.composite is not None and op.view is None:
            # the registry runs a composite's body before the hooks, an in-place composite's after them (``div_``,
            # fuzz seed 7870054): its body runs here, each call through the hooks, on a copy of the target (a body
            # may write into its first argument, as in the registry's own in-place path); copy_ writes it back
            result = op.composite(target.clone(), *args[1:])
            registry.check_inplace(op, target, result)
            return registry.call_inplace(registry.OPS["copy"], (target, result, False))
        autograd = registry.AUTOGRAD
        state = (autograd.prepare_inplace(op, args, copy=_history_copy)
                 if autograd is not None and autograd.needs_grad(op, args) else None)
        if op.view is not None:
            # ``swapdims_()``: the tensor's per-sample geometry changes; its history records the view (fuzz seed
            # 7874509: without it, the gradient reached the op before in the swapped shape)
            target._set_geometry(*op.view(*args)[:3])
        elif registry.expanded_write(op, target) is not None:
            # torch's fill_, zero_, masked_fill_ write through a sample whose elements share memory (an expanded
            # meshgrid output), element by element, which copy_ refuses (fuzz seed 7997433): each sample's own write
            phys = {id(t): physical(t) for t in _tensors(op, args) if level_of(t) is level}
            for b in range(level.size):
                registry.call_inplace(op, registry.map_tensors(op, args, lambda t: phys[id(t)][b] if id(t) in phys
                                                               else t))
            target._storage._version += 1
        else:
            result = _random(op, args, level) if op.kind == "random" else _compute(op, args, level)
            registry.check_inplace(op, target, result)
            registry.call_inplace(registry.OPS["copy"], (physical(target), physical(result), False))
            target._storage._version += 1
        if state is not None:
            autograd.finish_inplace(op, state, args, target)
        return target

    def resize_out(self, out, shape, strides):
        if level_of(out) is None or threading.get_ident() != self.thread:
            return NotImplemented
        raise RuntimeError(f"vmap: an out= tensor that is batched cannot be resized (from {list(out.shape)} to "
                           f"{list(shape)}); give one of the result's shape")

    def write_out(self, out, result):
        if threading.get_ident() != self.thread or (level_of(out) is None and level_of(result) is None):
            return NotImplemented
        return self.call_inplace(registry.OPS["copy"], (out, result, False))

