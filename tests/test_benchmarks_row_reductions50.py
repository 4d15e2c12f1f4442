"""benchmarks/row_reductions.py: the systems take turns in blocks (each begun with an untimed call), the cases keep
the element count (whole rows of it), and every case's compiled result is torch's."""

from pathlib import Path

import numpy as np
import torch

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "row_reductions.py"


def test_timed_calls_each_system_in_blocks_taking_turns_and_gives_two_medians(monkeypatch):
    """Regression (session 51): the systems took turns call by call, so each jitorch call came 1 ms after a torch
    call whose OpenMP worker still spun on one of the two cores. Now each system's calls come in blocks of
    ``BLOCK`` timed calls after one untimed call, the block's first system alternating by round: 5 timed calls in
    blocks of 3 are a, aaa, b, bbb, then b, bb, a, aa."""
    bench = load_script(SCRIPT, "row_reductions_benchmark")
    monkeypatch.setattr(bench, "settle", lambda: 0.0)
    order = []
    times = bench.timed({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 5)
    assert bench.BLOCK == 3 and "".join(order) == "aaaabbbbbbbaaa"
    assert set(times) == {"a", "b"} and all(len(t) == 2 and min(t) >= 0 for t in times.values())


def test_quick_cases_cover_whole_rows_and_match_torch():
    bench = load_script(SCRIPT, "row_reductions_benchmark")
    cases = bench.cases(quick=True)
    assert [label.split()[1] for label, _, _ in cases[1:]] == ["sum", "max"] * 5
    for label, array, fn in cases[:1] + cases[1:3]:  # (the full sum and the rows of 9: compiling all takes long)
        assert array.size > (1 << 22) - 9
        np.testing.assert_allclose(jt.compile(fn)(jt.from_numpy(array)).numpy(), fn(torch.from_numpy(array)).numpy(),
                                   rtol=1e-4, atol=1e-3, err_msg=label)
