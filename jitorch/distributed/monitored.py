"""torch's ``monitored_barrier``: a barrier whose first rank names the ranks that never reached it.

Every other rank sends the group's first rank a message and waits for its answer; the first rank waits for all
those messages until one deadline, and answers every rank only once all have arrived, so every rank leaves
together or none does (as gloo's). The messages are MPI point-to-point ones on the group's communicator, under
the largest tag MPI allows, where a script's own ``send``/``recv`` (tag 0 unless given) does not meet them.
"""

from __future__ import annotations

import os
import time

import numpy as np

from .collectives import _seconds
from .mpi_backend import mpi, wait
from .process_group import members_only, resolve


@members_only
def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """Wait until every rank of the group has called monitored_barrier, as torch's.

    On the group's first rank, RuntimeError when some rank has not called it within ``timeout`` (a timedelta or
    seconds; None: the group's timeout), naming the first such rank: "[Rank 0]: Rank 2 failed to pass
    monitoredBarrier in 500 ms", or with ``wait_all_ranks=True`` every one: "[Rank 0]: Ranks 1, 2 failed to
    pass monitoredBarrier in 500 ms". The others then get no answer: their wait (the group's timeout, as in
    torch) ends in RuntimeError saying that rank 0 failed. Ranks are global ranks, as in jitorch's other errors
    (torch names group ranks; the two agree in the default group)."""
    pg = resolve(group)
    seconds = pg.timeout if timeout is None else _seconds(timeout)
    comm, me = pg.comm, pg.rank()
    tag = comm.Get_attr(mpi().TAG_UB)
    token = np.zeros(1, np.uint8)
    if me != 0:
        wait(comm.Isend(token, dest=0, tag=tag), pg.timeout, "monitored_barrier")
        if _unanswered({0: comm.Irecv(np.zeros(1, np.uint8), source=0, tag=tag)}, pg.timeout):
            raise RuntimeError(f"Rank {pg.ranks[me]} successfully reached monitoredBarrier, but received errors "
                               f"while waiting for send/recv from rank {pg.ranks[0]}. Please check rank "
                               f"{pg.ranks[0]} logs for faulty rank.")
        return
    tokens = np.zeros(pg.size(), np.uint8)
    pending = {r: comm.Irecv(tokens[r:r + 1], source=r, tag=tag) for r in range(1, pg.size())}
    missing = _unanswered(pending, seconds)
    if missing:
        named = [pg.ranks[r] for r in missing] if wait_all_ranks else [pg.ranks[min(missing)]]
        raise RuntimeError(f"[Rank {pg.ranks[0]}]: Rank{'s' if wait_all_ranks else ''} "
                           f"{', '.join(map(str, named))} failed to pass monitoredBarrier in "
                           f"{round(seconds * 1000)} ms")
    for request in [comm.Isend(token, dest=r, tag=tag) for r in range(1, pg.size())]:
        wait(request, pg.timeout, "monitored_barrier")


def _unanswered(pending, seconds):
    """Test the receives of ``pending`` (rank -> request) until all have completed or ``seconds`` pass; those
    still pending, by rank, cancelled (a receive never matched would keep MPI's finalize waiting). Between
    rounds the core is yielded, as `mpi_backend.wait` does, so that a rank on the same core can run."""
    deadline = time.monotonic() + seconds
    while pending:
        pending = {r: request for r, request in pending.items() if not request.Test()}
        if not pending or time.monotonic() > deadline:
            break
        os.sched_yield()
    for request in pending.values():
        request.Cancel()
        request.Wait()
    return pending
