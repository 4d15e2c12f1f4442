"""benchmarks/row_reductions.py: each system is called once per round, the cases keep the element count
(whole rows of it), and every case's compiled result is torch's."""

from pathlib import Path

import numpy as np
import torch

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "row_reductions.py"


def test_timed_calls_each_system_once_per_round_and_gives_two_medians():
    bench = load_script(SCRIPT, "row_reductions_benchmark")
    counts = {"a": 0, "b": 0}

    def call(k):
        counts[k] += 1
    times = bench.timed({"a": lambda: call("a"), "b": lambda: call("b")}, 5)
    assert counts == {"a": 5, "b": 5}
    assert set(times) == {"a", "b"} and all(len(t) == 2 and min(t) >= 0 for t in times.values())


def test_quick_cases_cover_whole_rows_and_match_torch():
    bench = load_script(SCRIPT, "row_reductions_benchmark")
    cases = bench.cases(quick=True)
    assert [label.split()[1] for label, _, _ in cases[1:]] == ["sum", "max"] * 5
    for label, array, fn in cases[:1] + cases[1:3]:  # (the full sum and the rows of 9: compiling all takes long)
        assert array.size > (1 << 22) - 9
        np.testing.assert_allclose(jt.compile(fn)(jt.from_numpy(array)).numpy(), fn(torch.from_numpy(array)).numpy(),
                                   rtol=1e-4, atol=1e-3, err_msg=label)
