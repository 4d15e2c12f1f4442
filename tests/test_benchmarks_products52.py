"""benchmarks/products.py collects a fused recurrence's per-step products (the language model's h W_hh^T and
d_gates W_hh, 140 of them per step at full size): by the generated step kernel where it runs them, else as the NumPy
products the layer's loop makes; and times a step-kernel case as the loop runs it."""

from pathlib import Path

import numpy as np
import pytest

from jitorch.codegen import recurrence
from jitorch.ops import recurrences
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "products.py"
AVX512 = recurrence.product_kernel("float32", 2, 2) is not None
# models.py's quick lstm: emsize = nhid 16 (gates 64), bptt 8, batch 4, 2 layers: 8 steps x 2 layers each way
FORWARD, BACKWARD = ((4, 16), (16, 1), (16, 64), (64, 1)), ((4, 64), (64, 1), (64, 16), (16, 1))


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT, "products_benchmark52")


def _per_step(found):
    return {k[1:5]: (n, k[5], k[6]) for k, n in found.items() if k[1][0] == 4}


def test_the_recurrences_per_step_products_are_collected_with_their_step_counts(bench):
    found = _per_step(bench.collect("lstm", quick=True))
    caller, out = (bench.STEP_KERNEL, None) if AVX512 else ("jitorch", (64, 1))
    assert found[FORWARD] == (16, None if AVX512 else out, caller)
    assert found[BACKWARD][0] == 16 and found[BACKWARD][2] == caller


def test_without_a_step_kernel_the_loops_numpy_products_are_collected(bench, monkeypatch):
    monkeypatch.setattr(recurrences, "PRODUCT_KERNEL", None)
    found = _per_step(bench.collect("lstm", quick=True))
    assert found[FORWARD][0] == found[BACKWARD][0] == 16
    assert {c for _, _, c in found.values()} == {"jitorch"}


@pytest.mark.skipif(not AVX512, reason="the step kernel runs on AVX-512 machines only (JITORCH_CPU)")
def test_a_step_kernel_case_is_timed_as_the_loop_runs_it_and_matches_numpy(bench):
    key = ("float32",) + FORWARD + (None, bench.STEP_KERNEL)
    times = bench.time_case(key, bench.models.real_torch(), rounds=1)
    assert set(times) >= {"jitorch", "numpy"} and all(t > 0 for t in times.values())
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((16, 64)).astype(np.float32)
    run = bench._step_kernel(a, b)
    np.testing.assert_allclose(run(3), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
