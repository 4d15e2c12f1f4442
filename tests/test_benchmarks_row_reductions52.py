"""benchmarks/row_reductions.py's ``--parts``: each fork's native parts run through a recording part that calls the
kernel's own and notes the thread, CPU and times; the counts add up and the call's result is unchanged."""

from pathlib import Path

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime import threads
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "row_reductions.py"


@pytest.mark.skipif(threads._native() is None, reason="the team's native code is Linux's")
def test_where_parts_ran_records_every_part_handed_to_a_worker(monkeypatch):
    bench = load_script(SCRIPT, "row_reductions_benchmark")
    monkeypatch.setattr(bench, "settle", lambda: 0.0)
    monkeypatch.setitem(threads._settings, "threads", 2)
    x = np.random.default_rng(52).standard_normal(1 << 20, dtype=np.float32)
    summed = jt.compile(lambda t: t.sum())
    tx = jt.from_numpy(x)
    expected = summed(tx).numpy().tobytes()
    results = []
    where = bench.where_parts_ran(lambda: results.append(summed(tx).numpy().tobytes()), 4)
    assert results == [expected] * 4
    assert where["parts"] == 4 and 0 <= where["taken back"] <= 4  # (one fork of two parts per call)
    assert 0 <= where["on its CPU"] <= where["parts"] - where["taken back"]
    assert where["own part us"] > 0
    assert threads._forked is not None and threads._forked.__name__ == "_forked"  # (the recording is undone)
