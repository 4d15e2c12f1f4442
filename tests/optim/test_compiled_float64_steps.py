"""A compiled optimizer step of float64 parameters gives eager's results within float64 rounding (a fused kernel
may round an ulp otherwise), and torch's.

The compiled step read the learning rate as a float32 scalar (so a scheduler needs no new trace): 0.1 became
0.10000000149, and float64 parameters moved 1e-8 off eager's steps after three SGD steps (5e-8 AdamW, 1e-7
NAdam with decoupled weight decay). ASGD's traced step also computed ``1 - lambd * eta`` and the next eta in
its float32 state's dtype. The rate is now float64 where the group holds a float64 parameter, ASGD's factors
float64 as eager's Python floats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt

CASES = [("SGD", {"lr": 0.1, "momentum": 0.9}), ("AdamW", {"lr": 0.1}),
         ("NAdam", {"lr": 0.1, "decoupled_weight_decay": True, "weight_decay": 0.1}),
         ("ASGD", {"lr": 0.1, "t0": 1, "lambd": 0.1}), ("Muon", {"lr": 0.1}), ("Rprop", {"lr": 0.1})]
INIT = np.random.default_rng(0).normal(size=(3, 4))


def _steps(lib, name, kw, compiled=False):
    p = lib.tensor(INIT.copy(), requires_grad=True)
    opt = getattr(lib.optim, name)([p], **kw)

    def step():
        opt.zero_grad()
        (p * p * 0.5 + p).sum().backward()
        opt.step()
    run = jt.compile(step) if compiled else step
    for _ in range(3):
        run()
    return p.detach().numpy(), run


@pytest.mark.parametrize("name, kw", CASES, ids=[c[0] for c in CASES])
def test_a_compiled_float64_step_keeps_float64_precision(name, kw):
    eager, _ = _steps(jt, name, kw)
    compiled, run = _steps(jt, name, kw, compiled=True)
    assert len(run.cache) == 1  # one traced step, run as a graph
    np.testing.assert_allclose(compiled, eager, rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(compiled, _steps(torch, name, kw)[0], rtol=1e-13, atol=1e-15)
