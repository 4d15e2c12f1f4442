"""Collectives on NumPy buffers through MPI (mpi4py): the engine under jitorch.distributed's CPU tensors.

Every collective is started non-blocking and waited for with a deadline, so a rank that died or never joins
makes the others raise after the group's timeout instead of hanging. Buffers are the tensors' own memory
where they are contiguous (MPI reads and writes them in place); MPI has no bfloat16, so those reduce through
float32 copies.
"""

from __future__ import annotations

import threading
import time

import numpy as np

SPIN = 0.0005  # seconds a wait polls before MPI's own blocking wait takes over

def mpi():
    """The mpi4py ``MPI`` module (importing it initialises MPI, so it loads on first use)."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise RuntimeError("jitorch.distributed needs mpi4py and an MPI library: pip install 'jitorch[distributed]' "
                           "(mpi4py with MPICH)") from error
    return MPI


def op_of(name):
    """The MPI reduction for one of ReduceOp's names (AVG sums; the caller divides)."""
    MPI = mpi()
    return {"SUM": MPI.SUM, "AVG": MPI.SUM, "PRODUCT": MPI.PROD, "MIN": MPI.MIN, "MAX": MPI.MAX,
            "BAND": MPI.BAND, "BOR": MPI.BOR, "BXOR": MPI.BXOR}[name]


def wait(request, timeout, what):
    """Wait for an MPI request until ``timeout`` seconds pass; RuntimeError naming ``what`` after that.

    A collective that finishes within ``SPIN`` seconds is polled for; a longer one is waited for by MPI itself
    (whose blocking wait progresses faster than polling from Python) in a helper thread, while this thread
    waits for it with the deadline. After a timeout that helper stays blocked: the group is broken anyway."""
    start = time.monotonic()
    while not request.Test():
        if time.monotonic() - start > SPIN:
            done, errors = threading.Event(), []
            threading.Thread(target=_wait_then_set, args=(request, done, errors), daemon=True).start()
            if not done.wait(max(0.0, timeout - (time.monotonic() - start))):
                raise RuntimeError(f"jitorch.distributed: {what} timed out after {timeout:.0f} s: a rank died, or "
                                   "did not call the same collective")
            if errors:
                raise RuntimeError(f"jitorch.distributed: {what} failed in MPI: {errors[0]}") from errors[0]
            return


def _wait_then_set(request, done, errors):
    try:
        request.Wait()
    except Exception as error:  # raised again by the waiting thread
        errors.append(error)
    finally:
        done.set()


def reducible(array):
    """A buffer MPI can reduce: the array itself, or a float32 copy of a bfloat16 array."""
    if array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    return array
