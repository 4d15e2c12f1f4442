"""torch.autograd.forward_ad: dual tensors, whose tangents ops carry forward.

A dual tensor is a tensor with a tangent at a forward-AD level (``dual_level``); levels nest (torch's public
API allows one, its torch.func transforms nest them). While a level is open, a dispatch hook
(`ForwardHook`, one per level, the innermost first) sees every primitive op: on operands with tangents at
its level it runs the op as usual (with those tangents set aside, so the hooks of outer levels see it
next, and vmap's between them: a level's tangents live on the tensors of its own vmap level) and computes
the result's tangent from the op's reverse-mode derivative rule, by the transpose trick: ``u -> J^T u`` is
linear in ``u``, so the gradient of ``<J^T u, t>`` with respect to ``u`` is ``J t``. Every op with a
derivative rule thus has a forward derivative, at the cost of running the op again with history, its
backward with history, and that backward's backward (about four times the op). The computations go
through dispatch too, so tangents of outer levels reach the inner level's tangents (forward over forward),
and they keep their history where the operands require grad (reverse over forward).

As torch's, a view's tangent is the same view of its base's tangent (when the tangent is laid out as the
primal), and an in-place op writes its result's tangent into its target's tangent, so that the tangents of
the target's views and base see the write as their primals do (and the tangent given to `make_dual` is
written too). Written through a view of a base without a tangent, the base gets one (zeros but where
written), as torch's. A write through an expanded target (``fill_``, which torch allows) writes the tangent
through the base's tangent alike. A target whose tangent overlaps itself (an expanded zero) gets the result's
tangent as a new tensor.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from ..ops import registry
from ..runtime.grad_mode import enable_grad, is_grad_enabled
from ..tensor import Tensor
from .gradients import grad
from .rule import DerivativeNotImplemented, linearizing

class _State(threading.local):
    def __init__(self):
        self.levels = []  # the open forward-AD levels of this thread, outermost first


_STATE = _State()


class _Level:
    """One open forward-AD level: its index (0 for the outermost), its hook, and the ids of the tensors whose
    tangents at it are set aside and of their bases (`_set_aside`: their views take none from a base meanwhile)."""

    __slots__ = ("index", "hook", "aside")

    def __init__(self, index, hook):
        self.index, self.hook, self.aside = index, hook, set()


def _levels():
    return _STATE.levels


def _tangents(t):
    return t.__dict__.get("_fw_tangents") if t.__dict__ else None


def _tangent(t, lv):
    """``t``'s tangent at level ``lv``, or None. A view without one takes the same view of its base's, once the
    base has one (torch's lazy view tangent: a view made before its base got a tangent sees it, seed 7871961)."""
    found = _tangents(t)
    if found and lv in found:
        return found[lv]
    if t._base is None or id(t) in lv.aside or id(t._base) in lv.aside or _cut(t, lv):
        return None
    return _through_base(t, lv, False)


def _cut(t, lv):
    """Whether ``t`` takes no tangent at ``lv`` from its base: `unpack_dual`'s primal and the views made of it
    (torch's primal is a view that is not forward differentiable)."""
    cut = t.__dict__.get("_fw_cut") if t.__dict__ else None
    return cut is not None and lv in cut


def _mark_cut(result, cuts, lv):
    """Mark the outputs of an op on the tensors ``cuts`` (`_cut` at ``lv``) that are views of one of them and
    have no tangent at ``lv``: they take none from their base either."""
    storages = {id(c._storage) for c in cuts}
    for o in [result] if isinstance(result, Tensor) else result:
        if isinstance(o, Tensor) and id(o._storage) in storages and lv not in (_tangents(o) or ()):
            o.__dict__.setdefault("_fw_cut", set()).add(lv)


def _level_at(level):
    levels = _levels()
    if not levels:
        return None
    if level is None:
        return levels[-1]
    return levels[level] if 0 <= level < len(levels) else None


def _is_float(dtype):
    return dtype.is_floating_point or dtype.is_complex


def enter_dual_level():
    """Open a new forward-AD level (inside any open one) and return its index."""
    levels = _levels()
    lv = _Level(len(levels), None)
    lv.hook = ForwardHook(lv)
    levels.append(lv)
    registry.DISPATCH_HOOKS.insert(0, lv.hook)
    return len(levels) - 1


def exit_dual_level(*, level=None):
    """Close the innermost forward-AD level (``level``, if given, must be its index); its tangents vanish."""
    levels = _levels()
    if not levels:
        raise RuntimeError("Dual level must be a positive number.")
    if level is not None and level != len(levels) - 1:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that was created. This is "
                           "not supported.")
    registry.DISPATCH_HOOKS.remove(levels.pop().hook)


