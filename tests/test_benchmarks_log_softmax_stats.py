"""benchmarks/log_softmax_stats.py at --quick sizes: the step without the lse pass writes the log-probs (the row
kernel), with it the statistics; both give the same bits."""

from pathlib import Path

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "log_softmax_stats.py"


def test_the_stats_system_writes_no_log_probs_and_gives_the_written_bits(capsys):
    bench = load_script(SCRIPT, "log_softmax_stats_benchmark")
    try:
        bench.main(["--quick"])
    finally:
        jt.set_num_threads(1)
    out = capsys.readouterr().out
    lines = {line.split(" kernels: ")[0]: line for line in out.splitlines() if " kernels: " in line}
    assert "'log_softmax'" in lines["written"] and "'_log_softmax_stats'" not in lines["written"]
    assert "'_log_softmax_stats'" in lines["stats"] and "'log_softmax'" not in lines["stats"]
    assert "same bits: True" in out and "written/stats median" in out
