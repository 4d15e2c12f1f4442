"""Shared timing for the benchmark scripts."""

from __future__ import annotations

import statistics
import time


def median_time(fn, repeat, warmup=1, clock=time.perf_counter):
    """Median seconds per call of ``fn`` over ``repeat`` calls, after ``warmup`` untimed ones
    (the first compiles, the second settles caches and allocations), on ``clock`` (wall time by default)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


# `settle`'s window (seconds), how many quiet windows in a row end it (two: under load a spinning thread can spend a
# whole window queued for a core, and would look quiet), the share of a window other threads may use in a quiet
# one, and the longest it waits. torch's OpenMP worker spins 5-7.5 ms of CPU after a 2-thread call (a 16M sum,
# session 52), jitorch's workers `threads.SPIN_US` after a part, `threads.STEP_SPIN_US` within a compiled call.
QUIET_WINDOW_S = 0.002
QUIET_WINDOWS = 2
QUIET_SHARE = 0.05
QUIET_LIMIT_S = 0.25


def settle(window=QUIET_WINDOW_S, limit=QUIET_LIMIT_S):
    """Sleep until this process's threads other than the calling one go quiet: `QUIET_WINDOWS` windows in a row of
    ``window`` seconds in which they used less than `QUIET_SHARE` of a window of CPU, or ``limit`` seconds. A
    system timed right after another must not share the cores with the other's spinning threads (a jitorch 16M sum
    at 2 threads took 2.20 ms 1 ms after a torch call, 1.42 ms 30 ms after: benchmarks/row_reductions.py). Returns
    the seconds it slept."""
    start = time.perf_counter()
    quiet = 0
    while quiet < QUIET_WINDOWS and time.perf_counter() - start < limit:
        others = time.process_time() - time.thread_time()
        time.sleep(window)
        used = time.process_time() - time.thread_time() - others
        quiet = quiet + 1 if used < QUIET_SHARE * window else 0
    return time.perf_counter() - start


def patched(call, owner, name, value):
    """``call`` run with ``owner.name`` set to ``value`` during it (restored after): one system's switch."""
    def run():
        saved = getattr(owner, name)
        setattr(owner, name, value)
        try:
            return call()
        finally:
            setattr(owner, name, saved)
    return run
