"""RMSprop, Adagrad, Adamax, NAdam and RAdam in the group's generated kernel (`jitorch.optim.foreach.group_step`,
`jitorch.codegen.foreach.step_kernel`): each option's values and version counts bit for bit those of the
per-parameter NumPy step (itself bit for bit the ops' step: tests/optim/test_numpy_step.py), whatever the
thread count; against torch within the tolerance docs/differences-from-torch.md states; which parameters
the kernel takes, and how many kernel calls a step makes."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
import jitorch.optim as optim
from jitorch.codegen import foreach as kernels
from jitorch.runtime import threads
from tests.optim.test_numpy_step import assert_follows_torch, assert_same_steps

SHAPES = [(6, 5), (7,), (2, 3, 2), (), (40,)]

CASES = [
    (optim.RMSprop, dict(lr=0.05)),
    (optim.RMSprop, dict(lr=0.05, momentum=0.9)),
    (optim.RMSprop, dict(lr=0.05, centered=True)),  # lerp's first form, 1 - alpha = 0.01
    (optim.RMSprop, dict(lr=0.05, alpha=0.3, centered=True)),  # its second form
    (optim.RMSprop, dict(lr=0.05, alpha=0.3, momentum=0.5, centered=True, weight_decay=0.1, maximize=True)),
    (optim.RMSprop, dict(lr=0.05, eps=1e-3, weight_decay=1)),
    (optim.Adagrad, dict(lr=0.1)),
    (optim.Adagrad, dict(lr=0.1, lr_decay=0.3)),
    (optim.Adagrad, dict(lr=0.1, initial_accumulator_value=0.5, eps=1e-3)),
    (optim.Adagrad, dict(lr=0.1, lr_decay=0.3, weight_decay=0.1, initial_accumulator_value=0.5, maximize=True)),
    (optim.Adamax, dict(lr=0.05)),
    (optim.Adamax, dict(lr=0.05, betas=(0.1, 0.3), eps=1e-3)),  # lerp's second form
    (optim.Adamax, dict(lr=0.05, weight_decay=0.2, maximize=True)),
    (optim.NAdam, dict(lr=0.05)),
    (optim.NAdam, dict(lr=0.05, betas=(0.2, 0.6), momentum_decay=0.1)),
    (optim.NAdam, dict(lr=0.05, weight_decay=0.1, maximize=True)),
    (optim.NAdam, dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    # rho_t is 1 at step 1 whatever beta2; with beta2 = 0.9 it passes 5 at step 6 (rectified)
    (optim.RAdam, dict(lr=0.05)),
    (optim.RAdam, dict(lr=0.05, betas=(0.5, 0.9))),
    (optim.RAdam, dict(lr=0.05, betas=(0.2, 0.9), weight_decay=0.1, maximize=True)),
    (optim.RAdam, dict(lr=0.05, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1, decoupled_weight_decay=True)),
]
IDS = [f"{cls.__name__}-{i}" for i, (cls, _) in enumerate(CASES)]
STEPS = 8


def _spy_kernel(opt, allow):
    """Count the parameters the group's kernel takes; ``allow`` False leaves every one to the per-parameter
    step."""
    counts = {"kernel": 0}
    foreach_update = opt._foreach_update

    def spy(group, params, *rest):
        left = foreach_update(group, params, *rest) if allow else params
        counts["kernel"] += len(params) - len(left)
        return left
    opt._foreach_update = spy
    return counts


def _train(cls, options, allow, dtype, shapes=SHAPES, steps=STEPS):
    rng = np.random.default_rng(0)
    params = [jt.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]
    opt = cls(params, **options)
    counts = _spy_kernel(opt, allow)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    for _ in range(steps):
        for p in params:
            p.grad = jt.tensor(rng.standard_normal(p.shape).astype(dtype))
        opt.step()
        scheduler.step()
    return params, opt, counts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,options", CASES, ids=IDS)
def test_kernel_step_is_the_per_parameter_step_bit_for_bit(cls, options, dtype):
    fast, fast_opt, counts = _train(cls, options, True, dtype)
    slow, slow_opt, slow_counts = _train(cls, options, False, dtype)
    zero_dim_left = cls is not optim.RMSprop  # (their NumPy step leaves a 0-d parameter to the ops)
    assert counts["kernel"] == STEPS * (len(SHAPES) - zero_dim_left) and slow_counts["kernel"] == 0
    assert_same_steps(fast, fast_opt, slow, slow_opt)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,options", CASES, ids=IDS)
def test_kernel_step_follows_torch(cls, options, dtype):
    """Within docs/differences-from-torch.md's tolerance of torch.optim's steps on the same parameters,
    gradients and schedule (float32: relative 2e-5)."""
    fast, _, counts = _train(cls, options, True, dtype)
    assert counts["kernel"] > 0
    assert_follows_torch(fast, cls, options, dtype, SHAPES, STEPS)


@pytest.mark.parametrize("cls,options", [CASES[4], CASES[9], CASES[12], CASES[15], CASES[19]],
                         ids=["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"])
def test_kernel_step_does_not_depend_on_the_thread_count(monkeypatch, cls, options):
    """Parameters of several blocks (`codegen.foreach.BLOCK`) shared out among one or two threads: the same
    bits, those of the per-parameter step."""
    shapes = [(kernels.BLOCK * 2 + 77,), (3, kernels.BLOCK + 5), (100,)]
    results = []
    for count, allow in ((1, True), (2, True), (1, False)):
        monkeypatch.setitem(threads._settings, "threads", count)
        params, opt, counts = _train(cls, options, allow, np.float32, shapes, steps=3)
        assert counts["kernel"] == 3 * len(shapes) * allow
        results.append((params, opt))
    assert_same_steps(*results[0], *results[1])
    assert_same_steps(*results[0], *results[2])


def test_one_kernel_call_per_dtype(monkeypatch):
    """A group of float32 and float64 parameters: two kernel calls per step, every parameter in one."""
    calls = []
    run_blocks = kernels.run_blocks
    monkeypatch.setattr(kernels, "run_blocks", lambda kernel, operands, rows: calls.append(len(operands))
                        or run_blocks(kernel, operands, rows))
    params = [jt.randn(5, dtype=dtype, requires_grad=True) for dtype in (jt.float32, jt.float64) * 3]
    opt = optim.NAdam(params, lr=0.1)
    for p in params:
        p.grad = jt.ones_like(p)
    opt.step()
    assert sorted(calls) == [3, 3]


def test_radam_rectified_and_unrectified_parameters_in_one_step():
    """A parameter that joins the group's steps late is still unrectified (rho_t <= 5) when the others are
    rectified: two kernels in one step, each parameter's bits those of the per-parameter step."""
    results = []
    for allow in (True, False):
        rng = np.random.default_rng(5)
        params = [jt.tensor(rng.standard_normal(9).astype(np.float32), requires_grad=True) for _ in range(3)]
        opt = optim.RAdam(params, lr=0.05, betas=(0.9, 0.9))
        counts = _spy_kernel(opt, allow)
        for step in range(9):
            for k, p in enumerate(params):
                p.grad = jt.tensor(rng.standard_normal(9).astype(np.float32)) if step >= 4 * k else None
            opt.step()
        assert [float(opt.state[p]["step"]) for p in params] == [9.0, 5.0, 1.0]
        assert counts["kernel"] == (9 + 5 + 1) * allow
        results.append((params, opt))
    assert_same_steps(*results[0], *results[1])


