"""share_memory_ finds the tensors on a moved storage from the ones it is given, not by searching the process.

Its first call used to walk every object of the process (``gc.get_referrers``) to make the tensors on the
moved storage drop their arrays of the old buffer: its cost grew with the process, not with the tensor. These
tests assert the mechanism: no search where the tensors given, their bases and their bases' views account for
every reference to the storage, among many unrelated objects; the search, and the same result, where something
else refers to it."""

import gc

import pytest

import jitorch as jt
import jitorch.multiprocessing as mp
from jitorch.runtime import shared_memory

from .test_shared_memory import FORK, memory_files


@pytest.fixture
def searches(monkeypatch):
    """The storages `shared_memory` searched the process for, with a hundred thousand unrelated objects alive."""
    searched = []
    search = shared_memory._drop_stale_views

    def recorded(roots):
        searched.append(roots)
        search(roots)

    def refused(*objects):
        raise AssertionError("share_memory_ walked every object of the process")

    monkeypatch.setattr(shared_memory, "_drop_stale_views", recorded)
    monkeypatch.setattr(gc, "get_referrers", refused)
    crowd = [[i] for i in range(100_000)]  # noqa: F841  (what a search would have to walk)
    yield searched


def test_a_tensor_and_its_views_move_without_a_search(searches):
    x = jt.arange(12.0)
    view, column = x[2:6], x.view(3, 4)[:, 1]
    view.numpy(), column.numpy(), x.numpy()  # cached arrays of the old buffer
    x.share_memory_()
    assert searches == []
    assert view.is_shared() and column.is_shared()
    x[5] = 100.0
    assert view.tolist() == [2.0, 3.0, 4.0, 100.0]
    assert column.tolist() == [1.0, 100.0, 9.0]
    column.zero_()
    assert x[9].item() == 0.0


def test_sharing_a_view_moves_its_base_and_sibling_views_without_a_search(searches):
    x = jt.zeros(4, 3)
    first, second = x[0], x[1]
    first.numpy(), second.numpy(), x.numpy()
    second.share_memory_()
    assert searches == [] and x.is_shared()
    x.fill_(7.0)
    assert first.tolist() == [7.0] * 3 and second.tolist() == [7.0] * 3


def test_module_share_memory_of_parameters_grads_and_buffers_does_not_search(searches):
    m = jt.nn.Sequential(jt.nn.Linear(3, 4), jt.nn.BatchNorm1d(4), jt.nn.Linear(4, 2))
    m(jt.randn(5, 3)).sum().backward()  # (its graph freed: a live one's saved views of the weights are searched for)
    with jt.no_grad():
        expected = m(jt.ones(2, 3))
    m.share_memory()
    assert searches == []
    assert all(p.is_shared() and p.grad.is_shared() for p in m.parameters())
    assert jt.allclose(m(jt.ones(2, 3)), expected)


def test_sending_a_tensor_shares_it_without_a_search(searches):
    x = jt.ones(3, 4)
    mp.reductions.reduce_tensor(x[1])
    assert searches == [] and x.is_shared()


@pytest.mark.parametrize("make", ["detach", "parameter", "reinterpretation", "ints_row"])
def test_a_holder_that_cannot_be_named_is_searched_for_and_reads_the_shared_buffer(make):
    """A detached alias, a Parameter made on a live tensor, a reinterpretation (``view(dtype)``) and an integer
    view of one (integer views are not kept by their base) refer to the storage beyond what share_memory_ can
    name: it searches, once, and the holder reads the shared buffer."""
    searched = []
    search = shared_memory._drop_stale_views
    shared_memory._drop_stale_views = lambda roots: (searched.append(roots), search(roots))
    try:
        x = jt.arange(8.0)
        other = {"detach": x.detach, "parameter": lambda: jt.nn.Parameter(x),
                 "reinterpretation": lambda: x.view(jt.int32), "ints_row": lambda: x.view(jt.int32)[2:4]}[make]()
        other.detach().numpy()  # its cached array of the old buffer
        x.share_memory_()
    finally:
        shared_memory._drop_stale_views = search
    assert len(searched) == 1 and other.is_shared()
    x.fill_(3.0)
    if make == "reinterpretation":
        assert other.tolist() == [1077936128] * 8  # 3.0's bits
    elif make == "ints_row":
        assert other.tolist() == [1077936128] * 2
    else:
        assert other.tolist() == [3.0] * 8


def test_the_reference_count_is_measured_on_this_interpreter():
    """What a call of the counting function adds is measured, not assumed (it differs across CPythons)."""
    probe = object()
    assert shared_memory._references_besides(probe, 1) == 0
    held = [probe]
    assert shared_memory._references_besides(probe, 1) == 1 and held


def _hold_then_drop(queue, results):
    inherited = memory_files()
    t = queue.get()
    results.put(memory_files() - inherited)
    del t
    gc.collect()
    results.put(memory_files() - inherited)


def test_a_tensor_shared_in_place_is_freed_when_the_last_process_lets_go():
    gc.collect()
    start = memory_files()
    queue, results = FORK.Queue(), FORK.Queue()
    process = FORK.Process(target=_hold_then_drop, args=(queue, results))
    process.start()  # before the memory file exists: the child does not inherit it
    x = jt.full((64, 1024), 2.0)
    view = x[1]
    view.numpy()
    x.share_memory_()
    assert memory_files() == start + 1
    queue.put(view)
    assert results.get(timeout=60) == 1
    del x, view
    gc.collect()
    assert memory_files() == start  # the receiver's mapping alone keeps the memory
    assert results.get(timeout=60) == 0
    process.join(60)
    assert process.exitcode == 0
