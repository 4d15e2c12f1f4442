"""Independent parts of a fusion group (`jit.parts`): siblings that share only a scalar run as one
kernel each, equal parts compile to one machine code, and siblings sharing a large operand stay one
kernel."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import cache as cache_mod, cpu, kernel as kernel_mod
from jitorch.codegen.cache import KernelCache
from jitorch.ir.passes.fusion import fuse
from jitorch.jit import trace
from jitorch.jit.parts import independent_parts


def _updates(lr, *xs):
    """An optimizer-like update of each tensor: its own arithmetic, the learning rate shared."""
    return tuple((x * 0.9 - lr * x.sin()).sqrt() for x in xs)


def _tensors(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(1.0, 2.0, s).astype(np.float32) for s in shapes]


def test_parts_sharing_a_scalar_are_split_in_node_order():
    xs = [jt.tensor(a) for a in _tensors([(6, 5)] * 3)]
    (group,) = fuse(trace(_updates, jt.tensor(0.1), *xs))
    parts = independent_parts(group)
    assert len(parts) == 3 and [len(p.outputs) for p in parts] == [1, 1, 1]
    assert [n for p in parts for n in p.nodes] == group.nodes
    lr = [v for v in group.inputs if v.type.shape == ()]
    assert len(lr) == 1 and all(lr[0] in p.inputs and p.shape == group.shape for p in parts)


def test_siblings_sharing_a_large_operand_stay_one_group():
    x = jt.randn(6)
    (group,) = fuse(trace(lambda x: (x + 1, x * 2, x.exp()), x))
    assert independent_parts(group) == [group]


@pytest.fixture
def fresh_kernels(tmp_path, monkeypatch):
    """This process's kernels forgotten (as in a new process), over an empty kernel cache."""
    monkeypatch.setattr(cache_mod, "default_cache", lambda: KernelCache(tmp_path / "kernels"))
    monkeypatch.setattr(cpu, "_linked", weakref.WeakValueDictionary())
    monkeypatch.setattr(kernel_mod, "_built", type(kernel_mod._built)())


def test_equal_parts_compile_to_one_machine_code(fresh_kernels, monkeypatch):
    texts = []
    real = cpu._batch_module
    monkeypatch.setattr(cpu, "_batch_module", lambda t, names: texts.append(len(t)) or real(t, names))
    arrays = _tensors([(40, 30)] * 4)
    fn = jt.compile(_updates)
    got = fn(jt.tensor(0.1), *[jt.tensor(a) for a in arrays])
    want = _updates(torch.tensor(0.1), *[torch.tensor(a) for a in arrays])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
    kernels = fn.lower(jt.tensor(0.1), *[jt.tensor(a) for a in arrays]).executable.kernels
    assert len(kernels) == 4 and len({k._code.address for k in kernels}) == 1  # one machine code serves all
    assert texts == [1]  # four kernels, one text handed to LLVM


def test_a_training_step_compiles_one_update_code_per_pattern_for_parameters_of_every_size(fresh_kernels):
    model = jt.nn.Sequential(jt.nn.Linear(8, 16), jt.nn.Tanh(), jt.nn.Linear(16, 4))
    opt = jt.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    x, y = jt.randn(5, 8), jt.randn(5, 4)
    fn = jt.compile(step)
    for _ in range(2):  # the second call traces again, with Adam's state
        fn(x, y)
    kernels = fn.lower(x, y).executable.kernels
    updates = [k for k in kernels if "lerp" in k.ops]
    assert len(updates) == 4  # one per parameter, of four sizes
    # one code per pattern, whatever the sizes: the weights' update, the biases' (which reads its gradient
    # through a view), and any whose gradient is laid out otherwise (a transposed matmul result)
    patterns = {(tuple(k.ops), tuple(k.source.layouts.values())) for k in updates}
    assert len({k._code.address for k in updates}) == len(patterns) < len(updates)


def test_a_group_of_one_element_stays_one_kernel():
    # step counters merged by fusion: each part's call would cost more than its arithmetic
    counts = [jt.zeros(()) for _ in range(4)]
    (group,) = fuse(trace(lambda lr, *cs: tuple(c + lr for c in cs), jt.tensor(1.0), *counts))
    assert len(group.outputs) == 4 and independent_parts(group) == [group]
