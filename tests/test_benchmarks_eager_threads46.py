"""benchmarks/eager_threads.py at --quick sizes: the eager steps of jitorch and torch interleaved at one and two
threads, with jitorch's calling-thread CPU and the team's counters per step."""

from pathlib import Path

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "eager_threads.py"


def test_a_quick_cnn_eager_step_at_one_and_two_threads(capsys):
    bench = load_script(SCRIPT, "eager_threads_benchmark")
    try:
        bench.main(["--models", "cnn", "--quick", "--rounds", "1", "--steps", "1"])
    finally:
        jt.set_num_threads(1)
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("cnn: "))
    assert "[1t] jitorch" in line and "[2t] jitorch" in line and "caller CPU" in line
    assert "jitorch/torch" in line  # (torch is the oracle's install: present)
    one = next(line for line in out.splitlines() if "[1t] per jitorch step" in line)
    assert "forks 0.0 parts 0.0" in one  # (no team at one thread)


def test_two_threads_takes_the_eager_step(capsys):
    """benchmarks/two_threads.py --system "jitorch eager": its rows and the in-turn serial part of the eager step."""
    bench = load_script(Path(__file__).parents[1] / "benchmarks" / "two_threads.py", "two_threads_benchmark")
    try:
        bench.main(["--models", "cnn", "--quick", "--steps", "1", "--rounds", "1", "--system", "jitorch eager",
                    "--in-turn"])
    finally:
        jt.set_num_threads(1)
    out = capsys.readouterr().out
    assert "cnn, jitorch eager, 2 threads: wall" in out and "in turn at 2 threads:" in out
