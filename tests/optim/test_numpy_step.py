"""Eager optimizer steps on the parameters' NumPy arrays (`_numpy_update`): the same values bit for bit as
the step through jitorch's ops (whose values the other tests compare with torch's), the same version
counts, and taken only where allowed: never while a step is traced, profiled or autocast, nor for
tensors other than dense float32/float64 CPU tensors, nor for a tensor learning rate."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
import jitorch.optim as optim

SHAPES = [(6, 5), (7,), (2, 3, 2), ()]

CASES = [
    (optim.Adam, dict(lr=0.05)),
    (optim.Adam, dict(lr=0.05, weight_decay=0.1, amsgrad=True, maximize=True)),
    (optim.Adam, dict(lr=0.05, betas=(0.5, 0.9), eps=1e-3, weight_decay=1)),
    (optim.Adam, dict(lr=0.05, betas=(0.1, 0.3), eps=1e-3)),  # lerp's second form, 1 - w inexact in float32
    (optim.AdamW, dict(lr=0.05)),
    (optim.AdamW, dict(lr=0.05, amsgrad=True, maximize=True, weight_decay=0.3)),
    (optim.SGD, dict(lr=0.1)),
    (optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    (optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    (optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.3, weight_decay=1)),
    (optim.RMSprop, dict(lr=0.05)),
    (optim.RMSprop, dict(lr=0.05, alpha=0.3, momentum=0.9, centered=True, weight_decay=0.1, maximize=True)),
    (optim.RMSprop, dict(lr=0.05, alpha=0.8, centered=True)),  # lerp's first form, 1 - alpha < 0.5
    (optim.Adagrad, dict(lr=0.1)),
    (optim.Adagrad, dict(lr=0.1, lr_decay=0.3, weight_decay=0.1, initial_accumulator_value=0.5, maximize=True)),
    (optim.Adamax, dict(lr=0.05)),
    (optim.Adamax, dict(lr=0.05, betas=(0.1, 0.3), eps=1e-3, weight_decay=0.2, maximize=True)),
    (optim.NAdam, dict(lr=0.05)),
    (optim.NAdam, dict(lr=0.05, betas=(0.2, 0.6), weight_decay=0.1, momentum_decay=0.1, maximize=True)),
    (optim.NAdam, dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    # rho_t is 1 at step 1 whatever beta2; with beta2 = 0.9 it passes 5 at step 6 (rectified), with 0.999 later
    (optim.RAdam, dict(lr=0.05)),
    (optim.RAdam, dict(lr=0.05, betas=(0.5, 0.9), weight_decay=0.1, maximize=True)),
    (optim.RAdam, dict(lr=0.05, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1, decoupled_weight_decay=True)),
    (optim.Adadelta, dict()),
    (optim.Adadelta, dict(lr=0.5, rho=0.3, eps=1e-3, weight_decay=0.1, maximize=True)),
]
# optimizers whose general step multiplies by 0-d float64 tensors of the step, which promote a 0-d parameter's
# products: the ops take those parameters' steps
ZERO_DIM_BY_OPS = (optim.Adagrad, optim.Adamax, optim.NAdam, optim.RAdam)
# every optimizer here takes the group's eager step in one generated kernel call (`jitorch.optim.foreach`)


def _spy(opt, allow):
    """Count the parameters offered to ``opt``'s `_numpy_update` or taken by the group's
    generated kernel (`_foreach_update`, counted in both and in "kernel"), and those that took their step
    there; ``allow`` False makes every step take jitorch's ops."""
    counts = {"calls": 0, "taken": 0, "kernel": 0}
    numpy_update = opt._numpy_update
    foreach_update = getattr(opt, "_foreach_update", None)

    def spy(*args):
        counts["calls"] += 1
        taken = allow and numpy_update(*args)
        counts["taken"] += taken
        return taken
    opt._numpy_update = spy

    def spy_foreach(group, params, *rest):
        left = foreach_update(group, params, *rest) if allow else params
        for key in counts:
            counts[key] += len(params) - len(left)
        return left
    if foreach_update is not None:
        opt._foreach_update = spy_foreach
    return counts


def _set_grads(rng, params, dtype, device="cpu"):
    for p in params:
        p.grad = jt.tensor(rng.standard_normal(p.shape).astype(dtype), device=device)
    params[0].grad = jt.tensor(rng.standard_normal((5, 6)).astype(dtype), device=device).t()  # (read as laid out)


def _train(cls, options, allow, dtype, steps=4, schedule=True):
    rng = np.random.default_rng(0)
    params = [jt.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in SHAPES]
    opt = cls(params, **options)
    counts = _spy(opt, allow)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7) if schedule else None
    for _ in range(steps):
        _set_grads(rng, params, dtype)
        opt.step()
        if scheduler is not None:
            scheduler.step()
    return params, opt, counts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,options", CASES, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(CASES)])
