"""Tail folding of the math kernels' map loops (`codegen.target._tail_folded`): a loop of a fixed trip count that
is no multiple of the vector's lanes runs its last iterations as one masked vector iteration on AVX-512, not as a
scalar loop of the mathlib functions (an LSTM cell of hidden size 200: 8 of every 200 elements); the values are
the same bits either way, but for a NaN's sign."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import cpu, machine, target
from jitorch.codegen.kernel import build
from jitorch.codegen.recurrence import cell_kernel
from jitorch.ir.fake import add_op
from jitorch.ir.graph import Graph, TensorType
from jitorch.ir.passes.fusion import fuse

PREDICATE = "llvm.loop.vectorize.predicate.enable"
AVX512 = "avx512f" in machine.selected().required()  # (the machine code is made for: JITORCH_CPU)


def cell_source(cols, name="jitorch_test_tail"):
    """The kernel source of tanh(x) * sigmoid(x) over the first ``cols`` columns of a (3, cols + 16) float32 ``x``
    (rows apart in memory, as an LSTM cell's gates are: the loop over a row's columns is the innermost)."""
    g = Graph()
    x = add_op(g, "narrow", g.add_input(TensorType((3, cols + 16), jt.float32, jt.device("cpu"))), 1, 0, cols)
    g.outputs = (add_op(g, "mul", add_op(g, "tanh", x), add_op(g, "sigmoid", x)),)
    (group,) = fuse(g)
    return build(group, f"{name}_{cols}")


@pytest.fixture
def selected_as(monkeypatch):
    """Select the machine ``spec`` for code generation (the host taken for one that has every feature)."""
    def select(spec):
        v4 = machine.parse("x86-64-v4")
        monkeypatch.setattr(machine, "host", lambda: v4)
        monkeypatch.setenv("JITORCH_CPU", spec)
        machine._selected.cache_clear()
    yield select
    machine._selected.cache_clear()


def test_a_fixed_remainder_is_folded_into_a_masked_iteration_on_avx512(selected_as):
    selected_as("x86-64-v4")
    assert PREDICATE in cell_source(200).llvm_ir  # (200 = 12 x 16 + 8)
    assert PREDICATE not in cell_source(208).llvm_ir  # (whole vectors: nothing to fold)


def test_narrower_targets_keep_their_scalar_remainder(selected_as):
    """Without AVX-512's masked loads and stores LLVM would emulate them lane by lane."""
    for spec in ("x86-64-v3", "x86-64-v2"):
        selected_as(spec)
        assert PREDICATE not in cell_source(200).llvm_ir, spec


def _run(source, x):
    compiled = cpu.link_kernel(source)
    out = np.empty((3, 200), x.dtype)
    args = (ctypes.c_void_p * 2)(cpu.address(x), cpu.address(out))
    compiled.fn(args, 0, compiled.outer)
    return out


@pytest.mark.skipif(not AVX512, reason="folding applies only to code made for AVX-512 (JITORCH_CPU)")
def test_folded_and_scalar_remainders_give_the_same_bits(monkeypatch):
    rng = np.random.default_rng(45)
    x = (rng.standard_normal((3, 216)) * 4).astype(np.float32)
    x[0, 192:200] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 88.0, -104.0]  # (specials in the folded lanes)
    folded = cell_source(200)
    assert PREDICATE in folded.llvm_ir
    monkeypatch.setattr(target, "_tail_folded", lambda module, width: _plain_loop(module, width))
    scalar = cell_source(200, "jitorch_test_tail_scalar")
    assert PREDICATE not in scalar.llvm_ir
    a, b = _run(folded, x), _run(scalar, x)
    # (a NaN's sign is not kept by LLVM: the unfolded loop gave x86's default NaN, -NaN, the folded one +NaN)
    assert np.array_equal(np.isnan(a), np.isnan(b)) and np.isnan(a[0, 196])
    assert np.array_equal(a.view(np.uint32)[~np.isnan(a)], b.view(np.uint32)[~np.isnan(b)])
    x = x[:, :200].astype(np.float64)
    np.testing.assert_allclose(a, np.tanh(x) / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)


def _plain_loop(module, width):
    loop = module.add_metadata([width])
    loop.operands = (loop, width)
    return loop


@pytest.mark.skipif(not AVX512, reason="folding applies only to code made for AVX-512 (JITORCH_CPU)")
def test_the_lstm_cell_of_hidden_200_has_no_scalar_remainder():
    """The word language model's forward cell (hidden 200, 16 float lanes): its loop is folded."""
    kernel = cell_kernel("forward", "LSTM", np.float32, 200, True)
    assert kernel is not None and PREDICATE in kernel._compiled.source.llvm_ir
