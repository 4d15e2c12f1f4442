"""DataLoader(pin_memory=True) where CUDA is present (the fake driver, tests/cuda/fake_driver.py): the batches of
a plain loader, in page-locked memory; pinned by the calling thread without workers and by the loader's
pinning thread with them (as torch does). Without CUDA it warns and does not pin (test_dataloader_workers.py)."""

from __future__ import annotations

import collections
import threading
import warnings

import pytest

import jitorch as jt
from jitorch.utils.data import DataLoader, TensorDataset, dataloader
from jitorch.utils.data import pin_memory as pinning

from tests.cuda import fake_driver

Pair = collections.namedtuple("Pair", "x y")


def _dataset(n=20):
    return TensorDataset(jt.arange(2.0 * n).view(n, 2), jt.arange(n))


def _pinned_batches(loader):
    out = []
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        out.append((x.tolist(), y.tolist()))
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_are_pinned_and_unchanged(monkeypatch, num_workers):
    drv = fake_driver.install(monkeypatch)
    threads = []
    real = pinning.pin_memory
    monkeypatch.setattr(pinning, "pin_memory", lambda data: threads.append(threading.current_thread()) or real(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with CUDA present there is no "no accelerator" warning
        loader = DataLoader(_dataset(), batch_size=6, shuffle=True, generator=jt.Generator().manual_seed(3),
                            pin_memory=True, num_workers=num_workers)
    plain = DataLoader(_dataset(), batch_size=6, shuffle=True, generator=jt.Generator().manual_seed(3))
    assert _pinned_batches(loader) == [(x.tolist(), y.tolist()) for x, y in plain]
    assert drv.calls.count("cuMemHostAlloc") == 8   # two tensors in each of the four batches
    expected = threading.main_thread() if num_workers == 0 else None
    assert threads and all((t is expected) if expected else (t is not threading.main_thread()) for t in threads)


def test_pin_memory_keeps_the_batch_structure(monkeypatch):
    fake_driver.install(monkeypatch)
    batch = {"a": Pair(jt.ones(2), [jt.zeros(1), "name"]), "b": 3}
    pinned = pinning.pin_memory(batch)
    assert type(pinned["a"]) is Pair and pinned["a"].x.is_pinned() and pinned["a"].y[0].is_pinned()
    assert pinned["a"].y[1] == "name" and pinned["b"] == 3 and not batch["a"].x.is_pinned()


def test_an_error_in_the_pinning_thread_reaches_the_loop(monkeypatch):
    fake_driver.install(monkeypatch)

    def fail(data):
        raise ValueError("pinning failed")
    monkeypatch.setattr(pinning, "pin_memory", fail)
    loader = DataLoader(_dataset(), batch_size=5, pin_memory=True, num_workers=1)
    # raised at once: not after the wait the loader gives a worker whose connection dropped (it waited 30 s)
    waits = []
    monkeypatch.setattr(dataloader._WorkerIterator, "_exits", lambda self, sentinels: waits.append(sentinels) or [])
    with pytest.raises(ValueError, match="pinning failed"):
        next(iter(loader))
    assert waits == []


def test_a_pin_thread_stopped_from_itself_ends_without_joining_itself():
    """CI of stop 35 warned "cannot join current thread" in ``_WorkerIterator.__del__``: a garbage collection
    that ran on the pinning thread collected the loader's iterator, whose shutdown stopped (joined) that thread."""
    import queue
    source = queue.Queue()
    pin = pinning.PinThread(source)
    errors = []

    def stop_from_inside(data):
        try:
            pin.stop()
        except RuntimeError as error:
            errors.append(error)
        return data
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pinning, "pin_memory", stop_from_inside)
        source.put((0, "batch"))
        assert pin.get(timeout=30) == (0, "batch")
    pin._thread.join(30)
    assert errors == [] and not pin._thread.is_alive()
