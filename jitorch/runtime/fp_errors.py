"""NumPy's floating-point error state, silenced around kernels.

torch neither warns nor raises on overflow, 0/0 or log(0); NumPy warns. Every
eager kernel runs with NumPy's error handling set to "ignore". `np.errstate`
costs more than adding two small arrays, so when NumPy exposes the context
variable behind it (NumPy 2) we set that directly: about 0.2 us per kernel.

A small op's one NumPy call runs instead through `silenced`: the call made
inside a context of this module's own that holds the silenced state, entered
and left in C (0.03 us), the caller's context untouched.
"""

from __future__ import annotations

import contextvars
import functools

import numpy as np

try:
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _IGNORE = _make_extobj(all="ignore")
    # enter() silences floating-point errors and returns a token for leave(token). Both are C callables (no
    # Python frame): every small eager kernel pays for them.
    enter = functools.partial(_extobj_contextvar.set, _IGNORE)
    leave = _extobj_contextvar.reset

    # ``silenced(fn, *args, **kwargs)``: ``fn(*args, **kwargs)`` run in this context, whose only variable is
    # NumPy's error state, silenced. A context is entered by one caller at a time: a second (another thread's
    # call while the first is inside, or a call nested in ``fn``) raises RuntimeError before ``fn`` runs,
    # which its caller hands to `when_busy`. ``fn`` reads no other context variable: NumPy calls, or Python
    # code of jitorch's that makes them (jitorch keeps no context variables). A child forked while another
    # thread of its parent was inside finds the context taken for good: its calls all go to `when_busy`.
    _SILENCED = contextvars.Context()
    _SILENCED.run(_extobj_contextvar.set, _IGNORE)
    silenced = _SILENCED.run

except ImportError:  # NumPy 1.x: the public context manager
    def enter():
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def leave(token):
        token.__exit__(None, None, None)

    silenced = None  # (set below: `call_silenced`)


def call_silenced(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` silenced by `enter` and `leave`: for any ``fn``, nested calls included."""
    token = enter()
    try:
        return fn(*args, **kwargs)
    finally:
        leave(token)


if silenced is None:
    silenced = call_silenced


def when_busy(error, fn, *args, **kwargs):
    """`call_silenced` for a `silenced` call that raised ``error`` (a RuntimeError) because its context was
    entered already (by another thread, or by the caller); any other RuntimeError is raised again."""
    if not str(error).startswith("cannot enter context"):
        raise error
    return call_silenced(fn, *args, **kwargs)
