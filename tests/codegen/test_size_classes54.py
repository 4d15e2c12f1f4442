"""What a graph over several sizes costs LLVM: the kernels of a traced loop whose passes read growing
slices (as a sampling loop's attention does) are distinct texts that differ only in their sizes, and
`cpu.size_classes` counts them so (the compile log says how many of a batch's kernels differ but for
their sizes: session 54's measure of generate's cold first call, 204 texts of 22 classes)."""

from __future__ import annotations

import logging
import weakref

import numpy as np
import torch

import jitorch as jt
from jitorch.codegen import cache as cache_mod, cpu, kernel as kernel_mod
from jitorch.codegen.cache import KernelCache
from jitorch.ir.passes.fusion import Group
from jitorch.jit import trace
from jitorch.runtime import logs
from tests.codegen.test_kernels import run_linked

LENGTHS = (32, 48)


def passes(x):
    """One softmax per length over the first columns of ``x``, scaled: a softmax kernel per length (the flat
    scaling is one text whatever its length)."""
    return [x[:, :n].softmax(-1) * 2.0 for n in LENGTHS]


def test_a_loop_over_growing_slices_compiles_kernels_differing_only_in_sizes(tmp_path, monkeypatch, caplog):
    cache = KernelCache(tmp_path / "kernels")
    monkeypatch.setattr(cache_mod, "default_cache", lambda: cache)
    monkeypatch.setattr(cpu, "_linked", weakref.WeakValueDictionary())
    monkeypatch.setattr(kernel_mod, "_built", type(kernel_mod._built)())
    x = np.random.default_rng(54).standard_normal((6, 64)).astype(np.float32)
    logs.set_logs("codegen")
    try:
        with caplog.at_level(logging.INFO, logger="jitorch"):
            got = jt.compile(passes)(jt.tensor(x))
    finally:
        logs.set_logs("")
    want = passes(torch.tensor(x))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-7)
    batch = [r for r in caplog.records if r.getMessage().startswith("compiled ") and "but for their sizes" in
             r.getMessage()]
    assert len(batch) == 1, [r.getMessage() for r in caplog.records]
    kernels, distinct, classes = batch[0].args
    # a softmax and a scaling kernel per length; the softmaxes distinct texts, one text but for their lengths
    assert (kernels, distinct, classes) == (2 * len(LENGTHS), len(LENGTHS) + 1, 2), batch[0].getMessage()


def test_size_classes_blank_integers_but_keep_names_and_float_constants():
    a = "define void @k(ptr %p) {\n  %x = getelementptr float, ptr %p, i64 17\n  %y = fmul float %z, 0x3FC0000000000000\n}"
    b = a.replace("i64 17", "i64 33")
    c = b.replace("0x3FC0000000000000", "0x3FD0000000000000")
    d = a.replace("@k", "@k2")
    classes = cpu.size_classes([a, b, c, d])
    assert sorted(map(len, classes)) == [1, 1, 2] and [a, b] in classes


def copy_kernel(length):
    """(the view group, its graph, its kernel source) of GPT's attention output reshaped, ``(1, 4, length, 32)``
    transposed to ``(1, length, 4, 32)`` and viewed as ``(1, length, 128)``: from compact memory, a copy."""
    x = jt.randn(1, length, 4, 32).permute(0, 2, 1, 3)  # (a view eager can take; compact, the graph's input is not)
    graph = trace(lambda x: x.transpose(1, 2).view(1, length, 128), x)
    group = Group("view", graph.nodes, list(graph.inputs), graph.output_values(), (1, length, 128))
    return group, graph, kernel_mod.build(group, f"copy54_{length}")


def test_a_copy_keeps_its_innermost_loop_rolled_and_copies_every_bit_at_each_length():
    # LLVM unrolled this copy's 4 x 32 nest into 128 scalar loads and stores, 0.15 s of O3 per length
    texts = []
    # (lengths of 8 or more: a copy of fewer than `target.ROLLED_MAX_WORK` elements has every loop rolled)
    for length in (8, 13, 20, 64):
        group, graph, source = copy_kernel(length)
        assert source.kind == "pointwise" and [n.op.name for n in group.nodes] == ["transpose", "view"]
        assert "llvm.loop.unroll.disable" in source.llvm_ir
        x = torch.randn(1, 4, length, 32)
        (got,) = run_linked(cpu.link_kernel(source), graph, group, [jt.tensor(x.numpy())])
        assert np.array_equal(got, x.transpose(1, 2).reshape(1, length, 128).numpy())
        texts.append(source.llvm_ir.replace(source.name, "k"))
    # one text per length, but for the head's stride
    assert len(set(texts)) == 4 and len(cpu.size_classes(texts)) == 1
