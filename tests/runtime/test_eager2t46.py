"""Eager ops that left the second thread idle at two threads, now split across the team: large copies (``clone``,
``contiguous``, a convolution's im2col and batch-last layouts, ``as_strided_scatter``: `runtime.copy_parts`) and exact
pointwise ufuncs on operands laid out apart (`ops.pointwise_base._split_in_order`). Which calls fork, and that their
bits are the one-thread call's and torch's; and a worker that kept its last part's arguments alive."""

import threading
import weakref

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.runtime import copy_parts, threads, ufunc_parts


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
    assert x.size >= copy_parts.SPLIT_MIN
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
    """The transposed copy that `copy_parts.copy_whole` blocks along the unit-stride dim: each part blocks its own rows."""
    x = jt.arange(600 * 700).reshape(600, 700).to(getattr(jt, dtype))
    t, forks, parts = _forks(lambda: x.t().clone(memory_format=jt.contiguous_format))
    assert (forks, parts) == (1, 1) and t.is_contiguous()
    expected = torch.arange(600 * 700).reshape(600, 700).to(getattr(torch, dtype)).t().clone()
    assert torch.equal(torch.from_numpy(t.float().numpy()), expected.float())


def test_contiguous_to_contiguous_copies_split_as_one_run(two_threads):
    """Two C-contiguous arrays split as one run of elements (a leading dim of 3 would give parts of 2 and 1)."""
    src = np.arange(3 * 100_000, dtype=np.float32).reshape(3, 100_000)
    dst = np.empty_like(src)
    pieces = copy_parts.pieces(dst, src)
    assert [p[0].shape for p in pieces] == [(150_000,), (150_000,)]
    _, forks, _ = _forks(lambda: copy_parts.copy(dst, src))
    assert forks == 1 and np.array_equal(dst, src)


def test_copies_that_run_whole():
    """Under `SPLIT_MIN` elements, at one thread, into a destination that repeats an element, from memory the
    destination shares, or broadcast from another shape: no parts."""
    big = np.zeros(copy_parts.SPLIT_MIN, np.float32)
    with pytest.MonkeyPatch.context() as m:
        m.setitem(threads._settings, "threads", 2)
        assert copy_parts.pieces(np.empty(copy_parts.SPLIT_MIN - 1, np.float32), big[1:]) is None
        repeated = np.lib.stride_tricks.as_strided(np.empty(8, np.float32), (copy_parts.SPLIT_MIN,), (0,))
        assert copy_parts.pieces(repeated, big) is None
        assert copy_parts.pieces(big[::-1], big) is None
        assert copy_parts.pieces(np.empty((2, copy_parts.SPLIT_MIN), np.float32), big) is None
        assert copy_parts.pieces(np.empty_like(big), big) is not None
        m.setitem(threads._settings, "threads", 1)
        assert copy_parts.pieces(np.empty_like(big), big) is None


def test_as_strided_scatter_into_a_view_that_overlaps_runs_whole(two_threads):
    """An as_strided_scatter whose view repeats elements: ``self``'s copy forks, the scatter runs whole (which write
    wins is the whole copy's: NumPy's, the last; torch leaves the order of overlapping writes undefined)."""
    n = copy_parts.SPLIT_MIN + 10
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


# Pointwise ops on operands laid out apart (`ops.pointwise_base._split_in_order`) -------------------------------

_A = np.random.default_rng(46).standard_normal((64, 16, 16, 64)).astype(np.float32)  # (batch-last, as permuted)
_B = np.random.default_rng(47).standard_normal((64, 64, 16, 16)).astype(np.float32)


def _permuted(lib):
    return lib.from_numpy(_A).permute(0, 3, 1, 2)


LAID_APART = {
    "permuted * contiguous": lambda lib: _permuted(lib) * lib.from_numpy(_B),
    "contiguous + permuted": lambda lib: lib.from_numpy(_B) + _permuted(lib),
    "permuted > contiguous": lambda lib: _permuted(lib) > lib.from_numpy(_B),
    "contiguous - permuted": lambda lib: lib.from_numpy(_B) - _permuted(lib),
    "a gradient's product": lambda lib: _permuted(lib).requires_grad_() * lib.from_numpy(_B),
}


@pytest.mark.parametrize("case", sorted(LAID_APART))
def test_an_exact_ufunc_on_operands_laid_out_apart_splits_with_the_one_thread_bits_and_torchs_layout(monkeypatch,
                                                                                                    case):
    """A convolution's input gradient (batch-last memory, NCHW shape) times a contiguous tensor: at two threads the
    operand laid out apart is copied into the result's layout and the product runs on the team over memory order;
    the bits are the one-thread call's (NumPy's strided loop) and torch's, the strides torch's."""
    fn = LAID_APART[case]
    monkeypatch.setitem(threads._settings, "threads", 1)
    one, forks, _ = _forks(lambda: fn(jt))
    assert forks == 0
    monkeypatch.setitem(threads._settings, "threads", 2)
    monkeypatch.setattr(ufunc_parts, "BACKOFF", 0)  # (every large call asks the team, even on a loaded machine)
    monkeypatch.setitem(ufunc_parts._backoff, "calls", 0)
    two, forks, _ = _forks(lambda: fn(jt))
    assert forks >= 1
    theirs = fn(torch)
    assert two.stride() == one.stride() == theirs.stride()
    assert np.array_equal(two.detach().numpy(), one.detach().numpy())
    assert np.array_equal(two.detach().numpy(), theirs.detach().numpy())


def test_an_inexact_ufunc_on_operands_laid_out_apart_runs_whole(two_threads):
    """atan2 rounds as its loop does: on operands laid out apart it stays NumPy's one call (no fork), the bits the
    one-thread call's."""
    x, y = _permuted(jt), jt.from_numpy(_B)
    r, forks, _ = _forks(lambda: jt.atan2(x, y))
    assert forks == 0
    assert np.array_equal(r.numpy(), np.arctan2(_A.transpose(0, 3, 1, 2), _B))


def test_a_product_laid_out_apart_in_a_backward_matches_one_thread(monkeypatch):
    """The gradient of a leaky_relu after a convolution (its input gradient laid out batch-last) at two threads: the
    one-thread gradient's bits."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 16, 16, 16)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1

    def grad():
        xt = jt.from_numpy(x).requires_grad_()
        y = F.conv2d(F.leaky_relu(xt * 1.5, 0.2), jt.from_numpy(w), padding=1)
        (y * y).sum().backward()
        return xt.grad.numpy()

    monkeypatch.setitem(threads._settings, "threads", 1)
    one = grad()
    monkeypatch.setitem(threads._settings, "threads", 2)
    assert np.array_equal(grad(), one)


def test_a_workers_python_part_keeps_no_reference_to_its_arguments_after_the_fork(two_threads):
    """A worker's frame held its last Python part's arguments until its next part: the source of a split copy
    (a tensor already dead) kept its buffer out of the allocator's pool (tests/runtime/test_allocator.py's zeros_like
    case failed once ``reshape`` copies split)."""
    started = threading.Event()

    def part(a, first):
        if first:
            started.wait(10)  # (until the worker has claimed the other part)
        else:
            started.set()

    a = np.ones(1000)
    ref = weakref.ref(a)
    taken = threads.counters["taken back"]
    threads.run_parts(part, [(a[:500], True), (a[500:], False)])
    assert started.is_set() and threads.counters["taken back"] == taken  # (the worker ran its part)
    del a
    assert ref() is None