def test_nadam_float64_mu_product_from_a_state_dict():
    """A loaded state dict casts ``mu_product`` to a float64 parameter's dtype (the step stays float32):
    the kernel takes the step, multiplying the float64 product as the per-parameter step does."""
    results = []
    for allow in (True, False):
        rng = np.random.default_rng(6)
        w = jt.tensor(rng.standard_normal(11), requires_grad=True)
        source = optim.NAdam([w], lr=0.05)
        w.grad = jt.tensor(rng.standard_normal(11))
        source.step()
        opt = optim.NAdam([w], lr=0.05)
        opt.load_state_dict(source.state_dict())
        assert opt.state[w]["mu_product"].dtype is jt.float64 and opt.state[w]["step"].dtype is jt.float32
        counts = _spy_kernel(opt, allow)
        for _ in range(3):
            w.grad = jt.tensor(rng.standard_normal(11))
            opt.step()
        assert counts["kernel"] == 3 * allow
        results.append(([w], opt))
    assert_same_steps(*results[0], *results[1])


def test_parameters_sharing_memory_take_the_per_parameter_step():
    """Two parameters viewing one storage are left by the kernel (it declares its operands ``noalias``);
    the third takes it."""
    base = jt.zeros(8)
    a, b = base[:4].requires_grad_(), base[4:].requires_grad_()
    c = jt.zeros(4, requires_grad=True)
    opt = optim.Adagrad([a, b, c], lr=0.1)
    counts = _spy_kernel(opt, True)
    for p in (a, b, c):
        p.grad = jt.ones(4)
    opt.step()
    assert counts["kernel"] == 1
    np.testing.assert_array_equal(base.numpy(), np.full(8, -0.1, np.float32))
    np.testing.assert_array_equal(c.detach().numpy(), np.full(4, -0.1, np.float32))
