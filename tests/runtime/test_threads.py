"""The workers that split compiled kernels' chunks and large products' parts (`runtime.threads`): what ran
where, counted, and results that do not depend on the thread count."""

import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import jitorch as jt
from jitorch.codegen import cpu
from jitorch.runtime import threads
from tests.blas_reference import chosen_matmul


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 2)
    yield


def test_parts_run_on_the_calling_thread_and_a_worker(two_threads):
    ran = []
    forks, parts = threads.counters["forks"], threads.counters["parts"]
    started = threading.Event()

    def part(i):
        if i == 0:  # (until the worker has claimed its part: one it has not claimed is taken back; a fixed
            started.wait(30)  # sleep was too short on loaded machines)
        else:
            started.set()
        ran.append((i, threading.current_thread().name))
    threads.run_parts(part, [(0,), (1,)])
    assert sorted(ran) == [(0, threading.current_thread().name), (1, "jitorch-1")]
    assert (threads.counters["forks"], threads.counters["parts"]) == (forks + 1, parts + 1)


def test_a_sleeping_worker_wakes_for_the_next_part(two_threads):
    ran = []
    threads.run_parts(ran.append, [(0,), (1,)])
    time.sleep(20 * threads.SPIN_US * 1e-6)  # past its spin: it sleeps on the futex
    threads.run_parts(ran.append, [(2,), (3,)])
    assert sorted(ran) == [0, 1, 2, 3]


def test_a_parts_exception_is_raised_after_every_part_has_run(two_threads):
    ran = []

    def part(i):
        if i == 1:
            raise ValueError("part 1")
        time.sleep(0.01)
        ran.append(i)
    with pytest.raises(ValueError, match="part 1"):
        threads.run_parts(part, [(0,), (1,)])
    assert ran == [0]
    threads.run_parts(ran.append, [(2,), (3,)])  # the team is free again
    assert sorted(ran) == [0, 2, 3]


def test_a_part_that_splits_again_runs_its_parts_inline(two_threads):
    ran = []
    inline = threads.counters["inline"]

    def outer(i):
        threads.run_parts(lambda j: ran.append((i, j)), [(0,), (1,)])
    threads.run_parts(outer, [(0,), (1,)])
    assert sorted(ran) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert threads.counters["inline"] == inline + 2  # the workers were busy: nothing waited for them


def test_kernel_chunks_run_natively_on_the_workers_and_match_one_thread(monkeypatch, two_threads):
    # 2**16 elements: below the old threshold of 2**18, a kernel now worth splitting
    x = jt.randn(256, 256)
    f = jt.compile(lambda t: (t * 0.7978 * (1 + 0.0447 * t * t)).tanh() * t + 1)
    monkeypatch.setitem(threads._settings, "threads", 1)
    one = f(x).numpy()
    monkeypatch.setitem(threads._settings, "threads", 2)
    (kernel,) = f.lower(x).executable.kernels
    assert kernel.parallel and kernel.source.work >= cpu.PARALLEL_MIN_WORK
    forks, parts = threads.counters["forks"], threads.counters["parts"]
    two = f(x).numpy()
    assert (threads.counters["forks"], threads.counters["parts"]) == (forks + 1, parts + 1)
    np.testing.assert_array_equal(one, two)


def test_row_reductions_split_by_rows_match_one_thread(monkeypatch, two_threads):
    x = jt.randn(512, 300)
    f = jt.compile(lambda t: (t.exp() * t).sum(1))
    monkeypatch.setitem(threads._settings, "threads", 1)
    one = f(x).numpy()
    monkeypatch.setitem(threads._settings, "threads", 2)
    forks = threads.counters["forks"]
    two = f(x).numpy()
    assert threads.counters["forks"] == forks + 1
    np.testing.assert_array_equal(one, two)


def test_compiled_calls_from_two_threads_share_the_workers(two_threads):
    x = jt.randn(256, 256)
    f = jt.compile(lambda t: (t * 2 + 1).exp())
    want = np.exp(x.numpy() * 2 + 1)
    results, errors = [], []

    def calls():
        try:
            for _ in range(50):
                results.append(f(x).numpy())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    runners = [threading.Thread(target=calls) for _ in range(2)]
    for t in runners:
        t.start()
    for t in runners:
        t.join(60)
    assert not errors and len(results) == 100
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-6)


def test_a_kernel_just_over_the_threshold_splits_in_two_on_many_threads(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 8)
    x = jt.randn(1 << 15)
    f = jt.compile(lambda t: (t * 3).exp())
    got = f(x)
    (kernel,) = f.lower(x).executable.kernels
    assert kernel.parallel
    forks, parts = threads.counters["forks"], threads.counters["parts"]
    f(x)
    assert (threads.counters["forks"], threads.counters["parts"]) == (forks + 1, parts + 1)  # 2 chunks, not 8
    np.testing.assert_allclose(got.numpy(), np.exp(x.numpy() * 3), rtol=1e-6)


