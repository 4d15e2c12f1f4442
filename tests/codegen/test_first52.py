"""A fixed-shape kernel's long innermost loop stays a loop (`kernel.ROLLED_MIN`).

LLVM unrolled the MNIST net's window copy (loops of 8, 3, 3, 24 and 1,536 floats) whole below its two outer
loops: one block of 2,304 vector loads and stores, 9,249 instructions, which x86's code generator took 3.5-5.7 s
to emit, most of the net's cold first call.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import cpu, kernel
from jitorch.codegen.cache import KernelCache
from jitorch.ir.passes import fusion, optimize
from jitorch.jit import trace
from jitorch.jit.executor import copy_then_views


def windows(x):
    """A 3x3 convolution's windows of a channels-last batch, merged (traced as a clone: a pointwise copy)."""
    return x.unfold(1, 3, 1).unfold(2, 3, 1).permute(0, 4, 5, 1, 2, 3).reshape(8, 9, -1)


def windows_product(x, w):
    """The windows read by a product (a view group: the reshape of the strided windows copies them)."""
    return windows(x).transpose(1, 2) @ w


def instructions(source):
    optimised = cpu.optimise(source.llvm_ir, cpu._init()["machine"])
    return sum(1 for f in optimised.functions if not f.is_declaration for blk in f.blocks for _ in blk.instructions)


def copy_kernels(fn, *args):
    """The kernel sources of ``fn``'s pointwise groups and of the copies of its view groups (`copy_then_views`: the
    part a kernel makes, where views follow the copy; a group of a reshape alone needs no kernel)."""
    sources = []
    for group in fusion.fuse(optimize(trace(fn, *args))):
        if group.kind == "pointwise":
            sources.append(kernel.build(group, "jitorch_windows"))
        elif group.kind == "view" and copy_then_views(group) is not None:
            sources.append(kernel.build(copy_then_views(group)[0], "jitorch_windows"))
    return sources


@pytest.mark.parametrize("fn", [windows, windows_product])
def test_a_window_copy_kernel_is_not_unrolled_into_thousands_of_instructions(fn):
    args = (jt.randn(8, 26, 26, 64), jt.randn(9, 4))[:fn.__code__.co_argcount]
    (source,) = copy_kernels(fn, *args)
    assert "llvm.loop.unroll.disable" in source.llvm_ir
    assert instructions(source) < 1000  # (9,249 unrolled)


def test_short_inner_loops_are_left_to_llvm():
    (source,) = copy_kernels(windows, jt.randn(8, 26, 26, 4))  # (an inner loop of 96 floats)
    assert "llvm.loop.unroll.disable" not in source.llvm_ir


@pytest.mark.parametrize("fn", [windows, windows_product])
def test_the_compiled_window_copy_equals_eager(fn):
    args = (jt.randn(8, 26, 26, 64), jt.randn(9, 4))[:fn.__code__.co_argcount]
    np.testing.assert_array_equal(jt.compile(fn)(*args).numpy(), fn(*args).numpy())


def erf_layers(x, w):
    """Pointwise kernels of `mathlib` functions, whose IR asks for the machine's vector width, between products."""
    for _ in range(3):
        x = jt.erf(x @ w * 0.7 + 0.1)
    return x


def requests_of(fn, *args):
    groups = [g for g in fusion.fuse(optimize(trace(fn, *args))) if g.kind == "pointwise"]
    return [(g, f"jitorch_k{i}_pointwise", None, None) for i, g in enumerate(groups)]


def widths(sources):
    return [re.findall(r'"llvm.loop.vectorize.width", i32 (\d+)', s.llvm_ir) for s in sources if s is not None]


def built_on(machine, monkeypatch, fn, *args, cache=None):
    """The vector widths of ``fn``'s kernel sources as `build_many` gives them with ``JITORCH_CPU=machine``."""
    monkeypatch.setenv("JITORCH_CPU", machine)
    return widths(kernel.build_many(requests_of(fn, *args), cache))


def test_kernel_sources_built_for_one_cpu_are_not_given_to_another(tmp_path, monkeypatch):
    """The process's memo of built sources and the kernel-sources entry were keyed by the triple only: a process
    compiling for x86-64-v2 was handed the IR built for another machine's vector widths (and so its code)."""
    x = (jt.randn(64, 256), jt.randn(256, 256))
    monkeypatch.setattr(kernel, "_built", type(kernel._built)())
    v2 = built_on("x86-64-v2", monkeypatch, erf_layers, *x)
    assert v2 and all(w == ["4"] for w in v2)  # (4 floats a vector with SSE)
    assert all(w == ["8"] for w in built_on("x86-64-v3", monkeypatch, erf_layers, *x))  # (the memo holds v2's)
    monkeypatch.setattr(kernel, "_built", type(kernel._built)())
    built_on("x86-64-v3", monkeypatch, erf_layers, *x, cache=KernelCache(tmp_path))  # (an x86-64-v3 entry)
    monkeypatch.setattr(kernel, "_built", type(kernel._built)())
    assert built_on("x86-64-v2", monkeypatch, erf_layers, *x, cache=KernelCache(tmp_path)) == v2
