"""Adam, AdamW, SGD and Adadelta steps of a whole group in one generated kernel call (`jitorch.optim.foreach`): against
torch's for-loop, ``foreach`` and ``fused`` optimizers over several steps (float32 and float64; torch's CPU
kernels use fused multiply-adds, so within a few roundings, not bit for bit), the same bits whatever the
flags and the thread count, one kernel per dtype and options, parameters sharing memory left to the
per-parameter step, and state dicts that round-trip. (test_numpy_step.py checks the kernel's values bit for
bit against jitorch's per-op step, with version counts.)"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.optim as optim
from jitorch.codegen import foreach as kernels
from jitorch.runtime import threads

SHAPES = [(6, 5), (70000,), (2, 3, 2), ()]  # (70000: two blocks of the kernel's loop)
CASES = [
    ("Adam", dict(lr=0.05)),
    ("Adam", dict(lr=0.05, betas=(0.1, 0.3), eps=1e-3, weight_decay=0.1, amsgrad=True)),  # lerp's second form
    ("AdamW", dict(lr=0.05, amsgrad=True, maximize=True, weight_decay=0.3)),
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.3)),
]
MODES = [dict(), dict(foreach=True), dict(fused=True)]  # (foreach=False: the default's path on the CPU)
MODE_IDS = ["default", "foreach", "fused"]
# (torch's Adadelta has no fused form)
CASES += [("Adadelta", dict()), ("Adadelta", dict(lr=0.5, rho=0.3, eps=1e-3, weight_decay=0.1, maximize=True)),
          ("Adadelta", dict(rho=0.0))]
RUNS = [(cls, options, mode) for cls, options in CASES for mode, name in zip(MODES, MODE_IDS)
        if not (cls == "Adadelta" and name == "fused")]
RUN_IDS = [f"{cls}-{CASES.index((cls, options))}-{MODE_IDS[MODES.index(mode)]}" for cls, options, mode in RUNS]
TOLERANCES = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def _train(lib, cls, options, dtype, steps=4, shapes=SHAPES):
    rng = np.random.default_rng(0)
    params = [lib.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]
    opt = getattr(lib.optim, cls)(params, **options)
    for _ in range(steps):
        for p in params:
            p.grad = lib.tensor(rng.standard_normal(p.shape).astype(dtype))
        opt.step()
    return params, opt


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,options,mode", RUNS, ids=RUN_IDS)
def test_matches_torch(cls, options, mode, dtype):
    ours, opt = _train(jt, cls, {**options, **mode}, dtype)
    theirs, reference = _train(torch, cls, {**options, **mode}, dtype)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **TOLERANCES[dtype])
        ours_state, theirs_state = opt.state[p], reference.state[q]
        assert sorted(ours_state) == sorted(theirs_state)
        for key, value in theirs_state.items():
            assert ours_state[key].dtype == getattr(jt, str(value.dtype).removeprefix("torch."))
            np.testing.assert_allclose(ours_state[key].numpy(), value.numpy(), **TOLERANCES[dtype])
    # the flags select no other arithmetic: every mode gives the default's bits
    default, _ = _train(jt, cls, options, dtype)
    assert all(p.detach().numpy().tobytes() == q.detach().numpy().tobytes() for p, q in zip(ours, default))


def test_one_kernel_per_dtype_and_options(monkeypatch):
    built = []
    build = kernels._kernels._build
    monkeypatch.setattr(kernels._kernels, "_build", lambda *key: built.append(key) or build(*key))
    monkeypatch.setattr(kernels._kernels, "_made", {})
    a = jt.zeros(3, requires_grad=True)
    b = jt.zeros(4, dtype=jt.float64, requires_grad=True)
    c = jt.zeros(2, 2, requires_grad=True)
    opt = optim.AdamW([a, b, c], lr=0.1)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        for p in (a, b, c):
            p.grad = jt.ones(p.shape, dtype=p.dtype)
        opt.step()
        scheduler.step()  # (a new learning rate: the same kernel)
    assert sorted(key[1] for key in built) == ["float32", "float64"]
    assert float(opt.state[b]["step"]) == 3.0


def test_threads_give_the_bits_of_one(monkeypatch):
    # (the thread count set through the settings the test restores: set_num_threads would also leave products
    # split for the tests after it)
    results, forks = [], []
    for count in (1, 2):
        monkeypatch.setitem(threads._settings, "threads", count)
        before = threads.counters["forks"]
        params, _ = _train(jt, "AdamW", dict(lr=0.05, weight_decay=0.1), np.float32, steps=2,
                           shapes=[(300000,), (5, 7), (70000,)])
        forks.append(threads.counters["forks"] - before)
        results.append([p.detach().numpy().tobytes() for p in params])
    assert forks[0] == 0 and forks[1] >= 2  # (each step's kernel split in two)
    assert results[0] == results[1]


def test_parameters_sharing_memory_take_the_per_parameter_step():
    base = jt.zeros(10)
    first, second = base[:5].requires_grad_(), base[5:].requires_grad_()
    alone = jt.zeros(3, requires_grad=True)
    opt = optim.SGD([first, second, alone], lr=0.5)
    left = []
    opt._numpy_update = lambda p, group: left.append(p) and False
    for p in (first, second, alone):
        p.grad = jt.ones(p.shape)
    opt.step()
    assert [id(p) for p in left] == [id(first), id(second)]  # (the ops then took their steps)
    np.testing.assert_array_equal(base.numpy(), np.full(10, -0.5, np.float32))
    np.testing.assert_array_equal(alone.detach().numpy(), np.full(3, -0.5, np.float32))


@pytest.mark.parametrize("cls,options", [CASES[2], CASES[4]], ids=["AdamW", "SGD"])
def test_state_dict_round_trips(cls, options):
    params, opt = _train(jt, cls, options, np.float32, steps=2)
    file = io.BytesIO()
    jt.save(opt.state_dict(), file)  # (a copy: the state dict holds the state tensors themselves)
    file.seek(0)
    saved = jt.load(file)
    again = [jt.tensor(p.detach().numpy(), requires_grad=True) for p in params]
    resumed = getattr(optim, cls)(again, **options)
    resumed.load_state_dict(saved)
    rng = np.random.default_rng(1)
    for _ in range(2):
        for p, q in zip(params, again):
            q.grad = p.grad = jt.tensor(rng.standard_normal(p.shape).astype(np.float32))
        opt.step()
        resumed.step()
    for p, q in zip(params, again):
        assert p.detach().numpy().tobytes() == q.detach().numpy().tobytes()
    assert {k: sorted(v) for k, v in resumed.state_dict()["state"].items()} == \
        {k: sorted(v) for k, v in opt.state_dict()["state"].items()}
    torch_opt = getattr(torch.optim, cls)([torch.zeros(p.shape, requires_grad=True) for p in params], **options)
    torch_opt.load_state_dict({"state": {k: {n: torch.from_numpy(t.numpy().copy()) for n, t in v.items()}
                                         for k, v in saved["state"].items()},
                               "param_groups": saved["param_groups"]})
    assert torch_opt.state_dict()["param_groups"] == saved["param_groups"]


def test_capturable_on_cpu_raises_as_torch():
    w = jt.zeros(3, requires_grad=True)
    w.grad = jt.ones(3)
    with pytest.raises(AssertionError, match="If capturable=True, params and state_steps must be on supported"):
        optim.Adam([w], capturable=True).step()
    optim.Adam([w], capturable=True, fused=True).step()  # (torch's fused kernels take capturable on CPU)
    assert float(w[0]) < 0
