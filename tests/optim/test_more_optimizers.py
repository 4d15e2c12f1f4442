"""Adagrad, Adamax, NAdam, RAdam, Adadelta against NumPy transcriptions of torch's documented algorithms
(errors, groups, state dicts, compiled steps too); CosineAnnealingWarmRestarts and CyclicLR against
their formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
import jitorch.optim as optim
from jitorch.optim import lr_scheduler

from .reference import decayed

STEPS = 6


# NumPy references: one parameter through the steps whose gradients are `grads`; the parameter after each.

def adagrad_reference(p, grads, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                      maximize=False):
    p, out = p.copy(), []
    acc = np.full_like(p, initial_accumulator_value)
    for t, g in enumerate(grads, start=1):
        g = -g if maximize else g
        if weight_decay:
            g = g + weight_decay * p
        acc = acc + g * g
        p = p - lr / (1 + (t - 1) * lr_decay) * g / (np.sqrt(acc) + eps)
        out.append(p)
    return out


def adamax_reference(p, grads, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, maximize=False):
    (b1, b2), p, out = betas, p.copy(), []
    m, u = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = -g if maximize else g
        if weight_decay:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g) + eps)
        p = p - lr / (1 - b1 ** t) * m / u
        out.append(p)
    return out


def nadam_reference(p, grads, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                    decoupled_weight_decay=False, maximize=False):
    (b1, b2), p, out = betas, p.copy(), []
    m, v = np.zeros_like(p), np.zeros_like(p)
    mu_product = np.float32(1.0)  # torch keeps the product in a float32 tensor
    for t, g in enumerate(grads, start=1):
        p, g = decayed(p, g, lr, weight_decay, decoupled_weight_decay, maximize)
        mu = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
        mu_product = np.float32(mu_product * np.float32(mu))
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = np.sqrt(v / (1 - b2 ** t)) + eps
        mp = float(mu_product)
        p = p - lr * (1 - mu) / (1 - mp) * g / denom - lr * mu_next / (1 - mp * mu_next) * m / denom
        out.append(p)
    return out


def radam_reference(p, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                    maximize=False):
    (b1, b2), p, out = betas, p.copy(), []
    m, v = np.zeros_like(p), np.zeros_like(p)
    rho_inf = 2 / (1 - b2) - 1
    for t, g in enumerate(grads, start=1):
        p, g = decayed(p, g, lr, weight_decay, decoupled_weight_decay, maximize)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** t)
        rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        if rho_t > 5:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            p = p - lr * m_hat * rect * math.sqrt(1 - b2 ** t) / (np.sqrt(v) + eps)
        else:
            p = p - lr * m_hat
        out.append(p)
    return out


def adadelta_reference(p, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, maximize=False):
    p, out = p.copy(), []
    v, u = np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = -g if maximize else g
        if weight_decay:
            g = g + weight_decay * p
        v = rho * v + (1 - rho) * g * g
        delta = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta
        p = p - lr * delta
        out.append(p)
    return out


OPTIMIZERS = {
    "Adagrad": (optim.Adagrad, adagrad_reference),
    "Adamax": (optim.Adamax, adamax_reference),
    "NAdam": (optim.NAdam, nadam_reference),
    "RAdam": (optim.RAdam, radam_reference),
    "Adadelta": (optim.Adadelta, adadelta_reference),
}

lrs = st.sampled_from([1e-3, 0.01, 0.1])
decays = st.sampled_from([0.0, 0.1])
betas = st.sampled_from([(0.9, 0.999), (0.8, 0.9), (0.5, 0.6)])
OPTIONS = {
    "Adagrad": st.fixed_dictionaries({"lr": lrs, "lr_decay": st.sampled_from([0.0, 0.3]), "weight_decay": decays,
                                      "initial_accumulator_value": st.sampled_from([0.0, 0.5]),
                                      "eps": st.sampled_from([1e-10, 1e-3]), "maximize": st.booleans()}),
    "Adamax": st.fixed_dictionaries({"lr": lrs, "betas": betas, "weight_decay": decays, "maximize": st.booleans()}),
    # momentum_decay up to 0.5 makes mu vary enough over six steps to exercise the schedule
    "NAdam": st.fixed_dictionaries({"lr": lrs, "betas": betas, "weight_decay": decays,
                                    "momentum_decay": st.sampled_from([4e-3, 0.5]),
                                    "decoupled_weight_decay": st.booleans(), "maximize": st.booleans()}),
    # betas[1] = 0.6 keeps rho_t <= 5 (the un-rectified branch) for every step; 0.9 switches after step 5
    "RAdam": st.fixed_dictionaries({"lr": lrs, "betas": betas, "weight_decay": decays,
                                    "decoupled_weight_decay": st.booleans(), "maximize": st.booleans()}),
    "Adadelta": st.fixed_dictionaries({"lr": st.sampled_from([1.0, 0.5]), "rho": st.sampled_from([0.9, 0.5]),
                                       "eps": st.sampled_from([1e-6, 1e-3]), "weight_decay": decays,
                                       "maximize": st.booleans()}),
}


def _run(opt, params, grads_per_param):
    """Give each parameter the step's gradient, step, and collect the parameters after each step."""
    history = []
    for k in range(STEPS):
        for p, grads in zip(params, grads_per_param):
            p.grad = jt.tensor(grads[k], dtype=p.dtype)
        opt.step()
        history.append([p.detach().numpy().copy() for p in params])
    return history


