"""A compiled call holds the thread team (`threads.hold`): its workers spin across the call's serial stretches
instead of falling asleep after `SPIN_US`, the call wakes them as it begins, and lets them sleep again at its
end; the results do not depend on the thread count."""

import ctypes
import os
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import jitorch as jt
from jitorch.ops import random_parts
from jitorch.runtime import threads


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 2)
    yield threads._team(2)


@pytest.fixture
def uncrowded():
    """The crowded rule off and the held spin a minute long: where a wait ends then is decided by the hold alone,
    not by the machine's load."""
    native = threads._native()
    saved = native.crowd_ns.value, native.hold_ns.value
    native.crowd_ns.value, native.hold_ns.value = 0, 60 * 10**9
    yield native
    native.crowd_ns.value, native.hold_ns.value = saved


def _until(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)
    return condition()


def _fork_until_a_worker_runs_a_part():
    """Fork two-part chunks until the worker runs one (a part it has not claimed is taken back, so on a loaded
    machine a fork may run both here); the worker is then in its wait, after a part."""
    ran = []
    entry = threads.KERNEL_ENTRY(lambda args, lo, hi: ran.append(threading.get_native_id()))
    address = ctypes.cast(entry, ctypes.c_void_p).value
    me = threading.get_native_id()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        threads.run_chunks(address, (ctypes.c_int64 * 1)(), [(0, 1), (1, 2)])
        if any(t != me for t in ran):
            return True
    return False


def _asleep(team):
    """Whether the worker has set go's sleepers flag: it sleeps on the futex (or is about to)."""
    return team.state[1] == 1


def test_a_held_team_keeps_its_worker_spinning_through_a_gap_longer_than_its_spin(two_threads, uncrowded):
    """While a call holds the team, a worker whose part is done watches for the next fork for `STEP_SPIN_US`
    (here a minute) rather than `SPIN_US`: 20 spins' time later it has not gone to sleep. Released, it sleeps
    (counted in ``slept``)."""
    team = two_threads
    held = threads.hold()
    try:
        assert held and uncrowded.held.value >= 1
        assert _fork_until_a_worker_runs_a_part()
        slept = uncrowded.slept.value
        time.sleep(20 * threads.SPIN_US * 1e-6)
        assert not _asleep(team)
    finally:
        threads.release(held)
    assert uncrowded.held.value == 0
    assert _until(lambda: _asleep(team)) and uncrowded.slept.value > slept


def test_the_first_hold_wakes_a_sleeping_worker_without_running_a_part(two_threads, uncrowded):
    """A worker asleep between calls is woken by `hold` (a raise with every row of the part table at -1: no part
    runs, none is counted), so the call's first fork finds it spinning; after `release` it sleeps again."""
    team = two_threads
    assert _fork_until_a_worker_runs_a_part()
    assert _until(lambda: _asleep(team))  # (no hold: asleep after its short spin)
    counts, slept = dict(threads.counters), uncrowded.slept.value
    held = threads.hold()
    assert not _asleep(team)
    threads.release(held)
    assert _until(lambda: _asleep(team) and uncrowded.slept.value > slept)  # woken, it spun, then slept again
    assert list(team.table)[::4] == [-1] * team.workers
    assert {k: v for k, v in threads.counters.items() if k != "holds"} == \
        {k: v for k, v in counts.items() if k != "holds"}
    assert threads.counters["holds"] == counts["holds"] + 1


def test_no_hold_at_one_thread(monkeypatch):
    """At one thread there is no team to hold: `hold` returns 0 and counts nothing."""
    holds = threads.counters["holds"]
    monkeypatch.setitem(threads._settings, "threads", 1)
    assert threads.hold() == 0 and threads.counters["holds"] == holds


def test_a_compiled_call_whose_kernel_splits_holds_the_team_once_per_call_at_two_threads(monkeypatch):
    """The generated call holds the team around its steps where a kernel splits (2**16 elements), once per call at
    two threads, not at one; a call of small kernels only holds nothing. Same bits at 1 and 2 threads, and no hold
    is left once the calls are done."""
    x = jt.randn(1 << 16)
    f = jt.compile(lambda t: (t * 2 + 1).sin())
    small = jt.compile(lambda t: (t * 2 + 1).sin())
    monkeypatch.setitem(threads._settings, "threads", 1)
    one = f(x).numpy()
    holds = threads.counters["holds"]
    f(x)
    assert threads.counters["holds"] == holds  # (one thread)
    monkeypatch.setitem(threads._settings, "threads", 2)
    forks = threads.counters["forks"] + threads.counters["inline"]
    for _ in range(3):
        assert f(x).numpy().tobytes() == one.tobytes()
    assert threads.counters["holds"] == holds + 3
    assert threads.counters["forks"] + threads.counters["inline"] >= forks + 3  # (the kernel split: it forked)
    small(jt.randn(64))
    assert threads.counters["holds"] == holds + 3
    assert threads._native().held.value == 0


def test_a_compiled_call_that_raises_releases_its_hold(monkeypatch):
    """A call whose step raises (an index out of range, checked as the call runs) still releases the team."""
    monkeypatch.setitem(threads._settings, "threads", 2)
    f = jt.compile(lambda t, i: (t * 2 + 1).sin()[i])
    x = jt.randn(1 << 16)
    holds = threads.counters["holds"]
    f(x, jt.tensor([3]))
    with pytest.raises(IndexError):
        f(x, jt.tensor([1 << 17]))
    assert threads.counters["holds"] == holds + 2 and threads._native().held.value == 0


