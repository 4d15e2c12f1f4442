"""The general pow in a fused kernel (a tensor exponent) runs vectorised, without a libm call, and gives
torch's special values; pow by a number compiles to the ops eager computes it by, or for other float32
integers and odd halves up to 16 to products and a square root in double; full sums and row maxima split
over threads give torch's results on odd sizes, partial last blocks and NaN; kernels of math functions ask
for 512-bit vectors where no fast-math flag could make the width change a result."""

import re

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import cpu
from tests.codegen.test_kernels import assert_identical, fused_result

# bases and exponents where C's pow has its special cases: signed zeros, infinities, NaN, 1 and -1,
# negative bases to odd, even and fractional powers, huge and tiny results
BASES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1e-30, 1e30, np.inf, -np.inf, np.nan, 10.0, -7.25]
EXPONENTS = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, 1.5, 2.5, 1e10, -1e10, 1e-10, np.inf, -np.inf,
             np.nan, 200.0, -200.0, 31.0, 1025.0]


def pow_grid(dtype, repeat):
    """Every (base, exponent) pair, ``repeat`` times over and 7 more: vector lanes and a scalar tail."""
    a, b = (g.ravel() for g in np.meshgrid(BASES, EXPONENTS))
    n = len(a) * repeat + 7
    return jt.tensor(np.resize(a, n)).to(dtype), jt.tensor(np.resize(b, n)).to(dtype)


def assert_torchs_pow(got, base, exponent, ulps):
    """NaN where torch's pow gives NaN; infinities, zeros and their signs exact; the rest within ``ulps``."""
    want = torch.pow(torch.from_numpy(base.numpy()), torch.from_numpy(exponent.numpy())).numpy()
    got = got.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    numbers = ~np.isnan(want)
    g, w = got[numbers], want[numbers]
    np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
    np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
    np.testing.assert_array_equal(g == 0, w == 0)
    finite = np.isfinite(w) & (w != 0)
    np.testing.assert_array_max_ulp(g[finite], w[finite], ulps)


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64], ids=str)
def test_general_pow_matches_torch_on_special_values_and_a_tail(dtype):
    base, exponent = pow_grid(dtype, repeat=3)
    got = fused_result(lambda p, q: jt.pow(p * 1, q), base, exponent, ops=["pow"])
    assert_torchs_pow(got, base, exponent, ulps=2)


@pytest.mark.parametrize("dtype, lanes", [(jt.float32, "float"), (jt.float64, "double")], ids=str)
def test_general_pow_is_vectorised_without_a_libm_call(dtype, lanes):
    base, exponent = pow_grid(dtype, repeat=1)
    (kernel,) = jt.compile(lambda p, q: jt.pow(p, q) + 1).lower(base, exponent).kernels
    optimised = str(cpu.optimise(kernel._kernel.source.llvm_ir))
    assert any(f"<{n} x {lanes}>" in optimised for n in (2, 4, 8, 16)), "the loop is not vectorised"
    assert "@pow" not in optimised and "@powf" not in optimised


@pytest.mark.parametrize("exponent", [3, -2, 0.5, -0.5, -1])
def test_pow_by_a_number_compiles_to_other_ops_with_eagers_bits(exponent):
    x = jt.tensor(np.resize(BASES + [np.finfo(np.float32).max, 1e-40], 1003).astype(np.float32))
    f = jt.compile(lambda t: (t * 1) ** exponent)
    assert "pow" not in {op for kernel in f.lower(x).kernels for op in kernel.ops}
    with np.errstate(all="ignore"):
        assert_identical(f(x), (x * 1) ** exponent)


@pytest.mark.parametrize("exponent", [4, 5, 16, -3, -16, 1.5, -1.5, 2.5, 15.5, -15.5])
def test_float32_pow_by_an_integer_or_odd_half_is_products_in_double(exponent):
    """No pow in the kernel (an odd half takes one sqrt); torch's NaNs, infinities, zeros and their signs;
    within half an ulp of the exact power (rounded once from double), where torch's powf is 1-ulp SLEEF."""
    rng = np.random.default_rng(11)
    base = np.concatenate([np.array(BASES + [np.finfo(np.float32).max, 1e-40, 1.4e-45, 1.1e-38], np.float32),
                           (rng.standard_normal(5000) * np.exp(rng.uniform(-25, 25, 5000))).astype(np.float32)])
    x = jt.tensor(base)
    f = jt.compile(lambda t: (t * 1) ** exponent)
    (kernel,) = f.lower(x).kernels
    text = kernel._kernel.source.llvm_ir
    assert "jitorch.math.pow" not in text
    assert ("llvm.sqrt" in text) == (exponent % 1 != 0)
    got = f(x)
    assert_torchs_pow(got, x, jt.full_like(x, exponent), ulps=1)
    with np.errstate(all="ignore"):
        exact = np.power(base.astype(np.float64), exponent)
    g = got.numpy().astype(np.float64)
    finite = np.isfinite(exact) & (exact != 0) & (np.abs(exact) < float(np.finfo(np.float32).max))
    spacing = np.spacing(np.abs(exact[finite]).astype(np.float32)).astype(np.float64)
    assert (np.abs(g[finite] - exact[finite]) / spacing).max() <= 0.5 + 1e-6


# sizes over the split threshold that leave a short last part, and rows that are not whole vectors
@pytest.mark.parametrize("n", [(1 << 18) + 1, 3 * (1 << 18) - 17])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_split_full_sum_and_max_match_torch_on_odd_sizes(n, threads, monkeypatch):
    monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
    values = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    x = jt.tensor(values)
    got_sum = jt.compile(lambda t: t.sum())(x)
    np.testing.assert_allclose(got_sum.item(), torch.from_numpy(values).sum().item(), rtol=1e-5, atol=1e-3)
    values[-1] = np.nan  # in the last, partial part
    x = jt.tensor(values)
    assert np.isnan(jt.compile(lambda t: t.amax())(x).item())
    values[-1] = 1e30
    assert jt.compile(lambda t: t.amax())(jt.tensor(values)).item() == np.float32(1e30)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_parallel_row_max_matches_torch_with_nan_and_infinities(threads, monkeypatch):
    monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
    values = np.random.default_rng(0).standard_normal((513, 1031)).astype(np.float32)
    values[5, -1], values[7, 0], values[9, 500], values[11] = np.nan, np.inf, -np.inf, -np.inf
    got = jt.compile(lambda t: t.amax(1))(jt.tensor(values))
    np.testing.assert_array_equal(got.numpy(), torch.from_numpy(values).amax(1).numpy())


def test_wide_vectors_only_where_math_runs_and_no_flag_reorders():
    """The CPU target asks for 512-bit vectors in a kernel that evaluates math functions (erf, exp...) and
    carries no fast-math flag; a reduction that may reorder its sum, and a kernel of plain arithmetic, keep
    LLVM's own width (see `target.CpuTarget.module_text`)."""
    x = jt.randn(4099)
    wide = '"prefer-vector-width"="512"'
    for fn, expected in ((lambda t: jt.nn.functional.gelu(t), True), (lambda t: t.tanh() * t.exp(), True),
                         (lambda t: t.exp().sum(), False), (lambda t: t * 2 + 1, False)):
        (kernel,) = jt.compile(fn).lower(x).kernels
        text = kernel._kernel.source.llvm_ir
        assert (wide in text) == expected, text[:300]
        if expected:  # on the entry, where the loop lands once the body is inlined
            assert re.search(rf'^define void @"[\w]+"\(.*\) {re.escape(wide)}$', text, flags=re.M)