def _check_against_reference(name, options, seed, dtype=np.float64):
    cls, reference = OPTIMIZERS[name]
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(5).astype(dtype)]
    grads = [[(rng.standard_normal(a.shape) * rng.uniform(0.1, 3.0)).astype(dtype) for _ in range(STEPS)]
             for a in start]
    params = [jt.tensor(a, requires_grad=True) for a in start]
    history = _run(cls(params, **options), params, grads)
    rtol, atol = (1e-10, 1e-12) if dtype == np.float64 else (1e-5, 1e-6)
    for i, (a, g) in enumerate(zip(start, grads)):
        expected = reference(a.astype(np.float64), [x.astype(np.float64) for x in g], **options)
        for k in range(STEPS):
            np.testing.assert_allclose(history[k][i], expected[k], rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_defaults_match_reference(name):
    _check_against_reference(name, {}, seed=0)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_steps_match_reference(name):
    @settings(max_examples=8)
    @given(options=OPTIONS[name], seed=st.integers(0, 2 ** 16))
    def check(options, seed):
        _check_against_reference(name, options, seed)
    check()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_float32_steps(name):
    _check_against_reference(name, {"weight_decay": 0.1}, seed=1, dtype=np.float32)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_param_groups_use_their_own_options(name):
    cls, reference = OPTIMIZERS[name]
    rng = np.random.default_rng(2)
    start = [rng.standard_normal(4), rng.standard_normal(3)]
    grads = [[rng.standard_normal(a.shape) for _ in range(STEPS)] for a in start]
    params = [jt.tensor(a, requires_grad=True) for a in start]
    opt = cls([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.05, "weight_decay": 0.2}], lr=0.01)
    history = _run(opt, params, grads)
    for i, options in enumerate([dict(lr=0.01), dict(lr=0.05, weight_decay=0.2)]):
        expected = reference(start[i], grads[i], **options)
        np.testing.assert_allclose(history[-1][i], expected[-1], rtol=1e-10, atol=1e-12)


