"""benchmarks/log_softmax_stats.py at --quick sizes: both systems compile to the kernels its docstring names and
agree on the loss and the logits' gradient."""

from pathlib import Path

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "log_softmax_stats.py"


def test_the_stats_system_writes_no_log_probs_and_agrees_with_the_row_kernel(capsys):
    bench = load_script(SCRIPT, "log_softmax_stats_benchmark")
    try:
        bench.main(["--quick", "--bound"])
    finally:
        jt.set_num_threads(1)
    out = capsys.readouterr().out
    lines = {line.split(" kernels: ")[0]: line for line in out.splitlines() if " kernels: " in line}
    assert "'log_softmax'" in lines["written"] and "'log_softmax'" not in lines["stats"]
    assert "'amax'" in lines["stats"]
    difference = float(out.split("gradient's largest difference ")[1].split()[0])
    assert difference < 1e-6, out
    assert "written/stats median" in out and "its max and sum passes alone" in out
    assert "first columns equal: True" in out
