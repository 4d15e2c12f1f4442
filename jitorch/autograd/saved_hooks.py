"""Saved-tensor hooks (torch's ``saved_tensors_hooks``): the per-thread stack of (pack, unpack) pairs
and what the engine and custom Functions do with a tensor they save for backward while a pair is set.

A saved tensor becomes a `Packed` holding ``pack(tensor)``; the backward calls ``unpack`` on it each
time it reads it. As torch's SavedVariable: only the innermost pair applies, ``pack`` runs without grad
mode on a detached alias and may not write into it, and a packed tensor has no version check (the hooks
may have moved its values anywhere); the unpacked tensor carries the original's history, so a
``create_graph`` backward still reaches what the original depended on.
"""

from __future__ import annotations

import threading
import weakref

from ..ops import registry
from ..runtime.grad_mode import no_grad
from .rule import Unsaved


class _Stack(threading.local):
    pairs = ()          # (pack, unpack) per open saved_tensors_hooks, innermost last
    disabled = None     # the error message of the innermost disable_saved_tensors_hooks, or None


_tls = _Stack()

# How many saved_tensors_hooks blocks are open over all threads: while none is, saving a tensor reads no
# thread-local state (the engine records a node per op).
OPEN = [0]


def push(pack, unpack):
    """Make (``pack``, ``unpack``) this thread's innermost pair; torch's error where hooks are disabled."""
    if _tls.disabled is not None:
        raise RuntimeError(_tls.disabled)
    _tls.pairs = _tls.pairs + ((pack, unpack),)
    OPEN[0] += 1


def pop():
    """Close the innermost pair."""
    _tls.pairs = _tls.pairs[:-1]
    OPEN[0] -= 1


def disabled_message():
    """The message a saved_tensors_hooks raises on this thread now, or None."""
    return _tls.disabled


def set_disabled(message):
    """Refuse (``message``: str) or allow again (None) new saved_tensors_hooks on this thread."""
    _tls.disabled = message


def active():
    """This thread's innermost (pack, unpack) pair, or None."""
    if not OPEN[0]:
        return None
    pairs = _tls.pairs
    return pairs[-1] if pairs else None


class Packed(Unsaved):
    """A saved tensor as its pack hook left it, with what the unpacked tensor needs of the original: its
    history (grad_fn and output index, or the leaf's gradient accumulator). Its geometry reads as an
    `Unsaved`'s (a rule's predicate may read shapes without unpacking)."""

    __slots__ = ("value", "unpack", "edge", "output_nr", "leaf")

    def __init__(self, t, pair, edge, what):
        """``edge``: (node or a weak reference to it, output index, whether it is a leaf's accumulator) where
        ``t``'s gradient goes, or None; ``what``: (op name, argument name)."""
        super().__init__(t, what)
        pack, self.unpack = pair
        version = t._storage._version
        with no_grad():
            self.value = pack(t.detach())
        if t._storage._version != version:
            raise RuntimeError("A saved tensor pack hook is modifying its input in place. Tensors provided as "
                               "input to pack hook cannot be modified by in-place operations as this can lead "
                               "to unexpected side-effects. Please open an issue if you need to perform in-place "
                               "operations on the input to a pack hook.")
        self.requires_grad = edge is not None
        self.edge = edge

    def get(self):
        """``unpack(packed)`` as a tensor with the original's history."""
        got = self.unpack(self.value)
        if not isinstance(got, registry.Tensor):
            raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but got result of type "
                            f"{type(got).__name__}")
        if self.edge is None:
            return got
        node, nr, leaf = self.edge
        if node.__class__ is weakref.ref:
            node = node()
        t = got.detach()
        t._requires_grad = True
        if leaf:
            t._accumulator = node
        else:
            t.grad_fn = node
            t._output_nr = nr
        return t


def unpacked(values):
    """``values`` (a node's saved arguments or outputs, tensor lists included) with every `Packed` unpacked."""
    out = []
    for a in values:
        if a.__class__ is Packed:
            a = a.get()
        elif a.__class__ is list and any(x.__class__ is Packed for x in a):
            a = [x.get() if x.__class__ is Packed else x for x in a]
        out.append(a)
    return out


def pack_saved(values, pair, edge_of, what):
    """``values`` (a list, written in place) with each tensor packed by ``pair``; ``edge_of(k, t)``: the
    `Packed` edge of tensor ``t`` at ``k``; ``what(k)``: (op name, argument name) of value ``k``."""
    Tensor = registry.Tensor
    for k, a in enumerate(values):
        if isinstance(a, Tensor):
            values[k] = Packed(a, pair, edge_of(k, a), what(k))
        elif isinstance(a, (list, tuple)) and any(isinstance(x, Tensor) for x in a):
            values[k] = [Packed(x, pair, edge_of(k, x), what(k)) if isinstance(x, Tensor) else x for x in a]