def _train(threads_n, monkeypatch):
    """Three steps of a compiled MLP training step (forward, backward, SGD) at ``threads_n`` threads: the
    parameters' bytes, and how many calls held the team."""
    monkeypatch.setitem(threads._settings, "threads", threads_n)
    monkeypatch.setitem(threads._settings, "split_products", threads_n > 1)
    jt.manual_seed(0)
    model = jt.nn.Sequential(jt.nn.Linear(256, 512), jt.nn.GELU(), jt.nn.Linear(512, 10))
    opt = jt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = jt.randn(256, 256), jt.randint(0, 10, (256,))

    @jt.compile
    def step():
        opt.zero_grad()
        loss = jt.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    holds = threads.counters["holds"]
    for _ in range(3):
        step()
    return [p.detach().numpy().tobytes() for p in model.parameters()], threads.counters["holds"] - holds


def test_a_compiled_training_step_holds_the_team_and_matches_one_thread_bit_for_bit(monkeypatch):
    one, held_one = _train(1, monkeypatch)
    two, held_two = _train(2, monkeypatch)
    assert held_one == 0 and held_two >= 2  # (the first call may trace eagerly)
    assert one == two


@pytest.mark.parametrize("n", [random_parts.SPLIT_DRAW_MIN, 3 * random_parts.SPLIT_DRAW_MIN + 5])
def test_a_large_uniform_draw_splits_and_is_the_one_thread_stream_bit_for_bit(two_threads, n):
    """`random_parts.random_doubles` at two threads: the doubles of one ``random`` call, and the generator left
    where that call leaves it, its buffered 32-bit half too (a float32 drawn before, one after)."""
    split, whole = (np.random.Generator(np.random.PCG64(44)) for _ in range(2))
    assert split.random(dtype=np.float32) == whole.random(dtype=np.float32)  # (leaves half an output buffered)
    calls = threads.counters["forks"] + threads.counters["inline"]
    drawn = random_parts.random_doubles(split, (n,))
    assert threads.counters["forks"] + threads.counters["inline"] == calls + 1
    assert drawn.tobytes() == whole.random((n,)).tobytes()
    assert split.bit_generator.state == whole.bit_generator.state
    assert split.random(dtype=np.float32) == whole.random(dtype=np.float32) and split.random() == whole.random()


def test_a_small_draw_runs_whole(two_threads):
    calls = threads.counters["forks"] + threads.counters["inline"]
    random_parts.random_doubles(np.random.Generator(np.random.PCG64(1)), (random_parts.SPLIT_DRAW_MIN - 1,))
    assert threads.counters["forks"] + threads.counters["inline"] == calls


def test_dropout_in_a_compiled_step_draws_in_parts_and_matches_one_thread(monkeypatch):
    """A compiled function with dropout on 2**17 elements draws its mask in parts at two threads: the same output
    as at one thread from the same seed, and the default generator left in the same state."""
    f = jt.compile(lambda t: jt.nn.functional.dropout(t * 2, 0.3, training=True).sum(0))
    x = jt.randn(512, 256)
    fills, fill = [], random_parts._fill
    monkeypatch.setattr(random_parts, "_fill", lambda g, out: fills.append(out.size) or fill(g, out))
    results = {}
    for n in (1, 2, 1, 2):  # (each thread count twice: the second call runs the compiled graph)
        monkeypatch.setitem(threads._settings, "threads", n)
        jt.manual_seed(7)
        del fills[:]
        out = f(x).numpy().tobytes()
        results.setdefault(n, []).append((out, jt.rand(3).numpy().tobytes()))
        assert fills == ([x.numel() // 2] * 2 if n == 2 else [])
    assert results[1] == results[2] and results[1][0] == results[1][1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_with_no_hold(two_threads):
    """A child forked while a call holds the team has neither the parent's workers nor its hold: its waits spin
    `SPIN_US` again, and a call there holds and releases its own team."""
    held = threads.hold()
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # (the child reports what it sees through the pipe, then leaves at once)
            os.close(r)
            ok = threads._native().held.value == 0 and not threads._teams
            state = threads.hold()
            ok = ok and threads._native().held.value == 1
            threads.release(state)
            os.write(w, b"1" if ok and threads._native().held.value == 0 else b"0")
            os._exit(0)
        os.close(w)
        assert os.read(r, 1) == b"1"
        os.waitpid(pid, 0)
        os.close(r)
    finally:
        threads.release(held)


def test_a_call_whose_only_forks_are_products_holds_only_once_products_split(monkeypatch):
    """A compiled product of 2**24 multiply-adds (over `linalg.SPLIT_MIN_WORK`) and no kernel that splits holds the
    team at two threads only where products split (``set_num_threads`` called: `threads.product_parts`); the same
    bits either way."""
    f = jt.compile(lambda a, b: a @ b)
    a, b = jt.randn(256, 256), jt.randn(256, 256)
    monkeypatch.setitem(threads._settings, "threads", 2)
    monkeypatch.setitem(threads._settings, "split_products", False)
    with threadpool_limits(limits=1, user_api="blas"):  # (as ``set_num_threads`` leaves BLAS)
        whole = f(a, b).numpy()
        holds = threads.counters["holds"]
        assert f(a, b).numpy().tobytes() == whole.tobytes() and threads.counters["holds"] == holds
        monkeypatch.setitem(threads._settings, "split_products", True)
        assert f(a, b).numpy().tobytes() == whole.tobytes() and threads.counters["holds"] == holds + 1
