"""Python's cyclic garbage collector paused while a graph is traced or compiled.

Tracing and compiling make hundreds of thousands of small objects (nodes, values, argument tuples,
kernel sources) that stay alive until the compile ends, so the collector's passes over them, which
their allocation triggers, find next to nothing to free: on a GPT training step they took a tenth of
the first call. Reference counting still frees what is in no cycle; the cycles a compile leaves
behind are collected once the collector runs again.
"""

from __future__ import annotations

import contextlib
import gc
from ..runtime.forks import module_lock

_lock = module_lock(globals(), "_lock")
_state = {"depth": 0, "was_enabled": False}


@contextlib.contextmanager
def collector_paused():
    """The cyclic collector off inside (a decorator too); on again after the outermost of nested or
    concurrent uses, if it was on before the first."""
    with _lock:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
