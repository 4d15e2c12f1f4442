"""``torch.autograd.graph.allow_mutation_on_saved_tensors``: within it, a tensor saved for backward that is then
written in place is cloned just before the write, and the backward reads the clone (the values it saved).

As torch's: saved-tensor hooks pack each saved tensor as a handle to it, and a dispatch hook, told of every
in-place op and ``out=`` write, clones the saved tensors of the memory about to be written (each once). torch
matches memory by a view's data pointer; this matches a storage, so a write through another view of the saved
memory is caught too. The backward must run inside the same context (torch's AssertionError otherwise), and
contexts do not nest.
"""

from __future__ import annotations

import contextlib
import weakref

from ..ops import registry
from . import saved_hooks

_ENABLED = [False]
_OUTSIDE = ("Trying to backward outside of the 'allow_mutation_on_saved_tensors' contextin which the graph was "
            "originally recorded.")


class _Handle:
    """What a saved tensor is packed as (a key the context maps to the tensor or its clone)."""

    __slots__ = ("__weakref__",)


def _memory(t):
    return id(getattr(t._storage, "root", t._storage))


class _AllowMutationOnSavedContext:
    """The state of one context: saved tensors by handle, their clones, and the handles of each memory."""

    def __init__(self):
        self.original = weakref.WeakKeyDictionary()
        self.cloned = weakref.WeakKeyDictionary()
        self.by_memory = {}  # id of a storage -> weak references to the handles of tensors saved on it

    def clear(self):
        self.original.clear()
        self.cloned.clear()
        self.by_memory.clear()

    def pack(self, tensor):
        handle = _Handle()
        self.original[handle] = tensor
        self.by_memory.setdefault(_memory(tensor), []).append(weakref.ref(handle))
        return handle

    def unpack(self, handle):
        if not _ENABLED[0]:
            raise AssertionError(_OUTSIDE)
        found = self.cloned.get(handle)
        if found is None:
            found = self.original.get(handle)
        if found is None:
            raise AssertionError(_OUTSIDE)
        return found

    def before_write(self, t):
        """Clone the saved tensors on ``t``'s memory that are not cloned yet."""
        for ref in self.by_memory.get(_memory(t), ()):
            handle = ref()
            if handle is not None and handle in self.original:
                self.cloned[handle] = self.original.pop(handle).clone()


class _CloneBeforeWrite(registry.DispatchHook):
    """The dispatch hook: passes every call on, after cloning what an in-place op or out= write overwrites."""

    def __init__(self, ctx):
        self.ctx = ctx

    def call(self, op, args, out):
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, registry.Tensor):
                self.ctx.before_write(t)
        return NotImplemented

    def call_inplace(self, op, args):
        self.ctx.before_write(args[0])
        return NotImplemented


@contextlib.contextmanager
def allow_mutation_on_saved_tensors():
    """Within this context, writing in place into a tensor saved for backward is allowed: it is cloned first and
    the backward (which must run within the same context) reads the clone. Yields the context's state."""
    ctx = _AllowMutationOnSavedContext()
    hook = _CloneBeforeWrite(ctx)
    saved_hooks.push(ctx.pack, ctx.unpack)
    registry.DISPATCH_HOOKS.append(hook)
    try:
        if _ENABLED[0]:
            raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
        _ENABLED[0] = True
        yield ctx
    finally:
        ctx.clear()
        _ENABLED[0] = False  # (an inner context's refusal ends the outer one too, as torch's)
        registry.DISPATCH_HOOKS.remove(hook)
        saved_hooks.pop()
