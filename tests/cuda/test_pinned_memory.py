"""Page-locked host memory: Tensor.pin_memory / is_pinned, factories' pin_memory=True, and asynchronous copies
from it on a stream (on the fake driver, whose cuMemHostAlloc memory is read when a queued copy runs), and
torch's errors where no CUDA device is present (torch 2.13 CPU build as the oracle)."""

import gc

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.runtime import cuda_memory

from . import fake_driver


@pytest.fixture
def drv(monkeypatch):
    return fake_driver.install(monkeypatch)


def _error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("make", [
    lambda m: m.ones(3).pin_memory(),
    lambda m: m.empty(3, pin_memory=True),
    lambda m: m.empty_strided((2, 2), (1, 2), pin_memory=True),
    lambda m: m.tensor([1.0, 2.0], pin_memory=True),
])
def test_without_cuda_pinning_raises_torchs_error(make):
    assert not jt.cuda.is_available() and not torch.cuda.is_available()
    assert _error(lambda: make(jt)) == _error(lambda: make(torch))
    assert jt.ones(3).is_pinned() is torch.ones(3).is_pinned() is False


def test_pin_memory_copies_into_page_locked_memory_with_the_same_strides(drv):
    x = jt.arange(12.0).reshape(3, 4).t()
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned() and p.pin_memory() is p
    assert p.stride() == x.stride() and jt.equal(p, x)
    assert p[1:].is_pinned()                       # a view of pinned memory is pinned
    assert drv.calls.count("cuMemHostAlloc") == 1 and set(drv.pinned) == {p.untyped_storage().data_ptr()}
    view = p.numpy()
    del p
    gc.collect()
    assert "cuMemFreeHost" not in drv.calls        # a NumPy view keeps the memory
    assert view.tolist() == x.numpy().tolist()
    del view
    gc.collect()
    assert "cuMemFreeHost" in drv.calls and not drv.pinned


def test_factories_make_pinned_tensors(drv):
    e = jt.empty(2, 3, dtype=jt.int64, pin_memory=True)
    t = jt.tensor([[1.0, 2.0]], pin_memory=True, requires_grad=True)
    s = jt.empty_strided((2, 3), (1, 2), pin_memory=True)
    assert e.is_pinned() and e.shape == (2, 3) and e.dtype == jt.int64
    assert t.is_pinned() and t.is_leaf and t.requires_grad and t.tolist() == [[1.0, 2.0]]
    assert s.is_pinned() and s.stride() == (1, 2)
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        jt.ones(2, device="cuda").pin_memory()


def test_a_non_blocking_copy_from_pinned_memory_is_queued_on_the_stream(drv):
    x = jt.arange(8.0).pin_memory()
    s = jt.cuda.Stream()
    with jt.cuda.stream(s):
        y = x.to("cuda", non_blocking=True)
    # not staged: the driver reads the pinned memory when the stream runs the copy, after the call returned
    assert drv.pinned_copies == [("htod", 32)] and not s.query()
    x.add_(100)  # so a change before the copy runs reaches the device (torch's rule: do not touch it yet)
    s.synchronize()
    assert y.cpu().tolist() == [100.0 + i for i in range(8)]
    pageable = jt.arange(4.0)
    with jt.cuda.stream(s):
        pageable.to("cuda", non_blocking=True)
    assert len(drv.pinned_copies) == 1              # pageable memory is staged at the call


def test_freeing_pinned_memory_waits_for_its_queued_copies(drv):
    s = jt.cuda.Stream()
    with jt.cuda.stream(s):
        y = jt.full((4,), 7.0).pin_memory().to("cuda", non_blocking=True)
    gc.collect()                                    # the pinned source is gone: cuMemFreeHost ran the copy first
    assert "cuMemFreeHost" in drv.calls and not cuda_memory._PINNED
    s.synchronize()
    assert y.cpu().tolist() == [7.0] * 4
