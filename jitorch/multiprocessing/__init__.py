"""jitorch.multiprocessing: Python's ``multiprocessing``, with tensors shared instead of copied (torch's API).

Importing it registers reducers with ``multiprocessing``'s pickler, so a tensor put on a queue, sent through a
pipe or passed to a process moves into shared memory and travels as a handle to it: the receiver maps the
same memory, and writes on either side are seen on the other. The memory is freed when the last process that
maps it lets go. A CUDA tensor travels as a CUDA IPC handle to its device memory (see reductions), which the
sender must keep alive while receivers use it, as in torch.

    import jitorch.multiprocessing as mp
    q = mp.Queue()
    q.put(jt.zeros(1000))        # sends a handle, never the elements
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import *  # noqa: F401,F403  (as torch.multiprocessing: the whole stdlib API)

from .reductions import init_reductions
from .spawn import (ProcessContext, ProcessException, ProcessExitedException, ProcessRaisedException, spawn,
                    start_processes)

__all__ = ["get_all_sharing_strategies", "get_sharing_strategy", "set_sharing_strategy", "spawn",
           "start_processes", "ProcessContext", "ProcessException", "ProcessExitedException",
           "ProcessRaisedException", *multiprocessing.__all__]

# torch also offers "file_system" (named files in /dev/shm); jitorch shares through descriptors only, which the
# kernel frees when the last process lets go, with no name that could leak when a process dies
_STRATEGIES = frozenset({"file_descriptor"})


def get_all_sharing_strategies():
    """The ways tensors can be shared between processes here: ``{"file_descriptor"}``."""
    return set(_STRATEGIES)


def get_sharing_strategy():
    """The current way of sharing tensors between processes (always ``"file_descriptor"``)."""
    return "file_descriptor"


def set_sharing_strategy(new_strategy):
    """Choose how tensors are shared; only ``"file_descriptor"`` exists in jitorch."""
    if new_strategy not in _STRATEGIES:
        raise ValueError(f"sharing strategy {new_strategy!r} is not available; jitorch shares tensors with: "
                         f"{sorted(_STRATEGIES)}")


init_reductions()
