"""Eager float sums of more than `summation.BLOCK_SUMS_MIN` elements: NumPy's pairwise block sums computed by a
generated kernel on the thread team (`jitorch/codegen/pairwise.py`; session 54).

Before, NumPy summed the blocks on the calling thread: the eager sum of 16M float32 took 2.4 times torch's time
at two threads. The kernel's block sums are checked bit for bit against NumPy's (values of every magnitude, NaN,
infinities, negative zeros), the eager results against the NumPy path's bits and torch's float64 sum, the same bits
at one and two threads, and what ran: the kernel, on two parts at two threads.
"""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import pairwise
from jitorch.runtime import summation, threads

N = summation.BLOCK_SUMS_MIN + 77  # (whole blocks of at least BLOCK_SUMS_MIN elements, and a tail)
DTYPES = [np.float32, np.float64]


def spread(n, dtype, seed=0):
    """``n`` values of ``dtype`` of magnitudes from 1e-6 to 1e6, of both signs."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * np.exp(rng.uniform(-14, 14, n))).astype(dtype)


class Counted:
    """`summation.BLOCK_SUMS` wrapped: the calls it took, and the team's forks during them."""

    def __init__(self, monkeypatch):
        self.calls, self.forks = 0, 0
        inner = summation.BLOCK_SUMS
        assert inner is not None  # (registered by ``import jitorch``)

        def counted(blocks, squares):
            forks = threads.counters["forks"]
            self.calls += 1
            out = inner(blocks, squares)
            self.forks += threads.counters["forks"] - forks
            return out
        monkeypatch.setattr(summation, "BLOCK_SUMS", counted)


def numpy_blocks(fn, monkeypatch):
    """``fn()`` with NumPy summing the blocks (the eager path before session 54)."""
    with monkeypatch.context() as m:
        m.setattr(summation, "BLOCK_SUMS", None)
        return fn()


@pytest.fixture
def restore_threads():
    before = jt.get_num_threads()
    yield
    jt.set_num_threads(before)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_block_sums_are_numpys_bit_for_bit(dtype):
    """Each block's sum is NumPy's pairwise sum of it, to the bit, specials included; a block of negative zeros
    sums to a positive zero, as NumPy's reduction (which starts from 0.0) gives."""
    blocks = spread(40 * summation.BLOCK, dtype).reshape(40, summation.BLOCK)
    blocks[1, 5] = np.nan
    blocks[2, 7], blocks[3, 9], blocks[3, 10] = np.inf, np.inf, -np.inf
    blocks[4] = -0.0
    blocks[5] = np.finfo(dtype).max / 4  # (overflows to inf part-way)
    blocks[6] = np.finfo(dtype).tiny / 3  # (subnormals)
    got = pairwise.block_sums(blocks)
    want = np.add.reduce(blocks, axis=-1)
    assert got.dtype == dtype and got.tobytes() == want.tobytes()
    assert np.signbit(got[4]) == np.signbit(want[4]) == False  # noqa: E712
    assert np.isnan(got[1]) and np.isnan(got[3]) and got[2] == np.inf and got[5] == np.inf


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_block_sums_of_squares_are_numpys_sums_of_np_square_of_np_abs(dtype):
    """The 2-norm's kernel (``squares``) sums ``np.square(np.abs(x))`` as NumPy would, to the bit: NaN of
    either sign, infinities, overflow of the squares, subnormals."""
    blocks = spread(40 * summation.BLOCK, dtype, seed=3).reshape(40, summation.BLOCK)
    blocks[1, 5] = -np.nan
    blocks[2, 7] = -np.inf
    blocks[3] = np.sqrt(np.finfo(dtype).max) * 2  # (squares overflow)
    blocks[4] = -np.finfo(dtype).tiny  # (squares underflow to zero)
    got = pairwise.block_sums(blocks, squares=True)
    want = np.add.reduce(np.square(np.abs(blocks)), axis=-1)
    assert got.tobytes() == want.tobytes()
    assert np.isnan(got[1]) and not np.signbit(got[1]) and got[2] == got[3] == np.inf and got[4] == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape, dim", [((N,), None), ((2, N - 77), 1), ((2, N - 77), 0), ((N - 77, 2), None)],
                         ids=str)
