"""Session 50's dependent row reductions (`fusion.DEPENDENT_ROW_REDUCTIONS`) over inputs whose reduced dims hold one
element, against torch, on the CPU and the emulated GPU."""

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.cuda.test_ptx import emulated_outputs


def _chain(x):
    """Three reductions, each over the previous one's centred values, along dim 0."""
    a = x - x.mean(0, keepdim=True)
    b = a - a.amax(0, keepdim=True)
    return (b - b.mean(0, keepdim=True)).sum(0)


@pytest.mark.parametrize("shape", [(1, 7), (1, 37), (2, 1, 7)])
def test_dependent_reductions_over_a_dim_of_one_element_keeping_the_innermost_dim_compile(shape):
    """Fusion takes a reduction over dims of one element for a row reduction (a trailing row of none) and groups the
    dependent ones; the kernel builder gave such a group the kept-innermost-dim loop (chunks of accumulators), which
    reads no earlier reduction's result, so it lowered the earlier reduction as a pointwise op: AttributeError
    ``'Reduction' object has no attribute 'emit'`` at compile time (CPU and GPU), not a wrong value."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    fn = _chain if len(shape) == 2 else (lambda t: _chain(t.transpose(0, 1)))
    want = fn(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(jt.compile(fn)(jt.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    if shape == (1, 37):
        got, _ = emulated_outputs(fn, [jt.tensor(x)])
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
