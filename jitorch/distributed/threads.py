"""Ranks that are threads of one process, for NCCL groups driven from one process (one thread per GPU).

A `ThreadWorld` gives each thread a `ThreadComm`: the part of an MPI communicator a process group of CUDA tensors
uses (its rank and size, a broadcast of a byte buffer, a barrier, the all-gather of the blocks that compare the ranks'
calls before each collective, persistent as MPI 4's, and an all-reduce of small arrays), in the same non-blocking form (requests with
``Test``), so `process_group.ProcessGroup` and the collectives run unchanged. The CUDA selftest uses it to run
the NCCL collectives over every GPU of one machine; the test suite, to run them on its fake NCCL.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .mpi_backend import op_of
from .process_group import ProcessGroup


class ThreadWorld:
    """``size`` ranks, each a thread, exchanging through this object."""

    WAKE = 0.001  # seconds an unfinished request's Test waits for another rank's post

    def __init__(self, size):
        self.size = size
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified whenever a rank posts
        self.posted = {}    # sequence number -> bytes a root broadcast
        self.arrived = {}   # sequence number -> ranks at a barrier
        self.given = {}     # sequence number -> [rank -> array, ranks yet to read them] of an all-gather

    def comm(self, rank):
        """Rank ``rank``'s communicator."""
        return ThreadComm(self, rank)


class _Request:
    """A started exchange; ``ready()``, called under the world's lock, finishes it once the other ranks have
    posted their part (and says whether they had)."""

    def __init__(self, world, ready):
        self.world, self.ready = world, ready
        self.done = False

    def Test(self):  # noqa: N802  (mpi4py's name, which mpi_backend.wait calls in a loop)
        """Whether it has finished; when not, waits up to `ThreadWorld.WAKE` seconds for a post first, releasing
        the GIL: a waiting rank that spun on Test would hold the GIL its peers need to post (measured: ~13 ms per
        exchange, about the interpreter's switch interval, against ~0.2 ms)."""
        if not self.done:
            with self.world.changed:
                self.done = self.ready() or (self.world.changed.wait(self.world.WAKE) and self.ready())
        return self.done

    def abandon(self):
        """Nothing to do when a wait gives up on it: no MPI request is left pending (`mpi_backend.wait`)."""


class ThreadComm:
    """One thread's communicator in a `ThreadWorld` (mpi4py's method names); calls must come in the same order on
    every rank, as MPI's collectives."""

    def __init__(self, world, rank):
        self.world, self.rank, self.sequence = world, rank, 0

    def Get_rank(self):  # noqa: N802
        return self.rank

    def Get_size(self):  # noqa: N802
        return self.world.size

    def _next(self):
        self.sequence += 1
        return self.sequence

    def Ibcast(self, buf, root=0):  # noqa: N802
        """Root's bytes of ``buf`` (a NumPy array) into every rank's ``buf``."""
        seq, world = self._next(), self.world
        if self.rank == root:
            with world.changed:
                world.posted[seq] = [buf.tobytes(), world.size - 1]
                world.changed.notify_all()
            return _Request(world, lambda: True)

        def ready():
            entry = world.posted.get(seq)
            if entry is None:
                return False
            buf.reshape(-1).view("u1")[:] = bytearray(entry[0])
            _read_once(world.posted, seq, entry)
            return True
        return _Request(world, ready)

    def Ibarrier(self):  # noqa: N802
        seq, world = self._next(), self.world
        with world.changed:
            world.arrived.setdefault(seq, set()).add(self.rank)
            world.changed.notify_all()
        return _Request(world, lambda: len(world.arrived.get(seq, ())) >= world.size)

    def Iallgather(self, sendbuf, recvbuf):  # noqa: N802
        """Every rank's ``sendbuf`` (NumPy arrays of one size), in rank order, into ``recvbuf``."""
        def deliver(rows):
            recvbuf.reshape(len(rows), -1)[...] = rows.reshape(len(rows), -1)
        return self._gathered(sendbuf, deliver)

    def Allgather_init(self, sendbuf, recvbuf):  # noqa: N802
        """MPI 4's persistent all-gather: a `_Persistent` request whose every ``Start()`` is an `Iallgather` of
        the same buffers (each with the next sequence number, as MPI's order of collectives counts it)."""
        return _Persistent(lambda: self.Iallgather(sendbuf, recvbuf))

    def Iallreduce(self, sendbuf, recvbuf, op):  # noqa: N802
        """The element-wise maximum of the ranks' ``sendbuf`` into ``recvbuf``: ``op`` is MPI.MAX, the only
        reduction a thread world makes (DDP's check of unused parameters; NCCL reduces the tensors)."""
        if op is not op_of("MAX"):
            raise NotImplementedError("a thread world's all-reduce takes MPI.MAX only")

        def deliver(rows):
            recvbuf[...] = rows.max(axis=0)
        return self._gathered(sendbuf, deliver)

    def _gathered(self, sendbuf, deliver):
        """A request that completes once every rank has given its array: ``deliver(rows)`` then gets them all,
        stacked in rank order."""
        seq, world = self._next(), self.world
        with world.changed:
            entry = world.given.setdefault(seq, [{}, world.size])
            entry[0][self.rank] = np.array(sendbuf)
            world.changed.notify_all()

        def ready():
            if len(entry[0]) < world.size:
                return False
            deliver(np.stack([entry[0][r] for r in range(world.size)]))
            _read_once(world.given, seq, entry)
            return True
        return _Request(world, ready)

    def Free(self):  # noqa: N802
        """Nothing to free: the world is garbage-collected with its threads' groups."""