ERRORS = [
    (optim.Adagrad, dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (optim.Adagrad, dict(lr_decay=-0.5), "Invalid lr_decay value: -0.5"),
    (optim.Adagrad, dict(weight_decay=-0.1), "Invalid weight_decay value: -0.1"),
    (optim.Adagrad, dict(initial_accumulator_value=-1), "Invalid initial_accumulator_value value: -1"),
    (optim.Adagrad, dict(eps=-1e-3), "Invalid epsilon value: -0.001"),
    (optim.Adamax, dict(lr=-1.0), "Invalid learning rate: -1.0"),
    (optim.Adamax, dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0: 1.0"),
    (optim.Adamax, dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
    (optim.NAdam, dict(momentum_decay=-1e-3), "Invalid momentum_decay value: -0.001"),
    (optim.NAdam, dict(eps=-1.0), "Invalid epsilon value: -1.0"),
    (optim.RAdam, dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (optim.RAdam, dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    (optim.Adadelta, dict(rho=1.5), "Invalid rho value: 1.5"),
    (optim.Adadelta, dict(lr=-0.1), "Invalid learning rate: -0.1"),
]


@pytest.mark.parametrize("cls, options, message", ERRORS, ids=[m for _, _, m in ERRORS])
def test_invalid_hyperparameters_raise_torchs_errors(cls, options, message):
    with pytest.raises(ValueError, match=f"^{message}$".replace(".", r"\.")):
        cls([jt.zeros(2, requires_grad=True)], **options)


DEFAULTS = {
    "Adagrad": dict(lr=1e-2, lr_decay=0, eps=1e-10, weight_decay=0, initial_accumulator_value=0),
    "Adamax": dict(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0),
    "NAdam": dict(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                  decoupled_weight_decay=False),
    "RAdam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False),
    "Adadelta": dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0),
}
STATE_KEYS = {
    "Adagrad": ["step", "sum"],
    "Adamax": ["step", "exp_avg", "exp_inf"],
    "NAdam": ["step", "mu_product", "exp_avg", "exp_avg_sq"],
    "RAdam": ["step", "exp_avg", "exp_avg_sq"],
    "Adadelta": ["step", "square_avg", "acc_delta"],
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_defaults_and_state_dict_keys_are_torchs(name):
    cls = OPTIMIZERS[name][0]
    w = jt.zeros(3, requires_grad=True)
    opt = cls([w])
    group = opt.state_dict()["param_groups"][0]
    assert {k: group[k] for k in DEFAULTS[name]} == DEFAULTS[name]
    assert group["maximize"] is False and group["params"] == [0]
    w.grad = jt.ones(3)
    opt.step()
    opt.step()
    state = opt.state_dict()["state"]
    assert list(state) == [0] and list(state[0]) == STATE_KEYS[name]
    assert state[0]["step"].dtype is jt.float32 and state[0]["step"].item() == 2.0


def test_adagrad_makes_its_state_on_construction():
    # as torch: the accumulator starts at initial_accumulator_value before any step
    w = jt.zeros((2, 2), dtype=jt.float64, requires_grad=True)
    state = optim.Adagrad([w], initial_accumulator_value=0.25).state_dict()["state"][0]
    assert state["step"].item() == 0.0
    assert state["sum"].dtype is jt.float64
    np.testing.assert_array_equal(state["sum"].numpy(), np.full((2, 2), 0.25))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_load_state_dict_resumes_the_same_trajectory(name):
    cls = OPTIMIZERS[name][0]
    rng = np.random.default_rng(4)
    start, grads = rng.standard_normal(5), [rng.standard_normal(5) for _ in range(4)]
    a = jt.tensor(start, requires_grad=True)
    opt_a = cls([a], lr=0.05)
    for g in grads[:2]:
        a.grad = jt.tensor(g)
        opt_a.step()
    b = jt.tensor(a.detach().numpy(), requires_grad=True)
    opt_b = cls([b], lr=0.01)  # the loaded groups bring back lr=0.05
    saved = opt_a.state_dict()
    opt_b.load_state_dict({"state": {k: {n: t.clone() for n, t in v.items()} for k, v in saved["state"].items()},
                           "param_groups": saved["param_groups"]})
    assert opt_b.param_groups[0]["lr"] == 0.05
    for g in grads[2:]:
        a.grad, b.grad = jt.tensor(g), jt.tensor(g)
        opt_a.step()
        opt_b.step()
    # exact, but for NAdam: loading casts mu_product to the parameter's float64 (as torch does), which
    # then rounds less than the float32 product of the optimizer that was not reloaded
    np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-7 if name == "NAdam" else 0, atol=0)


COMPILED = {
    "Adagrad": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.1, weight_decay=0.01),
    "Adamax": lambda ps: optim.Adamax(ps, lr=0.01, weight_decay=0.01, maximize=True),
    "NAdam": lambda ps: optim.NAdam(ps, lr=0.01, weight_decay=0.01, decoupled_weight_decay=True),
    # beta2 = 0.9: rho_t passes 5 at step 6, so the traced `where` takes each branch within the steps run
    "RAdam": lambda ps: optim.RAdam(ps, lr=0.01, betas=(0.9, 0.9), weight_decay=0.01),
    "Adadelta": lambda ps: optim.Adadelta(ps, lr=0.5, weight_decay=0.01),
}


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_compiled_training_step_equals_eager(name):
    def make():
        g = jt.Generator().manual_seed(0)
        ps = [jt.randn(6, 3, generator=g).requires_grad_(), jt.zeros(3, requires_grad=True)]
        return ps, COMPILED[name](ps)

    def make_step(ps, opt):
        def step(x, y):
            opt.zero_grad()
            loss = ((x @ ps[0] + ps[1]).tanh() - y).square().mean()
            loss.backward()
            opt.step()
            return loss
        return step

    g = jt.Generator().manual_seed(1)
    x, y = jt.randn(8, 6, generator=g), jt.randn(8, 3, generator=g)
    (eager_ps, eager_opt), (comp_ps, comp_opt) = make(), make()
    eager, compiled = make_step(eager_ps, eager_opt), jt.compile(make_step(comp_ps, comp_opt), fullgraph=True)
    for _ in range(STEPS):
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=2e-5)
        for p, q in zip(comp_ps, eager_ps):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-5, atol=2e-6)
    # the step-dependent numbers (bias corrections, clr, mu, rho_t) are tensors: one graph serves every step
    assert len(compiled.cache) == 1
    for s_comp, s_eager in zip(comp_opt.state.values(), eager_opt.state.values()):
        assert list(s_comp) == list(s_eager)
        for key in s_eager:
            np.testing.assert_allclose(s_comp[key].numpy(), s_eager[key].numpy(), rtol=2e-5, atol=2e-6)


# Schedulers ---------------------------------------------------------------------------------------------

def _sgd(lr=0.1, momentum=0.9):
    return optim.SGD([jt.zeros(2, requires_grad=True)], lr=lr, momentum=momentum)


def _lrs(opt, scheduler, steps):
    """The lr of the first group before each of ``steps`` scheduler steps."""
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        scheduler.step()
    return out


@pytest.mark.parametrize("T_0, T_mult, eta_min", [(5, 1, 0.0), (3, 2, 0.01), (2, 3, 0.005)])
def test_cosine_annealing_warm_restarts_follows_sgdr(T_0, T_mult, eta_min):
    opt = _sgd()
    lrs = _lrs(opt, lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0, T_mult, eta_min), 40)
    expected, t_cur, t_i = [], 0, T_0
    for _ in range(40):
        expected.append(eta_min + (0.1 - eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2)
        t_cur += 1
        if t_cur == t_i:  # restart, with a period T_mult times longer
            t_cur, t_i = 0, t_i * T_mult
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)


