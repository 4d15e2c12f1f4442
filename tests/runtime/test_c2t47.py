"""Large eager fills split across the thread team (`runtime.copy_parts.fill`): the zeros and ones of the eager factories
(`ops.creation.pooled`: an LSTM language model's nll_loss gradient starts from 28 MB of them, outside its compiled
model) and the zeros an embedding's backward adds its rows into (`ops.indexing.index_add_into`); the values are the
one-thread fill's, small fills run whole."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import indexing
from jitorch.runtime import copy_parts, threads


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 2)


def _forks(fn):
    before = threads.counters["forks"]
    result = fn()
    return result, threads.counters["forks"] - before


@pytest.mark.parametrize("factory, value", [(jt.zeros, 0), (jt.ones, 1)])
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64, jt.int64])
def test_a_large_eager_fill_splits_across_the_team(two_threads, factory, value, dtype):
    shape = (700, 1000)
    assert shape[0] * shape[1] >= copy_parts.SPLIT_MIN
    t, forks = _forks(lambda: factory(*shape, dtype=dtype))
    assert forks == 1
    expected = np.full(shape, value, t.numpy().dtype)
    assert t.numpy().tobytes() == expected.tobytes()


def test_new_zeros_of_a_large_gradient_split_and_small_ones_run_whole(two_threads):
    x = jt.randn(3, 4)
    _, forks = _forks(lambda: x.new_zeros(700, 1000))
    assert forks == 1
    small, forks = _forks(lambda: x.new_zeros(7, 10))
    assert forks == 0 and not small.numpy().any()


def test_an_eager_fill_at_one_thread_runs_whole(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 1)
    t, forks = _forks(lambda: jt.zeros(700, 1000))
    assert forks == 0 and not t.numpy().any()


def test_nll_loss_gradient_from_split_zeros_equals_torch(two_threads):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((700, 300)).astype(np.float32)
    target = rng.integers(0, 300, 700)
    grads = []
    for lib in (jt, torch):
        x = lib.tensor(logits).log_softmax(1).detach().requires_grad_()
        lib.nn.functional.nll_loss(x, lib.tensor(target)).backward()
        grads.append(x.grad.numpy())
    assert grads[0].tobytes() == grads[1].tobytes()


def test_the_embedding_backward_zeros_split_and_rows_add_as_one_thread(two_threads, monkeypatch):
    rng = np.random.default_rng(1)
    index = rng.integers(0, 10000, 700)
    source = rng.standard_normal((700, 200)).astype(np.float32)
    out = np.full((10000, 200), np.nan, np.float32)  # (``x`` None: the zeros are the writer's own)
    _, forks = _forks(lambda: indexing.index_add_into(out, None, 0, index, source))
    assert forks >= 1
    expected = np.zeros((10000, 200), np.float32)
    np.add.at(expected, index, source)
    assert out.tobytes() == expected.tobytes()