def test_two_norm_sums_squares_without_their_array_with_the_bits_of_abs_squared(shape, dim, dtype, monkeypatch,
                                                                                restore_threads):
    """Regression (session 54): eager ``x.norm()`` of 16M float32 took ~26 ms of CPU, 10x torch's: ``|x|`` and
    ``|x| ** 2`` each a new 64 MB array (page faults), then the sum. Now the 2-norm's sum squares as it reads
    (`summation.add_reduce(squares=True)`), through the kernel where the blocks are contiguous: the bits of the
    old formula, at one and two threads; torch's float64 norm within the dtype's precision."""
    values = spread(int(np.prod(shape)), dtype, seed=4).reshape(shape)
    values.flat[3] = -values.flat[3]
    x = jt.from_numpy(values)
    with monkeypatch.context() as m:
        m.setattr(summation, "BLOCK_SUMS", None)
        old = summation.add_reduce(np.abs(values) ** 2, dim) ** 0.5
    counted = Counted(monkeypatch)
    for n in (1, 2):
        jt.set_num_threads(n)
        got = x.norm(dim=dim).numpy()
        assert got.tobytes() == np.asarray(old, dtype).tobytes(), n
    assert counted.calls == (2 if dim != 0 else 0)  # (along dim 0 of (2, n): pairs, NumPy's elementwise sums)
    oracle = torch.from_numpy(values.astype(np.float64)).norm(dim=dim).numpy()
    np.testing.assert_allclose(got, oracle, rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_eager_sum_runs_the_kernel_with_numpys_bits_at_one_and_two_threads(dtype, monkeypatch, restore_threads):
    """Regression (session 54): eager ``x.sum()`` of 16M float32 took 2.4x torch's time, NumPy summing every block
    on one thread. Now the kernel sums the blocks, on two parts at two threads, on one at one; the result has the
    NumPy path's bits at both and is torch's float64 sum to the dtype's precision."""
    values = spread(N, dtype)
    x = jt.from_numpy(values)
    want = numpy_blocks(lambda: x.sum().numpy(), monkeypatch)
    counted = Counted(monkeypatch)
    results = []
    for n, forks in ((1, 0), (2, 1)):
        jt.set_num_threads(n)
        before = counted.forks
        results.append(x.sum().numpy())
        assert counted.forks - before == forks, n
    assert counted.calls == 2
    assert results[0].tobytes() == results[1].tobytes() == want.tobytes()
    oracle = torch.from_numpy(values.astype(np.float64)).sum().item()
    scale = np.abs(values.astype(np.float64)).sum()
    assert abs(float(results[0]) - oracle) <= scale * (1e-6 if dtype == np.float32 else 1e-14)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name, fn", [
    ("mean", lambda t: t.mean()), ("nansum", lambda t: t.nansum()), ("var", lambda t: t.var()),
    ("norm", lambda t: t.norm()), ("3-norm", lambda t: t.norm(3)), ("row sum", lambda t: t.reshape(2, -1).sum(1)),
    ("sum of a transpose", lambda t: t.reshape(2, -1).t().sum()), ("sum along dim 0", lambda t: t.sum(0))],
    ids=lambda v: v if isinstance(v, str) else "")
def test_reductions_on_add_reduce_take_the_kernel_with_the_same_bits(name, fn, dtype, monkeypatch, restore_threads):
    """mean, nansum, var and norm, a sum over rows of more than a block and a full sum of a transposed (copied)
    input take the kernel too, with the NumPy path's bits, at one and two threads; close to torch's float64
    result."""
    values = spread(2 * (N - 77), dtype, seed=1)
    x = jt.from_numpy(values)
    want = numpy_blocks(lambda: fn(x).numpy(), monkeypatch)
    counted = Counted(monkeypatch)
    for n in (1, 2):
        jt.set_num_threads(n)
        assert fn(x).numpy().tobytes() == want.tobytes(), n
    assert counted.calls >= 2
    oracle = fn(torch.from_numpy(values.astype(np.float64))).numpy()
    np.testing.assert_allclose(want, oracle, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_small_and_complex_sums_keep_numpy(monkeypatch):
    """Below `summation.BLOCK_SUMS_MIN` elements, and for complex input, NumPy sums the blocks."""
    counted = Counted(monkeypatch)
    small = spread(summation.BLOCK_SUMS_MIN - summation.BLOCK, np.float32)
    got = jt.from_numpy(small).sum().numpy()
    assert got.tobytes() == numpy_blocks(lambda: jt.from_numpy(small).sum().numpy(), monkeypatch).tobytes()
    values = spread(N, np.float64) + 1j * spread(N, np.float64, seed=2)
    assert summation.add_reduce(values).tobytes() == numpy_blocks(lambda: summation.add_reduce(values),
                                                                  monkeypatch).tobytes()
    assert counted.calls == 0
