"""ASGD, Rprop, LBFGS (fixed step and strong-Wolfe line search) and Adafactor against torch's own optimizers:
the same parameter trajectories (float64 to 1e-12: the ops' last bits differ, torch's vectorised adds fusing
a multiply-add, its reductions summing in another order; float32 within a few roundings per step), the same
state, state dicts loaded across the two libraries, torch's errors; compiled ASGD and Rprop steps as eager;
MultiplicativeLR and ChainedScheduler against torch's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.optim as optim

rng = np.random.default_rng(0)
W0, B0 = rng.standard_normal((4, 3)), rng.standard_normal(3)
X, Y = rng.standard_normal((6, 4)), rng.standard_normal((6, 3))

CASES = {
    "ASGD": ("ASGD", {}),
    "ASGD-averaging": ("ASGD", dict(lr=0.05, t0=2, lambd=1e-2, alpha=0.5, weight_decay=0.1, maximize=True)),
    "Rprop": ("Rprop", {}),
    "Rprop-options": ("Rprop", dict(lr=0.1, etas=(0.3, 1.7), step_sizes=(1e-3, 0.2), maximize=True)),
    "Adafactor": ("Adafactor", {}),
    "Adafactor-options": ("Adafactor", dict(lr=0.1, weight_decay=0.1, maximize=True, d=1.5, eps=(1e-20, 1e-3),
                                            beta2_decay=-0.5)),
    "LBFGS": ("LBFGS", dict(lr=0.5, max_iter=4)),
    "LBFGS-strong-wolfe": ("LBFGS", dict(line_search_fn="strong_wolfe", max_iter=4, history_size=3)),
}
FLOAT32_RTOL = {"LBFGS": 5e-4}  # (a step runs several iterations, each a line of float32 roundings)


def _problem(lib, dtype):
    d = getattr(lib, dtype)
    params = [lib.tensor(W0, dtype=d, requires_grad=True), lib.tensor(B0, dtype=d, requires_grad=True)]
    return params, lib.tensor(X, dtype=d), lib.tensor(Y, dtype=d)


def _steps(lib, opt, params, x, y, steps):
    """Take ``steps`` steps (LBFGS through its closure); the flat parameters after each."""
    def closure():
        opt.zero_grad()
        loss = ((x @ params[0] + params[1]).tanh() - y).pow(2).mean()
        loss.backward()
        return loss
    out = []
    for _ in range(steps):
        if isinstance(opt, (optim.LBFGS, torch.optim.LBFGS)):
            opt.step(closure)
        else:
            closure()
            opt.step()
        out.append(np.concatenate([p.detach().numpy().ravel() for p in params]))
    return np.array(out)


def _run(lib, case, dtype, steps=3):
    cls, options = CASES[case]
    params, x, y = _problem(lib, dtype)
    opt = getattr(lib.optim, cls)(params, **options)
    return _steps(lib, opt, params, x, y, steps), opt, params, x, y


def _values(state):
    """A state value as NumPy/Python values (tensors, lists of them, numbers)."""
    if isinstance(state, (list, tuple)):
        return [_values(v) for v in state]
    if hasattr(state, "detach"):
        return state.detach().numpy()
    return state


def _assert_state_close(got, want, rtol):
    assert list(got) == list(want)
    for key in want:
        g, w = _values(got[key]), _values(want[key])
        if isinstance(w, list):
            assert len(g) == len(w)
            for a, b in zip(g, w):
                if b is None:
                    assert a is None
                else:
                    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_trajectories_and_state_are_torchs(case, dtype):
    got, opt, *_ = _run(jt, case, dtype)
    want, torch_opt, *_ = _run(torch, case, dtype)
    rtol = 1e-12 if dtype == "float64" else FLOAT32_RTOL.get(CASES[case][0], 2e-5)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    if CASES[case][0] == "LBFGS" and dtype == "float64":
        rtol = 1e-10  # (its state holds 1 / y.s and y.s / y.y, of gradient differences: cancellation)
    assert not np.array_equal(got[0], got[-1])  # the parameters moved
    mine, theirs = opt.state_dict(), torch_opt.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    assert list(mine["state"]) == list(theirs["state"])
    for k in theirs["state"]:
        _assert_state_close(mine["state"][k], theirs["state"][k], rtol)


def _convert(value, lib):
    """A state value with its tensors made in ``lib`` (lists of them too)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, lib) for v in value)
    if hasattr(value, "detach"):
        return lib.tensor(value.detach().numpy().copy())
    return value


