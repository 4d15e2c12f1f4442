"""Optimizer updates trace: compiled with jitorch.compile they give the eager parameters and state.

The state is created by one eager step first: torch creates it lazily on the
first step, and a state tensor created inside a trace would be a traced value.
"""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
import jitorch.optim as optim

MAKERS = [
    lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
    lambda p: optim.Adam(p, lr=0.1, amsgrad=True, weight_decay=0.1),
    lambda p: optim.AdamW(p, lr=0.1),
    lambda p: optim.RMSprop(p, lr=0.01, centered=True, momentum=0.5),
]


def _train(make, compiled, rng):
    w = jt.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    opt = make([w])
    grads = [jt.tensor(rng.standard_normal((4, 3)).astype(np.float32)) for _ in range(4)]
    w.grad = grads[0]
    opt.step()

    def update(g):
        w.grad = g
        opt.step()

    run = jt.compile(update, fullgraph=True) if compiled else update
    for g in grads[1:]:
        run(g)
    return w, opt.state[w]


@pytest.mark.parametrize("make", MAKERS, ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_compiled_update_equals_eager(make):
    w_eager, state_eager = _train(make, False, np.random.default_rng(0))
    w_compiled, state_compiled = _train(make, True, np.random.default_rng(0))
    np.testing.assert_allclose(w_compiled.detach().numpy(), w_eager.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert sorted(state_compiled) == sorted(state_eager)
    for key, value in state_eager.items():
        np.testing.assert_allclose(state_compiled[key].numpy(), value.numpy(), rtol=1e-6, atol=1e-7)
