"""benchmarks/products.py --variants: each 2-D product's gemm call against the ways of making it that keep its bits
(the result filled, then beta 1: a folded bias's way; the call in row or column parts), each checked bit for bit."""

from pathlib import Path

import numpy as np
import pytest

from jitorch.runtime import blas_calls
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "products.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT, "products_benchmark55")


def test_the_variants_of_a_transposed_weight_gradient_keep_the_whole_calls_bits(bench):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((96, 192)).astype(np.float32).T  # (192, 96) read through its transpose: "T"
    b = rng.standard_normal((96, 130)).astype(np.float32)
    out = np.empty((192, 130), np.float32)
    calls = bench.variant_calls(a, b, out)
    # rows in 2 or 3 parts (at least 64 each), columns in 2 (65 each); the fold; the whole call
    assert set(calls) == {"whole", "fold", "rows 2", "rows 3", "cols 2"}
    made = {}
    for name, call in calls.items():
        out[...] = np.nan  # (nothing left from the call before)
        before = dict(blas_calls.counters)
        call()
        made[name] = out.copy()
        assert blas_calls.counters["words calls"] - before["words calls"] == (
            int(name.split()[1]) if name.startswith(("rows", "cols")) else 1)
    for name, got in made.items():
        assert np.array_equal(got.view(np.uint32), made["whole"].view(np.uint32)), name
    np.testing.assert_allclose(made["whole"], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_a_case_is_timed_per_variant_and_a_product_that_is_no_gemm_call_is_left_out(bench):
    key = ("float32", (128, 64), (1, 128), (64, 128), (128, 1), (128, 1), "jitorch")
    rate, best = bench.run_variants(key, rounds=1)
    assert set(rate) == {"whole", "fold", "rows 2", "cols 2"} and best in ("rows 2", "cols 2")
    assert all(r > 0 for r in rate.values())
    batched = ("float32", (2, 64, 64), (4096, 64, 1), (2, 64, 64), (4096, 64, 1), (4096, 64, 1), "jitorch")
    assert bench.run_variants(batched, rounds=1) is None
    assert bench.run_variants(key[:-1] + (bench.STEP_KERNEL,), rounds=1) is None


def test_the_variants_table_is_printed_after_the_products_table(bench, capsys, monkeypatch):
    key = ("float32", (128, 64), (64, 1), (64, 128), (1, 64), (128, 1), "jitorch")
    monkeypatch.setattr(bench, "collect", lambda name, quick: {key: 2})
    bench.main(["--models", "gpt-1x32", "--rounds", "1", "--variants"])
    out = capsys.readouterr().out
    assert out.index("ms of products per step") < out.index("the gemm call and the ways of making it with its bits")
    assert "peak: OpenBLAS on a 1536^3 product" in out
    (row,) = out.split("best split\n", 1)[1].strip().splitlines()
    assert row.split()[:4] == ["128x64", "C", "64x128", "T"] and row.split()[-2] in ("rows", "cols")


def test_the_fold_keeps_the_bits_past_blass_block_of_the_sum(bench):
    """Filled with zeros, then beta 1: the bits of beta 0 with a sum longer than OpenBLAS's block of it (448 float32
    terms on Zen 4, fewer elsewhere), where a bias written first would round otherwise (`blas_calls.ADDS_EXACT_MAX_K`):
    OpenBLAS's beta 0 clears the result and adds the product's blocks to it alike."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((64, 1000)).astype(np.float32), rng.standard_normal((1000, 96)).astype(np.float32)
    out = np.empty((64, 96), np.float32)
    calls = bench.variant_calls(a, b, out)
    calls["whole"]()
    whole = out.copy()
    out[...] = np.nan
    calls["fold"]()
    assert np.array_equal(out.view(np.uint32), whole.view(np.uint32))
    np.testing.assert_allclose(whole, a.astype(np.float64) @ b, rtol=1e-3, atol=1e-3)
