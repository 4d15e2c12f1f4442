"""A ``cat`` whose inputs are copy kernels' results read by nothing else (an attention's backward: the gradients
of q, k and v, ``[B, H, T, D]``, made ``[B, T, H * D]`` and joined) writes each copy's source straight into its
slice of the result (`executor.fold_copies_into_cats`): no copy kernel, one pass; values bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.jit import executor
from jitorch.jit.executor import EagerStep, KernelStep


def _heads_joined(a, b, c, w):
    """Three ``[B, H, T, D]`` values, transposed to ``[B, T, H, D]``, made rows of ``H * D`` and joined (a copy each),
    then a product."""
    B, H, T, D = a.shape
    rows = [(x * 2).transpose(1, 2).reshape(B, T, H * D) for x in (a, b, c)]
    return jt.cat(rows, dim=2) @ w if isinstance(a, jt.Tensor) else torch.cat(rows, dim=2) @ w


def _plan(fn, *args):
    ex = jt.compile(fn).lower(*args).executable
    copies = [step for step in ex.steps if isinstance(step, KernelStep) and step.group.kind == "view"]
    cats = [step for step in ex.steps if isinstance(step, EagerStep) and any(n.op.name == "cat" for n in step.nodes)]
    return ex, copies, cats


def _inputs(seed, shape=(2, 3, 5, 4)):
    gen = jt.Generator().manual_seed(seed)
    a, b, c = (jt.randn(*shape, generator=gen) for _ in range(3))
    return a, b, c, jt.randn(3 * shape[1] * shape[3], 6, generator=gen)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cat_of_transposed_heads_has_no_copy_kernel(monkeypatch, threads):
    saved = jt.get_num_threads()
    jt.set_num_threads(threads)
    try:
        args = _inputs(0)
        ex, copies, cats = _plan(_heads_joined, *args)
        assert copies == [] and len(cats) == 1
        (cat,) = cats
        assert len(cat.pieces) == 3 and all(src in ex.graph.inputs or src.node.op.name == "mul"
                                            for src, _ in cat.pieces.values())
        out = ex.run(list(args))
        with monkeypatch.context() as m:
            m.setattr(executor, "fold_copies_into_cats", lambda graph, steps, layouts: steps)
            before, copies_before, _ = _plan(_heads_joined, *args)
        assert len(copies_before) == 3  # (what the fold removes)
        assert np.array_equal(out.numpy(), before.run(list(args)).numpy())
        expected = _heads_joined(*(torch.from_numpy(t.numpy()) for t in args))
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    finally:
        jt.set_num_threads(saved)


def test_a_copy_read_elsewhere_keeps_its_kernel():
    """A copy another step also reads is computed: the cat reads it as it is."""
    def also_summed(a, b, c, w):
        B, H, T, D = a.shape
        rows = [(x * 2).transpose(1, 2).reshape(B, T, H * D) for x in (a, b, c)]
        return jt.cat(rows, dim=2) @ w, rows[1] @ w[:H * D]
    args = _inputs(1)
    ex, copies, (cat,) = _plan(also_summed, *args)
    assert len(copies) == 1 and len(cat.pieces) == 2
    out, second = ex.run(list(args))
    ta, tb, tc, tw = (torch.from_numpy(t.numpy()) for t in args)
    rows = [(x * 2).transpose(1, 2).reshape(2, 5, 12) for x in (ta, tb, tc)]
    np.testing.assert_allclose(out.numpy(), (torch.cat(rows, 2) @ tw).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second.numpy(), (rows[1] @ tw[:12]).numpy(), rtol=1e-5, atol=1e-5)


def test_a_returned_cat_gets_new_memory_with_the_pieces_in_place():
    """A cat the call returns is written into fresh memory, its copied inputs from their sources."""
    def returned(a, b, c):
        B, H, T, D = a.shape
        return jt.cat([(x + 1).transpose(1, 2).reshape(B, T, H * D) for x in (a, b, c)], dim=1)
    a, b, c, _ = _inputs(2)
    ex, copies, (cat,) = _plan(returned, a, b, c)
    assert copies == [] and len(cat.pieces) == 3 and not cat.into_arena
    first, second = ex.run([a, b, c]), ex.run([a, b, c])
    assert first.data_ptr() != second.data_ptr() and first.is_contiguous()
    ta, tb, tc = (torch.from_numpy(t.numpy()) for t in (a, b, c))
    expected = torch.cat([(x + 1).transpose(1, 2).reshape(2, 5, 12) for x in (ta, tb, tc)], 1)
    assert np.array_equal(first.numpy(), expected.numpy()) and np.array_equal(second.numpy(), expected.numpy())


def test_attention_backward_plan_has_no_head_copy_and_matches_eager():
    """A GPT attention's training step: the backward's three head transposes feed the cat of q, k, v's gradients
    without a copy kernel; the gradients are eager's, and torch's within rounding."""
    gen = jt.Generator().manual_seed(3)
    B, T, H, D = 2, 6, 2, 4
    C = H * D
    x = jt.randn(B, T, C, generator=gen)
    w0 = jt.randn(C, 3 * C, generator=gen) * 0.3

    def step(x, w):
        q, k, v = (x @ w).split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        loss = (y * y).sum()
        loss.backward()
        return loss

    w = w0.clone().requires_grad_()
    ex = jt.compile(step).lower(x, w).executable
    copied = [s.inputs[0].node.op.name for s in ex.steps if isinstance(s, KernelStep) and s.group.kind == "view"]
    assert "_attention_backward" not in copied
    (cat,) = [s for s in ex.steps if isinstance(s, EagerStep) and s.pieces]
    assert {src.node.op.name for src, _ in cat.pieces.values()} == {"_attention_backward"} and len(cat.pieces) == 3
    jt.compile(step)(x, w)
    w_eager = w0.clone().requires_grad_()
    step(x, w_eager)
    assert np.array_equal(w.grad.numpy(), w_eager.grad.numpy())
    tw = torch.from_numpy(w0.numpy()).requires_grad_()
    tq, tk, tv = (torch.from_numpy(x.numpy()) @ tw).split(C, dim=2)
    tq, tk, tv = (t.view(B, T, H, D).transpose(1, 2) for t in (tq, tk, tv))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_a_large_cat_of_pieces_is_written_in_parts_on_the_team(monkeypatch):
    """From `views.SPLIT_MIN` elements at 2 threads the pieces are written in parts on the team: the bytes of
    the 1-thread call."""
    from jitorch.jit import cat_pieces
    args = _inputs(4, shape=(8, 4, 64, 64))
    saved = jt.get_num_threads()
    parts = []
    run_parts = cat_pieces.threads.run_parts
    monkeypatch.setattr(cat_pieces.threads, "run_parts",
                        lambda fn, p: (parts.append(len(p)) if fn is cat_pieces._copy else None, run_parts(fn, p)))
    try:
        results = []
        for threads in (1, 2):
            jt.set_num_threads(threads)
            ex, copies, (cat,) = _plan(_heads_joined, *args)
            assert copies == [] and len(cat.pieces) == 3
            results.append(ex.run(list(args)).numpy().tobytes())
    finally:
        jt.set_num_threads(saved)
    assert parts == [2] and results[0] == results[1]
