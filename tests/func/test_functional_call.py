"""functional_call and stack_module_state against torch.func's: replaced parameters and buffers, tied weights,
strict mode, and an ensemble mapped with vmap."""

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.func as jf
from jitorch.func import batching

RNG = np.random.default_rng(149000)


def _net(m, tied=False):
    m.manual_seed(0)
    net = m.nn.Sequential(m.nn.Linear(3, 3), m.nn.BatchNorm1d(3), m.nn.Linear(3, 3))
    if tied:
        net[2].weight = net[0].weight
    return net.eval()


def _state(tied=False):
    names = ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias", "1.running_mean", "1.running_var"]
    if tied:
        names.remove("2.weight")
    shapes = {"weight": (3, 3), "bias": (3,), "running_mean": (3,), "running_var": (3,)}
    return {n: np.abs(RNG.standard_normal(shapes[n.split(".")[1]] if n[0] != "1" else (3,))) for n in names}


def test_functional_call_replaces_parameters_and_buffers_then_restores():
    state, x = _state(), RNG.standard_normal((2, 3))
    got_net, want_net = _net(jt), _net(torch)
    before = [p.detach().numpy().copy() for p in got_net.parameters()]
    got = jf.functional_call(got_net, {k: jt.tensor(v) for k, v in state.items()}, (jt.tensor(x),))
    want = torch.func.functional_call(want_net, {k: torch.tensor(v) for k, v in state.items()},
                                      (torch.tensor(x),))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
    assert all(np.array_equal(b, p.detach().numpy()) for b, p in zip(before, got_net.parameters()))
    assert isinstance(got_net[0].weight, jt.nn.Parameter)


def test_functional_call_tied_weights_and_strict():
    state, x = _state(tied=True), RNG.standard_normal((2, 3))
    got = jf.functional_call(_net(jt, True), {k: jt.tensor(v) for k, v in state.items()}, jt.tensor(x))
    want = torch.func.functional_call(_net(torch, True), {k: torch.tensor(v) for k, v in state.items()},
                                      torch.tensor(x))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
    both = {"0.weight": jt.ones(3, 3), "2.weight": jt.zeros(3, 3)}
    with pytest.raises(ValueError, match="which are tied. Consider using tie_weights=False"):
        jf.functional_call(_net(jt, True), both, jt.tensor(x))
    with pytest.raises(RuntimeError, match=r"Missing key\(s\): '0.bias'"):
        jf.functional_call(_net(jt), {"0.weight": jt.ones(3, 3)}, jt.tensor(x), strict=True)
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        jf.functional_call(_net(jt), ({"0.bias": jt.ones(3)}, {"0.bias": jt.ones(3)}), jt.tensor(x))


def test_ensemble_with_stack_module_state_and_vmap():
    """Three models' outputs through one vmapped functional_call equal the models' own calls."""
    models = []
    for seed in range(3):
        jt.manual_seed(seed)
        models.append(jt.nn.Sequential(jt.nn.Linear(4, 5), jt.nn.Tanh(), jt.nn.Linear(5, 2)))
    params, buffers = jf.stack_module_state(models)
    assert params["0.weight"].shape == (3, 5, 4) and params["0.weight"].requires_grad and not buffers
    x = jt.tensor(RNG.standard_normal((6, 4)).astype(np.float32))
    before = batching.STATS["per_sample"].copy()
    got = jf.vmap(lambda p: jf.functional_call(models[0], p, (x,)))(params)
    assert batching.STATS["per_sample"] == before  # (linear with batched weights: a baddbmm)
    want = jt.stack([m(x) for m in models])
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="Expected at least one model, got 0"):
        jf.stack_module_state([])
