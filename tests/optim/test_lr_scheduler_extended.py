"""ConstantLR, PolynomialLR, SequentialLR, OneCycleLR and ReduceLROnPlateau, step by step against
learning rates (and momenta) recorded from torch 2.13 for the same calls; errors as torch raises them."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
import jitorch.optim as optim
from jitorch.optim import lr_scheduler as S


def _sgd(lrs=(0.1, 0.02), **kwargs):
    return optim.SGD([{"params": [jt.ones(1, requires_grad=True)], "lr": lr} for lr in lrs], lr=lrs[0], **kwargs)


def _run(scheduler, epochs, extra=lambda group: ()):
    """Per epoch: every group's lr, then ``extra(group)`` of every group; optimizer step, scheduler step."""
    opt, seen = scheduler.optimizer, []
    for _ in range(epochs):
        seen.append([g["lr"] for g in opt.param_groups] + [x for g in opt.param_groups for x in extra(g)])
        opt.step()
        scheduler.step()
    return seen


def _close(actual, expected):
    # torch's values were recorded rounded to 15 decimals.
    np.testing.assert_allclose(np.array(actual, dtype=float), np.array(expected, dtype=float), rtol=1e-12, atol=1e-14)


def test_constant_lr():
    scheduler = S.ConstantLR(_sgd(), factor=0.5, total_iters=4)
    _close(_run(scheduler, 7), [[0.05, 0.01]] * 4 + [[0.1, 0.02]] * 3)


def test_polynomial_lr():
    scheduler = S.PolynomialLR(_sgd(), total_iters=6, power=2.0)
    _close(_run(scheduler, 9), [[0.1 * (1 - min(t, 6) / 6) ** 2, 0.02 * (1 - min(t, 6) / 6) ** 2] for t in range(9)])


