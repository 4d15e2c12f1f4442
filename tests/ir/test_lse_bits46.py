"""What the lse pass keeps of a loss of big rows (found by session 46's partition helper).

The pass keeps every picked log-prob's bits, but nll_loss's ``gather(lp).squeeze(-1)`` becomes a reshape of the
computed ``(gather(x) - m) - n``, which starts another kernel: the loss's sum then reads the picked values from
memory, where it read them through the gather, and its partial sums associate otherwise, as a fused sum may
(docs/codegen-design.md, "Log-softmax statistics"): the loss moves by an ulp, the picked values do not."""

import numpy as np

import jitorch as jt
from jitorch.ir.passes import lse


def _with_and_without_the_pass(monkeypatch, fn, *args):
    rewritten = []
    real = lse.run
    monkeypatch.setattr(lse, "run", lambda graph: rewritten.append(real(graph)) or rewritten[-1])
    with_pass = jt.compile(fn)(*args).numpy()
    monkeypatch.setattr(lse, "run", lambda graph: 0)
    without = jt.compile(fn)(*args).numpy()
    assert sum(rewritten) == 1
    return with_pass, without


def _inputs():
    """Seed 7, (300, 1000) float32 logits (``x * 2`` below), targets."""
    rng = np.random.default_rng(7)
    return (jt.tensor(rng.standard_normal((300, 1000)).astype(np.float32)),
            jt.tensor(rng.integers(0, 1000, 300)))


def test_the_picked_log_probs_of_big_rows_keep_their_bits(monkeypatch):
    def picked(x, y):
        return jt.nn.functional.log_softmax(x * 2, -1).gather(1, y[:, None]) * 3
    with_pass, without = _with_and_without_the_pass(monkeypatch, picked, *_inputs())
    assert with_pass.tobytes() == without.tobytes()
    assert with_pass.tobytes() == picked(*_inputs()).numpy().tobytes()


def test_a_cross_entropy_of_big_rows_moves_by_at_most_an_ulp_with_the_pass(monkeypatch):
    """9.056694 with the pass, 9.056693 (eager's bits) without it on x86-64-v2 and rocketlake; on znver4 (AMD
    EPYC, session 48) the wider sum gives 9.056694 without the pass too (torch's value; float64's is 9.0566932),
    so compiled and eager are held to the ulp a fused sum may move, not to equal bits."""
    def loss(x, y):
        return jt.nn.functional.cross_entropy(x * 2, y)
    with_pass, without = _with_and_without_the_pass(monkeypatch, loss, *_inputs())
    eager = loss(*_inputs()).numpy()
    assert abs(without - eager) <= np.spacing(np.abs(eager))
    assert abs(with_pass - without) <= np.spacing(np.abs(without))