def _resumed(lib, cls, options, params, saved):
    """A ``lib`` optimizer on copies of ``params`` that loaded the state dict ``saved`` (of either library)."""
    copies = [lib.tensor(p.detach().numpy(), requires_grad=True) for p in params]
    opt = getattr(lib.optim, cls)(copies, **options)
    opt.load_state_dict({"state": {k: {n: _convert(v, lib) for n, v in s.items()} for k, s in saved["state"].items()},
                         "param_groups": saved["param_groups"]})
    return opt, copies


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_state_dict_loads_across_the_libraries_and_resumes_as_torch(case):
    """Each library's state dict, loaded by both (loading casts state to the parameters' dtype, as torch's
    does: ASGD's float32 ``eta`` becomes float64), resumes the same trajectory in both."""
    cls, options = CASES[case]
    _, x, y = _problem(jt, "float64")
    _, tx, ty = _problem(torch, "float64")
    for lib in (torch, jt):
        _, opt, params, *_ = _run(lib, case, "float64", steps=2)
        saved = opt.state_dict()
        mine, mine_params = _resumed(jt, cls, options, params, saved)
        theirs, their_params = _resumed(torch, cls, options, params, saved)
        np.testing.assert_allclose(_steps(jt, mine, mine_params, x, y, 2),
                                   _steps(torch, theirs, their_params, tx, ty, 2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls, options, error, message", [
    ("ASGD", dict(lr=-1), ValueError, "Invalid learning rate: -1"),
    ("ASGD", dict(weight_decay=-0.5), ValueError, "Invalid weight_decay value: -0.5"),
    ("Rprop", dict(etas=(1.5, 1.2)), ValueError, "Invalid eta values: 1.5, 1.2"),
    ("Rprop", dict(lr=-0.1), ValueError, "Invalid learning rate: -0.1"),
    ("Adafactor", dict(beta2_decay=0.5), ValueError, "beta2_decay should be <= 0 but is: 0.5"),
    ("Adafactor", dict(d=0.5), ValueError, "Clipping threshold d should be >= 1 but is: 0.5"),
    ("Adafactor", dict(eps=(-1.0, 1e-3)), ValueError, "epsilon1 should be >= 0 but is: -1.0"),
    ("LBFGS", dict(lr=-1), ValueError, "Invalid learning rate: -1"),
])
def test_invalid_options_raise_torchs_errors(cls, options, error, message):
    for lib in (jt, torch):
        with pytest.raises(error, match=message):
            getattr(lib.optim, cls)([lib.zeros(2, requires_grad=True)], **options)


def test_lbfgs_refuses_groups_and_unknown_line_searches_as_torch():
    for lib in (jt, torch):
        with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
            lib.optim.LBFGS([{"params": [lib.zeros(2, requires_grad=True)]},
                             {"params": [lib.zeros(2, requires_grad=True)]}])
        w = lib.ones(2, requires_grad=True)
        opt = lib.optim.LBFGS([w], line_search_fn="armijo")

        def closure():
            opt.zero_grad()
            loss = (w * w).sum()
            loss.backward()
            return loss
        with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
            opt.step(closure)


def test_lbfgs_counts_the_same_function_evaluations_as_torch():
    """The line search's and the loop's stopping decisions, which read values into Python, go as torch's."""
    for case in ("LBFGS", "LBFGS-strong-wolfe"):
        _, opt, *_ = _run(jt, case, "float64")
        _, torch_opt, *_ = _run(torch, case, "float64")
        (state,), (torch_state,) = opt.state.values(), torch_opt.state.values()
        assert (state["func_evals"], state["n_iter"]) == (torch_state["func_evals"], torch_state["n_iter"])
        assert state["func_evals"] > state["n_iter"] or case == "LBFGS"  # the line search evaluated more


