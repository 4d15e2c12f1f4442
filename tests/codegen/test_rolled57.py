"""A small kernel keeps its loops rolled (`target.ROLLED_MAX_WORK`, `loops.keep_rolled`).

LLVM unrolled the short loops of fixed trip count of small kernels whole (a (7, 5) map's loop of five, a
permuted copy's loops), code that costs LLVM time to optimise and emit for calls of a few hundred
nanoseconds: the suite's small kernels (tests/codegen/test_kernels.py, tests/ops/test_pointwise.py,
tests/codegen/test_reduce50.py) took 28% less LLVM CPU with their loops rolled. Only kernels without fast-math
flags are marked: nothing may reorder their arithmetic, so rolled or not their bits are the same.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import torch
from llvmlite import ir

import jitorch as jt
from jitorch.codegen import cpu, kernel, target
from jitorch.codegen.loops import counted_loop, keep_rolled, loop_metadata
from jitorch.codegen.target import ROLLED_MAX_WORK
from jitorch.jit import trace
from tests.codegen.test_kernels import run_linked, whole_graph

ROLLED = '!"llvm.loop.unroll.disable"'


def build(fn, *args):
    graph = trace(fn, *args)
    group = whole_graph(graph)
    return graph, group, kernel.build(group, "rolled57")


def latches(llvm_ir):
    """The ``llvm.loop`` nodes of a kernel's text, each as the set of its entries' texts."""
    nodes = dict(re.findall(r"^!(\d+) = (.*)$", llvm_ir, re.M))
    return [{nodes[e] for e in re.findall(r"!(\d+)", nodes[n]) if e != n}
            for n in re.findall(r"!llvm\.loop !(\d+)", llvm_ir)]


def instructions(llvm_ir):
    optimised = cpu.optimise(llvm_ir, cpu._init()["machine"])
    return sum(1 for f in optimised.functions if not f.is_declaration for blk in f.blocks for _ in blk.instructions)


def permuted_mul_add(x, y):
    return x.permute(1, 0, 2) * 3.0 + y


def test_a_small_kernels_loops_are_all_rolled_and_compute_the_same_bits():
    x, y = jt.randn(5, 7, 3), jt.randn(7, 5, 3)
    graph, group, source = build(permuted_mul_add, x, y)
    assert source.work < ROLLED_MAX_WORK
    loops = latches(source.llvm_ir)
    assert len(loops) >= 2 and all(any(ROLLED in e for e in entries) for entries in loops), loops
    unrolled = replace(source, llvm_ir=source.llvm_ir.replace(ROLLED, '!"llvm.loop.mustprogress"'))
    # what the mark changed: LLVM's code (unrolled, the loops of 3 and 5 became straight code), not a bit
    assert instructions(source.llvm_ir) < instructions(unrolled.llvm_ir)
    rolled_out, = run_linked(cpu.link_kernel(source), graph, group, [x, y])
    unrolled_out, = run_linked(cpu.link_kernel(unrolled), graph, group, [x, y])
    assert rolled_out.tobytes() == unrolled_out.tobytes()
    expected = permuted_mul_add(torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy())).numpy()
    np.testing.assert_array_equal(rolled_out, expected)
    np.testing.assert_array_equal(jt.compile(permuted_mul_add)(x, y).numpy(), expected)


def unmarked_text(fn, args, monkeypatch):
    """``fn``'s kernel text built with no kernel counted small."""
    with monkeypatch.context() as m:
        m.setattr(target, "ROLLED_MAX_WORK", 0)
        return build(fn, *args)[2].llvm_ir


def test_a_kernel_of_more_work_is_left_to_llvm(monkeypatch):
    args = jt.randn(5, 70, 3), jt.randn(70, 5, 3)
    _, _, source = build(permuted_mul_add, *args)
    assert source.work >= ROLLED_MAX_WORK
    assert ROLLED not in source.llvm_ir and source.llvm_ir == unmarked_text(permuted_mul_add, args, monkeypatch)


def test_a_small_float_sum_whose_adds_may_reassociate_is_left_as_it_was(monkeypatch):
    """A float sum's order is its reduced sizes' alone (`kernel._keep_reduction_rolled`), whatever the kernel's
    other sizes: marking it by the kernel's work could give one row two orders."""
    row_sums = lambda t: t.sum(1)  # noqa: E731
    floats, integers = jt.randn(6, 9), jt.randint(0, 9, (6, 9))
    _, _, source = build(row_sums, floats)
    assert "reassoc" in source.llvm_ir and source.llvm_ir == unmarked_text(row_sums, [floats], monkeypatch)
    _, _, integer = build(row_sums, integers)
    assert integer.llvm_ir != unmarked_text(row_sums, [integers], monkeypatch)
    assert all(any(ROLLED in e for e in entries) for entries in latches(integer.llvm_ir))


def test_keep_rolled_adds_the_mark_to_a_loops_own_entries_and_marks_every_back_edge():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    inner = []
    outer = counted_loop(b, ir.IntType(64)(0), ir.IntType(64)(4), ir.IntType(64)(1), lambda b, i: inner.append(
        counted_loop(b, ir.IntType(64)(0), ir.IntType(64)(3), ir.IntType(64)(1), lambda b, j: None, "in")))
    b.ret_void()
    inner[0].set_metadata("llvm.loop", loop_metadata(module, ("llvm.loop.vectorize.width", 1)))
    keep_rolled(module)
    entries = latches(str(module))
    assert len(entries) == 2 and all(any(ROLLED in e for e in es) for es in entries), entries
    assert sum(any("llvm.loop.vectorize.width" in e for e in es) for es in entries) == 1
    assert outer.metadata["llvm.loop"].operands[0] is outer.metadata["llvm.loop"]