def test_numpy_step_equals_ops_bit_for_bit(cls, options, dtype):
    steps = 8 if cls is optim.RAdam else 4  # (RAdam's rectified steps start at the 6th)
    fast, fast_opt, fast_counts = _train(cls, options, True, dtype, steps)
    slow, slow_opt, slow_counts = _train(cls, options, False, dtype, steps)
    # every parameter's step on its arrays, but an SGD momentum buffer's first (made by the ops)
    first_by_ops = len(SHAPES) if options.get("momentum") and cls is optim.SGD else 0
    zero_dim_by_ops = steps * SHAPES.count(()) if cls in ZERO_DIM_BY_OPS else 0
    # in the group's kernel, but the first parameter's (its gradient is transposed) and the 0-d one's where
    # the ops take it
    by_kernel = (steps - bool(first_by_ops)) * (len(SHAPES) - 1) - zero_dim_by_ops
    assert fast_counts == {"calls": steps * len(SHAPES),
                           "taken": steps * len(SHAPES) - first_by_ops - zero_dim_by_ops, "kernel": by_kernel}
    assert slow_counts["taken"] == 0
    assert_same_steps(fast, fast_opt, slow, slow_opt)


def assert_same_steps(fast, fast_opt, slow, slow_opt):
    """Two trainings' parameters, version counts and optimizer states bit for bit alike."""
    for p, q in zip(fast, slow):
        assert p.detach().numpy().tobytes() == q.detach().numpy().tobytes()
        assert p._version == q._version > 0
        fast_state, slow_state = fast_opt.state[p], slow_opt.state[q]
        assert sorted(fast_state) == sorted(slow_state)
        for key, value in slow_state.items():
            assert fast_state[key].dtype == value.dtype, key
            assert fast_state[key].numpy().tobytes() == value.numpy().tobytes(), key
            assert fast_state[key]._version == value._version, key


def test_saved_parameter_check_sees_the_numpy_step():
    """A graph that saved a parameter refuses to differentiate after the step changed it in place."""
    w = jt.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.AdamW([w], lr=0.1)
    counts = _spy(opt, True)
    y = (w * w).sum()
    w.grad = jt.tensor([0.5, -0.5])
    opt.step()
    assert counts["taken"] == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_not_taken_while_traced():
    w = jt.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    opt = optim.Adam([w], lr=0.1, amsgrad=True)
    w.grad = jt.ones(4, 3)
    opt.step()  # the state, made eagerly
    counts = _spy(opt, True)

    def update(g):
        w.grad = g
        opt.step()

    jt.compile(update, fullgraph=True)(jt.full((4, 3), 0.5))
    assert counts["calls"] == 0
    assert float(opt.state[w]["step"]) == 2.0


@pytest.mark.parametrize("cls,options", [CASES[1], CASES[6]], ids=["Adam", "SGD"])
def test_not_taken_under_profiler_or_autocast(cls, options):
    for context in (jt.profiler.profile, lambda: jt.autocast("cpu")):
        params, opt, counts = _train(cls, options, True, np.float32, steps=0)
        with context():
            for _ in range(2):
                for p in params:
                    p.grad = jt.ones(p.shape)
                opt.step()
        assert counts == {"calls": 0, "taken": 0, "kernel": 0}


def _one_step(opt, params, grads):
    counts = _spy(opt, True)
    for p, g in zip(params, grads):
        p.grad = g
    opt.step()
    return counts


def test_not_taken_for_other_tensors():
    # a half dtype, a meta tensor, a non-contiguous parameter, a gradient of another dtype
    half = jt.zeros(3, dtype=jt.float16, requires_grad=True)
    meta = jt.zeros(3, device="meta", requires_grad=True)
    strided = jt.zeros(4, 3).t().requires_grad_()
    other = jt.zeros(3, requires_grad=True)
    other.grad_dtype = None  # (torch's way to let a parameter take a gradient of another dtype)
    params = [half, meta, strided, other]
    grads = [jt.ones(3, dtype=jt.float16), jt.ones(3, device="meta"), jt.ones(3, 4), jt.ones(3, dtype=jt.float64)]
    counts = _one_step(optim.AdamW(params, lr=0.1), params, grads[:3] + [jt.ones(3)])
    # only ``other``, whose gradient is float32 here, in the group's kernel
    assert counts == {"calls": 4, "taken": 1, "kernel": 1}
    counts = _one_step(optim.SGD([other], lr=0.1), [other], grads[3:])
    assert counts == {"calls": 1, "taken": 0, "kernel": 0}
    np.testing.assert_allclose(strided.detach().numpy(), np.full((3, 4), -0.1), rtol=1e-6)  # by the ops


