"""A compiled AdamW step with clipping over parameters of no element and of one, beside larger ones: its kernels dealt
among two threads in shared groups (`jit.kernel_runs.deal` gives a kernel of rows without work whole), and the same
groups run backwards (`tests.fuzz.shared._reversed_run`), give one thread's bits and torch's values."""

import numpy as np
import torch

import jitorch as jt
from jitorch.jit import kernel_runs
from tests.fuzz.shared import _reversed_run, _shared_groups

SHAPES = [(256, 96), (0, 5), (64, 400), (1,), (0,), (1, 1), (300,)]


def _train(lib, threads=1, backwards=False, monkeypatch=None):
    rng = np.random.default_rng(0)
    params = [lib.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in SHAPES]
    grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    opt = lib.optim.AdamW(params, lr=0.01)

    def step():
        opt.zero_grad()
        for p, g in zip(params, grads):
            p.grad = lib.tensor(g)
        lib.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    run = step
    if lib is jt:
        jt.set_num_threads(threads)
        run = jt.compile(step)
    with monkeypatch.context() as m:
        if backwards:
            m.setattr(kernel_runs.SharedPrograms, "run", _reversed_run)
        for _ in range(3):
            run()
    return [p.detach().numpy().copy() for p in params], run


def test_compiled_adamw_over_empty_and_one_element_parameters_in_shared_groups(monkeypatch):
    before = jt.get_num_threads()
    try:
        one, _ = _train(jt, 1, monkeypatch=monkeypatch)
        two, run = _train(jt, 2, monkeypatch=monkeypatch)
        assert _shared_groups(run) > 0
        backwards, _ = _train(jt, 2, True, monkeypatch)
    finally:
        jt.set_num_threads(before)
    want, _ = _train(torch, monkeypatch=monkeypatch)
    for a, b, c, w in zip(one, two, backwards, want):
        np.testing.assert_array_equal(b, a)
        np.testing.assert_array_equal(c, a)
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-6)
