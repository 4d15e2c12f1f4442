"""A reduction's long innermost reduced loop stays a loop (`kernel._keep_reduction_rolled`).

DCGAN's batch-norm backward sums over reduced dims (8, 512) and (16, 1024) (a channel kept between them) were
unrolled by LLVM into 5-11k instructions each, most of the step's 7 s cold first call. The sum's additions carry
``reassoc`` (LLVM vectorises them), so the rolled loop may add in another order than the unrolled one did: the
results agree to rounding, not bit for bit, and every graph computing the sum gets the same rolled loop.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import cpu, kernel
from jitorch.jit import trace
from tests.codegen.test_kernels import run_linked, whole_graph

UNMARKED = '!"llvm.loop.mustprogress"'


def run_kernel(fn, args, unmark=False):
    """(kernel source, outputs) of ``fn`` built as one reduction kernel and run on ``args``; with ``unmark``, its
    loops' unroll marks taken out (the kernel as LLVM unrolled it before)."""
    graph = trace(fn, *args)
    group = whole_graph(graph)
    source = kernel.build(group, "rolled53")
    if unmark:
        source = replace(source, llvm_ir=source.llvm_ir.replace('!"llvm.loop.unroll.disable"', UNMARKED))
    return source, run_linked(cpu.link_kernel(source), graph, group, args)


def instructions(llvm_ir):
    optimised = cpu.optimise(llvm_ir, cpu._init()["machine"])
    return sum(1 for f in optimised.functions if not f.is_declaration for blk in f.blocks for _ in blk.instructions)


def batch_norm_grads(x, g, m):
    """A batch norm backward's two channel sums of an (N, C, HW) input: over N and HW, C kept between them."""
    return g.sum((0, 2)), ((x - m) * g).sum((0, 2))


def relu_grad_sum(x, g, m):
    return g.masked_fill(x <= 0, 0.0).sum((0, 2))


def channel_mean(x, g, m):
    return (x * g).mean((0, 2))


def inputs(shape, dtype=jt.float32):
    jt.manual_seed(0)
    return jt.randn(*shape, dtype=dtype), jt.randn(*shape, dtype=dtype), jt.randn(1, shape[1], 1, dtype=dtype)


@pytest.mark.parametrize("shape", [(8, 4, 512), (16, 3, 1024)])
def test_a_long_reduced_row_inside_another_reduced_loop_stays_a_loop(shape):
    source, _ = run_kernel(batch_norm_grads, inputs(shape))
    assert source.llvm_ir.count('!"llvm.loop.unroll.disable"') == 1  # (one mark, which both sums' loops name)
    kept = instructions(source.llvm_ir)
    unrolled = instructions(source.llvm_ir.replace('!"llvm.loop.unroll.disable"', UNMARKED))
    assert kept < 0.3 * unrolled, (kept, unrolled)  # (8, 4, 512): ~600 against ~3,900


@pytest.mark.parametrize("shape", [(8, 4, 64), (4, 512)])
def test_short_rows_and_single_reduced_dims_are_left_as_they_were(shape):
    """Rows under `ROLLED_MIN`, and a reduction of one reduced dim (a run, `streamed_run`'s own loop), keep the IR
    they had."""
    fn = (lambda x, g, m: (x * g).sum((0, 2))) if len(shape) == 3 else (lambda x, g, m: (x * g).sum(1))
    x = jt.randn(*shape)
    source, _ = run_kernel(fn, (x, x, x))
    assert kernel.ROLLED_MIN > 64
    # (a run's loop has its own metadata, `RUN_LOOP`, with its interleave count)
    marks = source.llvm_ir.count('!"llvm.loop.unroll.disable"')
    assert marks == (0 if len(shape) == 3 else source.llvm_ir.count('!"llvm.loop.interleave.count"'))


@pytest.mark.parametrize("fn", [batch_norm_grads, relu_grad_sum, channel_mean])
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_rolled_reductions_match_torch_and_the_unrolled_kernel(fn, dtype):
    args = inputs((8, 4, 512), dtype)
    _, rolled = run_kernel(fn, args)
    _, unrolled = run_kernel(fn, args, unmark=True)
    t = [torch.from_numpy(a.numpy().copy()) for a in args]
    expected = fn(*t)
    expected = expected if isinstance(expected, tuple) else (expected,)
    eps = np.finfo(dtype.np).eps
    for got, old, exp in zip(rolled, unrolled, expected):
        # (4,096 terms of order 1: a few units of the sum's magnitude in the last place, as torch's own order has)
        scale = np.abs(exp.numpy()).max() + 64
        np.testing.assert_allclose(got, exp.numpy(), rtol=0, atol=64 * eps * scale)
        np.testing.assert_allclose(got, old, rtol=0, atol=64 * eps * scale)


def test_a_compiled_batch_norm_step_gives_the_same_bits_each_time_and_matches_torch():
    """The rolled loop is one order: two compiled functions of one step agree bit for bit."""
    def step(x, w, b):
        y = jt.nn.functional.batch_norm(x, None, None, w, b, training=True)
        return jt.relu(y).sum()
    jt.manual_seed(0)
    x = jt.randn(8, 4, 16, 32, requires_grad=True)
    w, b = jt.ones(4, requires_grad=True), jt.zeros(4, requires_grad=True)

    def grads(f):
        for p in (x, w, b):
            p.grad = None
        f(x, w, b).backward()
        return [p.grad.numpy().copy() for p in (x, w, b)]
    first, second = grads(jt.compile(step)), grads(jt.compile(step))
    for a, c in zip(first, second):
        np.testing.assert_array_equal(a, c)
    tx, tw, tb = (torch.from_numpy(p.detach().numpy().copy()).requires_grad_() for p in (x, w, b))
    torch.relu(torch.nn.functional.batch_norm(tx, None, None, tw, tb, training=True)).sum().backward()
    for a, t in zip(first, (tx, tw, tb)):
        np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-4, atol=1e-4)
