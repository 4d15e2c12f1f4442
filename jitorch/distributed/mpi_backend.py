"""Collectives on NumPy buffers through MPI (mpi4py): the engine under jitorch.distributed's CPU tensors.

Every collective is started non-blocking and waited for on the calling thread with a deadline, so a rank that
died or never joins makes the others raise after the group's timeout instead of hanging. Buffers are the
tensors' own memory where they are contiguous (MPI reads and writes them in place); MPI has no bfloat16, so
those reduce through float32 copies.
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np

POLLS = 8  # MPI_Test calls between two looks at the clock, and between two yields of the core (`wait`)
# MPI_Test calls before the first look at the clock (about 3 us): a small collective's partner answers within
# them, and the clock and the loop's ranges were a quarter of a 4 B all-reduce's wait (2 ranks, loaded machine,
# a persistent all-gather of 1 KB: spinning on Test 1.00 us, the wait that read the clock after one Test 1.34)
_SPIN = range(32)
# A wait still pending after this many seconds sleeps `NAP` between its polls instead of yielding: a yield gives
# the core only to a thread queued on the same one, and a rank of a job with more ranks than cores, or beside
# other work, that waited so long kept its core busy polling for the whole wait (4-rank jobs on the 2-core
# machine spent a tenth of their processes' CPU in this loop). A wait this long is a large message or a peer
# behind: a nap, about 0.1 ms with the kernel's timer slack, is a tenth of what the wait has taken already.
NAP_AFTER = 1e-3
NAP = 5e-5

def mpi():
    """The mpi4py ``MPI`` module (importing it initialises MPI, so it loads on first use)."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise RuntimeError("jitorch.distributed needs mpi4py and an MPI library: pip install 'jitorch[distributed]' "
                           "(mpi4py with MPICH)") from error
    return MPI


def broken():
    """Make this process abort MPI at exit instead of finalizing it: after a timeout a connect, an accept or a
    collective is still pending, and MPI's finalize would wait for it, or crash (mpi4py's ``set_abort_status``;
    the exit status becomes 1)."""
    from mpi4py.run import set_abort_status

    set_abort_status(1)


def op_of(name, dtype=None):
    """The MPI reduction for one of ReduceOp's names (AVG sums; the caller divides) on arrays of NumPy ``dtype``.

    MPI's arithmetic reductions reject booleans (MPICH: "Invalid MPI_Op"), which torch reduces as logic: SUM and
    MAX as OR, PRODUCT and MIN as AND (measured on torch's gloo), BXOR as XOR; those use MPI's logical ones.
    MIN and MAX of floating point arrays keep a NaN of any rank (`_propagating_nan`)."""
    if dtype is not None and dtype.kind == "f" and name in ("MIN", "MAX"):
        return _propagating_nan(name, dtype.str)
    if not _OPS:
        MPI = mpi()
        _OPS.update(SUM=MPI.SUM, AVG=MPI.SUM, PRODUCT=MPI.PROD, MIN=MPI.MIN, MAX=MPI.MAX, BAND=MPI.BAND,
                    BOR=MPI.BOR, BXOR=MPI.BXOR)
        _LOGICAL.update(SUM=MPI.LOR, MAX=MPI.LOR, BOR=MPI.LOR, PRODUCT=MPI.LAND, MIN=MPI.LAND, BAND=MPI.LAND,
                        BXOR=MPI.LXOR)
    return _LOGICAL[name] if dtype is not None and dtype.kind == "b" else _OPS[name]


_OPS: dict = {}  # filled on first use: reading MPI's constants initialises MPI
_LOGICAL: dict = {}  # the same for boolean arrays


@functools.lru_cache(maxsize=None)
def _propagating_nan(name, dtype):
    """An MPI reduction of arrays of NumPy ``dtype`` (a string): NumPy's ``minimum`` or ``maximum``, which keep a
    NaN of any rank. It is associative, so every algorithm and every number of ranks gives the same values (MPI's
    own MIN and MAX keep a NaN of the higher rank only; torch's gloo compares in its algorithm's order, so which
    NaN it keeps depends on the ranks' order and number)."""
    dtype = np.dtype(dtype)
    ufunc = np.maximum if name == "MAX" else np.minimum

    def combine(mine, theirs, datatype):
        out = np.frombuffer(theirs, dtype)
        ufunc(np.frombuffer(mine, dtype), out, out=out)
    return mpi().Op.Create(combine, commute=True)


