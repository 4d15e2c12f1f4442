"""What the launched check scripts share: rank r's data, which every rank can compute, and a NumPy comparison
that counts the checks passed (``check.passed``)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import jitorch as jt

ROOT = Path(__file__).resolve().parents[2]


def data(r, shape=(2, 3), dtype=np.float32):
    """Rank ``r``'s values: distinct per rank and per element."""
    return (np.arange(np.prod(shape)).reshape(shape) + 10 * r + 1).astype(dtype)


def check(got, expected):
    """``got`` (a tensor or array) equals ``expected`` to float32 rounding; counts the check."""
    np.testing.assert_allclose(got.numpy() if isinstance(got, jt.Tensor) else got, expected, rtol=1e-6)
    check.passed += 1


check.passed = 0


def raises(message, call, kind=RuntimeError):
    """``call()`` raises ``kind`` with ``message`` on this rank; counts the check."""
    try:
        call()
    except kind as error:
        assert message in str(error), (message, str(error))
        check.passed += 1
    else:
        raise AssertionError(f"no error: {message}")


class Counting:
    """A group's communicator (``pg.comm = Counting(pg.comm)``), counting the all-reduces MPI is asked to start
    (``all_reduces``) and to bind to a buffer as persistent ones (``bound``)."""

    def __init__(self, comm):
        self.comm, self.all_reduces, self.bound = comm, 0, 0

    def Iallreduce(self, *args):  # noqa: N802
        self.all_reduces += 1
        return self.comm.Iallreduce(*args)

    def Allreduce_init(self, *args):  # noqa: N802
        self.bound += 1
        return self.comm.Allreduce_init(*args)

    def __getattr__(self, name):
        return getattr(self.comm, name)


def world_of_one(code):
    """``code`` run by a fresh Python as rank 0 of a world of 1 (env://, no launcher, no MPI environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "MPI_"))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(env, RANK="0", WORLD_SIZE="1", PYTHONPATH=str(ROOT)))
