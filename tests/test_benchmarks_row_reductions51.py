"""benchmarks/row_reductions.py's ``--pin``: the calling thread on the first CPU the process may use, every other
thread of the process on the others, so that each system's worker has a core of its own on a shared machine."""

import os
import threading
from pathlib import Path

import pytest

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "row_reductions.py"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2
                    or not os.path.isdir("/proc/self/task"), reason="needs Linux and two CPUs")
def test_pin_threads_puts_the_caller_on_one_cpu_and_the_other_threads_on_the_rest():
    bench = load_script(SCRIPT, "row_reductions_benchmark")
    cpus = sorted(os.sched_getaffinity(0))
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert bench.pin_threads()
        assert sorted(os.sched_getaffinity(threading.get_native_id())) == cpus[:1]
        assert sorted(os.sched_getaffinity(other.native_id)) == cpus[1:]
    finally:
        stop.set()
        other.join()
        for tid in map(int, os.listdir("/proc/self/task")):  # (the process's threads as they were: all CPUs)
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:  # (a thread that has ended since the listing)
                continue
