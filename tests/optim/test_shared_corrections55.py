"""A compiled Adam-family step shares one pair of captured bias corrections among the parameters whose step
counts are equal (jitorch/optim/optimizer.py's `_traced_bias_corrections`): one refresh per group before each
call instead of one per parameter, with a guard that the shared counts stay equal."""

from __future__ import annotations

import numpy as np
import torch

import jitorch as jt
from jitorch.jit import results

SHAPES = ((6, 4), (4,), (3, 6), (3,))


def _adamw_step(lib, arrays, grads):
    """Parameters of ``arrays``, AdamW in two groups (decay on the matrices, as nanoGPT's
    ``configure_optimizers``), and ``step(k)`` that takes a step with gradients ``grads[k]``: (step, params,
    optimizer). ``step.run`` is what ``step`` calls (a compiled step: ``step.run = jt.compile(step.run)``)."""
    params = [lib.tensor(a.copy(), requires_grad=True) for a in arrays]
    opt = lib.optim.AdamW([{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.1},
                           {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                          lr=0.01, betas=(0.9, 0.95))

    def update(*gs):
        for p, g in zip(params, gs):
            p.grad = g
        opt.step()

    def step(k):
        step.run(*[lib.tensor(g) for g in grads[k]])
    step.run = update
    return step, params, opt


def _setup(seed=0, calls=4):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(calls)]
    return arrays, grads


def _graph(compiled):
    """The graph of the compiled function's last cache entry."""
    return next(reversed(compiled.cache.values())).executable.graph


def _corrections(graph):
    return sorted(name for name in graph.constant_tensors if name.startswith(("step_size", "bias_correction2_sqrt")))


def test_equal_counts_share_one_pair_of_corrections_per_group():
    arrays, grads = _setup()
    step, params, opt = _adamw_step(jt, arrays, grads)
    eager, eager_params, _ = _adamw_step(jt, arrays, grads)
    torch_step, torch_params, _ = _adamw_step(torch, arrays, grads)
    step(0)  # (the state is made eagerly first: a state tensor made inside a trace would be a traced value)
    eager(0)
    torch_step(0)
    compiled = step.run = jt.compile(step.run)
    for k in range(1, 4):
        step(k)
        eager(k)
        torch_step(k)
    graph = _graph(compiled)
    # two groups (their own learning rates) -> two pairs, where each of the 4 parameters had its own
    assert len(_corrections(graph)) == 4
    # the pairs' two refreshes and the groups' two learning rates
    assert len(graph.refreshers) == 4
    assert len(compiled.cache) == 1
    for p, q, t in zip(params, eager_params, torch_params):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
        np.testing.assert_allclose(p.detach().numpy(), t.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert all(float(opt.state[p]["step"]) == 4 for p in params)


def test_counts_made_unequal_after_the_trace_retrace_with_their_own_corrections():
    arrays, grads = _setup(1, calls=5)
    runs = {}
    for name, lib in (("compiled", jt), ("eager", jt), ("torch", torch)):
        step, params, opt = _adamw_step(lib, arrays, grads)
        step(0)
        if name == "compiled":
            step.run = jt.compile(step.run)
        step(1)
        step(2)
        with lib.no_grad():
            opt.state[params[2]]["step"].fill_(10.0)  # one matrix's count moves away from the others'
        step(3)
        step(4)
        runs[name] = (step.run, params, opt)
    compiled, params, opt = runs["compiled"]
    assert "step counts that share their bias corrections" in compiled.retrace_reason
    graph = _graph(compiled)
    # the decay group's two counts differ now (3 pairs); the other group's stay shared
    assert len(_corrections(graph)) == 6
    assert [float(opt.state[p]["step"]) for p in params] == [5, 5, 12, 5]
    for p, q, t in zip(params, runs["eager"][1], runs["torch"][1]):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
        np.testing.assert_allclose(p.detach().numpy(), t.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_the_shared_guard_holds_only_while_the_counts_are_equal():
    arrays, grads = _setup(2)
    step, params, opt = _adamw_step(jt, arrays, grads)
    step(0)
    compiled = step.run = jt.compile(step.run)
    step(1)
    graph = _graph(compiled)
    assert results.python_guards_hold(graph)
    with jt.no_grad():
        opt.state[params[1]]["step"].add_(1.0)  # one bias's count moves away from the other bias's
    assert not results.python_guards_hold(graph)
    with jt.no_grad():
        opt.state[params[3]]["step"].add_(1.0)  # equal again (the other group's counts are apart: theirs)
    assert results.python_guards_hold(graph)
