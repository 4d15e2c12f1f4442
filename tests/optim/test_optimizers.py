"""Optimizer steps against NumPy transcriptions of torch's algorithms; groups, zero_grad, state dicts, errors."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
import jitorch.optim as optim

from .reference import adam_reference, adamw_reference, rmsprop_reference, sgd_reference

STEPS = 5

CASES = [
    (optim.SGD, sgd_reference, dict(lr=0.1)),
    (optim.SGD, sgd_reference, dict(lr=0.05, momentum=0.9)),
    (optim.SGD, sgd_reference, dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1)),
    (optim.SGD, sgd_reference, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01, maximize=True)),
    (optim.Adam, adam_reference, dict()),
    (optim.Adam, adam_reference, dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    (optim.Adam, adam_reference, dict(lr=0.02, amsgrad=True, maximize=True)),
    (optim.AdamW, adamw_reference, dict(lr=0.01)),
    (optim.AdamW, adamw_reference, dict(lr=0.01, weight_decay=0.5, amsgrad=True)),
    (optim.RMSprop, rmsprop_reference, dict()),
    (optim.RMSprop, rmsprop_reference, dict(lr=0.01, alpha=0.9, weight_decay=0.1, momentum=0.5)),
    (optim.RMSprop, rmsprop_reference, dict(lr=0.01, centered=True, momentum=0.3, maximize=True)),
]
IDS = [f"{cls.__name__}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'defaults'}" for cls, _, kw in CASES]


def _gradients(rng, shape, dtype=np.float64):
    # Gradients with both signs and a spread of magnitudes, so amsgrad's maximum matters.
    return [(rng.standard_normal(shape) * rng.uniform(0.1, 3.0)).astype(dtype) for _ in range(STEPS)]


def _run(opt, params, grads_per_param):
    """Set each parameter's gradient to the step's array, step, and collect the parameters after each step."""
    history = []
    for k in range(STEPS):
        for p, grads in zip(params, grads_per_param):
            p.grad = jt.tensor(grads[k], dtype=p.dtype)
        opt.step()
        history.append([p.detach().clone() for p in params])
    return history


@pytest.mark.parametrize("cls, reference, options", CASES, ids=IDS)
def test_steps_match_reference(cls, reference, options, rng):
    start = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    grads = [_gradients(rng, a.shape) for a in start]
    params = [jt.tensor(a, requires_grad=True) for a in start]
    history = _run(cls(params, **options), params, grads)
    for i, (a, g) in enumerate(zip(start, grads)):
        expected = reference(a, g, **options)
        for k in range(STEPS):
            np.testing.assert_allclose(history[k][i].numpy(), expected[k], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls, reference, options", CASES[1::3], ids=IDS[1::3])
def test_float32_steps(cls, reference, options, rng):
    start = rng.standard_normal(6).astype(np.float32)
    grads = _gradients(rng, start.shape, np.float32)
    p = jt.tensor(start, requires_grad=True)
    history = _run(cls([p], **options), [p], [grads])
    expected = reference(start.astype(np.float64), [g.astype(np.float64) for g in grads], **options)
    assert history[-1][0].dtype is jt.float32
    np.testing.assert_allclose(history[-1][0].numpy(), expected[-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls, reference, options", [CASES[2], CASES[5], CASES[10]], ids=[IDS[2], IDS[5], IDS[10]])
def test_param_groups_use_their_own_options(cls, reference, options, rng):
    start = [rng.standard_normal(4), rng.standard_normal(3)]
    grads = [_gradients(rng, a.shape) for a in start]
    params = [jt.tensor(a, requires_grad=True) for a in start]
    group_options = dict(options, lr=options.get("lr", 0.01) * 3, weight_decay=0.2)
    opt = cls([{"params": [params[0]]}, {"params": params[1], "lr": group_options["lr"], "weight_decay": 0.2}],
              **options)
    history = _run(opt, params, grads)
    for i, opts in enumerate([options, group_options]):
        np.testing.assert_allclose(history[-1][i].numpy(), reference(start[i], grads[i], **opts)[-1], rtol=1e-10)


def test_parameters_without_grad_are_left_alone():
    a, b = jt.ones(2, requires_grad=True), jt.ones(2, requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = jt.ones(2)
    opt.step()
    assert b.tolist() == [1.0, 1.0] and b not in opt.state
    assert opt.state[a]["step"].dtype is jt.float32 and opt.state[a]["step"].shape == ()


def test_step_state_is_0d_float32_tensor():
    p = jt.zeros(3, requires_grad=True)
    opt = optim.RMSprop([p])
    for _ in range(3):
        p.grad = jt.ones(3)
        opt.step()
    step = opt.state[p]["step"]
    assert isinstance(step, jt.Tensor) and step.dtype is jt.float32 and step.tolist() == 3.0


def test_step_calls_closure_with_grad_enabled():
    p = jt.tensor([2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.5)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with jt.no_grad():
        loss = opt.step(closure)
    assert loss.tolist() == 4.0 and p.tolist() == [0.0]


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    p = jt.ones(3, requires_grad=True)
    (p * 2).sum().backward()
    optim.SGD([p], lr=0.1).zero_grad(set_to_none=set_to_none)
    if set_to_none:
        assert p.grad is None
    else:
        assert p.grad.tolist() == [0.0, 0.0, 0.0] and not p.grad.requires_grad


def test_param_groups_take_defaults_and_names():
    a, b = jt.ones(1, requires_grad=True), jt.ones(1, requires_grad=True)
    opt = optim.SGD([("w", a), ("b", b)], lr=0.3, momentum=0.5)
    group = opt.param_groups[0]
    assert group["param_names"] == ["w", "b"] and group["lr"] == 0.3 and group["momentum"] == 0.5
    assert set(group) == {"params", "param_names", "lr", "momentum", "dampening", "weight_decay", "nesterov",
                          "maximize", "foreach", "differentiable", "fused"}


def test_add_param_group():
    a, b = jt.ones(1, requires_grad=True), jt.ones(1, requires_grad=True)
    opt = optim.Adam([a], lr=0.1)
    opt.add_param_group({"params": b, "betas": (0.5, 0.6)})
    assert opt.param_groups[1]["params"] == [b] and opt.param_groups[1]["lr"] == 0.1
    assert opt.param_groups[1]["betas"] == (0.5, 0.6)


def _trained(cls, options, grads, steps):
    p = jt.tensor(np.linspace(-1, 1, 4), requires_grad=True)
    opt = cls([p], **options)
    for g in grads[:steps]:
        p.grad = jt.tensor(g)
        opt.step()
    return p, opt


@pytest.mark.parametrize("cls, reference, options", CASES[1::2], ids=IDS[1::2])
def test_state_dict_round_trip_reproduces_next_step(cls, reference, options, rng):
    grads = _gradients(rng, (4,))
    p1, opt1 = _trained(cls, options, grads, STEPS)
    p2, opt2 = _trained(cls, options, grads, 2)
    # torch hands out state tensors by reference: snapshot them as saving to a file would.
    saved = opt1.state_dict()
    saved["state"] = {i: {k: v.clone() for k, v in st.items()} for i, st in saved["state"].items()}
    assert sorted(saved) == ["param_groups", "state"] and saved["param_groups"][0]["params"] == [0]
    with jt.no_grad():
        p2.copy_(p1)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["params"][0] is p2
    for p, opt in ((p1, opt1), (p2, opt2)):
        p.grad = jt.tensor(grads[0] * 2)
        opt.step()
    np.testing.assert_array_equal(p1.detach().numpy(), p2.detach().numpy())


def test_state_dict_indices_across_groups():
    ps = [jt.ones(1, requires_grad=True) for _ in range(3)]
    opt = optim.SGD([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.5}], lr=0.1, momentum=0.9)
    for p in ps:
        p.grad = jt.ones(1)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1, 2]]
    assert sorted(sd["state"]) == [0, 1, 2] and sd["state"][2]["momentum_buffer"] is opt.state[ps[2]]["momentum_buffer"]


def test_load_state_dict_restores_group_options():
    p = jt.ones(1, requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    sd = optim.SGD([jt.ones(1, requires_grad=True)], lr=0.7, momentum=0.2).state_dict()
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 0.7 and opt.param_groups[0]["params"] == [p]
    assert sd["param_groups"][0]["params"] == [0]


def test_load_state_dict_casts_state_to_parameter_dtype():
    p64 = jt.ones(2, dtype=jt.float64, requires_grad=True)
    p32 = jt.ones(2, requires_grad=True)
    src = optim.Adam([p32])
    p32.grad = jt.ones(2)
    src.step()
    dst = optim.Adam([p64])
    dst.load_state_dict(src.state_dict())
    assert dst.state[p64]["exp_avg"].dtype is jt.float64 and dst.state[p64]["step"].dtype is jt.float32


def test_load_state_dict_group_count_mismatch():
    opt = optim.SGD([jt.ones(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})


def test_load_state_dict_group_size_mismatch():
    opt = optim.SGD([jt.ones(1, requires_grad=True)], lr=0.1)
    other = optim.SGD([jt.ones(1, requires_grad=True), jt.ones(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        opt.load_state_dict(other.state_dict())


ERRORS = [
    (lambda p: optim.SGD(p, lr=-1), ValueError, "Invalid learning rate: -1"),
    (lambda p: optim.SGD(p, momentum=-0.5), ValueError, "Invalid momentum value: -0.5"),
    (lambda p: optim.SGD(p, weight_decay=-1), ValueError, "Invalid weight_decay value: -1"),
    (lambda p: optim.SGD(p, nesterov=True), ValueError, "Nesterov momentum requires a momentum and zero dampening"),
    (lambda p: optim.Adam(p, eps=-1.0), ValueError, "Invalid epsilon value: -1.0"),
    (lambda p: optim.Adam(p, betas=(1.0, 0.9)), ValueError, "Invalid beta parameter at index 0: 1.0"),
    (lambda p: optim.AdamW(p, betas=(0.9, -0.1)), ValueError, "Invalid beta parameter at index 1: -0.1"),
    (lambda p: optim.RMSprop(p, alpha=-0.1), ValueError, "Invalid alpha value: -0.1"),
    (lambda p: optim.SGD(p, differentiable=True), ValueError, "differentiable=True is not supported"),
    (lambda p: optim.Adam(p, foreach=True, fused=True), RuntimeError, "`fused` and `foreach` cannot be `True`"),
    (lambda p: optim.SGD(p[0]), TypeError, "should be an iterable of Tensors or dicts, but got jitorch.Tensor"),
    (lambda p: optim.SGD([]), ValueError, "optimizer got an empty parameter list"),
    (lambda p: optim.SGD([{"params": set(p)}]), TypeError, "organized in ordered collections"),
    (lambda p: optim.SGD([1.0]), TypeError,
     "optimizer can only optimize Tensors, but one of the params is builtins.float"),
    (lambda p: optim.SGD([p[0] * 2]), ValueError, "can't optimize a non-leaf Tensor"),
    (lambda p: optim.SGD([{"params": p}, {"params": p}]), ValueError, "more than one parameter group"),
    (lambda p: optim.SGD([("a", p[0]), jt.ones(1, requires_grad=True)]), ValueError, "Some param names are missing"),
]


@pytest.mark.parametrize("make, exc, message", ERRORS, ids=[m for _, _, m in ERRORS])
def test_construction_errors(make, exc, message):
    with pytest.raises(exc, match=message.replace("(", r"\(").replace(")", r"\)")):
        make([jt.ones(2, requires_grad=True)])


def test_add_param_group_not_a_dict():
    with pytest.raises(TypeError, match="param_group must be a dict, but got <class 'list'>"):
        optim.SGD([jt.ones(1, requires_grad=True)]).add_param_group([jt.ones(1, requires_grad=True)])


def test_add_param_group_names_mismatch():
    opt = optim.SGD([("a", jt.ones(1, requires_grad=True))])
    with pytest.raises(ValueError, match="cannot add param group without names"):
        opt.add_param_group({"params": [jt.ones(1, requires_grad=True)]})


def test_subclass_without_update_must_override_step():
    class Custom(optim.Optimizer):
        pass

    p = jt.ones(1, requires_grad=True)
    p.grad = jt.ones(1)
    with pytest.raises(NotImplementedError, match="Custom must override step"):
        Custom([p], {"lr": 0.1}).step()


def test_repr_lists_group_options():
    text = repr(optim.SGD([jt.ones(1, requires_grad=True)], lr=0.25))
    assert text.startswith("SGD (\nParameter Group 0\n") and "    lr: 0.25\n" in text and text.endswith(")")


def test_a_required_option_must_be_given_as_torch():
    from jitorch.optim.optimizer import Optimizer, required

    class Plain(Optimizer):
        def __init__(self, params, lr=required):
            super().__init__(params, {"lr": lr})

    p = jt.nn.Parameter(jt.zeros(1))
    with pytest.raises(ValueError, match="parameter group didn't specify a value of required optimization "
                                         "parameter lr"):
        Plain([p])
    assert Plain([{"params": [p], "lr": 0.1}]).param_groups[0]["lr"] == 0.1
    assert repr(required) == "<required parameter>"