def test_not_taken_for_a_tensor_learning_rate():
    w = jt.zeros(3, requires_grad=True)
    opt = optim.Adam([w], lr=jt.tensor(0.1))
    counts = _one_step(opt, [w], [jt.ones(3)])
    assert counts == {"calls": 0, "taken": 0, "kernel": 0}
    np.testing.assert_allclose(w.detach().numpy(), np.full(3, -0.1), rtol=1e-6)


@pytest.mark.parametrize("cls,options", [CASES[4], CASES[7]], ids=["AdamW", "SGD"])
def test_not_taken_for_cuda_tensors(cls, options):
    """On CUDA tensors (the fake device in host memory) the ops take every step, and agree with the CPU's."""
    from jitorch.backends.cuda.fake import FakeBackend
    from jitorch.runtime.cuda_backend import use_backend
    cpu_params, _, _ = _train(cls, options, True, np.float32, schedule=False)
    with use_backend(FakeBackend()):
        rng = np.random.default_rng(0)
        params = [jt.tensor(rng.standard_normal(s).astype(np.float32), device="cuda", requires_grad=True)
                  for s in SHAPES]
        opt = cls(params, **options)
        counts = _spy(opt, True)
        for _ in range(4):
            _set_grads(rng, params, np.float32, "cuda")
            opt.step()
        assert counts["taken"] == 0 and counts["calls"] > 0
        for p, q in zip(params, cpu_params):
            np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


NEW_CASES = [(cls, options) for cls, options in CASES if cls not in (optim.Adam, optim.AdamW, optim.SGD)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,options", NEW_CASES, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(NEW_CASES)])
def test_numpy_step_follows_torch(cls, options, dtype):
    """The steps on NumPy arrays follow torch.optim's on the same parameters, gradients and schedule."""
    steps = 8
    fast, _, counts = _train(cls, options, True, dtype, steps)
    assert counts["taken"] > 0
    assert_follows_torch(fast, cls, options, dtype, SHAPES, steps, transposed_grad=(5, 6))


def assert_follows_torch(fast, cls, options, dtype, shapes, steps, transposed_grad=None):
    """``fast`` (jitorch's parameters after ``steps`` steps of ``cls(options)``, their gradients drawn as `_train`
    draws them: standard normal from seed 0, the first one's the transpose of a ``transposed_grad`` draw where
    given) within docs/differences-from-torch.md's tolerance of torch.optim's on the same parameters, gradients
    and StepLR schedule (float32: relative 2e-5)."""
    import torch
    rng = np.random.default_rng(0)
    params = [torch.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]
    opt = getattr(torch.optim, cls.__name__)(params, **options)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    for _ in range(steps):
        for p in params:
            p.grad = torch.tensor(rng.standard_normal(p.shape).astype(dtype))
        if transposed_grad is not None:
            params[0].grad = torch.tensor(rng.standard_normal(transposed_grad).astype(dtype)).t()
        opt.step()
        scheduler.step()
    tolerance = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    for p, q in zip(fast, params):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **tolerance)


SPLIT_CASES = [CASES[1], CASES[5], (optim.Adadelta, dict(lr=0.5, rho=0.3, weight_decay=0.1)),
               (optim.RMSprop, dict(lr=0.05, alpha=0.8, centered=True)), CASES[8], CASES[9]]


@pytest.mark.parametrize("cls,options", SPLIT_CASES, ids=[c.__name__ for c, _ in SPLIT_CASES])
def test_large_parameters_split_across_two_threads_give_the_ops_bits(monkeypatch, cls, options):
    """A parameter of `ufunc_parts.SPLIT_MIN` elements or more is updated on the thread team (the same passes
    on each thread's range of elements): the bits of the step through the ops."""
    from jitorch.runtime import threads, ufunc_parts
    monkeypatch.setitem(threads._settings, "threads", 2)
    monkeypatch.setattr(ufunc_parts, "BACKOFF", 0)  # every large call asks the team, even on a loaded machine
    monkeypatch.setitem(ufunc_parts._backoff, "calls", 0)
    rng = np.random.default_rng(3)
    start = rng.standard_normal(ufunc_parts.SPLIT_MIN + 77).astype(np.float32)
    grads = [rng.standard_normal(start.shape).astype(np.float32) for _ in range(3)]
    results = []
    for allow in (True, False):
        w = jt.tensor(start, requires_grad=True)
        opt = cls([w], **options)
        counts = _spy(opt, allow)
        forks = threads.counters["forks"]
        for g in grads:
            w.grad = jt.tensor(g)
            opt.step()
        results.append((w.detach().numpy().tobytes(), {k: v.numpy().tobytes() for k, v in opt.state[w].items()}))
        if allow:  # (SGD's first step with momentum makes its buffer through the ops)
            assert counts["taken"] == 3 - (cls is optim.SGD) and threads.counters["forks"] > forks
    assert results[0] == results[1]