@pytest.mark.parametrize("eager_first", [True, False], ids=["state-made-eagerly", "state-made-in-the-trace"])
@pytest.mark.parametrize("case", ["ASGD-averaging", "Rprop-options"])
def test_compiled_training_step_equals_eager(case, eager_first):
    cls, options = CASES[case]

    def make():
        params, x, y = _problem(jt, "float32")
        opt = getattr(optim, cls)(params, **options)

        def step(x, y):
            opt.zero_grad()
            loss = ((x @ params[0] + params[1]).tanh() - y).square().mean()
            loss.backward()
            opt.step()
            return loss
        return params, opt, step, x, y
    eager_params, eager_opt, eager, x, y = make()
    comp_params, comp_opt, step, _, _ = make()
    compiled = jt.compile(step, fullgraph=True)
    if eager_first:
        eager(x, y), step(x, y)
    for _ in range(4):
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=1e-5)
        for p, q in zip(comp_params, eager_params):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
    [entry] = compiled.cache.values()
    assert entry.graph is not None and entry.calls >= 3  # one graph served the steps (a first trace that made
    # the state is traced again)
    for s_comp, s_eager in zip(comp_opt.state.values(), eager_opt.state.values()):
        assert list(s_comp) == list(s_eager)
        for key in s_eager:
            np.testing.assert_allclose(s_comp[key].numpy(), s_eager[key].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", ["Adafactor", "LBFGS"])
def test_steps_that_read_values_run_eagerly_in_a_compiled_function(cls):
    """Adafactor's and LBFGS's steps read norms and losses into Python, as torch's: compiled, the function
    runs eagerly (with jitorch.compile's warning), never a graph that froze those values."""
    results = []
    for compiled in (False, True):
        w = jt.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
        opt = getattr(optim, cls)([w])
        x = jt.ones(4, 3, dtype=jt.float64)

        def loss_of():
            opt.zero_grad()
            loss = (x @ w.T).tanh().square().mean()
            loss.backward()
            return loss

        def step():
            return opt.step(loss_of) if cls == "LBFGS" else (loss_of(), opt.step())[0]
        fn = jt.compile(step) if compiled else step
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                fn()
        assert any("running step eagerly" in str(m.message) for m in caught) == compiled
        results.append(w.detach().numpy().copy())
    assert np.array_equal(*results)


# Schedulers ---------------------------------------------------------------------------------------------

def _chained_lrs(lib):
    p, q = lib.zeros(2, requires_grad=True), lib.zeros(2, requires_grad=True)
    opt = lib.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=0.1)
    multiplicative = lib.optim.lr_scheduler.MultiplicativeLR(opt, [lambda e: 0.9, lambda e: 1.0 - 0.01 * e])
    step = lib.optim.lr_scheduler.StepLR(opt, 3, gamma=0.5)
    chained = lib.optim.lr_scheduler.ChainedScheduler([multiplicative, step])
    lrs = [chained.get_last_lr()]
    for _ in range(7):
        opt.step()
        chained.step()
        lrs.append(chained.get_last_lr())
    return lrs, chained, multiplicative


def test_multiplicative_lr_and_chained_scheduler_follow_torchs_rates():
    lrs, chained, multiplicative = _chained_lrs(jt)
    assert lrs == _chained_lrs(torch)[0]
    saved = chained.state_dict()
    assert len(saved["_schedulers"]) == 2 and saved["_schedulers"][0]["last_epoch"] == 7
    _, again, inner = _chained_lrs(jt)
    inner.last_epoch = 0
    again.load_state_dict(saved)
    assert inner.last_epoch == 7 and again.get_last_lr() == lrs[-1]