@pytest.mark.parametrize("make, expected", [
    (lambda o: S.ConstantLR(o, factor=0.25, total_iters=3), [[0.025, 0.005], [0.1, 0.02], [0.025, 0.005], [0.1, 0.02]]),
    (lambda o: S.PolynomialLR(o, total_iters=4, power=0.5),
     [[0.07071067811865477, 0.014142135623730952], [0.0, 0.0], [0.08660254037844387, 0.017320508075688773],
      [0.05, 0.01]]),
], ids=["ConstantLR", "PolynomialLR"])
def test_step_with_epoch_uses_closed_form(make, expected):
    opt = _sgd()
    scheduler = make(opt)
    seen = []
    for epoch in (2, 5, 1, 3):
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)` was not necessary"):
            scheduler.step(epoch)
        seen.append([g["lr"] for g in opt.param_groups])
    _close(seen, expected)


def test_sequential_lr_restarts_each_scheduler_at_its_milestone():
    opt = _sgd()
    scheduler = S.SequentialLR(opt, [S.ConstantLR(opt, factor=0.1, total_iters=2), S.ExponentialLR(opt, gamma=0.9)],
                               milestones=[3])
    _close(_run(scheduler, 8), [[0.01, 0.002], [0.01, 0.002], [0.1, 0.02], [0.1, 0.02], [0.09, 0.018],
                                [0.081, 0.0162], [0.0729, 0.01458], [0.06561, 0.013122]])
    assert scheduler.get_last_lr() == [g["lr"] for g in opt.param_groups]


def test_sequential_lr_three_schedulers():
    opt = _sgd((0.1,))
    scheduler = S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.5, total_iters=3),
                                     S.CosineAnnealingLR(opt, T_max=4, eta_min=0.01), S.StepLR(opt, 2, 0.5)],
                               milestones=[4, 7])
    _close(_run(scheduler, 11), [[0.05], [0.066666666666667], [0.083333333333333], [0.1], [0.1],
                                 [0.086819805153395], [0.055], [0.1], [0.1], [0.05], [0.05]])


def test_sequential_lr_state_dict_round_trip():
    def make():
        opt = _sgd()
        return S.SequentialLR(opt, [S.ConstantLR(opt, factor=0.1, total_iters=2), S.ExponentialLR(opt, gamma=0.9)],
                               milestones=[3])
    first = make()
    _run(first, 5)
    second = make()
    second.load_state_dict(first.state_dict())
    assert second.last_epoch == first.last_epoch == 5
    assert [s.last_epoch for s in second._schedulers] == [s.last_epoch for s in first._schedulers]


_ONECYCLE_COS = [
    [0.04, 0.02, 0.95, 0.95], [0.52, 0.26, 0.9, 0.9], [1.0, 0.5, 0.85, 0.85],
    [0.950484632013474, 0.475242316006737, 0.854951556604879, 0.854951556604879],
    [0.811745653949763, 0.405872826974882, 0.868825509907063, 0.868825509907063],
    [0.611262021936289, 0.305631010968145, 0.888873953302184, 0.888873953302184],
    [0.388741978063711, 0.194370989031855, 0.911126046697816, 0.911126046697816],
    [0.188258346050237, 0.094129173025118, 0.931174490092937, 0.931174490092937],
    [0.049519367986526, 0.024759683993263, 0.945048443395121, 0.945048443395121], [4e-06, 2e-06, 0.95, 0.95],
]

_ONECYCLE_LINEAR_THREE_PHASE = [
    [0.016, 0.9, 0.99], [0.208, 0.85, 0.99], [0.4, 0.8, 0.99], [0.208, 0.85, 0.99], [0.016, 0.9, 0.99],
    [0.013714514285714, 0.9, 0.99], [0.011429028571429, 0.9, 0.99], [0.009143542857143, 0.9, 0.99],
    [0.006858057142857, 0.9, 0.99], [0.004572571428571, 0.9, 0.99], [0.002287085714286, 0.9, 0.99],
    [1.6e-06, 0.9, 0.99],
]


def test_one_cycle_cos_cycles_sgd_momentum():
    opt = _sgd((0.1, 0.2), momentum=0.9)
    scheduler = S.OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=10)
    _close(_run(scheduler, 10, lambda g: (g["momentum"],)), _ONECYCLE_COS)
    assert [g["max_lr"] for g in opt.param_groups] == [1.0, 0.5]


def test_one_cycle_linear_three_phase_cycles_adam_beta1():
    opt = optim.Adam([jt.ones(1, requires_grad=True)], lr=0.1, betas=(0.9, 0.99))
    scheduler = S.OneCycleLR(opt, max_lr=0.4, epochs=3, steps_per_epoch=4, pct_start=0.25, anneal_strategy="linear",
                             three_phase=True, base_momentum=0.8, max_momentum=0.9)
    _close(_run(scheduler, 12, lambda g: g["betas"]), _ONECYCLE_LINEAR_THREE_PHASE)


def test_one_cycle_without_momentum_cycling():
    opt = _sgd((0.1, 0.2), momentum=0.9)
    scheduler = S.OneCycleLR(opt, max_lr=1.0, total_steps=5, cycle_momentum=False, pct_start=0.4, div_factor=10.0,
                             final_div_factor=100.0)
    _close(_run(scheduler, 5, lambda g: (g["momentum"],)),
           [[0.1, 0.1, 0.9, 0.9], [1.0, 1.0, 0.9, 0.9], [0.75025, 0.75025, 0.9, 0.9], [0.25075, 0.25075, 0.9, 0.9],
            [0.001, 0.001, 0.9, 0.9]])


def test_one_cycle_past_total_steps():
    scheduler = S.OneCycleLR(_sgd(), 1.0, total_steps=3)
    for _ in range(3):
        scheduler.step()
    with pytest.raises(ValueError, match="Tried to step 4 times. The specified number of total steps is 3"):
        scheduler.step()


def _plateau(metrics, **kwargs):
    """Per metric: both groups' lr, num_bad_epochs, cooldown_counter and best after ``step(metric)``."""
    opt = _sgd((0.1, 0.05))
    scheduler = S.ReduceLROnPlateau(opt, **kwargs)
    seen = []
    for m in metrics:
        scheduler.step(m)
        seen.append([g["lr"] for g in opt.param_groups] + [scheduler.num_bad_epochs, scheduler.cooldown_counter,
                                                             scheduler.best])
    assert scheduler.get_last_lr() == [g["lr"] for g in opt.param_groups]
    return seen


_METRICS = [1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1]


def test_plateau_min_rel_with_cooldown_and_min_lrs():
    _close(_plateau(_METRICS, factor=0.5, patience=2, cooldown=1, min_lr=[0.01, 0.03]), [
        [0.1, 0.05, 0, 0, 1.0], [0.1, 0.05, 0, 0, 0.9], [0.1, 0.05, 1, 0, 0.9], [0.1, 0.05, 2, 0, 0.9],
        [0.05, 0.03, 0, 1, 0.9], [0.05, 0.03, 0, 0, 0.9], [0.05, 0.03, 0, 0, 0.5], [0.05, 0.03, 1, 0, 0.5],
        [0.05, 0.03, 2, 0, 0.5], [0.025, 0.03, 0, 1, 0.5], [0.025, 0.03, 0, 0, 0.5], [0.025, 0.03, 1, 0, 0.5],
        [0.025, 0.03, 2, 0, 0.5]])


def test_plateau_max_abs():
    expected = [[0.1, 0.05, 0, 0, 1.0], [0.1, 0.05, 1, 0, 1.0], [0.03, 0.015, 0, 0, 1.0], [0.03, 0.015, 1, 0, 1.0],
                [0.009, 0.0045, 0, 0, 1.0], [0.009, 0.0045, 1, 0, 1.0]]
    expected += [[0.004, 0.004, t % 2, 0, 1.0] for t in range(7)]
    _close(_plateau(_METRICS, mode="max", factor=0.3, patience=1, threshold=0.15, threshold_mode="abs",
                    min_lr=0.004), expected)


def test_plateau_rel_threshold_and_eps():
    # 0.99995 is within the default relative threshold of 1.0; a reduction of 0.005 -> 0.0005 is below eps.
    _close(_plateau([1.0, 0.99995, 0.9999, 0.99, 0.99, 0.99, 0.99], patience=0, eps=0.006),
           [[0.1, 0.05, 0, 0, 1.0], [0.01, 0.005, 0, 0, 1.0], [0.001, 0.005, 0, 0, 1.0]]
           + [[0.001, 0.005, 0, 0, 0.99]] * 4)


def test_plateau_accepts_tensor_metrics_and_counts_epochs():
    scheduler = S.ReduceLROnPlateau(_sgd((0.1,)), patience=0)
    assert scheduler.get_last_lr() == [0.1]
    scheduler.step(jt.tensor(1.0))
    scheduler.step(jt.tensor([2.0]))
    assert scheduler.last_epoch == 2
    _close([scheduler.get_last_lr()], [[0.01]])


def test_plateau_state_dict_round_trip():
    first = S.ReduceLROnPlateau(_sgd(), mode="max", patience=3)
    for m in (1.0, 0.5, 0.4):
        first.step(m)
    second = S.ReduceLROnPlateau(_sgd())
    second.load_state_dict(first.state_dict())
    assert (second.mode, second.best, second.num_bad_epochs, second.mode_worse) == ("max", 1.0, 2, -np.inf)


def test_plateau_new_param_group_with_list_min_lr():
    opt = _sgd((0.1,))
    scheduler = S.ReduceLROnPlateau(opt, min_lr=[0.0], patience=0)
    opt.add_param_group({"params": [jt.ones(1)]})
    scheduler.step(1.0)
    with pytest.raises(RuntimeError, match=r"The number of param groups in the `optimizer` \(2\) differs from when "
                                           r"`ReduceLROnPlateau` was initialized \(1\)"):
        scheduler.step(2.0)


def _momentumless():
    return optim.Optimizer([jt.ones(1)], {"lr": 0.1})


@pytest.mark.parametrize("make, error, match", [
    (lambda o: S.ConstantLR(o, factor=1.5), ValueError,
     "Constant multiplicative factor expected to be between 0 and 1"),
    (lambda o: S.SequentialLR(o, [], []), ValueError, "SequentialLR expects at least one scheduler, but got no"),
    (lambda o: S.SequentialLR(o, [S.ConstantLR(o)], [3]), ValueError,
     "number of schedulers 1 and the number of milestones to be equal to 1"),
    (lambda o: S.SequentialLR(o, [S.ConstantLR(o), S.ReduceLROnPlateau(o)], [3]), ValueError,
     "SequentialLR does not support `ReduceLROnPlateau` scheduler .* at index 1"),
    (lambda o: S.SequentialLR(o, [S.ConstantLR(o), S.ConstantLR(_sgd())], [3]), ValueError,
     "SequentialLR expects all schedulers to belong to the same optimizer, but got scheduler ConstantLR at index 1"),
    (lambda o: S.SequentialLR(o, [S.ConstantLR(o), object()], [3]), TypeError,
     "SequentialLR at index 1 should have `optimizer` as its attribute"),
    (lambda o: S.OneCycleLR(o, 1.0), ValueError,
     r"You must define either total_steps OR \(epochs AND steps_per_epoch\)"),
    (lambda o: S.OneCycleLR(o, 1.0, total_steps=0), ValueError, "Expected positive integer total_steps, but got 0"),
    (lambda o: S.OneCycleLR(o, 1.0, epochs=2, steps_per_epoch=0), ValueError,
     "Expected positive integer steps_per_epoch, but got 0"),
    (lambda o: S.OneCycleLR(o, 1.0, total_steps=5, pct_start=1), ValueError,
     "Expected float between 0 and 1 pct_start, but got 1"),
    (lambda o: S.OneCycleLR(o, 1.0, total_steps=5, anneal_strategy="exp"), ValueError,
     "anneal_strategy must be one of 'cos' or 'linear', instead got exp"),
    (lambda o: S.OneCycleLR(o, [1.0, 2.0, 3.0], total_steps=5), ValueError,
     "max_lr must have the same length as optimizer.param_groups. max_lr has 3 values, param_groups has 2."),
    (lambda o: S.OneCycleLR(_momentumless(), 1.0, total_steps=5), ValueError,
     "optimizer must support momentum or beta1 with `cycle_momentum` option enabled"),
    (lambda o: S.ReduceLROnPlateau(o, factor=1.0), ValueError, r"Factor should be < 1.0."),
    (lambda o: S.ReduceLROnPlateau(o, mode="avg"), ValueError, "mode avg is unknown!"),
    (lambda o: S.ReduceLROnPlateau(o, threshold_mode="x"), ValueError, "threshold mode x is unknown!"),
    (lambda o: S.ReduceLROnPlateau(o, min_lr=[0.1]), ValueError, "expected 2 min_lrs, got 1"),
    (lambda o: S.ReduceLROnPlateau(object()), TypeError, "object is not an Optimizer"),
])
def test_errors(make, error, match):
    with pytest.raises(error, match=match):
        make(_sgd())
