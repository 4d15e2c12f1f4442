"""``_log_softmax_stats``'s row kernel (jitorch/codegen/kernel.py `build_softmax`): log_softmax's max and exp-sum
passes, each row's max and log-sum written in place of the row; ``(x - m) - n`` in the readers' kernels gives the
log-probs the row kernel wrote, bit for bit, over every row width the lanes split differently, in float32 and
float64, with a bias prologue, through a reshape, at one and two threads. The op's eager kernel against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir.passes import lse
from jitorch.ops import registry
from jitorch.runtime import threads
from tests.support import assert_close, to_numpy

F = jt.nn.functional


def readers(x, b):
    """An elementwise reader of the log-probs and a gather of them (a loss's two)."""
    lp = F.log_softmax(x + b, -1)
    index = jt.arange(2 * lp.shape[:-1].numel()).remainder(lp.shape[-1]).view(*lp.shape[:-1], 2)
    return lp.exp() * 3, lp.gather(-1, index) * 1


def reshaped(h, b):
    """The language model's decoder: (seq, batch, vocab) logits of a product plus a bias, seen as rows."""
    vocab = b.shape[0]
    weight = jt.linspace(-2, 2, h.shape[-1] * vocab, dtype=h.dtype).view(h.shape[-1], vocab)
    lp = F.log_softmax((jt.matmul(h, weight) + b).view(-1, vocab), 1)
    return lp.exp() - 1, lp.gather(1, jt.arange(lp.shape[0]).remainder(vocab).view(-1, 1)) * 1


def compiled_bits(fn, args, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(lse, "run", lambda graph: 0)
    compiled = jt.compile(fn)
    kernels = [k.ops for k in compiled.lower(*args).kernels]
    return kernels, [t.numpy().copy() for t in compiled(*args)]


CASES = [(readers, (5, 33), jt.float32), (readers, (3, 1), jt.float32), (readers, (4, 200), jt.float32),
         (readers, (6, 17), jt.float64), (readers, (2, 3, 40), jt.float32), (reshaped, (3, 4, 8, 50), jt.float32),
         (reshaped, (2, 5, 3, 9), jt.float64)]


@pytest.mark.parametrize("fn, shape, dtype", CASES)
def test_statistics_kernel_gives_the_row_kernels_log_probs(fn, shape, dtype, monkeypatch):
    """(``shape``: the input's, then the bias's length.)"""
    rng = np.random.default_rng(sum(shape))
    args = (jt.tensor(rng.standard_normal(shape[:-1] if fn is reshaped else shape) * 4, dtype=dtype),
            jt.tensor(rng.standard_normal(shape[-1]), dtype=dtype))
    kernels, new = compiled_bits(fn, args)
    stats = [ops for ops in kernels if "_log_softmax_stats" in ops]
    assert len(stats) == 1 and stats[0][0] == "add" and not any("log_softmax" in ops for ops in kernels), kernels
    old_kernels, old = compiled_bits(fn, args, monkeypatch)
    assert any("log_softmax" in ops for ops in old_kernels), old_kernels
    for a, b in zip(new, old):
        assert np.array_equal(a, b)
    for got, want in zip(new, fn(*args)):
        assert_close(jt.tensor(got), to_numpy(want))


def test_statistics_kernel_writes_two_values_a_row_and_splits_rows_across_threads(monkeypatch):
    """Its outputs are the (rows, 1) max and log-sum; at two threads each thread's rows give the same bits."""
    x, b = jt.randn(64, 300), jt.randn(300)
    compiled = jt.compile(lambda x, b: F.log_softmax(x + b, 1).exp() * 1)
    source = next(k.source for k in compiled.lower(x, b).executable.kernels if "_log_softmax_stats" in k.source.ops)
    assert [tuple(v.type.shape) for v in source.outputs] == [(64, 1), (64, 1)]
    assert source.mode == "block" and source.outer == 64
    one = compiled(x, b).numpy().copy()
    monkeypatch.setitem(threads._settings, "threads", 2)
    assert np.array_equal(compiled(x, b).numpy(), one)


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
@pytest.mark.parametrize("shape, dim", [((4, 7), 1), ((3, 2, 5), -1), ((6, 3), 0)])
def test_eager_statistics_against_torch(dtype, shape, dim):
    """The op's eager kernel (what a graph that does not lower it runs): ``(x - max) - log_sum`` is torch's
    log_softmax, ``max`` torch's amax; both kept along ``dim``."""
    x = np.random.default_rng(1).standard_normal(shape) * 3
    m, n = registry.call(registry.OPS["_log_softmax_stats"], (jt.tensor(x, dtype=dtype), dim))
    t = torch.tensor(x, dtype=getattr(torch, str(dtype)[8:]))
    assert_close(m, t.amax(dim, keepdim=True).numpy())
    assert_close(jt.tensor(x, dtype=dtype) - m - n, torch.log_softmax(t, dim).numpy())


def test_statistics_refuse_integers_and_empty_rows():
    """As log_softmax's kernel: a float tensor with elements along the dim, else an error naming the shape."""
    op = registry.OPS["_log_softmax_stats"]
    with pytest.raises(RuntimeError, match=r"\[2, 3\]"):
        registry.call(op, (jt.ones(2, 3, dtype=jt.int64), 1))
    with pytest.raises(RuntimeError, match=r"\[2, 0\]"):
        registry.call(op, (jt.ones(2, 0), 1))
