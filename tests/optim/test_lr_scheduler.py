"""Learning-rate schedules against their closed-form formulas; state dicts and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jitorch as jt
import jitorch.optim as optim
from jitorch.optim import lr_scheduler

EPOCHS = 25


def _optimizer(lrs=(0.1, 0.02)):
    return optim.SGD([{"params": [jt.ones(1, requires_grad=True)], "lr": lr} for lr in lrs], lr=lrs[0])


def _lrs(scheduler, epochs=EPOCHS):
    """The learning rates of every group at epochs 0..epochs-1 (optimizer step, then scheduler step)."""
    seen = []
    for _ in range(epochs):
        seen.append([g["lr"] for g in scheduler.optimizer.param_groups])
        scheduler.optimizer.step()
        scheduler.step()
    return np.array(seen)


def _closed(base_lrs, factor):
    return np.array([[base * factor(t) for base in base_lrs] for t in range(EPOCHS)])


SCHEDULES = [
    ("StepLR", lambda o: lr_scheduler.StepLR(o, step_size=3, gamma=0.5), lambda t: 0.5 ** (t // 3)),
    ("MultiStepLR", lambda o: lr_scheduler.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3),
     lambda t: 0.3 ** sum(m <= t for m in [2, 5, 5, 9])),
    ("ExponentialLR", lambda o: lr_scheduler.ExponentialLR(o, gamma=0.9), lambda t: 0.9 ** t),
    ("LambdaLR", lambda o: lr_scheduler.LambdaLR(o, lambda e: 1 / (1 + e)), lambda t: 1 / (1 + t)),
    ("LinearLR", lambda o: lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=7),
     lambda t: 0.25 + (0.9 - 0.25) * min(t, 7) / 7),
]


@pytest.mark.parametrize("make, factor", [s[1:] for s in SCHEDULES], ids=[s[0] for s in SCHEDULES])
def test_schedule_matches_closed_form(make, factor):
    scheduler = make(_optimizer())
    np.testing.assert_allclose(_lrs(scheduler), _closed([0.1, 0.02], factor), rtol=1e-12)
    assert scheduler.get_last_lr() == [g["lr"] for g in scheduler.optimizer.param_groups]


@pytest.mark.parametrize("t_max, eta_min", [(10, 0.0), (7, 0.001), (1, 0.01)])
def test_cosine_annealing_recursion_follows_closed_form(t_max, eta_min):
    # Past T_max the schedule climbs back up: torch's recursion is periodic with period 2 * T_max.
    scheduler = lr_scheduler.CosineAnnealingLR(_optimizer(), T_max=t_max, eta_min=eta_min)
    expected = np.array([[eta_min + (base - eta_min) * (1 + math.cos(math.pi * t / t_max)) / 2
                          for base in (0.1, 0.02)] for t in range(EPOCHS)])
    np.testing.assert_allclose(_lrs(scheduler), expected, rtol=1e-9, atol=1e-15)


def test_recursive_schedules_chain():
    opt = _optimizer((0.1,))
    first, second = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5), lr_scheduler.ExponentialLR(opt, gamma=0.9)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        first.step()
        second.step()
    np.testing.assert_allclose(seen, [0.1 * 0.5 ** (t // 2) * 0.9 ** t for t in range(6)], rtol=1e-12)


def test_initial_lr_and_base_lrs_recorded():
    opt = _optimizer()
    scheduler = lr_scheduler.StepLR(opt, step_size=1)
    assert scheduler.base_lrs == [0.1, 0.02] and [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.02]
    assert scheduler.last_epoch == 0 and scheduler.get_last_lr() == [0.1, 0.02]


def test_step_with_epoch_uses_closed_form():
    scheduler = lr_scheduler.StepLR(_optimizer(), step_size=3, gamma=0.5)
    with pytest.warns(UserWarning, match="epoch parameter"):
        scheduler.step(7)
    assert scheduler.last_epoch == 7 and scheduler.get_last_lr() == pytest.approx([0.1 * 0.25, 0.02 * 0.25])


def test_state_dict_round_trip():
    a = lr_scheduler.CosineAnnealingLR(_optimizer(), T_max=10)
    _lrs(a, 4)
    b = lr_scheduler.CosineAnnealingLR(_optimizer(), T_max=10)
    state = a.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 4 and state["T_max"] == 10
    b.load_state_dict(state)
    for group, lr in zip(b.optimizer.param_groups, a.get_last_lr()):
        group["lr"] = lr
    np.testing.assert_array_equal(_lrs(a, 5), _lrs(b, 5))


def test_lambda_state_dict_keeps_callable_objects():
    class Warmup:
        def __init__(self, n):
            self.n = n

        def __call__(self, epoch):
            return min(1.0, (epoch + 1) / self.n)

    a = lr_scheduler.LambdaLR(_optimizer((0.1,)), Warmup(4))
    state = a.state_dict()
    assert state["lr_lambdas"] == [{"n": 4}]
    b = lr_scheduler.LambdaLR(_optimizer((0.1,)), Warmup(9))
    b.load_state_dict(state)
    assert b.lr_lambdas[0].n == 4 and "lr_lambdas" in state
    assert lr_scheduler.LambdaLR(_optimizer((0.1,)), lambda e: 1.0).state_dict()["lr_lambdas"] == [None]


def test_scheduler_needs_an_optimizer():
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        lr_scheduler.StepLR([], step_size=1)


def test_resuming_needs_initial_lr():
    with pytest.raises(KeyError, match=r"param 'initial_lr' is not specified in param_groups\[0\]"):
        lr_scheduler.StepLR(_optimizer(), step_size=1, last_epoch=3)


def test_lambda_count_must_match_groups():
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        lr_scheduler.LambdaLR(_optimizer(), [lambda e: 1.0])


@pytest.mark.parametrize("options, message", [
    (dict(start_factor=0.0), "Starting multiplicative factor expected to be greater than 0"),
    (dict(end_factor=1.5), "Ending multiplicative factor expected to be between 0 and 1"),
])
def test_linear_lr_factor_errors(options, message):
    with pytest.raises(ValueError, match=message):
        lr_scheduler.LinearLR(_optimizer(), **options)
