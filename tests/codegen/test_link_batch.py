"""A compiled graph's kernels made together: one LLVM module per graph (`cpu.link_batch`), kernels equal
but for their names compiled once, the batch cached as one entry, a batch LLVM refuses; and the kernel
sources of equal groups built once (`kernel.build_shared`)."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
import torch

import jitorch
from jitorch.codegen import cache as cache_mod, cpu, kernel as kernel_mod
from jitorch.codegen.cache import KernelCache
from jitorch.codegen.errors import CompileError


@pytest.fixture
def fresh_kernels(tmp_path, monkeypatch):
    """Makes this process forget every kernel (as a new process would): a new kernel cache over
    ``tmp_path / "kernels"``, no linked code and no kernel sources built; returns that cache."""

    def forget():
        cache = KernelCache(tmp_path / "kernels")
        monkeypatch.setattr(cache_mod, "default_cache", lambda: cache)
        monkeypatch.setattr(cpu, "_linked", weakref.WeakValueDictionary())
        monkeypatch.setattr(kernel_mod, "_built", type(kernel_mod._built)())
        return cache

    return forget


@pytest.fixture
def batches(monkeypatch):
    """The number of kernel texts in each module `link_batch` hands to LLVM, in order."""
    seen = []
    real = cpu._batch_module

    def spy(texts, names):
        seen.append(len(texts))
        return real(texts, names)

    monkeypatch.setattr(cpu, "_batch_module", spy)
    return seen


def layers(lib, x, w1, w2, w3):
    """Three equal layers: their kernels differ only in their names."""
    for w in (w1, w2, w3):
        x = (x @ w).tanh() * 2.0 + 1.0
    return x


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((8, 16)).astype(np.float32)] + \
        [rng.standard_normal((16, 16)).astype(np.float32) * 0.2 for _ in range(3)]


def _run(arrays):
    return jitorch.compile(lambda *a: layers(jitorch, *a))(*[jitorch.tensor(a) for a in arrays]).numpy()


def _expected(arrays):
    return layers(torch, *[torch.tensor(a) for a in arrays]).numpy()


def test_equal_layers_are_compiled_once_in_one_module(fresh_kernels, batches):
    fresh_kernels()
    arrays = _inputs()
    np.testing.assert_allclose(_run(arrays), _expected(arrays), rtol=1e-5, atol=1e-5)
    assert batches == [1]  # three layers' kernels, one LLVM module holding one of them


def test_a_new_process_loads_sources_and_batch_from_the_disk_cache_without_building_or_llvm(
        fresh_kernels, batches, monkeypatch):
    fresh_kernels()
    arrays = _inputs()
    _run(arrays)
    cache = fresh_kernels()
    monkeypatch.setattr(kernel_mod, "build", None)  # a call would raise
    np.testing.assert_allclose(_run(arrays), _expected(arrays), rtol=1e-5, atol=1e-5)
    assert batches == [1]  # the first process's only
    info = cache.info()
    assert (info.disk_hits, info.misses, info.writes) == (2, 0, 0)  # the graph's kernel sources, its batch


def test_a_damaged_kernel_sources_entry_is_built_again(fresh_kernels, tmp_path):
    fresh_kernels()
    arrays = _inputs()
    _run(arrays)
    for path in (tmp_path / "kernels").rglob("*.jitk"):
        data = path.read_bytes()
        path.write_bytes(data[:-40] + b"\0" * 40)  # the payload's end: the entry's checks refuse it
    cache = fresh_kernels()
    np.testing.assert_allclose(_run(arrays), _expected(arrays), rtol=1e-5, atol=1e-5)
    assert cache.info().misses == 2


def test_kernels_of_distinct_layers_share_one_module(fresh_kernels, batches):
    fresh_kernels()

    def f(x):
        return (x.exp() + 1.0).sum(0), x.tanh() * 3.0, (x * x).amax(1)
    x = jitorch.tensor(_inputs()[0])
    out = jitorch.compile(f)(x)
    expected = f(torch.tensor(x.numpy()))
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    assert len(batches) == 1 and batches[0] >= 2


def test_a_batch_llvm_refuses_leaves_each_kernel_to_link_alone(fresh_kernels, monkeypatch):
    fresh_kernels()

    def refuse(texts, names):
        raise RuntimeError("LLVM refused the module")

    monkeypatch.setattr(cpu, "_batch_module", refuse)
    arrays = _inputs()
    arrays[2] = arrays[2][:, :12]  # layers of other shapes: kernels the batch would hold together
    arrays[3] = arrays[3][:12, :12]
    np.testing.assert_allclose(_run(arrays), _expected(arrays), rtol=1e-5, atol=1e-5)


def test_equal_groups_are_built_once_in_a_process(fresh_kernels, monkeypatch):
    fresh_kernels()
    built = []
    real = kernel_mod.build_pointwise

    def spy(group, name, *args):
        built.append(name)
        return real(group, name, *args)

    monkeypatch.setattr(kernel_mod, "build_pointwise", spy)
    arrays = _inputs()
    np.testing.assert_allclose(_run(arrays), _expected(arrays), rtol=1e-5, atol=1e-5)
    assert len(built) == 1  # the first layer's; the others are renamed copies
    np.testing.assert_allclose(_run(arrays), _expected(arrays), rtol=1e-5, atol=1e-5)  # a new function
    assert len(built) == 1


def test_flat_groups_of_any_shape_are_built_once_and_run_their_own_length(fresh_kernels, batches, monkeypatch):
    fresh_kernels()
    built = []
    real = kernel_mod.build_pointwise
    monkeypatch.setattr(kernel_mod, "build_pointwise", lambda group, *a: built.append(group.shape) or real(group, *a))
    f = lambda x, s: (x * s + 1.0).tanh()  # noqa: E731
    s = torch.tensor(0.5)
    for shape in [(8, 16), (3, 5, 7), (1000,)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        fn = jitorch.compile(f)
        np.testing.assert_allclose(fn(jitorch.tensor(x), jitorch.tensor(0.5)).numpy(), f(torch.tensor(x), s).numpy(),
                                   rtol=1e-6)
        (kernel,) = fn.lower(jitorch.tensor(x), jitorch.tensor(0.5)).executable.kernels
        assert kernel.outer == x.size
    assert built == [(8, 16)] and batches == []  # one build, one machine code: its loop's length is the call's


def test_a_strided_or_broadcast_operand_keeps_the_shape_in_the_signature(fresh_kernels):
    fresh_kernels()
    f = lambda x, b: x * b  # noqa: E731  (b broadcast over rows: index maths of the shape)
    for rows, cols in [(4, 6), (6, 4)]:
        x, b = np.ones((rows, cols), np.float32), np.arange(cols, dtype=np.float32)
        got = jitorch.compile(f)(jitorch.tensor(x), jitorch.tensor(b))
        np.testing.assert_array_equal(got.numpy(), x * b)
        got = jitorch.compile(f)(jitorch.tensor(x).t(), jitorch.tensor(np.arange(rows, dtype=np.float32)))
        np.testing.assert_array_equal(got.numpy(), x.T * np.arange(rows, dtype=np.float32))


def test_groups_that_differ_in_a_scalar_are_built_apart(fresh_kernels):
    fresh_kernels()
    x = jitorch.tensor(_inputs()[0])
    for scale in (2.0, 3.0, 2):  # the int makes an int literal in the graph, which a float must not match
        got = jitorch.compile(lambda t: (t * scale).exp())(x)
        np.testing.assert_allclose(got.numpy(), np.exp(x.numpy() * scale), rtol=1e-6)


def test_the_nodes_of_a_group_the_builder_refuses_join_the_batch(fresh_kernels, batches, monkeypatch):
    fresh_kernels()
    alone = []
    real_optimise, real_build = cpu.optimise, kernel_mod.build

    def optimise(*args):  # a kernel compiled by itself
        alone.append(args)
        return real_optimise(*args)

    def build(group, *args):  # refuses fused groups, as it does some: the executor splits them
        if len(group.nodes) > 1:
            raise CompileError("refused")
        return real_build(group, *args)

    monkeypatch.setattr(cpu, "optimise", optimise)
    monkeypatch.setattr(kernel_mod, "build", build)
    x = jitorch.tensor(_inputs()[0])
    got = jitorch.compile(lambda t: ((t * 2.0).exp() + 1.0).tanh())(x)
    np.testing.assert_allclose(got.numpy(), np.tanh(np.exp(x.numpy() * 2.0) + 1.0), rtol=1e-5)
    assert alone == [] and batches == [4]  # mul, exp, add, tanh: one module


def test_a_groups_nodes_are_described_once_for_its_kernel_and_its_in_place_kernel(fresh_kernels, monkeypatch):
    """A parameter update computed in place asks for its group's kernel twice (`build_many`), with and without
    the output's memory as its input's: the group's nodes are described once, and the two signatures differ
    in the aliases alone, so each has a kernel of its own."""
    fresh_kernels()
    described = []
    real = kernel_mod._nodes_described
    monkeypatch.setattr(kernel_mod, "_nodes_described", lambda group: described.append(group) or real(group))

    def update(w, g):  # (w itself not returned: its new value is written into its memory)
        with jitorch.no_grad():
            w.sub_(g * 0.5)
        return g.sum()

    w, g = jitorch.ones(64), jitorch.full((64,), 2.0)
    ex = jitorch.compile(update).lower(w, g).executable
    (step,) = [s for s in ex.steps if getattr(s, "inplace_kernel", None) is not None]
    assert described.count(step.group) == 1
    aliases = {v: t for _, v, t in step.inplace_outputs}
    plain, values, _ = kernel_mod._signature(step.group, None, step.layouts)
    in_place, same_values, _ = kernel_mod._signature(step.group, aliases, step.layouts)
    assert described.count(step.group) == 1 and values is same_values
    assert plain[:5] == in_place[:5] and plain[5] == () and in_place[5] != ()
    jitorch.compile(update)(w, g)
    np.testing.assert_array_equal(w.numpy(), np.zeros(64, np.float32))
