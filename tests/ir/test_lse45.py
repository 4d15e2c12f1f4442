"""The lse pass (jitorch/ir/passes/lse.py): log_softmax's log-probs computed where they are read from each row's
max and log-sum (one row kernel writing those), not written; kept where the program needs them in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir.passes import lse
from tests.codegen.test_cross_entropy45 import CASES, run_step
from tests.support import assert_close, to_numpy

F = jt.nn.functional


def kernel_ops(fn, *args):
    return [k.ops for k in fn.lower(*args).kernels]


def without_pass(monkeypatch):
    monkeypatch.setattr(lse, "run", lambda graph: 0)


def test_the_lstm_shaped_step_writes_statistics_not_log_probs():
    """The word language model's decoder and loss: the row kernel (with the bias add and the view as its
    prologue) writes two (rows, 1) values; the only kernel writing a (rows, vocab) value is the gradient's, which
    computes the log-probs again from the product; the picked log-probs are gathered from the product and the
    bias."""
    fn, h, y = run_step("lstm", jt, compiled=True)
    ex = fn.lower(h, y).executable
    graph_ops = [n.op.name for n in ex.graph.nodes]
    assert "log_softmax" not in graph_ops and graph_ops.count("_log_softmax_stats") == 1
    rows, vocab = 21, CASES["lstm"][2]
    sources = [k.source for k in ex.kernels]
    stats = [s for s in sources if "_log_softmax_stats" in s.ops]
    assert [s.ops for s in stats] == [["add", "view", "_log_softmax_stats"]]
    assert [tuple(v.type.shape) for v in stats[0].outputs] == [(rows, 1), (rows, 1)]
    wide = [s for s in sources if any(tuple(v.type.shape) in ((rows, vocab), (7, 3, vocab)) for v in s.outputs)]
    assert len(wide) == 1 and {"exp", "mul", "sum"} <= set(wide[0].ops), [s.ops for s in wide]
    assert any("gather" in s.ops and "sub" in s.ops for s in sources)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_step_gives_the_bits_it_gave_with_the_log_probs_written(name, monkeypatch):
    """The statistics are the row kernel's, and ``(x - m) - n`` its third pass: loss and gradients bit for bit."""
    fn, h, y = run_step(name, jt, compiled=True, seed=5)
    assert any("_log_softmax_stats" in ops for ops in kernel_ops(fn, h, y))
    new = [t.numpy().copy() for t in fn(h, y)]
    without_pass(monkeypatch)
    fn, h, y = run_step(name, jt, compiled=True, seed=5)
    assert any("log_softmax" in ops for ops in kernel_ops(fn, h, y))
    for a, b in zip(new, (t.numpy() for t in fn(h, y))):
        assert np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_step_matches_torch(name):
    """The compiled step in float64 (log-probs never written) against torch's step, tightly."""
    step, shape, vocab, targets, bias = CASES[name]
    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal(shape), rng.standard_normal((vocab, shape[-1]))] + \
        ([rng.standard_normal(vocab)] if bias else [])
    y = rng.integers(0, vocab, targets)
    results = []
    for lib, compiled in ((jt, True), (torch, False)):
        h, *params = [lib.tensor(a) for a in arrays]
        params = [p.requires_grad_() for p in params]

        def call(h, y, params=params, lib=lib):
            for p in params:
                p.grad = None
            return step(lib, h, *params, y)
        fn = jt.compile(call) if compiled else call
        if compiled:
            assert any("_log_softmax_stats" in ops for ops in kernel_ops(fn, h, lib.tensor(y)))
        results.append(fn(h, lib.tensor(y)))
    for got, want in zip(*results):
        assert_close(got, want.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_returned_log_probs_are_still_written_once():
    """A program returning the log-probs (and gathering and exponentiating them) keeps the row kernel that writes
    them; nothing computes them twice."""
    x, y = jt.randn(6, 9), jt.randint(0, 9, (6, 1))

    def f(x, y):
        lp = F.log_softmax(x + 1, 1)
        return lp, lp.gather(1, y), lp.exp() * 2
    fn = jt.compile(f)
    kernels = kernel_ops(fn, x, y)
    assert [ops for ops in kernels if "log_softmax" in ops] == [["add", "log_softmax"]], kernels
    assert not any("_log_softmax_stats" in ops for ops in kernels)
    for got, want in zip(fn(x, y), f(x, y)):
        assert_close(got, to_numpy(want))


@pytest.mark.parametrize("reader", [lambda lp: lp @ jt.ones(9, 2), lambda lp: lp.sort(1)[0] * 1,
                                    lambda lp: lp.gather(0, jt.zeros(1, 9, dtype=jt.int64)) * 1])
def test_log_probs_read_otherwise_keep_the_row_kernel(reader):
    """A product, a sort or a gather along another dim reads the log-probs where they lie: the row kernel stays."""
    x = jt.randn(6, 9)
    fn = jt.compile(lambda x: reader(F.log_softmax(x, 1)))
    assert any("log_softmax" in ops for ops in kernel_ops(fn, x))
    assert_close(fn(x), to_numpy(reader(F.log_softmax(x, 1))))


def test_log_softmax_along_another_dim_is_left_alone():
    x = jt.randn(6, 9)
    fn = jt.compile(lambda x: F.log_softmax(x, 0).exp() * 2)
    ops = [n.op.name for n in fn.lower(x).executable.graph.nodes]
    assert "log_softmax" in ops and "_log_softmax_stats" not in ops
    assert_close(fn(x), to_numpy(F.log_softmax(x, 0).exp() * 2))


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_extreme_rows_match_eager_and_torch(dtype):
    """Rows of equal logits of 1e30 (the max and the log apart: -log(n), not 0), with -inf, +inf and NaN
    elements, of one element: the elementwise reader's values and the gathered ones as eager's and torch's."""
    inf, nan = float("inf"), float("nan")
    rows = [[1e30] * 5, [-inf, 0.0, 1.0, -inf, 2.0], [inf, 0.0, 1.0, 2.0, 3.0], [nan, 0.0, 1.0, 2.0, 3.0],
            [-inf] * 5, [3.0, -1e4, 7.5, 0.0, -2.0]]
    x = np.array(rows)
    y = np.array([[0, 4], [0, 1], [1, 0], [2, 2], [3, 1], [4, 0]])

    def f(lib, x, y):
        lp = lib.nn.functional.log_softmax(x, 1)
        return lp.gather(1, y) * 1, lp.exp() + 0
    fn = jt.compile(lambda x, y: f(jt, x, y))
    args = jt.tensor(x, dtype=dtype), jt.tensor(y)
    assert any("_log_softmax_stats" in ops for ops in kernel_ops(fn, *args))
    got = fn(*args)
    for g, e, t in zip(got, f(jt, *args), f(torch, torch.tensor(x, dtype=getattr(torch, str(dtype)[8:])),
                                             torch.tensor(y))):
        assert_close(g, to_numpy(e), equal_nan=True)
        assert_close(g, t.numpy(), equal_nan=True)
    one = jt.compile(lambda x: F.log_softmax(x, 1).exp() + 0)
    column = jt.tensor(x[:, :1], dtype=dtype)
    assert_close(one(column), to_numpy(F.log_softmax(column, 1).exp() + 0), equal_nan=True)


def test_a_gather_out_of_range_still_raises():
    """The gather moved onto the product and the bias checks its index as the gather of the log-probs did."""
    x, b = jt.randn(4, 6), jt.randn(6)
    fn = jt.compile(lambda x, b, y: F.log_softmax(x + b, 1).gather(1, y) * 1)
    fn(x, b, jt.zeros(4, 1, dtype=jt.int64))
    bad = jt.zeros(4, 1, dtype=jt.int64)
    bad[2, 0] = 6
    with pytest.raises(RuntimeError) as compiled:
        fn(x, b, bad)
    with pytest.raises(RuntimeError) as eager:
        F.log_softmax(x + b, 1).gather(1, bad)
    assert type(compiled.value) is type(eager.value)


def test_gradcheck_through_a_compiled_cross_entropy():
    """float64 gradcheck of the compiled cross-entropy of ``(h @ W^T + b)`` seen as rows (its backward graph
    apart: the forward keeps the log-probs for it; `test_float64_step_matches_torch` checks the gradients of
    steps computing them in one graph, where the log-probs are never written)."""
    rng = np.random.default_rng(7)
    h = jt.tensor(rng.standard_normal((3, 2, 4)), requires_grad=True)
    W = jt.tensor(rng.standard_normal((9, 4)), requires_grad=True)
    b = jt.tensor(rng.standard_normal(9), requires_grad=True)
    y = jt.tensor(rng.integers(0, 9, (6,)))
    loss = jt.compile(lambda h, W, b: F.cross_entropy((jt.matmul(h, W.t()) + b).view(-1, 9), y))
    assert jt.autograd.gradcheck(loss, (h, W, b))


def test_a_reshaped_graph_input_keeps_the_row_kernel():
    """A reshape between log_softmax and a graph input: the input's memory may not be compact, so no copy reads
    it reshaped and the row kernel (which folds the reshape itself) stays; a computed product is reshaped
    (`test_the_lstm_shaped_step_writes_statistics_not_log_probs`)."""
    x, b = jt.randn(3, 4, 10), jt.randn(10)

    def f(x, b):
        return F.log_softmax((x + b).view(-1, 10), 1).exp() * 2
    fn = jt.compile(f)
    kernels = kernel_ops(fn, x, b)
    assert [ops for ops in kernels if "log_softmax" in ops] == [["add", "view", "log_softmax"]], kernels
    assert not any("_log_softmax_stats" in ops for ops in kernels)
    assert_close(fn(x, b), to_numpy(f(x, b)))
