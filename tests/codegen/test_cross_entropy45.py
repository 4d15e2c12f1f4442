"""A compiled classifier step's log-softmax and NLL backward (jitorch/ir/passes/sums.py): the one-hot gradient of
nll_loss, log-softmax's backward and, with a decoder bias summed through the language model's view, the bias's
gradient run as one kernel over the logits (on main: three, each a pass over the logits' size). Shapes of the
word language model (``(seq, batch, vocab)`` logits seen as rows, a bias), of nanoGPT (cross-entropy of
``(B, T, vocab)`` logits without a bias) and of the MNIST example (``(N, 10)`` with a bias); values against
eager and torch, gradients too."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir.passes import manager, sums
from tests.support import assert_close, to_numpy


def lm_step(lib, h, W, b, y):
    """The word language model's decoder and loss: (seq, batch, hidden) -> (seq * batch, vocab) log-probs."""
    logits = lib.matmul(h, W.t()) + b
    loss = lib.nn.functional.nll_loss(lib.nn.functional.log_softmax(logits.view(-1, W.shape[0]), dim=1), y)
    loss.backward()
    return loss, W.grad, b.grad


def gpt_step(lib, h, W, y):
    """nanoGPT's head and loss: cross-entropy of (B, T, vocab) logits seen as rows, no bias."""
    logits = lib.matmul(h, W.t())
    loss = lib.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    return loss, W.grad


def cnn_step(lib, h, W, b, y):
    """The MNIST example's last layer and loss."""
    loss = lib.nn.functional.nll_loss(lib.nn.functional.log_softmax(lib.nn.functional.linear(h, W, b), dim=1), y)
    loss.backward()
    return loss, W.grad, b.grad


CASES = {  # name: (step, hidden's shape, vocab, targets' shape, bias)
    "lstm": (lm_step, (7, 3, 8), 50, (21,), True),
    "gpt": (gpt_step, (2, 5, 8), 40, (2, 5), False),
    "cnn": (cnn_step, (6, 16), 10, (6,), True),
}


def case_inputs(lib, name, seed=0):
    """The step's inputs under ``lib`` (the same values for jitorch and torch): hidden, weight[, bias], targets."""
    _, shape, vocab, targets, bias = CASES[name]
    rng = np.random.default_rng(seed)
    h = lib.tensor(rng.standard_normal(shape).astype(np.float32))
    params = [rng.standard_normal((vocab, shape[-1])).astype(np.float32)]
    if bias:
        params.append(rng.standard_normal(vocab).astype(np.float32))
    y = lib.tensor(rng.integers(0, vocab, targets))
    return [h, *(lib.tensor(p, requires_grad=True) for p in params), y]


def run_step(name, lib, compiled=False, seed=0):
    step = CASES[name][0]
    h, *params, y = case_inputs(lib, name, seed)

    def call(h, y):
        for p in params:
            p.grad = None
        return step(lib, h, *params, y)
    fn = jt.compile(call) if compiled else call
    return fn, h, y


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_kernel_computes_the_gradient_of_the_logits(name):
    """The one-hot (eq against the positions), log-softmax's backward (exp, mul, sub) and, with a bias, its
    gradient (sum) in one kernel; no kernel sums the one-hot over the rows apart."""
    fn, h, y = run_step(name, jt, compiled=True)
    kernels = [k.ops for k in fn.lower(h, y).kernels]
    backward = [ops for ops in kernels if "exp" in ops]
    assert len(backward) == 1, kernels
    assert {"arange", "eq", "where.self", "exp", "mul", "sub"} <= set(backward[0]), kernels
    assert ("sum" in backward[0]) == CASES[name][4], kernels
    assert sum("arange" in ops for ops in kernels) == 1, kernels
    # (the row kernel writes each row's statistics, not the log-probs: ir/passes/lse.py)
    assert [ops for ops in kernels if "_log_softmax_stats" in ops] == [
        ["add", "view", "_log_softmax_stats"] if name == "lstm" else ["add", "_log_softmax_stats"] if name == "cnn"
        else ["_log_softmax_stats"]], kernels


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_step_matches_eager_and_torch(name, seed):
    fn, h, y = run_step(name, jt, compiled=True, seed=seed)
    got = [fn(h, y) for _ in range(2)][-1]  # (the second call runs the cached kernels)
    eager_fn, eh, ey = run_step(name, jt, seed=seed)
    expected = eager_fn(eh, ey)
    torch_fn, th, ty = run_step(name, torch, seed=seed)
    oracle = torch_fn(th, ty)
    for g, e, t in zip(got, expected, oracle):
        assert_close(g, to_numpy(e))
        assert_close(g, t.detach().numpy())


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_rewritten_step_gives_the_bits_of_the_step_without_the_sums_pass(name, monkeypatch):
    """The one-hot's row sum becomes the picked value exactly, and the bias's sum adds the same elements in the
    same order in the gradient's kernel as it did in a kernel of its own: every result has the same bits."""
    fn, h, y = run_step(name, jt, compiled=True, seed=3)
    with_pass = [t.numpy().copy() for t in fn(h, y)]
    without = tuple(p for p in manager.DEFAULT_PASSES if p is not sums.run)
    monkeypatch.setattr(manager.optimize, "__defaults__", (without,) + manager.optimize.__defaults__[1:])
    fn, h, y = run_step(name, jt, compiled=True, seed=3)
    # (the one-hot's row sum, which writes the one-hot, and the gradient's kernel reading it back, which sums the
    # bias's gradient; without a bias, the gradient is the row sum's row epilogue: one kernel)
    kernels = 2 if CASES[name][4] else 1
    assert sum("arange" in k.ops or "exp" in k.ops for k in fn.lower(h, y).kernels) == kernels
    for a, b in zip(with_pass, (t.numpy() for t in fn(h, y))):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_targets_out_of_range_raise_in_the_compiled_step():
    """The one-hot's positions are an index_select of the targets: a target out of range raises (torch's
    IndexError) rather than giving a zero gradient row, with the row sum rewritten away."""
    fn, h, y = run_step("gpt", jt, compiled=True)
    fn(h, y)
    bad = y.clone()
    bad[0, 1] = 40
    with pytest.raises(IndexError):
        fn(h, bad)


def test_sum_of_a_reshaped_kernel_value_fuses_into_its_kernel():
    """A sum through a view of a value the group computes: one kernel (on main, the view started a second)."""
    x = jt.randn(20, 6)
    for fn in (lambda x: (x * 2).view(5, 4, 6).sum((0, 1)), lambda x: (x * 2).view(5, 4, 6).sum()):
        kernels = [k.ops for k in jt.compile(fn).lower(x).kernels]
        assert kernels == [["mul", "sum"]], kernels
        assert_close(jt.compile(fn)(x), to_numpy(fn(x)))


def test_gradcheck_through_the_compiled_lstm_shaped_loss():
    rng = np.random.default_rng(3)
    h = jt.tensor(rng.standard_normal((3, 2, 4)), requires_grad=True)
    W = jt.tensor(rng.standard_normal((9, 4)), requires_grad=True)
    b = jt.tensor(rng.standard_normal(9), requires_grad=True)
    y = jt.tensor(rng.integers(0, 9, (6,)))
    loss = jt.compile(lambda h, W, b: jt.nn.functional.nll_loss(
        jt.nn.functional.log_softmax((jt.matmul(h, W.t()) + b).view(-1, 9), dim=1), y))
    assert jt.autograd.gradcheck(loss, (h, W, b))
