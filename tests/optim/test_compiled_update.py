"""Optimizer updates trace: compiled with jitorch.compile they give the eager parameters and state.

The state is created by one eager step first: torch creates it lazily on the
first step, and a state tensor created inside a trace would be a traced value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

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


def _adam_step_from_the_first_call(opt_class, steps_per_call=1, **options):
    """A compiled step whose first call makes the state (as a training step's does), and its eager twin:
    (compiled function, its parameter and optimizer, the eager ones)."""
    rng = np.random.default_rng(1)
    start = rng.standard_normal((5, 3)).astype(np.float32)
    grads = [jt.tensor(rng.standard_normal((5, 3)).astype(np.float32)) for _ in range(steps_per_call)]

    def make():
        w = jt.tensor(start.copy(), requires_grad=True)
        opt = opt_class([w], **options)

        def update():
            for g in grads:
                w.grad = g
                opt.step()
        return update, w, opt
    compiled, w, opt = make()
    return jt.compile(compiled), w, opt, make()


def _bias_correction_holders(compiled):
    """The captured bias corrections of the graph the last call ran (and that graph)."""
    (entry,) = compiled.cache.values()
    graph = entry.executable.graph
    named = {kind: [t for name, t in graph.constant_tensors.items() if name.split("_")[:2] == kind.split("_")[:2]]
             for kind in ("step_size", "bias_correction2_sqrt")}
    return [t for pair in zip(*named.values()) for t in pair], graph


@pytest.mark.parametrize("opt_class", [optim.Adam, optim.AdamW])
def test_bias_corrections_are_set_before_each_call_as_torch_computes_them(opt_class):
    # The compiled step takes lr / (1 - beta1**t) and sqrt(1 - beta2**t) from the step count at each call,
    # by Python's arithmetic as torch does (the C library's pow), not 7 ops per parameter in the graph.
    lr, betas = 0.01, (0.9, 0.999)
    compiled, w, opt, (eager, w_eager, _) = _adam_step_from_the_first_call(opt_class, lr=lr, betas=betas)
    compiled()  # (its graph makes the state and serves this call only: the next traces again)
    eager()
    for call in range(2, 5):
        compiled()
        eager()
        holders, graph = _bias_correction_holders(compiled)
        assert [n.op.name for n in graph.nodes].count("pow") == 0
        t = float(opt.state[w]["step"])
        assert t == call
        lr32 = float(np.float32(lr))  # (the graph's learning rate is a float32 scalar, refreshed per call)
        assert [float(h) for h in holders] == [lr32 / (1 - betas[0] ** t), math.sqrt(1 - betas[1] ** t)]
        np.testing.assert_allclose(w.detach().numpy(), w_eager.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_two_steps_in_one_call_count_both_increments():
    compiled, w, opt, (eager, w_eager, opt_eager) = _adam_step_from_the_first_call(optim.AdamW, 2, lr=0.05)
    for _ in range(3):
        compiled()
        eager()
    holders, graph = _bias_correction_holders(compiled)
    assert len(holders) == 4 and not any(n.op.name == "pow" for n in graph.nodes)
    assert float(opt.state[w]["step"]) == float(opt_eager.state[w_eager]["step"]) == 6
    assert float(holders[3]) == math.sqrt(1 - 0.999 ** 6)  # the second step of the last call: t = 6
    np.testing.assert_allclose(w.detach().numpy(), w_eager.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_a_step_count_written_otherwise_in_the_trace_keeps_the_ops():
    # A count the traced code changes itself is not "its value before the call plus increments": the bias
    # corrections are then the graph's ops on it, as before.
    w = jt.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    w_eager = jt.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    opts = [optim.Adam([p], lr=0.1) for p in (w, w_eager)]
    for p, opt in zip((w, w_eager), opts):
        p.grad = jt.full((2, 2), 0.5)
        opt.step()

    def update(p, opt):
        opt.state[p]["step"].add_(2.0)
        p.grad = jt.full((2, 2), 0.25)
        opt.step()
    compiled = jt.compile(lambda: update(w, opts[0]))
    compiled()
    update(w_eager, opts[1])
    holders, graph = _bias_correction_holders(compiled)
    assert holders == [] and [n.op.name for n in graph.nodes].count("pow") == 2
    assert float(opts[0].state[w]["step"]) == 4
    np.testing.assert_allclose(w.detach().numpy(), w_eager.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_a_count_where_python_raises_gives_the_ieee_values():
    # t = 0 (a count set to -1): 1 - beta1**0 is 0, and the graph's division gives inf where Python's raises
    compiled, w, opt, _ = _adam_step_from_the_first_call(optim.Adam, lr=0.1)
    compiled()
    opt.state[w]["step"].fill_(-1.0)
    compiled()
    holders, _ = _bias_correction_holders(compiled)
    assert [float(h) for h in holders] == [math.inf, 0.0]


def test_an_exported_step_keeps_the_bias_correction_ops():
    # an export keeps its captured values as they are (nothing sets them before each call): a bias correction
    # handed over as a number would stay the first step's
    w = jt.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    opt = optim.AdamW([w], lr=0.1)
    w.grad = jt.full((2, 2), 0.5)
    opt.step()

    def update(g):
        w.grad = g
        opt.step()
    program = jt.export(update, (jt.full((2, 2), 0.25),))
    ops = [n.op.name for n in program.graph.nodes]
    assert ops.count("pow") == 2 and not any(name.startswith("step_size") for name in program.constants)
    assert jt.compiler.scalars_refreshed() is False


def _clipped_adamw_step(lib, arrays):
    """A model of ``arrays``' weights (three Linear layers) and a compiled-or-eager-ready AdamW step with
    gradient clipping, as nanoGPT trains: (step, model, optimizer)."""
    layers = [lib.nn.Linear(a.shape[1], a.shape[0]) for a in arrays]
    model = lib.nn.Sequential(layers[0], lib.nn.Tanh(), layers[1], lib.nn.Tanh(), layers[2])
    with lib.no_grad():
        for layer, a in zip(layers, arrays):
            layer.weight.copy_(lib.tensor(a))
            layer.bias.fill_(0.1)
    opt = lib.optim.AdamW(model.parameters(), lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss
    return step, model, opt


def test_a_compiled_adamw_step_counts_every_parameter_in_one_kernel():
    # The step counters (one ``add_(1)`` per parameter) and AdamW's decay factor are one kernel of one element,
    # not one kernel each; the parameters and state stay eager's, and torch's within float32 roundings.
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((16, 8), (12, 16), (4, 12))]
    x, y = rng.standard_normal((10, 8)).astype(np.float32), rng.standard_normal((10, 4)).astype(np.float32)
    runs = {}
    for name, lib in (("compiled", jt), ("eager", jt), ("torch", torch)):
        step, model, opt = _clipped_adamw_step(lib, arrays)
        run = jt.compile(step) if name == "compiled" else step
        for _ in range(4):
            run(lib.tensor(x), lib.tensor(y))
        runs[name] = (run, model, opt)
    compiled, model, opt = runs["compiled"]
    executable = compiled.lower(jt.tensor(x), jt.tensor(y)).executable
    one_element = [s for s in executable.steps if getattr(s, "group", None) is not None and s.group.kind == "pointwise"
                   and s.group.shape == ()]
    (counters,) = one_element
    states = [opt.state[p]["step"] for p in model.parameters()]
    assert [n.op.name for n in counters.group.nodes].count("add") >= len(states) == 6
    for _, m, o in (runs["eager"], runs["torch"]):
        for p, q in zip(model.parameters(), m.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
            assert float(opt.state[p]["step"]) == float(o.state[q]["step"]) == 4
            np.testing.assert_allclose(opt.state[p]["exp_avg_sq"].numpy(), o.state[q]["exp_avg_sq"].numpy(),
                                       rtol=1e-5, atol=1e-9)
