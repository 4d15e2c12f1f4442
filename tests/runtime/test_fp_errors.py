"""runtime/fp_errors.py's silenced calls: NumPy's floating-point errors silenced inside, the caller's error
state untouched, a call made while the silenced context is taken (another thread inside, a nested call)
silenced all the same; and the eager shortcuts that run their NumPy calls so, under NumPy's strictest error
state, with the general path's bits and torch's values."""

import threading
import warnings

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime import fp_errors
from tests.support import general_path

ONES = np.ones(3, np.float32)
ZEROS = np.zeros(3, np.float32)


def _silenced_divide(a, b):
    """``a / b`` as the eager shortcuts call it: `fp_errors.silenced`, `fp_errors.when_busy` if taken."""
    try:
        return fp_errors.silenced(np.divide, a, b)
    except RuntimeError as e:
        return fp_errors.when_busy(e, np.divide, a, b)


def test_a_silenced_call_warns_and_raises_nothing_and_leaves_the_callers_state():
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        before = np.geterr()
        assert np.isinf(_silenced_divide(ONES, ZEROS)).all()
        assert np.isnan(fp_errors.silenced(np.subtract, np.float32([np.inf]), np.float32([np.inf]))).all()
        with pytest.raises(ValueError):  # (NumPy's own errors pass through)
            fp_errors.silenced(np.add, ONES, np.ones(2, np.float32))
        assert np.geterr() == before
        with pytest.raises(FloatingPointError):  # (the caller's state is still in force outside)
            np.divide(ONES, ZEROS)


def test_a_silenced_call_nested_in_another_is_silenced_too():
    """A silenced call made inside another (its context taken by the outer call) falls back to `enter` and
    `leave` through `when_busy`."""
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fp_errors.silenced(lambda: _silenced_divide(-ONES, ZEROS) * np.exp(np.float32(100)))
    assert (got == -np.inf).all()
    if fp_errors.silenced is not fp_errors.call_silenced:  # (NumPy 2: the context of its own)
        with pytest.raises(RuntimeError, match="cannot enter context"):
            fp_errors.silenced(fp_errors.silenced, np.divide, ONES, ZEROS)


def test_when_busy_raises_any_other_runtime_error_again():
    error = RuntimeError("something else")
    with pytest.raises(RuntimeError, match="something else"):
        fp_errors.when_busy(error, np.divide, ONES, ZEROS)


def _eager_calls(lib, inf, big, ones):
    """Eager calls of ``lib`` (jitorch, or torch) whose shortcuts make silenced NumPy calls, each meeting a
    floating-point error."""
    x = big.clone()
    x.add_(big, alpha=2)  # (overflow: add_'s remembered factor, then the in-place add)
    y = big.clone()
    y.add_(big)
    return [big * big, big.exp(), inf - inf, big + 1e38, lib.softmax(inf, -1), lib.log_softmax(inf, -1),
            big.sum(), x, y, big @ big.T, ones / 0.0]


def test_eager_shortcuts_meet_floating_point_errors_silently_with_the_general_paths_bits():
    torch = pytest.importorskip("torch")
    inf = jt.tensor([[np.inf], [-np.inf], [np.nan], [1.0]], dtype=jt.float32)
    big = jt.tensor([[3e38, -3e38]], dtype=jt.float32)
    ones = jt.ones(2, 2)
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _eager_calls(jt, inf, big, ones)
    with general_path():
        want = _eager_calls(jt, inf, big, ones)
    t = _eager_calls(torch, *(torch.from_numpy(v.numpy().copy()) for v in (inf, big, ones)))
    for g, w, tw in zip(got, want, t):
        np.testing.assert_array_equal(g.numpy().reshape(-1).view(np.uint8), w.numpy().reshape(-1).view(np.uint8))
        np.testing.assert_array_equal(g.numpy(), tw.numpy())


def test_eager_shortcuts_while_another_thread_is_inside_a_silenced_call():
    """A thread's eager ops while another thread holds the silenced context (its call waiting) are silenced
    through `when_busy`, with the same values."""
    inside, release = threading.Event(), threading.Event()

    def hold():
        inside.set()
        release.wait(10)

    holder = threading.Thread(target=lambda: fp_errors.silenced(hold))
    holder.start()
    try:
        assert inside.wait(10)
        inf = jt.tensor([[np.inf], [np.nan]], dtype=jt.float32)
        big = jt.tensor([[3e38, -3e38]], dtype=jt.float32)
        ones = jt.ones(2, 2)
        with np.errstate(all="raise"), warnings.catch_warnings():
            warnings.simplefilter("error")
            got = _eager_calls(jt, inf, big, ones)
    finally:
        release.set()
        holder.join()
    want = _eager_calls(jt, inf, big, ones)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy().reshape(-1).view(np.uint8), w.numpy().reshape(-1).view(np.uint8))
