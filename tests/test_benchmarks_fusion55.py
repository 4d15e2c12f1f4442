"""benchmarks/fusion.py's ``--tracked``: the rows issue 19 holds to torch eager (full sum, row max, MLP forward), each
timed for jitorch compiled and torch eager at each thread count, and nothing else."""

import sys
from pathlib import Path

import numpy as np
import torch

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "fusion.py"


def test_tracked_times_the_three_rows_for_both_systems_at_each_thread_count(monkeypatch):
    bench = load_script(SCRIPT, "fusion_benchmark")
    rng = np.random.default_rng(55)
    mlp_args = [rng.standard_normal(shape, dtype=np.float32) for shape in
                ((4, 6), (6, 5), (5,), (5, 3), (3,), (3, 2), (2,))]
    small = [("sum, 1K", (rng.standard_normal(1024, dtype=np.float32),), lambda t: t.sum(), None, None, 4096),
             ("softmax rows 8x8", (rng.standard_normal((8, 8), dtype=np.float32),), bench.softmax_rows, None, None,
              512),
             ("row max 8x8", (rng.standard_normal((8, 8), dtype=np.float32),), lambda t: t.amax(1), None, None, 256),
             ("MLP fwd 4x6", tuple(mlp_args), bench.mlp, None, None, None)]
    monkeypatch.setattr(bench, "cases", lambda quick: small)
    monkeypatch.setattr(sys.modules["row_reductions"], "settle", lambda: 0.0)  # (no waiting between blocks here)
    calls = []
    real = bench.timed

    def timed(systems, rounds):
        calls.append((sorted(systems), rounds, jt.get_num_threads(), torch.get_num_threads()))
        return real(systems, rounds)
    monkeypatch.setattr(bench, "timed", timed)
    before = jt.get_num_threads(), torch.get_num_threads()
    try:
        rows = bench.tracked(True, [1, 2], 2)
    finally:
        jt.set_num_threads(before[0])
        torch.set_num_threads(before[1])
    assert list(rows) == [(label, threads) for threads in (1, 2) for label in ("sum, 1K", "row max 8x8",
                                                                                "MLP fwd 4x6")]
    assert all(mine > 0 and theirs > 0 for mine, theirs in rows.values())
    assert calls == [(["jitorch", "torch"], 2, threads, threads) for threads in (1, 2) for _ in range(3)]
