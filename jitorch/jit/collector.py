"""Python's cyclic garbage collector paused while a graph is traced or compiled.

Tracing and compiling make hundreds of thousands of small objects (nodes, values, argument tuples,
kernel sources) that stay alive until the compile ends, so the collector's passes over them, which
their allocation triggers, find next to nothing to free: on a GPT training step they took a tenth of
the first call. Reference counting still frees what is in no cycle; the cycles a compile leaves
behind are collected once the collector runs again.

That collection comes at once, on the first allocation after the pause: a pass over everything the
pause left in the youngest generation (the compile's survivors: the graph, its kernels and steps), which
it moves to the middle one, whose own pass a few allocations later went over them all again, freeing
nothing (13 ms of the GPT training step's warm first call, after 4 and 10 ms for the youngest's passes
after its trace and its compile). So where a pause put off `YOUNG_BACKLOG` collections of the youngest
generation or more, the pause ends with one collection of both young generations, which frees the same
cycles and moves the survivors to the oldest generation, as the middle one's pass would have: the
collector's work in that first call fell from 24-28 ms to 9-13 ms.
"""

from __future__ import annotations

import contextlib
import gc
from ..runtime.forks import module_lock

_lock = module_lock(globals(), "_lock")
_state = {"depth": 0, "was_enabled": False}
# On leaving a pause in which this many of the youngest generation's collections were put off, the two young
# generations are collected at once (see the module docstring).
YOUNG_BACKLOG = 10


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
            resumed = _state["depth"] == 0 and _state["was_enabled"]
            if resumed:
                gc.enable()
        # (outside the lock: a finalizer the collection runs may trace; a threshold of 0 turns automatic
        # collection off, which then stays so)
        youngest = gc.get_threshold()[0]
        if resumed and youngest and gc.get_count()[0] > YOUNG_BACKLOG * youngest:
            gc.collect(1)
