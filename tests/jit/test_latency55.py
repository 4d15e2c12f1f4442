"""What a first compiled call does as its graph grows (issue 19: compile work linear in the graph), counted, not
timed: LLVM's kernels and distinct texts of a training step at three depths (the deeper ones' batches found in
the cache the shallowest filled), and the in-place checks and the product pairing asking each step once."""

from __future__ import annotations

import logging
import weakref

import numpy as np
import torch

import jitorch as jt
from jitorch.codegen import cache as cache_mod, cpu, kernel as kernel_mod
from jitorch.codegen.cache import KernelCache
from jitorch.jit import executor, interop
from jitorch.runtime import logs


def _mlp_step(layers):
    """A training step (forward, backward, SGD with momentum) of ``layers`` equal blocks, compiled."""
    jt.manual_seed(0)
    model = jt.nn.Sequential(*[jt.nn.Sequential(jt.nn.Linear(16, 16), jt.nn.GELU(), jt.nn.LayerNorm(16))
                               for _ in range(layers)])
    opt = jt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = jt.randn(8, 16), jt.randn(8, 16)

    def step():
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return jt.compile(step)


def _first_call(caplog, monkeypatch, layers):
    """(the loss of `_mlp_step`'s first call, [kernels, distinct texts] of each batch LLVM compiled for it, the
    distinct texts of each batch loaded from the kernel cache, the kernels that went to its batches)."""
    monkeypatch.setattr(cpu, "_linked", weakref.WeakValueDictionary())
    monkeypatch.setattr(kernel_mod, "_built", type(kernel_mod._built)())
    kernels, unnamed = [], cpu._unnamed
    monkeypatch.setattr(cpu, "_unnamed", lambda source: kernels.append(source) or unnamed(source))
    caplog.clear()
    logs.set_logs("codegen")
    try:
        with caplog.at_level(logging.INFO, logger="jitorch"):
            loss = _mlp_step(layers)()
    finally:
        logs.set_logs("")
    compiled = [list(r.args[:2]) for r in caplog.records if "but for their sizes" in r.msg]
    loaded = [r.args[0] for r in caplog.records if r.msg.startswith("loaded %d kernels")]
    return float(loss), compiled, loaded, len(kernels)


def test_a_deeper_step_compiles_more_kernels_of_the_same_texts(tmp_path, monkeypatch, caplog):
    """Blocks equal but for their names compile once (as the GPT step's 34 texts at 2, 4 and 8 layers, session 54):
    the step's batches hold the same distinct texts at 2, 3 and 4 blocks, so the deeper steps, compiled after over
    the same cache, find their batches there (a batch's key is its texts') and LLVM compiles nothing for them; each block
    adds the same number of kernels (its forward's, backward's and update's)."""
    cache = KernelCache(tmp_path / "kernels")
    monkeypatch.setattr(cache_mod, "default_cache", lambda: cache)
    losses, compiled, loaded, kernels = zip(*[_first_call(caplog, monkeypatch, n) for n in (2, 3, 4)])
    assert all(np.isfinite(losses))
    texts = [t for _, t in compiled[0]]
    assert loaded[0] == [] and compiled[1:] == ([], []) and loaded[1:] == (texts, texts)
    assert kernels[0] == sum(k for k, _ in compiled[0]) and kernels[2] - kernels[1] == kernels[1] - kernels[0]
    # the graph's kernels, then the in-place optimizer's (`Plan.inplace`); 11 more kernels per block
    assert (compiled[0], kernels[1] - kernels[0]) == ([[17, 11], [8, 2]], 11), (compiled, kernels)


def test_the_in_place_checks_scan_each_kernel_once_whatever_its_outputs(monkeypatch):
    """A kernel updating several inputs in place (as an optimizer's updates each parameter): the nodes feeding its
    reductions, its readers and its views were found again for each output (time growing as the square of the
    kernel: the GPT-8x128 step's plan took 19 ms, 13 now); now once per kernel step (this one: 3 times before)."""
    scans = []
    real = executor._feeding_reductions
    monkeypatch.setattr(executor, "_feeding_reductions", lambda nodes: scans.append(id(nodes)) or real(nodes))

    def update(a, b, c):
        s = (a * b).sum(-1, keepdim=True)
        a.sub_(s * 0.1)
        b.sub_(s * 0.2)
        c.add_(s)

    rng = np.random.default_rng(55)
    a, b, c = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(3))
    got = [jt.tensor(v) for v in (a, b, c)]
    jt.compile(update)(*got)
    want = [torch.tensor(v) for v in (a, b, c)]
    update(*want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)
    assert len(scans) == len(set(scans)) == 1


class _Step:
    """A step as `interop.pair_products` sees it, counting the times its reads are asked."""

    def __init__(self, reads, writes, work=None):
        self._reads, self._writes, self.work, self.asked = reads, writes, work, 0

    def reads(self):
        self.asked += 1
        return self._reads

    def writes(self):
        return self._writes


def test_pairing_asks_each_steps_reads_once():
    """Each product looks `PAIR_WINDOW` steps ahead for its pair, and each step's reads were made at each look
    (20,729 times in generate's warm first call, 3,733 steps): now once per step."""
    w = 1 << 20
    steps = []
    for i in range(40):  # products that each read the one before: none pairs, every window is searched
        steps += [_Step([f"p{i - 1}"], [f"v{i}"]), _Step([f"v{i}"], [f"p{i}"], w)]

    def pair(a, b):
        raise AssertionError("no two of these products are independent")
    assert interop.pair_products(steps, lambda s: s.work, lambda s: True, pair, 1 << 22) == steps
    assert max(s.asked for s in steps) == 1
