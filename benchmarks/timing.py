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