def test_cosine_annealing_warm_restarts_steps_to_fractional_epochs():
    opt = _sgd()
    scheduler = lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=0.0)
    # periods [0, 2), [2, 6), [6, 14): epoch 7.5 is 1.5 into a period of 8
    for epoch, (t_cur, t_i) in [(0.5, (0.5, 2)), (3.0, (1.0, 4)), (7.5, (1.5, 8)), (1.0, (1.0, 2))]:
        scheduler.step(epoch)
        assert (scheduler.T_cur, scheduler.T_i) == (t_cur, t_i)
        assert scheduler.last_epoch == math.floor(epoch)
        assert scheduler.get_last_lr()[0] == pytest.approx(0.05 * (1 + math.cos(math.pi * t_cur / t_i)))
    with pytest.raises(ValueError, match="Expected non-negative epoch, but got -1"):
        scheduler.step(-1)


@pytest.mark.parametrize("options, message", [
    (dict(T_0=0), "Expected positive integer T_0, but got 0"),
    (dict(T_0=2.0), "Expected positive integer T_0, but got 2.0"),
    (dict(T_0=2, T_mult=0), "Expected integer T_mult >= 1, but got 0"),
    (dict(T_0=2, eta_min="0"), "Expected float or int eta_min, but got 0 of type <class 'str'>"),
])
def test_cosine_annealing_warm_restarts_errors(options, message):
    with pytest.raises(ValueError, match=message):
        lr_scheduler.CosineAnnealingWarmRestarts(_sgd(), **options)


