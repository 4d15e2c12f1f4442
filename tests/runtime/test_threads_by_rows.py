"""Row-wise eager ops split by rows across two threads (`threads.by_rows`: softmax, log_softmax, layer_norm):
the one-thread bits, torch's values, and whole calls where a pass is small, not along the last dim or not
over a C-contiguous array."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.runtime import threads


@pytest.fixture
def threads_to(monkeypatch):
    # NumPy's passes, as before the code generator loads (its row kernels split themselves: tests/codegen/test_rows.py)
    from jitorch.ops import normalization, reductions
    monkeypatch.setattr(reductions, "ROW_KERNEL", None)
    monkeypatch.setattr(normalization, "LAYER_NORM_KERNEL", None)

    def to(n):
        monkeypatch.setitem(threads._settings, "threads", n)
    return to


def _calls(lib, x, w, b):
    F = lib.nn.functional
    return [F.softmax(x, -1), F.log_softmax(x, -1), F.layer_norm(x, x.shape[-1:], w, b),
            F.layer_norm(x, x.shape[-1:]), F.softmax(x, 1), x.transpose(0, 1).softmax(-1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_wise_ops_split_by_rows_with_one_threads_bits(threads_to, dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((3, 1031, 97)) * 4).astype(dtype)  # 300,021 elements: 1031 x 3 rows of 97
    assert threads.ROWS_SPLIT_MIN <= a.size
    a[0, 5, :] = -np.inf  # a row of -inf: NaN through softmax, as torch
    a[1, 7, 3] = np.nan
    wb = [rng.standard_normal(97).astype(dtype) for _ in range(2)]
    x, w, b = (jt.tensor(v) for v in (a, *wb))
    threads_to(1)
    forks = threads.counters["forks"]
    one = [t.numpy() for t in _calls(jt, x, w, b)]
    assert threads.counters["forks"] == forks
    threads_to(2)
    parts = []
    real = threads.run_parts
    with pytest.MonkeyPatch.context() as m:
        m.setattr(threads, "run_parts", lambda fn, args: parts.append(fn.__name__) or real(fn, args))
        two = [t.numpy() for t in _calls(jt, x, w, b)]
    # the last two (not along the last dim of a C-contiguous array) ran whole
    assert parts == ["_softmax_rows", "_log_softmax_rows", "_normalized_rows", "_normalized_rows"]
    want = [t.numpy() for t in _calls(torch, *(torch.tensor(v) for v in (a, *wb)))]
    for got, same, expected in zip(two, one, want):
        assert got.dtype == same.dtype == expected.dtype and got.shape == same.shape == expected.shape
        assert got.tobytes() == same.tobytes()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_small_row_wise_ops_and_one_thread_run_whole(threads_to, monkeypatch):
    monkeypatch.setattr(threads, "run_parts", lambda fn, args: pytest.fail("split"))
    threads_to(2)
    x = jt.randn(64, 127)  # under ROWS_SPLIT_MIN
    assert x.numel() < threads.ROWS_SPLIT_MIN
    np.testing.assert_allclose(x.softmax(-1).numpy(), torch.tensor(x.numpy()).softmax(-1).numpy(), rtol=1e-6)
    threads_to(1)
    y = jt.randn(1500, 200)
    np.testing.assert_allclose(jt.nn.functional.layer_norm(y, (200,)).numpy(),
                               torch.nn.functional.layer_norm(torch.tensor(y.numpy()), (200,)).numpy(),
                               rtol=1e-5, atol=1e-5)
    assert threads.bounds(5, 2) == [(0, 3), (3, 5)] and threads.bounds(1, 4) == [(0, 1)]