class _Persistent:
    """A persistent collective of a thread world (mpi4py's ``Prequest`` methods): ``Start()`` makes ``begin()``'s
    request, which ``Test`` and ``abandon`` then go to."""

    def __init__(self, begin):
        self.begin, self.request = begin, None

    def Start(self):  # noqa: N802
        self.request = self.begin()

    def Test(self):  # noqa: N802
        return self.request.Test()

    def abandon(self):
        """`_Request.abandon`: a wait that gives up leaves nothing pending."""
        self.request.abandon()

    def Free(self):  # noqa: N802
        """Nothing to free (MPI's persistent requests are freed before their communicator)."""
        self.request = None


def run(size, fn, timeout=300.0, backend="nccl", group_timeout=None):
    """Call ``fn(group)`` on ``size`` threads, thread r with rank r's `ProcessGroup` of a new `ThreadWorld`
    (its ``timeout``, ``group_timeout`` seconds, defaults to ``timeout``); the list of their results, in rank
    order. An exception in a thread is raised here as soon as it happens (the first rank's, when several have);
    RuntimeError when a thread is still running after ``timeout`` seconds."""
    world = ThreadWorld(size)
    results, errors = [None] * size, [None] * size
    seconds = timeout if group_timeout is None else group_timeout
    groups = [ProcessGroup(world.comm(r), range(size), backend, seconds) for r in range(size)]

    def body(rank):
        try:
            results[rank] = fn(groups[rank])
        except BaseException as error:  # handed to the calling thread
            errors[rank] = error

    threads = [threading.Thread(target=body, args=(r,), name=f"rank-{r}", daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    # a rank that raised leaves its peers waiting for it (until their group's timeout): report it at once
    while any(t.is_alive() for t in threads) and not any(errors) and time.monotonic() < deadline:
        next(t for t in threads if t.is_alive()).join(0.05)
    for error in errors:
        if error is not None:
            raise error
    if any(t.is_alive() for t in threads):
        raise RuntimeError(f"jitorch.distributed: ranks {[r for r, t in enumerate(threads) if t.is_alive()]} of "
                           f"{size} threads still running after {timeout:.0f} s")
    return results


def _read_once(table, seq, entry):
    """Count one reader off a posted ``[data, readers left]`` entry; the last reader removes it."""
    entry[1] -= 1
    if not entry[1]:
        del table[seq]
