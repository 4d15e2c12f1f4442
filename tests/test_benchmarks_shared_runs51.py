"""benchmarks/shared_runs.py at --quick sizes: both systems of a model's compiled step built and timed, the thread
count put back, and the shared groups counted (a quick GPT's update kernels hold fewer elements than a group needs)."""

from pathlib import Path

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "shared_runs.py"


def test_shared_runs_times_both_systems_and_puts_the_thread_count_back(capsys):
    bench = load_script(SCRIPT, "shared_runs_benchmark")
    before = jt.get_num_threads()
    bench.main(["--models", "gpt-1x32", "--quick", "--threads", "2", "--reps", "1", "--steps", "1"])
    assert jt.get_num_threads() == before
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("load: ")
    assert "gpt-1x32" in out[1] and " 2t " in out[1] and "shared groups" in out[1]
