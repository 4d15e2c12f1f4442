"""Hooks for code that knows it may be traced by `jitorch.compile` (as ``torch.compiler``).

Library code such as an optimizer keeps Python state across calls: buffers it
creates on its first step, learning rates a scheduler changes. A traced graph
is specialised to that state, so such code tells the compiler about it:

* `eager_state` creates persistent tensors for real while tracing (they become
  graph constants), and makes the trace serve this one call: the next call
  traces again, with the state in place;
* `dynamic_scalar` turns a Python number that changes between calls (a
  learning rate) into a captured 0-d tensor refreshed before every call;
* `guard` records a check of Python state the trace relies on; a call where it
  fails traces again instead of running a stale graph.
"""

from __future__ import annotations

import contextlib

from .jit.tracer import current_tracer

__all__ = ["is_compiling", "eager_state", "dynamic_scalar", "guard"]


def is_compiling():
    """True while `jitorch.compile` is tracing a function."""
    return current_tracer() is not None


@contextlib.contextmanager
def _untraced(tracer):
    """The block's ops run for real: ``tracer`` stops recording meanwhile."""
    from .ops import registry
    position = registry.DISPATCH_HOOKS.index(tracer)
    registry.DISPATCH_HOOKS.remove(tracer)
    try:
        yield
    finally:
        registry.DISPATCH_HOOKS.insert(position, tracer)


@contextlib.contextmanager
def eager_state():
    """Run the block eagerly, even while tracing: tensors it makes are real and persist (an
    optimizer's momentum buffers). Outside a trace it does nothing."""
    tracer = current_tracer()
    if tracer is None:
        yield
        return
    tracer.one_shot = True
    with _untraced(tracer):
        yield


def dynamic_scalar(read, dtype=None):
    """A Python number the traced code uses but that changes between calls (a learning rate a
    scheduler sets). Outside a trace: ``read()``. While tracing: a real 0-d tensor the graph
    captures, set to ``read()`` before every call of the compiled graph, so a new value needs no
    new trace. ``dtype`` defaults to the default float dtype."""
    tracer = current_tracer()
    if tracer is None:
        return read()
    from .ops.creation import tensor as make_tensor
    with _untraced(tracer):
        holder = make_tensor(read(), dtype=dtype)
    tracer.refreshers.append(lambda: holder.fill_(read()))
    return holder


def guard(check, description=None):
    """While tracing, make the graph valid only while ``check()`` (no arguments) returns True;
    ``description`` names the assumption in the recompile log. Outside a trace it does nothing."""
    tracer = current_tracer()
    if tracer is not None:
        if description is not None:
            check.__doc__ = description
        tracer.python_guards.append(check)
