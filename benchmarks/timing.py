"""Shared timing for the benchmark scripts."""

from __future__ import annotations

import statistics
import time


def median_time(fn, repeat, warmup=1):
    """Median seconds per call of ``fn`` over ``repeat`` calls, after ``warmup`` untimed ones
    (the first compiles, the second settles caches and allocations)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
