"""The summation order of an eager float32 sum over several dims, and the compiled kernel's other order
(docs/differences-from-torch.md, "Compiled kernels reassociate")."""

from __future__ import annotations

import numpy as np

import jitorch as jt


def _numpy_pairwise_runs(x):
    """``x.sum((0, 2, 3))`` in eager's order: each (n, c) run of H*W elements in NumPy's eight accumulators
    (H*W a multiple of 8, at most 128) combined as a tree, then the runs' sums in the order of n."""
    runs = x.reshape(x.shape[0], x.shape[1], -1)
    lanes = [runs[:, :, k].copy() for k in range(8)]
    for start in range(8, runs.shape[2], 8):
        for k in range(8):
            lanes[k] = lanes[k] + runs[:, :, start + k]
    per_run = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    total = np.zeros(x.shape[1], x.dtype)
    for n in range(x.shape[0]):
        total = total + per_run[n]
    return total


def test_a_sum_over_batch_and_spatial_dims_is_numpys_order_eagerly_and_one_kernel_compiled():
    """Session 37's finding: compiled ``x.sum((0, 2, 3))`` of a (64, 128, 8, 8) float32 tensor is not byte-equal
    to eager's. Eager's order is NumPy's pairwise runs (the same under NumPy 1.26 and 2.x: runs under 8192
    elements); the compiled call is one reduction kernel in its own loop order, within float32 rounding."""
    x = np.random.default_rng(0).standard_normal((16, 32, 8, 8)).astype(np.float32)
    eager = jt.tensor(x).sum((0, 2, 3)).numpy()
    assert eager.tobytes() == _numpy_pairwise_runs(x).tobytes()
    fn = lambda a: a.sum((0, 2, 3))  # noqa: E731
    assert [str(s) for s in jt.explain(fn, jt.tensor(x)).steps] == ["<kernel jitorch_k0_reduction: sum>"]
    compiled = jt.compile(fn)(jt.tensor(x)).numpy()
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-4)