def test_scheduler_errors_as_torch():
    for lib in (jt, torch):
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=0.1)
        other = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=0.1)
        with pytest.raises(TypeError, match="lr_lambda should be a function, but got float"):
            lib.optim.lr_scheduler.MultiplicativeLR(opt, 0.5)
        with pytest.raises(ValueError, match="ChainedScheduler expects at least one scheduler to be chained"):
            lib.optim.lr_scheduler.ChainedScheduler([])
        with pytest.raises(ValueError, match="expects all schedulers to belong to the same optimizer"):
            lib.optim.lr_scheduler.ChainedScheduler([lib.optim.lr_scheduler.StepLR(opt, 2),
                                                     lib.optim.lr_scheduler.StepLR(other, 2)])


# Muon ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
def test_muon_newton_schulz_gives_torchs_bfloat16_bits(shape):
    from jitorch.optim.muon import zeropower_via_newtonschulz
    from torch.optim._muon import _zeropower_via_newtonschulz
    g = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    coefficients = (3.4445, -4.7750, 2.0315)
    got = zeropower_via_newtonschulz(jt.tensor(g), coefficients, 5, 1e-7)
    want = _zeropower_via_newtonschulz(torch.tensor(g), coefficients, 5, 1e-7)
    assert got.dtype is jt.bfloat16 and tuple(got.shape) == shape
    assert np.array_equal(got.float().numpy(), want.float().numpy())


def _muon_run(lib, dtype, options, steps=3):
    d = getattr(lib, dtype)
    w = lib.tensor(W0, dtype=d, requires_grad=True)  # (4, 3): tall
    v = lib.tensor(V0, dtype=d, requires_grad=True)  # (3, 5): wide
    x = lib.tensor(X, dtype=d)
    opt = lib.optim.Muon([w, v], **options)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        (x @ w @ v).tanh().square().mean().backward()
        opt.step()
        out.append(np.concatenate([w.detach().numpy().ravel(), v.detach().numpy().ravel()]))
    return np.array(out), opt, (w, v)


V0 = np.random.default_rng(5).standard_normal((3, 5))


@pytest.mark.parametrize("options", [{}, dict(lr=0.05, nesterov=False, weight_decay=0.0, adjust_lr_fn="match_rms_adamw",
                                              momentum=0.8, ns_steps=3)], ids=["defaults", "options"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_muon_trajectories_and_state_are_torchs(dtype, options):
    got, opt, _ = _muon_run(jt, dtype, options)
    want, torch_opt, _ = _muon_run(torch, dtype, options)
    rtol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    mine, theirs = opt.state_dict(), torch_opt.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    for k in theirs["state"]:
        _assert_state_close(mine["state"][k], theirs["state"][k], rtol)


def test_muon_errors_as_torch():
    for lib in (jt, torch):
        with pytest.raises(ValueError, match="Muon only supports 2D parameters whereas we found a parameter"):
            lib.optim.Muon([lib.zeros(3, requires_grad=True)])
        with pytest.raises(ValueError, match="Adjust learning rate function other is not supported"):
            lib.optim.Muon([lib.zeros(2, 2, requires_grad=True)], adjust_lr_fn="other")
        with pytest.raises(ValueError, match="momentum should be >= 0 but is: -1"):
            lib.optim.Muon([lib.zeros(2, 2, requires_grad=True)], momentum=-1)


def test_muon_compiled_step_equals_eager():
    results = []
    for compiled in (False, True):
        w = jt.tensor(W0, dtype=jt.float32, requires_grad=True)
        opt = optim.Muon([w], lr=0.02)
        x = jt.tensor(X, dtype=jt.float32)

        def step(x):
            opt.zero_grad()
            loss = (x @ w).tanh().square().mean()
            loss.backward()
            opt.step()
            return loss
        fn = jt.compile(step, fullgraph=True) if compiled else step
        for _ in range(3):
            fn(x)
        results.append(w.detach().numpy().copy())
    assert next(iter(fn.cache.values())).graph is not None
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
