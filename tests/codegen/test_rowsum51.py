"""Long runs of reduced elements (`kernel.streamed_run`: full sums, wide row sums and maxima) in vectors of at
most `kernel.RUN_VECTOR_BITS` (session 51).

On this AMD EPYC (znver4) LLVM vectorised the runs' loops in 512-bit vectors, which streamed from memory
5-13% slower than 256-bit ones (a 16M float32 sum 1.09-1.15x torch's time at one thread, 1.01 after). The
kernels are checked for their vector width, and their values against torch's and eager jitorch's, with the
same bits at one and two threads.
"""

import re

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen.machine import selected
from jitorch.codegen.target import vector_bits

from tests.codegen.test_reduce50 import vector_bodies

WIDTHS = {"float": 32, "double": 64}
CASES = {"full sum": ((1 << 19) + 5,), "row sum": (6, 4099), "row max": (6, 4099)}
FNS = {"full sum": lambda t: t.sum(), "row sum": lambda t: t.sum(1), "row max": lambda t: t.amax(1)}


# (the width measured best on the AMD EPYC: a test of the kernels, not of the constant that asks for it)
RUN_BITS = 256


@pytest.mark.parametrize("dtype, name", [(jt.float32, "float"), (jt.float64, "double")], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_long_runs_are_read_in_vectors_of_at_most_256_bits_not_the_512_of_avx512(case, dtype, name):
    """Regression (session 51): a 16M float32 sum's and a 4096x4096 row sum's loops took 512-bit vectors on an
    AVX-512 host, 1.09-1.15x torch's time at one thread (256-bit ones: 1.01). Each vectorised loop of the run
    now loads vectors of 256 bits (or of the machine's narrower registers, as LLVM chooses them)."""
    x = jt.randn(*CASES[case], dtype=dtype)
    (k,) = jt.compile(FNS[case]).lower(x).kernels
    lanes = [int(n) for blk in vector_bodies(k.llvm_ir) for n in re.findall(rf"load <(\d+) x {name}>", blk)]
    assert lanes, k.llvm_ir
    assert max(lanes) * WIDTHS[name] <= min(vector_bits(selected()), RUN_BITS), lanes
    if vector_bits(selected()) > RUN_BITS:
        assert set(lanes) == {RUN_BITS // WIDTHS[name]}, lanes


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_long_runs_match_torch_and_eager_with_the_same_bits_at_one_and_two_threads(case, dtype):
    """The narrower vectors change which lanes add which elements: the results stay within float rounding of
    torch's and eager jitorch's (a max exactly, NaN included), bit for bit the same at one and two threads."""
    values = np.random.default_rng(51).standard_normal(CASES[case]).astype(dtype)
    if case == "row max":
        values[2, 4000] = np.nan
        values[4, 17] = np.inf
    x, fn = jt.from_numpy(values), FNS[case]
    before = jt.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            jt.set_num_threads(threads)
            results.append(jt.compile(fn)(x).numpy())
    finally:
        jt.set_num_threads(before)
    assert results[0].tobytes() == results[1].tobytes()
    want, eager = fn(torch.from_numpy(values)).numpy(), fn(x).numpy()
    if case == "row max":
        np.testing.assert_array_equal(results[0], want)
        np.testing.assert_array_equal(results[0], eager)
    else:
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(results[0], want, rtol=tol, atol=tol * 100)
        np.testing.assert_allclose(results[0], eager, rtol=tol, atol=tol * 100)
