"""Where the team's workers run (`threads._Team.place`): off the CPU of the thread that forks, within the masks the
user set, and never pinned where the forking thread may use one CPU. Each test holds on any number of CPUs the
process may use (run it under ``taskset -c 0`` too): on one CPU it checks that nothing was pinned."""

import os
import threading

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime import threads

pytestmark = pytest.mark.skipif(threads._native() is None or not hasattr(os, "sched_getaffinity"),
                                reason="the team's native code and CPU masks are Linux's")


@pytest.fixture
def team(monkeypatch):
    """A team of two threads of its own (another test's pins do not reach it), placement on, the one that forks
    at two threads."""
    monkeypatch.setattr(threads, "PIN_WORKERS", True)
    monkeypatch.setitem(threads._settings, "threads", 2)
    fresh = threads._Team(2, threads._native())
    monkeypatch.setitem(threads._teams, 2, fresh)
    allowed = os.sched_getaffinity(0)
    yield fresh
    os.sched_setaffinity(0, allowed)


def _fork_to_the_worker(team):
    """Fork two Python parts, the first waiting until the worker runs the second (a part no worker claimed is taken
    back); (the thread id and CPU of the worker's part)."""
    started = threading.Event()
    seen = {}

    def part(i):
        if i == 0:
            assert started.wait(30)
        else:
            seen["worker"] = threading.get_native_id(), threads._getcpu()
            started.set()
    team.fork([(part, (0,)), (part, (1,))])
    return seen["worker"]


def test_a_workers_part_runs_off_the_cpu_the_forking_thread_ran_on(team):
    """Regression (session 52): a worker woken by a fork was placed on the forking thread's CPU by the kernel and
    waited there while that thread ran its own part, which then took the worker's back (64-86% of the parts of
    a 16M sum on the 2-vCPU machine with nothing else running). The workers now may not run on that CPU."""
    allowed = os.sched_getaffinity(0)
    tid, cpu = _fork_to_the_worker(team)
    assert tid == team.tids[0]
    if len(allowed) > 1:
        assert team.placed_on in allowed and cpu in allowed - {team.placed_on}
        assert os.sched_getaffinity(tid) == allowed - {team.placed_on} and team.masks == [allowed - {team.placed_on}]
    else:  # (nothing to keep it off: not pinned)
        assert os.sched_getaffinity(tid) == allowed and team.masks == team.started_masks and team.placements == 0
        assert team.placed_on is None


def test_workers_follow_the_forking_thread_to_another_cpu(team):
    """A forking thread that moved (here: its mask set to one CPU, one the worker had where there are two) gives
    the workers back the masks they started with at its next fork, and pins them again once its mask allows more
    CPUs."""
    allowed = os.sched_getaffinity(0)
    _fork_to_the_worker(team)
    one = max(allowed - {team.placed_on} if len(allowed) > 1 else allowed)
    os.sched_setaffinity(0, {one})
    _, cpu = _fork_to_the_worker(team)
    assert team.placed_on is None and team.masks == team.started_masks == [allowed]
    assert os.sched_getaffinity(team.tids[0]) == allowed
    os.sched_setaffinity(0, allowed)
    _, cpu = _fork_to_the_worker(team)
    if len(allowed) > 1:
        assert cpu != team.placed_on and team.masks == [allowed - {team.placed_on}]
    else:
        assert team.placed_on is None and team.placements == 0


def test_placement_off_gives_the_workers_back_their_masks(team, monkeypatch):
    allowed = os.sched_getaffinity(0)
    _fork_to_the_worker(team)
    monkeypatch.setattr(threads, "PIN_WORKERS", False)
    _fork_to_the_worker(team)
    assert os.sched_getaffinity(team.tids[0]) == allowed and team.masks == team.started_masks
    assert team.placed_on is None and team.hands_off is None


def test_a_mask_set_outside_jitorch_ends_placement(team, monkeypatch):
    """A worker's mask that is not the one jitorch gave it (a user's, a benchmark's ``--pin``) stays: placement
    stops for good rather than overwrite it."""
    allowed = os.sched_getaffinity(0)
    _fork_to_the_worker(team)
    mine = {team.placed_on} if len(allowed) > 1 else allowed  # (one that jitorch did not give it)
    os.sched_setaffinity(team.tids[0], mine)
    monkeypatch.setattr(threads, "PIN_WORKERS", False)  # (would give the worker its started mask back)
    _fork_to_the_worker(team)
    assert os.sched_getaffinity(team.tids[0]) == mine
    if len(allowed) > 1:  # (on one CPU the user's mask is the one jitorch knew of: nothing to tell apart)
        assert team.hands_off is not None
        monkeypatch.setattr(threads, "PIN_WORKERS", True)
        _fork_to_the_worker(team)
        assert os.sched_getaffinity(team.tids[0]) == mine


def test_on_a_crowded_machine_the_workers_are_left_to_the_kernel(team, monkeypatch):
    """Placement "auto" pins the workers only while the load average is under the forking thread's CPUs plus
    `UNCROWDED_LOAD`: on a crowded machine a worker kept off the forking thread's CPU queues for the other one
    and then spins there while the forking thread queues (compiled steps 1.04-1.19x slower at load 13-15)."""
    allowed = os.sched_getaffinity(0)
    monkeypatch.setattr(threads, "PIN_WORKERS", "auto")
    monkeypatch.setattr(threads, "LOAD_CHECK_S", 0.0)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    _fork_to_the_worker(team)
    assert team.masks == ([allowed - {team.placed_on}] if len(allowed) > 1 else [allowed])
    monkeypatch.setattr(os, "getloadavg", lambda: (len(allowed) + threads.UNCROWDED_LOAD,) * 3)
    _fork_to_the_worker(team)
    assert team.placed_on is None and team.masks == team.started_masks
    assert os.sched_getaffinity(team.tids[0]) == allowed


def test_a_compiled_sum_has_the_same_bits_with_the_workers_placed_or_not(team, monkeypatch):
    x = jt.from_numpy(np.random.default_rng(52).standard_normal(1 << 20, dtype=np.float32))
    sums = {}
    for placed in (True, False):
        monkeypatch.setattr(threads, "PIN_WORKERS", placed)
        forks = threads.counters["forks"] + threads.counters["inline"]
        sums[placed] = jt.compile(lambda t: t.sum())(x).numpy()
        assert threads.counters["forks"] + threads.counters["inline"] > forks  # (it split)
    monkeypatch.setitem(threads._settings, "threads", 1)
    sums[1] = jt.compile(lambda t: t.sum())(x).numpy()
    assert sums[True].tobytes() == sums[False].tobytes() == sums[1].tobytes()


def test_holds_from_threads_on_different_cpus_keep_placement_going(team):
    """`hold` places the workers outside the team's lock: two threads that hold it at once from different CPUs
    (each moves the workers off its own) must not take each other's masks for a user's and end placement."""
    allowed = sorted(os.sched_getaffinity(0))
    errors = []

    def holder(cpu):
        try:
            os.sched_setaffinity(0, {cpu})
            for _ in range(300):
                threads.release(threads.hold())
        except BaseException as e:  # noqa: BLE001 - re-raised below, on the test's thread
            errors.append(e)
    holders = [threading.Thread(target=holder, args=(cpu,)) for cpu in (allowed[0], allowed[-1])]
    for h in holders:
        h.start()
    for h in holders:
        h.join()
    assert not errors and team.hands_off is None
    assert [os.sched_getaffinity(tid) for tid in team.tids] == team.masks
