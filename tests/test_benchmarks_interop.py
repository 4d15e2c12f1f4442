"""benchmarks/interop.py at its --quick sizes: the compiled step with inter-op parallelism on and off takes turns in
one process, and the per-round ratios are printed."""

from pathlib import Path

import jitorch as jt
from jitorch.runtime import threads
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "interop.py"


def test_quick_cnn_step_on_and_off_each_round():
    bench = load_script(SCRIPT, "interop_benchmark")
    saved = threads.INTEROP
    try:
        times = bench.measure("cnn", 2, 2, quick=True, torch=False)
    finally:
        jt.set_num_threads(1)
    assert threads.INTEROP == saved  # (switched per turn, restored after)
    assert set(times) == {bench.ON, bench.OFF} and all(len(t) == 2 for t in times.values())
    assert all(wall > 0 and cpu >= 0 for t in times.values() for wall, cpu in t)
    assert bench.ratio(times, bench.ON, bench.OFF, 1) != "-" and bench.ratio(times, bench.ON, "torch eager", 0) == "-"