def is_bfloat16(dtype):
    """Whether a NumPy dtype is ml_dtypes' bfloat16 (without NumPy's slow ``dtype.name`` on every call)."""
    return dtype.kind == "V" and dtype.type.__name__ == "bfloat16"


def wait(request, timeout, what):
    """Wait for an MPI request on this thread until ``timeout`` seconds pass; RuntimeError naming ``what`` after
    that (and MPI aborts at exit, see `broken`, unless the request has an ``abandon()`` to call instead).

    The wait is MPI's ``Test`` called in a loop: MPICH's blocking wait polls the same way, so this is as fast,
    measured both ways, and only a loop here can stop at a deadline and raise. Each ``Test`` also advances
    MPI's other started requests. After the first `_SPIN` tests (about 3 us) it yields the core every ``POLLS``
    tests (and naps instead once the wait passes `NAP_AFTER`), as MPICH's own blocking wait does between polls: when more threads want the cores than there are (a
    loaded machine), a rank that only spun would keep its core from the peer it waits for until the scheduler
    took it away. Measured on 2 ranks of the loaded 2-core machine, torch's gloo group in the same processes,
    the median of 30 all-reduces of 1 MB each after a barrier: spinning 29 ms, yielding after 50 us 5.1 ms,
    mpi4py's blocking Allreduce 4.8 ms; where the ranks got the cores, 0.28, 0.16 and 3.6 ms (a quiet machine
    has nothing to yield to: ``sched_yield`` returns at once). Yielding after 50 us rather than at once was
    the worst case of all where both ranks run on one core, which this VM's scheduler often does of itself
    (it wakes a thread on its waker's core), and ``taskset -c 0`` does always: each wait spun 50 us before the
    peer could run. 2 ranks on one core, interleaved with mpi4py's blocking Allreduce on the same buffer, share
    of its time: 4 B 14% -> 68%, 8 KB 9% -> 50%, 64 KB 18% -> 69%; on two cores alike (4 B 98-101% against
    95-97%, 8 KB 93-95% against 89-92%, 64 KB 100-102% against 100-104%, 10th percentiles of 2-4 runs)."""
    test = request.Test
    try:
        for _ in _SPIN:
            if test():
                return
        start = time.monotonic()
        while True:
            for _ in range(POLLS):
                if test():
                    return
            waited = time.monotonic() - start
            if waited > timeout:
                # an MPI request stays pending (`broken`); a thread world's (`threads`) says what it needs instead
                getattr(request, "abandon", broken)()
                raise RuntimeError(f"jitorch.distributed: {what} timed out after {timeout:.0f} s: a rank died, or "
                                   "did not call the same collective")
            if waited > NAP_AFTER:
                time.sleep(NAP)
            else:
                os.sched_yield()
    except mpi().Exception as error:
        raise RuntimeError(f"jitorch.distributed: {what} failed in MPI: {error}") from error


def reducible(array):
    """A buffer MPI can reduce: the array itself, or a float32 copy of a bfloat16 array."""
    if is_bfloat16(array.dtype):
        return array.astype(np.float32)
    return array


def check_pairs(pg, sent, received, what):
    """RuntimeError on every rank unless each rank sends each other as many bytes as that one receives from it
    (``sent[j]``, ``received[j]``: this rank's bytes to and from group rank j), where MPI would leave part of an
    output unwritten and NCCL would hang or mix data: one all-gather of every rank's counts on the group's MPI
    communicator, which every rank then reads alike."""
    n = pg.size()
    counts = np.empty((n, 2 * n), np.int64)
    wait(pg.comm.Iallgather(np.array([*sent, *received], np.int64), counts), pg.timeout, what)
    wrong = [f"rank {pg.ranks[k]} sends {counts[k, j]} bytes to rank {pg.ranks[j]}, which receives {counts[j, n + k]}"
             for k in range(n) for j in range(n) if counts[k, j] != counts[j, n + k]]
    if wrong:
        raise RuntimeError(f"{what}: the ranks' split sizes do not pair up: " + "; ".join(wrong))
