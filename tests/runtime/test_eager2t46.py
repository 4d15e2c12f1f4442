"""Large eager copies (``clone``, ``contiguous``, a convolution's im2col and batch-last layouts, ``as_strided_scatter``)
split across the thread team (`ops.views._copy_pieces`): which copies fork, and that their bits are the one-thread
copy's and torch's."""

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.ops import views
from jitorch.runtime import threads


def _forks(fn):
    """(fn's result, forks onto the team and parts handed over while it ran)."""
    forks, parts, inline = threads.counters["forks"], threads.counters["parts"], threads.counters["inline"]
    result = fn()
    assert threads.counters["inline"] == inline  # (nothing else held the team)
    return result, threads.counters["forks"] - forks, threads.counters["parts"] - parts


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 2)


def test_a_large_clone_of_a_permuted_view_forks_once_with_the_one_thread_bits(monkeypatch):
    """A batch-last copy (the layout a convolution gathers from): one fork of two parts at two threads, none at one,
    the same elements as NumPy's and torch's copy."""
    x = np.random.default_rng(46).standard_normal((64, 32, 12, 12)).astype(np.float32)
    assert x.size >= views.SPLIT_MIN
    monkeypatch.setitem(threads._settings, "threads", 1)
    one, forks, _ = _forks(lambda: jt.from_numpy(x).permute(1, 2, 3, 0).contiguous())
    assert forks == 0
    monkeypatch.setitem(threads._settings, "threads", 2)
    two, forks, parts = _forks(lambda: jt.from_numpy(x).permute(1, 2, 3, 0).contiguous())
    assert (forks, parts) == (1, 1)
    assert two.is_contiguous() and np.array_equal(two.numpy(), one.numpy())
    assert np.array_equal(two.numpy(), torch.from_numpy(x).permute(1, 2, 3, 0).contiguous().numpy())


@pytest.mark.parametrize("dtype", ["float64", "int32", "bfloat16"])
def test_clone_of_a_transposed_matrix_splits_for_every_dtype(two_threads, dtype):
    """The transposed copy that `_copy_whole` blocks along the unit-stride dim: each part blocks its own rows."""
    x = jt.arange(600 * 700).reshape(600, 700).to(getattr(jt, dtype))
    t, forks, parts = _forks(lambda: x.t().clone(memory_format=jt.contiguous_format))
    assert (forks, parts) == (1, 1) and t.is_contiguous()
    expected = torch.arange(600 * 700).reshape(600, 700).to(getattr(torch, dtype)).t().clone()
    assert torch.equal(torch.from_numpy(t.float().numpy()), expected.float())


def test_contiguous_to_contiguous_copies_split_as_one_run(two_threads):
    """Two C-contiguous arrays split as one run of elements (a leading dim of 3 would give parts of 2 and 1)."""
    src = np.arange(3 * 100_000, dtype=np.float32).reshape(3, 100_000)
    dst = np.empty_like(src)
    pieces = views._copy_pieces(dst, src)
    assert [p[0].shape for p in pieces] == [(150_000,), (150_000,)]
    _, forks, _ = _forks(lambda: views._copy(dst, src))
    assert forks == 1 and np.array_equal(dst, src)


def test_copies_that_run_whole():
    """Under `SPLIT_MIN` elements, at one thread, into a destination that repeats an element, from memory the
    destination shares, or broadcast from another shape: no parts."""
    big = np.zeros(views.SPLIT_MIN, np.float32)
    with pytest.MonkeyPatch.context() as m:
        m.setitem(threads._settings, "threads", 2)
        assert views._copy_pieces(np.empty(views.SPLIT_MIN - 1, np.float32), big[1:]) is None
        repeated = np.lib.stride_tricks.as_strided(np.empty(8, np.float32), (views.SPLIT_MIN,), (0,))
        assert views._copy_pieces(repeated, big) is None
        assert views._copy_pieces(big[::-1], big) is None
        assert views._copy_pieces(np.empty((2, views.SPLIT_MIN), np.float32), big) is None
        assert views._copy_pieces(np.empty_like(big), big) is not None
        m.setitem(threads._settings, "threads", 1)
        assert views._copy_pieces(np.empty_like(big), big) is None


def test_as_strided_scatter_into_a_view_that_overlaps_runs_whole(two_threads):
    """An as_strided_scatter whose view repeats elements: ``self``'s copy forks, the scatter runs whole (which write
    wins is the whole copy's: NumPy's, the last; torch leaves the order of overlapping writes undefined)."""
    n = views.SPLIT_MIN + 10
    src = np.random.default_rng(3).standard_normal((2, n)).astype(np.float32)
    base = np.zeros(n + 1, np.float32)
    ours, forks, _ = _forks(lambda: jt.as_strided_scatter(jt.from_numpy(base), jt.from_numpy(src), (2, n), (1, 1)))
    whole = base.copy()
    np.lib.stride_tricks.as_strided(whole, (2, n), (4, 4))[...] = src
    assert forks == 1 and np.array_equal(ours.numpy(), whole)


def test_a_convolution_step_at_two_threads_is_the_one_thread_step_bit_for_bit(monkeypatch):
    """conv2d forward and backward with padding (batch-last copy into zeros, im2col copy, col2im, the result back
    to NCHW): at two threads its copies fork, and the output and gradients are the one-thread bits, within float
    rounding of torch's."""
    rng = np.random.default_rng(46)
    x = rng.standard_normal((64, 32, 14, 14)).astype(np.float32)
    w = rng.standard_normal((16, 32, 3, 3)).astype(np.float32) * 0.1

    def step():
        xt, wt = jt.from_numpy(x).requires_grad_(), jt.from_numpy(w).requires_grad_()
        y = F.conv2d(xt, wt, padding=1)
        (y * y).sum().backward()
        return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()

    monkeypatch.setitem(threads._settings, "threads", 1)
    one = step()
    monkeypatch.setitem(threads._settings, "threads", 2)
    two, forks, _ = _forks(step)
    assert forks >= 3  # (the padded batch-last copy, the im2col copy, the result's copy back at least)
    for a, b in zip(one, two):
        assert np.array_equal(a, b)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, padding=1)
    (ty * ty).sum().backward()
    for a, b in zip(two, (ty.detach(), tx.grad, tw.grad)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-3)
