"""benchmarks/products.py at its --quick sizes: the products of a compiled step are collected with their
layouts and counts, and each is timed under jitorch, NumPy and torch on operands of the same strides."""

from pathlib import Path

import numpy as np
import pytest

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "products.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT, "products_benchmark")


def test_a_compiled_gpt_steps_products_are_collected_with_layouts_and_counts(bench):
    found = bench.collect("gpt-1x32", quick=True)
    # one layer: 4 linears (forward, input and weight gradients), the head's 3; attention's products are
    # inside the fused ops _attention and _attention_backward (ops/attention.py), none of them a matmul
    assert sum(found.values()) == 4 * 3 + 3
    assert all(caller == "jitorch" and out is not None for (*_, out, caller) in found)  # into the arena
    assert not [k for k in found if len(k[1]) == 4]  # no batched (batch, heads, ..) product left


def test_a_case_is_timed_on_operands_of_its_strides_under_each_system(bench, capsys):
    a = bench.strided((3, 5), (1, 3), "float32", np.random.default_rng(0))
    assert a.shape == (3, 5) and a.strides == (4, 12)
    key = ("float32", (2, 8, 4), (32, 1, 8), (2, 4, 6), (24, 6, 1), (48, 6, 1), "jitorch")
    times = bench.time_case(key, bench.models.real_torch(), rounds=1)
    assert set(times) >= {"jitorch", "numpy"} and all(t > 0 for t in times.values())
    bench.main(["--models", "gpt-1x32", "--quick", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "GFLOP/s per product" in out and "ms of products per step" in out and "gpt-1x32" in out
