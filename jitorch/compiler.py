"""Hooks for code that knows it may be traced by `jitorch.compile` (as ``torch.compiler``).

Library code such as an optimizer keeps Python state across calls: buffers it
creates on its first step, learning rates a scheduler changes. A traced graph
is specialised to that state, so such code tells the compiler about it:

* `eager_state` creates persistent tensors for real while tracing (they become
  graph constants), and makes the trace serve this one call: the next call
  traces again, with the state in place;
* `guard` records a check of Python state the trace relies on; a call where it
  fails traces again instead of running a stale graph.
"""

from __future__ import annotations

import contextlib

from .jit.tracer import current_tracer

__all__ = ["is_compiling", "eager_state", "guard"]


def is_compiling():
    """True while `jitorch.compile` is tracing a function."""
    return current_tracer() is not None


@contextlib.contextmanager
def eager_state():
    """Run the block eagerly, even while tracing: tensors it makes are real and persist (an
    optimizer's momentum buffers). Outside a trace it does nothing."""
    from .ops import registry
    tracer = current_tracer()
    if tracer is None:
        yield
        return
    tracer.one_shot = True
    position = registry.DISPATCH_HOOKS.index(tracer)
    registry.DISPATCH_HOOKS.remove(tracer)
    try:
        yield
    finally:
        registry.DISPATCH_HOOKS.insert(position, tracer)


def guard(check, description=None):
    """While tracing, make the graph valid only while ``check()`` (no arguments) returns True;
    ``description`` names the assumption in the recompile log. Outside a trace it does nothing."""
    tracer = current_tracer()
    if tracer is not None:
        if description is not None:
            check.__doc__ = description
        tracer.python_guards.append(check)
