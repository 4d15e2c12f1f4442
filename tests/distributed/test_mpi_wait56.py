"""`mpi_backend.wait`'s polling: spin, then yield, then nap once a wait has lasted `NAP_AFTER` (no MPI here: a
request is anything with ``Test``; MPI loads only where a wait raises MPI's exception)."""

from __future__ import annotations

import time

from jitorch.distributed import mpi_backend


class _DoneAfter:
    """A request whose Test answers True once ``seconds`` have passed since it was made."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def Test(self):
        return time.monotonic() >= self.end


def _counted(monkeypatch):
    counts = {"sleep": 0, "yield": 0}
    sleep, sched_yield = mpi_backend.time.sleep, mpi_backend.os.sched_yield

    def counted_sleep(seconds):
        counts["sleep"] += 1
        sleep(seconds)

    def counted_yield():
        counts["yield"] += 1
        sched_yield()
    monkeypatch.setattr(mpi_backend.time, "sleep", counted_sleep)
    monkeypatch.setattr(mpi_backend.os, "sched_yield", counted_yield)
    return counts


def test_a_wait_shorter_than_nap_after_yields_and_never_naps(monkeypatch):
    counts = _counted(monkeypatch)
    mpi_backend.wait(_DoneAfter(mpi_backend.NAP_AFTER / 4), 10, "a test")
    assert counts["sleep"] == 0 and counts["yield"] > 0


def test_a_wait_longer_than_nap_after_naps_between_polls(monkeypatch):
    counts = _counted(monkeypatch)
    start = time.monotonic()
    mpi_backend.wait(_DoneAfter(20 * mpi_backend.NAP_AFTER), 10, "a test")
    assert time.monotonic() - start >= 20 * mpi_backend.NAP_AFTER
    # (each nap lasts NAP or more: far fewer polls than spinning 19 ms would make)
    assert 0 < counts["sleep"] <= 19 * mpi_backend.NAP_AFTER / mpi_backend.NAP + 1
