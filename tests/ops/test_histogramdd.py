"""torch.histogramdd (jitorch/ops/histogramdd.py) against torch: counts, weights, densities, ranges, edge tensors,
torch's errors, and a compiled call that runs the two kernels as eager steps between generated kernels."""

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.support import assert_close, raises_as_torch


def histogramdd(lib, a, bins, **kwargs):
    """histogramdd of ``a`` in ``lib`` (torch or jitorch); bins given as edge arrays, and array arguments, become
    the library's tensors."""
    if isinstance(bins, list) and isinstance(bins[0], np.ndarray):
        bins = [lib.tensor(e) for e in bins]
    kw = {k: lib.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    return lib.histogramdd(lib.tensor(a), bins, **kw)


def both(a, bins, **kwargs):
    """histogramdd of ``a`` in torch and in jitorch."""
    return [histogramdd(lib, a, bins, **kwargs) for lib in (torch, jt)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,bins,kwargs", [
    ((50, 3), [3, 4, 2], {}),
    ((5, 10, 2), 5, {"density": True}),
    ((40, 2), [4, 4], {"range": [-1.0, 1.0, -0.5, 2.0]}),
    ((0, 2), 3, {}),  # no points: [0, 1] in each dim
    ((30, 1), 7, {"density": True}),
    ((6, 2), 2, {"range": [0.5, 0.5, 0.0, 1.0]}),  # an empty range widened by 0.5 either way, as NumPy's
])
@pytest.mark.parametrize("weighted", [False, True])
def test_histogramdd_matches_torch(dtype, shape, bins, kwargs, weighted, rng):
    a = rng.standard_normal(shape).astype(dtype)
    if weighted:
        kwargs = dict(kwargs, weight=rng.random(shape[:-1]).astype(dtype))
    t, j = both(a, bins, **kwargs)
    assert type(j).__name__ == "histogramdd" and j.hist is j[0] and len(j.bin_edges) == shape[-1]
    tol = 1e-6 if dtype == "float32" else 1e-13  # (weights summed in float64, torch's in the dtype)
    assert_close(j.hist, t.hist.numpy(), atol=tol, rtol=tol)
    for je, te in zip(j.bin_edges, t.bin_edges):
        assert_close(je, te.numpy(), atol=0, rtol=0)


def test_histogramdd_with_edge_tensors_counts_the_last_edge_and_skips_points_outside_any_dim():
    a = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 0.0], [2.0, 2.0], [2.0, 2.5], [np.nan, 0.0]])
    edges = [np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.5, 2.0])]
    t, j = both(a, edges)
    assert_close(j.hist, t.hist.numpy(), atol=0, rtol=0)
    assert j.hist.sum().item() == 4  # (2, 2.5) and the NaN point fall outside
    t, j = both(a, [np.array([1.0, 0.0]), np.array([0.0, 1.0])])  # decreasing edges: nothing inside
    assert_close(j.hist, t.hist.numpy(), atol=0, rtol=0)


@pytest.mark.parametrize("a,bins,kwargs", [
    (np.ones((4, 2)), [2], {}),
    (np.ones((4, 2)), 2, {"range": [0.0, 1.0]}),
    (np.ones((4, 2), np.int64), 2, {}),
    (np.ones((4, 2), np.float16), 2, {}),
    (np.ones((4, 2)), [2, 0], {}),
    (np.ones((4, 2)), 2, {"range": [1.0, 0.0, 0.0, 1.0]}),
    (np.ones((4, 2)), 2, {"range": [0.0, np.inf, 0.0, 1.0]}),
    (np.ones((4, 2)), 2, {"weight": np.ones(3)}),
    (np.ones((4, 2)), 2, {"weight": np.ones(4, np.float32)}),
    (np.ones(3), 2, {}),
    (np.ones((4, 2)), [np.array([0.0, 1.0]), np.array([[0.0, 1.0]])], {}),
    (np.ones((4, 2)), [np.array([0.0, 1.0]), np.array([0.0, 1.0], np.float32)], {}),
])
def test_histogramdd_errors_are_torchs(a, bins, kwargs):
    raises_as_torch(lambda lib: histogramdd(lib, a, bins, **kwargs))


def test_compiled_histogramdd_runs_its_kernels_as_eager_steps_with_eagers_result(rng):
    x = jt.tensor(rng.standard_normal((20, 2)).astype(np.float32))
    fn = jt.compile(lambda x: jt.histogramdd(x * 2, [3, 2], density=True).hist + 1, fullgraph=True)
    assert_close(fn(x), (jt.histogramdd(x * 2, [3, 2], density=True).hist + 1).numpy(), atol=0, rtol=0)
    steps = [repr(s) for s in fn.lower(x).steps]
    assert steps.count("<eager _histogramdd_edges>") == 2 and "<eager _histogramdd_from_bin_cts>" in steps
    assert sum(s.startswith("<kernel") for s in steps) == 2
