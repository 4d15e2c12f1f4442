"""The lse pass's claim of the same bits, on a loss of big rows (found by session 46's partition helper, open).

The pass keeps every picked log-prob's bits, but nll_loss's ``gather(lp).squeeze(-1)`` becomes a reshape of the
computed ``(gather(x) - m) - n``, which starts another kernel: the loss's sum then reads the picked values from
memory, where it read them through the gather, and its partial sums associate otherwise."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.ir.passes import lse


@pytest.mark.xfail(strict=True, reason="open: the picked values' sum associates otherwise with the lse pass "
                                       "(1 ulp of the loss); see the module docstring")
def test_a_cross_entropy_of_big_rows_has_the_bits_it_has_without_the_lse_pass(monkeypatch):
    """Seed 7, (300, 1000) float32 logits ``x * 2``: 9.056694 with the pass, 9.056693 without it."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 1000)).astype(np.float32)
    y = rng.integers(0, 1000, 300)

    def loss():
        f = jt.compile(lambda x, y: jt.nn.functional.cross_entropy(x * 2, y))
        return f(jt.tensor(x), jt.tensor(y)).numpy()
    rewritten = []
    real = lse.run
    monkeypatch.setattr(lse, "run", lambda graph: rewritten.append(real(graph)) or rewritten[-1])
    with_pass = loss()
    monkeypatch.setattr(lse, "run", lambda graph: 0)
    without = loss()
    assert sum(rewritten) == 1
    np.testing.assert_allclose(with_pass, without, rtol=1e-6)
    assert with_pass.tobytes() == without.tobytes()