def _cyclic_reference(t, base, top, up, down, mode, gamma):
    """The CyclicLR value at iteration t: a triangle wave from base up to the (scaled) top and back."""
    cycle, pos = t // (up + down) + 1, t % (up + down)
    height = pos / up if pos <= up else (up + down - pos) / down
    scale = {"triangular": 1.0, "triangular2": 0.5 ** (cycle - 1), "exp_range": gamma ** t}[mode]
    return base + (top - base) * height * scale


@pytest.mark.parametrize("mode, up, down, gamma", [("triangular", 4, None, 1.0), ("triangular2", 3, 5, 1.0),
                                                   ("exp_range", 4, 2, 0.95)])
def test_cyclic_lr_and_momentum_follow_the_triangle_wave(mode, up, down, gamma):
    opt = _sgd()
    scheduler = lr_scheduler.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=up, step_size_down=down,
                                      mode=mode, gamma=gamma, base_momentum=0.8, max_momentum=0.95)
    down = down or up
    lrs, momenta = [], []
    for _ in range(30):
        lrs.append(opt.param_groups[0]["lr"])
        momenta.append(opt.param_groups[0]["momentum"])
        scheduler.step()
    np.testing.assert_allclose(lrs, [_cyclic_reference(t, 0.01, 0.1, up, down, mode, gamma) for t in range(30)],
                               rtol=1e-12)
    # momentum moves against the lr: max_momentum where the lr is at base_lr
    np.testing.assert_allclose(momenta, [0.95 - _cyclic_reference(t, 0.0, 0.15, up, down, mode, gamma)
                                         for t in range(30)], rtol=1e-12)


def test_cyclic_lr_cycles_adams_beta1_and_takes_a_scale_fn():
    opt = optim.Adam([jt.zeros(2, requires_grad=True)], betas=(0.9, 0.99))
    scheduler = lr_scheduler.CyclicLR(opt, 0.001, 0.01, step_size_up=2, scale_fn=lambda x: 1 / x)
    lrs, betas = [], []
    for _ in range(9):
        lrs.append(opt.param_groups[0]["lr"])
        betas.append(opt.param_groups[0]["betas"])
        scheduler.step()
    # scale_fn of the cycle (the default scale_mode): the second cycle's peak is half the first's
    np.testing.assert_allclose(lrs, [0.001, 0.0055, 0.01, 0.0055, 0.001, 0.00325, 0.0055, 0.00325, 0.001])
    assert all(b[1] == 0.99 for b in betas)
    np.testing.assert_allclose([b[0] for b in betas[:3]], [0.9, 0.85, 0.8])


def test_cyclic_lr_errors_and_state_dict():
    with pytest.raises(ValueError, match="mode is invalid and scale_fn is None"):
        lr_scheduler.CyclicLR(_sgd(), 0.01, 0.1, mode="sawtooth")
    with pytest.raises(ValueError, match="optimizer must support momentum or beta1"):
        lr_scheduler.CyclicLR(optim.Adagrad([jt.zeros(2, requires_grad=True)]), 0.01, 0.1)
    with pytest.raises(ValueError, match="base_lr must have the same length as optimizer.param_groups"):
        lr_scheduler.CyclicLR(_sgd(), [0.01, 0.02], 0.1)
    opt = _sgd()
    scheduler = lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=3, mode="triangular2")
    for _ in range(7):
        scheduler.step()
    state = scheduler.state_dict()
    assert "optimizer" not in state and state["_scale_fn_custom"] is None
    resumed_opt = _sgd()
    resumed = lr_scheduler.CyclicLR(resumed_opt, 0.01, 0.1, step_size_up=3, mode="triangular2")
    resumed.load_state_dict(state)
    assert _lrs(resumed_opt, resumed, 5)[1:] == _lrs(opt, scheduler, 5)[1:]