def test_chunks_no_worker_claimed_are_taken_back_by_the_forking_thread(monkeypatch, two_threads):
    """A team whose worker never comes (asleep or off the cores): the forking thread runs the worker's chunk
    too once its own is done, counts it as taken back, and the result is the whole call's."""
    from jitorch.runtime import ufunc_parts
    native = threads._native()
    team = threads._Team.__new__(threads._Team)  # (no worker thread started)
    team.native, team.busy, team.workers, team.done = native, threading.Lock(), 1, 0
    team.state, team.table, team.python = (threads.ctypes.c_int32 * 4)(), (threads.ctypes.c_int64 * 4)(), [None]
    team.hands_off = "no worker thread to place"
    monkeypatch.setattr(threads, "_team", lambda n: team)
    monkeypatch.setattr(ufunc_parts, "BACKOFF", 0)
    monkeypatch.setitem(ufunc_parts._backoff, "calls", 0)
    x = np.linspace(-3, 3, ufunc_parts.SPLIT_MIN * 2, dtype=np.float32)
    out = np.empty_like(x)
    taken, forks = threads.counters["taken back"], threads.counters["forks"]
    for _ in range(2):  # (the second fork finds the state the first left)
        assert ufunc_parts.split_call(np.tanh, [x], out)
    assert threads.counters["forks"] - forks == 2 and threads.counters["taken back"] - taken == 2
    assert out.tobytes() == np.tanh(x).tobytes()


def test_python_parts_no_worker_claimed_are_taken_back_by_the_forking_thread(monkeypatch, two_threads):
    """The same for Python parts (a product's halves, a col2im's channels): the forking thread runs the part no
    worker came for, on its own thread, and a taken-back part's exception is raised as a worker's would be."""
    native = threads._native()
    team = threads._Team.__new__(threads._Team)  # (no worker thread started)
    team.native, team.busy, team.workers, team.done = native, threading.Lock(), 1, 0
    team.state, team.table, team.python = (threads.ctypes.c_int32 * 4)(), (threads.ctypes.c_int64 * 4)(), [None]
    team.hands_off = "no worker thread to place"
    monkeypatch.setattr(threads, "_team", lambda n: team)
    ran = []
    taken, forks = threads.counters["taken back"], threads.counters["forks"]
    for k in range(2):  # (the second fork finds the state the first left)
        threads.run_parts(lambda i: ran.append((i, threading.current_thread().name)), [(2 * k,), (2 * k + 1,)])
    me = threading.current_thread().name
    assert ran == [(0, me), (1, me), (2, me), (3, me)]
    assert threads.counters["forks"] - forks == 2 and threads.counters["taken back"] - taken == 2

    def part(i):
        if i == 1:
            raise ValueError("part 1")
        ran.append(i)
    with pytest.raises(ValueError, match="part 1"):
        threads.run_parts(part, [(4,), (1,)])
    threads.run_parts(ran.append, [(5,), (6,)])  # the team is free again
    assert ran[4:] == [4, 5, 6] and team.python == [None]
    # a product's second half, taken back: the bits of the whole product, which BLAS at one thread (as
    # set_num_threads leaves it where products split) computes with gemm, as it does each half
    a, b = (np.random.default_rng(k).standard_normal(s).astype(np.float32) for k, s in ((0, (600, 300)), (1, (300, 500))))
    with threadpool_limits(limits=1, user_api="blas"):
        whole = chosen_matmul(a, b)
        monkeypatch.setitem(threads._settings, "split_products", True)
        assert jt.from_numpy(a).matmul(jt.from_numpy(b)).numpy().tobytes() == whole.tobytes()
    assert threads.counters["taken back"] - taken == 5  # four forks above, and the product's second half


def test_a_row_program_runs_its_calls_in_order_over_each_range_of_rows(two_threads):
    """`threads.run_row_program`: each range of rows runs every call of the program in order, one fork for all
    of them (entry points here are ctypes callbacks, which take the GIL on whichever thread calls them)."""
    seen = []
    entry = threads.KERNEL_ENTRY(lambda args, lo, hi: seen.append((args, lo, hi)))
    address = threads.ctypes.cast(entry, threads.ctypes.c_void_p).value
    program = np.array([3, address, 11, address, 22, address, 33], np.uint64)
    forks, parts = threads.counters["forks"], threads.counters["parts"]
    assert threads.run_row_program(program, 10, 2)
    assert sorted(seen) == sorted([(a, lo, hi) for a in (11, 22, 33) for lo, hi in ((0, 5), (5, 10))])
    for lo in (0, 5):  # (each range's calls in the program's order)
        assert [a for a, l, _ in seen if l == lo] == [11, 22, 33]
    assert (threads.counters["forks"], threads.counters["parts"]) == (forks + 1, parts + 1)
    seen.clear()
    assert threads.run_row_program(program, 10, 1) and seen == [(11, 0, 10), (22, 0, 10), (33, 0, 10)]
    assert threads.counters["forks"] == forks + 1  # (one part: no fork)


def test_a_wait_whose_yield_found_the_core_crowded_sleeps_before_its_spin_ends():
    """A waiter yields its core every 16th turn of its spin; where a yield takes `CROWD_US` or more (here any
    yield, the bound set to 1 ns), another thread wanted the core and the waiter goes to sleep at once (it sets
    its sleepers flag) instead of spinning on for its minute, and counts a crowded wait; raised, it returns."""
    native = threads._native()
    word, flag = threads.ctypes.c_int32(0), threads.ctypes.c_int32(0)
    saved, crowded = native.crowd_ns.value, native.crowded.value
    native.crowd_ns.value = 1
    try:
        waiter = threading.Thread(target=native.wait_for, args=(threads.ctypes.addressof(word), 1, 60 * 10**9,
                                                                threads.ctypes.addressof(flag)))
        waiter.start()
        deadline = time.monotonic() + 30
        while flag.value == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert flag.value == 1 and waiter.is_alive()  # asleep long before its 60 s spin would end
        native.raise_holding_gil(threads.ctypes.addressof(word), threads.ctypes.addressof(flag))
        waiter.join(30)
        assert not waiter.is_alive() and native.crowded.value > crowded
    finally:
        native.crowd_ns.value = saved
