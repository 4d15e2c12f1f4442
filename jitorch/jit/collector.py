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
after its trace and its compile). Session 48 replaced those passes with one collection of both young
generations; that pass still went over every survivor, and a compile's survivors grow with its graph, so
its time grew faster than the graph (the GPT step's warm first call: 6, 14 and 40 ms at 2, 4 and 8 layers;
240 ms of generate's, whose 64 sampling steps are traced whole, for 14,000 objects freed among 440,000).
So where a pause put off `YOUNG_BACKLOG` collections of the youngest generation or more, the pause ends by
moving everything young to the oldest generation without a pass (``gc.freeze()`` then ``gc.unfreeze()``,
which splice the generations' lists), as the middle one's pass would have moved the survivors. The cycles
the compile left behind are freed by the next full collection, which the move does not bring nearer (the
collector counts the objects its own passes move up, not these). So that a process compiling graph after
graph still reaches that collection, once `PROMOTED_MAX` objects were moved so since the last full
collection, a pause ends with the collection of both young generations again, whose survivors the
collector counts. Where the program froze objects itself (``gc.get_freeze_count()``), unfreezing would
hand its objects back to the collector: the pause ends with that collection too.
"""

from __future__ import annotations

import contextlib
import gc
from ..runtime.forks import module_lock

_lock = module_lock(globals(), "_lock")
_state = {"depth": 0, "was_enabled": False}
# On leaving a pause in which this many of the youngest generation's collections were put off, the two young
# generations are moved to the oldest one (see the module docstring).
YOUNG_BACKLOG = 10
# Objects moved to the oldest generation without a pass since the last full collection, beyond which a pause
# ends with the young generations' collection instead (generate's first call, 64 sampling steps traced whole,
# moves about 500,000).
PROMOTED_MAX = 1_000_000
_promoted = {"objects": 0, "full collections": 0}


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
            # (a threshold of 0 turns automatic collection off, which then stays so)
            youngest = gc.get_threshold()[0]
            backlog = resumed and youngest and gc.get_count()[0] > YOUNG_BACKLOG * youngest
            # moved before the collector is on again, whose first allocation would start a pass over them
            moved = backlog and _moved_without_a_pass()
            if resumed:
                gc.enable()
        if backlog and not moved:  # (outside the lock: a finalizer the collection runs may trace)
            gc.collect(1)


def _moved_without_a_pass():
    """Move every object of the two young generations to the oldest one without a collector's pass and return
    True where the program has frozen nothing and fewer than `PROMOTED_MAX` objects were moved so since the
    last full collection (see the module docstring); else False (nothing moved)."""
    full = gc.get_stats()[-1]["collections"]
    if full != _promoted["full collections"]:
        _promoted.update({"objects": 0, "full collections": full})
    _promoted["objects"] += gc.get_count()[0]
    if gc.get_freeze_count() or _promoted["objects"] > PROMOTED_MAX:
        return False
    gc.freeze()
    gc.unfreeze()
    return True
