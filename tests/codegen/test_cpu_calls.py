"""codegen/cpu.py's calls of eager kernels: array addresses and the split of a call over the thread team."""

import numpy as np
import pytest

from jitorch.codegen import cpu


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32),  # (writable C-contiguous)
    lambda: np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],  # (strided)
    lambda: np.broadcast_to(np.float32(1), (4,)),  # (read-only)
    lambda: np.empty(0, np.float32),  # (empty)
    lambda: np.arange(4, dtype=np.int64).view("datetime64[s]"),  # (a dtype the buffer protocol refuses)
    lambda: np.arange(12, dtype=np.float32)[3:],  # (an offset view)
    lambda: np.arange(12, dtype=np.float32)[::-1],  # (negative strides: its first element's address)
])
def test_an_arrays_address_is_its_datas(make):
    a = make()
    assert cpu.address(a) == a.__array_interface__["data"][0]
    assert cpu.address(None) == 0


def test_a_small_call_runs_whole_on_the_calling_thread_without_asking_the_thread_count(monkeypatch):
    """Below two chunks of work, or over one item, `run_split` calls the kernel once over every item on the
    calling thread, whatever the thread count (which it does not read)."""
    calls = []
    monkeypatch.setattr(cpu, "num_threads", lambda: pytest.fail("asked for the thread count"))
    monkeypatch.setattr(cpu, "run_chunks", lambda *a: pytest.fail("split"))
    for count, work in ((5, 2 * cpu.CHUNK_MIN_WORK - 1), (1, 1 << 30), (0, 0)):
        cpu.run_split(lambda args, lo, hi: calls.append((args, lo, hi)), 0, "args", count, work)
    assert calls == [("args", 0, 5), ("args", 0, 1), ("args", 0, 0)]


def test_a_large_call_asks_the_thread_count_and_splits(monkeypatch):
    chunks = []
    monkeypatch.setattr(cpu, "num_threads", lambda: 2)
    monkeypatch.setattr(cpu, "run_chunks", lambda address, args, bounds: chunks.append((address, args, bounds)))
    cpu.run_split(None, 7, "args", 10, 2 * cpu.CHUNK_MIN_WORK)
    assert chunks == [(7, "args", cpu.bounds(10, 2))]
    monkeypatch.setattr(cpu, "num_threads", lambda: 1)
    whole = []
    cpu.run_split(lambda args, lo, hi: whole.append((lo, hi)), 7, "args", 10, 1 << 30)
    assert whole == [(0, 10)] and len(chunks) == 1
