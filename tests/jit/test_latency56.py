"""A warm first call's work, counted, not timed (issue 19: a GPT training step's first call over a warm kernel
cache): the compile's scans over its steps."""

from __future__ import annotations

import numpy as np

import jitorch as jt
from jitorch.codegen import cache as cache_mod, kernel as kernel_mod
from jitorch.codegen.cache import KernelCache
from jitorch.jit import executor


def test_the_compile_asks_each_steps_reads_once_per_scan(monkeypatch):
    """The memory plan and the passes folding copies, biases and windows into their readers each asked every step's
    reads two or three times (an eager step's are made anew at each asking: 2,300 askings in the gpt-4x128 step's
    compile, 57,000 in generate's; 1,200 and 26,000 now): now once per pass over the steps, and once more in
    `fold_writers_into_cats`, whose steps' reads the copies just folded changed."""
    asked = {}
    for cls in (executor.EagerStep, executor.KernelStep):
        real = cls.reads
        monkeypatch.setattr(cls, "reads", lambda self, _real=real: asked.__setitem__(self, asked.get(self, 0) + 1)
                            or _real(self))
    a, b = jt.randn(4, 8), jt.randn(8, 8)
    out = jt.compile(lambda a, b: ((a @ b).relu() @ b + 1).sum(0))(a, b)
    np.testing.assert_allclose(out.numpy(), ((a.numpy() @ b.numpy()).clip(0) @ b.numpy() + 1).sum(0), rtol=1e-5)
    # fold_copies_into_cats and its fold_writers_into_cats, fold_biases_into_products, the plan: 4 askings (9-10
    # before: 2 + 1, 2, 3, and read_windows_in_place's 2)
    assert asked and max(asked.values()) <= 4, sorted(asked.values())[-5:]


def test_a_process_that_built_no_kernel_asks_no_memo_when_reading_the_graphs_sources(tmp_path, monkeypatch):
    """`build_many` asks whether this process built any of the groups' kernels before (it then builds them from its
    memo rather than reading the graph's entry): a fresh process over a warm cache has built none, and each question
    hashed a group's whole description (4,763 in generate's first batch, for nothing). It asks none there now."""
    cache = KernelCache(tmp_path / "kernels")
    monkeypatch.setattr(cache_mod, "default_cache", lambda: cache)
    asked = []
    real = kernel_mod._memo_key
    monkeypatch.setattr(kernel_mod, "_memo_key", lambda *args: asked.append(args) or real(*args))

    def f(x, y):
        return ((x * y).exp() + y).sum(0), (x @ y.t()).relu() * 2  # (two kernels: the product lies between)

    x, y = jt.randn(5, 6), jt.randn(5, 6)
    first = jt.compile(f)(x, y)  # (builds the kernels' IR: the memo and the cache's entry filled)
    assert asked
    monkeypatch.setattr(kernel_mod, "_built", type(kernel_mod._built)())  # a fresh process's memo
    asked.clear()
    again = jt.compile(f)(x, y)
    assert asked == [] and len(kernel_mod._built) == 0  # (the sources read from the cache's entry, none built)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(again[0].numpy(), (np.exp(x.numpy() * y.numpy()) + y.numpy()).sum(0), rtol=1e-5)
    np.testing.assert_allclose(again[1].numpy(), np.maximum(x.numpy() @ y.numpy().T, 0) * 2, rtol=1e-5)