class dual_level:
    """Context manager of a forward-AD level: ``with dual_level(): ...`` (``as`` gives its index)."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()


class UnpackedDualTensor(NamedTuple):
    """`unpack_dual`'s result: the primal (a view without the tangent) and the tangent (or None)."""

    primal: Tensor
    tangent: Tensor | None


def make_dual(tensor, tangent, *, level=None):
    """A view of ``tensor`` with forward gradient ``tangent`` at ``level`` (by default the innermost)."""
    lv = _level_at(level)
    if lv is None:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, make sure to "
                           "enter_dual_level() first.")
    if not _is_float(tensor.dtype):
        raise ValueError(f"Expected primal to be floating point or complex, but got: {tensor.dtype}")
    if not _is_float(tangent.dtype):
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {tangent.dtype}")
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(f"Trying to set a forward gradient that has a different size than that of the original "
                           f"Tensor, this is not supported. Tensor is of size {list(tensor.shape)} while the given "
                           f"forward gradient is of size {list(tangent.shape)}.")
    if tangent.device != tensor.device:
        raise RuntimeError(f"Trying to set a forward gradient on a Tensor on device {tensor.device} with a tangent "
                           f"on device {tangent.device}; they must be on the same device.")
    if _tangent(tensor, lv) is not None:
        raise RuntimeError(f"Making a dual Tensor based on a Tensor that already has a forward gradient at the same "
                           f"level {lv.index} is not supported.")
    with _set_aside(lv, [tensor]):
        dual = tensor.view_as(tensor)
    _attach(dual, lv, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of ``tensor`` at ``level``: a view without that tangent, and the tangent or None."""
    lv = _level_at(level)
    tangent = None if lv is None else _tangent(tensor, lv)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    with _set_aside(lv, [tensor]):
        primal = tensor.view_as(tensor)
    primal.__dict__.setdefault("_fw_cut", set()).add(lv)
    return UnpackedDualTensor(primal, tangent)


def _attach(t, lv, tangent):
    found = t.__dict__.get("_fw_tangents")
    if found is None:
        found = t.__dict__["_fw_tangents"] = {}
    found[lv] = tangent


class _set_aside:
    """While the block runs, ``tensors`` hold no tangent at level ``lv`` (they get them back after)."""

    def __init__(self, lv, tensors):
        self.lv, self.taken, self.marked = lv, [], []
        for t in tensors:
            found = _tangents(t)
            if found and lv in found:
                self.taken.append((t, found.pop(lv)))
            # (and its base: the views an op makes of ``t`` meanwhile take no tangent from the base either)
            for i in {id(t), id(t._base)} - {id(None)}:
                if i not in lv.aside:
                    lv.aside.add(i)
                    self.marked.append(i)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lv.aside.difference_update(self.marked)
        for t, tangent in self.taken:
            _attach(t, self.lv, tangent)


def _pairs(op, args, lv):
    """The (tensor, tangent) pairs of the tensor arguments with a tangent at level ``lv``, and the arguments
    without one that are `_cut` there (each tensor once)."""
    pairs, cuts, seen = [], [], set()
    for t in registry.tensors_of(op, args):
        if id(t) in seen:
            continue
        seen.add(id(t))
        tangent = _tangent(t, lv)
        if tangent is not None:
            pairs.append((t, tangent))
        elif _cut(t, lv) and id(t) not in lv.aside:
            cuts.append(t)
    return pairs, cuts


def detached(t):
    """``t.detach()`` keeping ``t``'s tangents (a transform's result, cut from the history it was computed with)."""
    d = t.detach()
    for lv in _levels():
        _tangent(t, lv)  # (a view's tangent taken from its base)
    if _tangents(t):
        d.__dict__["_fw_tangents"] = dict(_tangents(t))
    return d


def stand_in(t, keep_history):
    """``t`` as the input of a computation to differentiate: a view keeping its history (``keep_history``, for
    reverse mode over it), else a new leaf; with its tangents either way (forward mode over it)."""
    if keep_history and t.requires_grad:
        return t.view_as(t)
    return detached(t).requires_grad_(True)


def _jvp(op, args, pairs, outer_grad):
    """The tangents of ``op(*args)``'s outputs (None where an output has none) given the ``pairs``'s tangents."""
    keep = outer_grad and any(t.requires_grad or tangent.requires_grad for t, tangent in pairs)
    with enable_grad():
        subs = {id(t): stand_in(t, keep) for t, _ in pairs}
        result = registry.call(op, registry.map_tensors(op, args, lambda a: subs.get(id(a), a)))
        outs = [result] if isinstance(result, Tensor) else list(result)
        rule = op.pieces.get("derivative")
        # (outputs whose gradients the rule never reads take no tangent, as torch's undefined one: slogdet's sign,
        # whose zero tangent times lgamma's pole gave NaN where torch's tangent is 0, transform-fuzz seed 8105088)
        passing = getattr(getattr(rule, "backward", None), "grads_of", None)
        live = [o for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad and _is_float(o.dtype)
                and (passing is None or i in passing)]
        inputs = [subs[id(t)] for t, _ in pairs if subs[id(t)].requires_grad]
        if not live or not inputs:
            return [None] * len(outs)
        # (any point of u serves, J^T u being linear in u; ones rather than zeros, where a rule's formula is
        # singular: logcumsumexp's takes the log of the gradient's magnitude)
        dummies = [registry.FUNCTIONS["ones_like"](o.detach()).requires_grad_(True) for o in live]
        try:
            with linearizing():
                firsts = grad(live, inputs, dummies, create_graph=True, allow_unused=True)
        except DerivativeNotImplemented as e:  # (torch's forward-mode error names the op otherwise)
            raise NotImplementedError(f"Trying to use forward AD with {e.forward} that does not support it because "
                                      "it has not been implemented yet.") from None
        used = [(g, tangent) for g, (t, tangent) in zip(firsts, [p for p in pairs if subs[id(p[0])].requires_grad])
                if g is not None and g.requires_grad]
        if not used:  # a derivative that is 0 everywhere (floor's, sign's): a zero tangent, as torch's (seed 7875465)
            return [registry.FUNCTIONS["zeros_like"](o.detach()) if any(o is x for x in live) else None for o in outs]
        seconds = grad([g for g, _ in used], dummies, [tg.to(g.dtype) for g, tg in used], create_graph=keep,
                       allow_unused=True, materialize_grads=True)
    found = iter(seconds if keep else [detached(s) for s in seconds])
    return [next(found) if any(o is x for x in live) else None for o in outs]


def _geometry(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype


def _viewed(op, args, pairs, outs):
    """The tangents of a view op's results, the same view of the operand's tangent (sharing its memory, so
    that writes to either reach the other's views), or None where the op is not such a view: its results
    share the memory of no operand with a tangent, or of several, or that tangent is laid out otherwise than
    its primal (``as_strided`` reads the layout). The other operands give a view op only sizes (``view_as``'s
    ``other``, whose tangent made ``v2.view_as(v1)`` a copy that missed later writes into ``v2``: transform-fuzz
    seed 8201832)."""
    sharing = [(t, tangent) for t, tangent in pairs if all(
        isinstance(o, Tensor) and o._storage is t._storage for o in outs)]
    if len(sharing) > 1:  # (``x[::2].view_as(x)``: ``other`` shares the memory too, and gives only sizes; seed 8405951)
        sharing = [(t, tangent) for t, tangent in sharing if t is args[0]]
    if len(sharing) != 1:
        return None
    t, tangent = sharing[0]
    if _geometry(t) != _geometry(tangent):
        return None
    result = registry.call(op, registry.map_tensors(op, args, lambda a: tangent if a is t else a))
    viewed = [result] if isinstance(result, Tensor) else list(result)
    if [_geometry(v)[:2] for v in viewed] != [_geometry(o)[:2] for o in outs]:
        return None
    return viewed


def _own(tangents, pairs):
    """``tangents`` with those that share memory with an operand's tangent (an op whose derivative passes
    the tangent on, as clone's) copied: an in-place op writes a tangent, which only its views may see."""
    shared = {id(tangent._storage) for _, tangent in pairs}
    return [tg.clone() if tg is not None and id(tg._storage) in shared else tg for tg in tangents]


def _through_base(t, lv, create):
    """For a view ``t`` about to be written (``create``) or read without a tangent of its own: ``t``'s tangent
    at ``lv`` as the same view of its base's (returned), the base's first laid out as the base where it is not
    (an expanded tangent, another dtype's, seed 7872385: its values copied) or made (zeros, where ``create``),
    so that a write into ``t``'s tangent reaches the base's, as torch's; None where ``t`` is no such view, its
    base has no tangent and none is to be made, or its tangent is that view already."""
    base = t._base
    if base is None or base.dtype != t.dtype or not _is_float(base.dtype) or not base.numel() or _cut(t, lv) \
            or create and not t.numel():
        return None
    found, own = _tangents(base), _tangents(t)
    old = found.get(lv) if found else None
    if old is None and (not create or own and lv in own):  # (a dual made of the base: its tangent is its own)
        return None
    if old is None or not _fits(old, base) or old._storage.size < _extent(t):
        extent = max(_extent(base), _extent(t))
        memory = base.detach().new_zeros((extent,))
        fresh = memory.as_strided(base.shape, base.stride(), base.storage_offset())
        if old is not None:
            fresh.copy_(old)
        _attach(base, lv, fresh)
        old = fresh
    elif own and lv in own and own[lv]._storage is old._storage and _fits(own[lv], t):
        return None
    view = old.as_strided(t.shape, t.stride(), t.storage_offset())
    _attach(t, lv, view)
    return view


def _operand_tangents(op, args, pairs):
    """``args`` with each float tensor replaced by its tangent (``pairs``), zeros where it has none."""
    found = {id(t): tangent for t, tangent in pairs}

    def tangent_of(a):
        if not _is_float(a.dtype):
            return a
        return found[id(a)] if id(a) in found else a.detach().new_zeros(a.shape)
    return registry.map_tensors(op, args, tangent_of)


def _extent(t):
    """How many elements of its storage ``t`` spans from the storage's start."""
    return _extent_of(t.shape, t.stride(), t.storage_offset())


def _extent_of(shape, strides, offset):
    return 1 + offset + sum((n - 1) * st for n, st in zip(shape, strides))


def _fits(tangent, t):
    """Whether ``tangent`` can take a write through ``t``'s geometry in place: laid out as ``t``, of its dtype,
    no element reached twice."""
    return _writable(tangent) and _geometry(tangent) == _geometry(t)


def _writable(t):
    """Whether ``t`` can take a write in place: no element reached twice (an expanded tangent)."""
    return all(st != 0 or n <= 1 for n, st in zip(t.shape, t.stride()))


class ForwardHook(registry.TransformHook):
    """The dispatch hook of an open forward-AD level (see the module's docstring)."""

    def _top(self, op, args):
        """The pairs and cuts (`_pairs`) of the op's arguments at this level (none from another thread)."""
        if threading.get_ident() != self.thread:
            return (), ()
        return _pairs(op, args, self.level)

    def call(self, op, args, out):
        pairs, cuts = self._top(op, args)
        lv = self.level
        if cuts and out is None:
            with _set_aside(lv, cuts):
                result = self.call(op, args, None) if pairs else registry.call(op, args)
            _mark_cut(result, cuts, lv)
            return result
        if not pairs or "nondifferentiable" in op.pieces:
            return NotImplemented
        if out is not None:
            result = self.call(op, args, None)
            tangent = _tangents(result).get(lv) if _tangents(result) else None
            written = registry.write_out(op, out, registry.out_grad(op, args, out, result), args)
            if tangent is not None:
                _attach(out, lv, tangent)
            return written
        outer_grad = is_grad_enabled()
        with _set_aside(lv, [t for t, _ in pairs]):
            result = registry.call(op, args)
            outs = [result] if isinstance(result, Tensor) else list(result)
            tangents = _viewed(op, args, pairs, outs) or _own(_jvp(op, args, pairs, outer_grad), pairs)
        for o, tangent in zip(outs, tangents):
            if tangent is not None and isinstance(o, Tensor):
                _attach(o, lv, tangent)
        return result

    def write_out(self, out, result):
        """A composite op's ``out=`` write of a result with a tangent at this level: a ``copy_``, which
        gives ``out`` that tangent (a plain write would not)."""
        if threading.get_ident() != self.thread or _tangent(result, self.level) is None:
            return NotImplemented
        return registry.call_inplace(registry.OPS["copy"], (out, result, False))

    def _regeometry(self, op, args, pairs):
        """An in-place view op (``t_``, ``unsqueeze_``, ``as_strided_``) on a target whose tangent is laid out as
        it: the target takes its new geometry, and its tangent the same geometry over the old tangent's memory,
        which it keeps sharing with the tangents of the target's base and views, so that a later write into the
        target reaches them as the primal's reaches their primals (a tangent computed by the transpose trick is
        new memory: transform-fuzz seed 8008245). Whether it did so (otherwise nothing is done)."""
        target, lv = args[0], self.level
        old = next((tangent for t, tangent in pairs if t is target), None)
        if old is None or _geometry(old) != _geometry(target) or \
                old._storage.size < _extent_of(*op.view(*args)):
            return False
        with _set_aside(lv, [target]):
            registry.call_inplace(op, args)
        _attach(target, lv, old.as_strided(target.shape, target.stride(), target.storage_offset()))
        return True

    def call_inplace(self, op, args):
        pairs, _ = self._top(op, args)
        lv = self.level
        target = args[0]
        # (a nondifferentiable op writes values of a zero derivative, `logical_and_`'s 0s and 1s: its target's
        # tangent becomes 0, as central differences give, where torch's keeps the old one; seed 7892288)
        constant = "nondifferentiable" in op.pieces
        if not pairs or constant and not any(t is target for t, _ in pairs):
            return NotImplemented
        if op.view is not None and self._regeometry(op, args, pairs):
            return target
        outer_grad = is_grad_enabled()
        with _set_aside(lv, [t for t, _ in pairs]):
            tangent = None if constant else _own(_jvp(op, args, pairs, outer_grad), pairs)[0]
            registry.call_inplace(op, args)
        found = _tangents(target)
        old = found.get(lv) if found else None
        if old is None or not _fits(old, target) or target._base is not None:
            viewed = _through_base(target, lv, tangent is not None)
            if viewed is not None:
                old, found = viewed, _tangents(target)
        if old is not None and _writable(old) and _geometry(old)[:2] == _geometry(target)[:2]:
            if tangent is None:
                old.zero_()
            else:
                old.copy_(tangent)
        elif tangent is not None and old is not None and _geometry(old)[:2] == _geometry(target)[:2] and \
                registry.expanded_write(op, target) is not None:
            # an op torch lets write through an expanded target (``meshgrid(x, x)[0].fill_(2)``) writes its tangent
            # through the base's tangent, element by element as the primal, from its operands' tangents (torch's
            # ``self_t.index_put_(indices, values_t)``; fuzz seed 7997433: x kept its tangent)
            registry.write_inplace(op, old, _operand_tangents(op, args, pairs), tangent)
        elif tangent is not None:
            _attach(target, lv, tangent.to(target.dtype) if _is_float(target.dtype) else tangent)
        elif old is not None:
            del found[lv]
        return target

__all__ = ["dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual", "UnpackedDualTensor"]
