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


def _attention_step(B, T, H, D, is_causal=True, returned=None):
    """A GPT attention's training step over ``x @ w`` split into q, k, v (``returned``: also return that head's
    gradient of the attention's input, so that it leaves the call)."""
    C = H * D

    def step(x, w):
        q, k, v = (x @ w).split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        if returned is not None:
            for t in (q, k, v):
                t.retain_grad()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal).transpose(1, 2).contiguous().view(B, T, C)
        loss = (y * y).sum()
        loss.backward()
        return loss if returned is None else (loss, (q, k, v)[returned].grad)
    return step


def _attention_args(seed, B, T, H, D, dtype=jt.float32):
    gen = jt.Generator().manual_seed(seed)
    C = H * D
    return jt.randn(B, T, C, generator=gen, dtype=dtype), jt.randn(C, 3 * C, generator=gen, dtype=dtype) * 0.3


def _folded(ex):
    """The cat steps whose pieces an op writes into them, and the eager steps that compute an attention's
    backward apart."""
    folded = [s for s in ex.steps if isinstance(s, EagerStep) and s.producers]
    apart = [s for s in ex.steps if isinstance(s, EagerStep) and any(n.op.name == "_attention_backward" for n in s.nodes)]
    return folded, apart


def _torch_grad(x, w0, B, T, H, D, is_causal):
    C = H * D
    tw = torch.from_numpy(w0.numpy()).requires_grad_()
    tq, tk, tv = (torch.from_numpy(x.numpy()) @ tw).split(C, dim=2)
    tq, tk, tv = (t.view(B, T, H, D).transpose(1, 2) for t in (tq, tk, tv))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=is_causal)
    (ty * ty).sum().backward()
    return tw.grad.numpy()


@pytest.mark.parametrize("shape, is_causal, dtype, threads", [((2, 6, 2, 4), True, jt.float32, 1),
                                                              ((2, 16, 2, 32), True, jt.float32, 2),
                                                              ((1, 5, 3, 8), False, jt.float64, 1)])
def test_attention_backward_writes_q_k_v_gradients_into_the_cats_buffer(monkeypatch, shape, is_causal, dtype, threads):
    """The attention's backward is no step of its own: it runs as the cat's step (`fold_writers_into_cats`), its
    kernel writing the gradients of q, k and v straight into their slices of the cat's result (head dims that
    fill register blocks or not, causal or not, float32 and float64); the weight's gradient is the same bytes as
    with the three gradients computed apart and joined, as eager's, and torch's within rounding."""
    from jitorch.jit import cat_pieces
    B, T, H, D = shape
    saved = jt.get_num_threads()
    jt.set_num_threads(threads)
    try:
        x, w0 = _attention_args(5, *shape, dtype=dtype)
        step = _attention_step(*shape, is_causal=is_causal)
        w = w0.clone().requires_grad_()
        ex = jt.compile(step).lower(x, w).executable
        folded, apart = _folded(ex)
        assert apart == [] and len(folded) == 1
        ((cat, (producer, places)),) = folded[0].producers.items()
        assert cat.op.name == "cat" and producer.op.name == "_attention_backward" and len(places) == 3
        assert [offset for _, _, offset in places] == [0, H * D, 2 * H * D]
        assert all(strides == (T * 3 * H * D if B > 1 else 0, D, 3 * H * D, 1) for _, strides, _ in places)
        jt.compile(step)(x, w)
        with monkeypatch.context() as m:
            m.setattr(cat_pieces, "WRITERS", {})
            w_apart = w0.clone().requires_grad_()
            compiled = jt.compile(step)
            folded_apart, apart = _folded(compiled.lower(x, w_apart).executable)
            assert folded_apart == [] and len(apart) == 1
            compiled(x, w_apart)
        w_eager = w0.clone().requires_grad_()
        step(x, w_eager)
    finally:
        jt.set_num_threads(saved)
    assert w.grad.numpy().tobytes() == w_apart.grad.numpy().tobytes() == w_eager.grad.numpy().tobytes()
    expected = _torch_grad(x, w0, B, T, H, D, is_causal)
    tol = (1e-5 if dtype is jt.float32 else 1e-12) * np.abs(expected).max()
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=0, atol=tol)


def test_an_attention_gradient_that_leaves_the_call_keeps_the_backward_apart():
    """q's gradient also leaves the call (``retain_grad``): the backward writes its results as they are and the
    cat reads them (no fold); the values are eager's."""
    shape = (2, 6, 2, 4)
    x, w0 = _attention_args(6, *shape)
    step = _attention_step(*shape, returned=0)
    w = w0.clone().requires_grad_()
    compiled = jt.compile(step)
    folded, apart = _folded(compiled.lower(x, w).executable)
    assert folded == [] and len(apart) == 1
    _, q_grad = compiled(x, w)
    w_eager = w0.clone().requires_grad_()
    _, q_grad_eager = step(x, w_eager)
    assert np.array_equal(q_grad.numpy(), q_grad_eager.numpy())
    assert np.array_equal(w.grad.numpy(), w_eager.grad.numpy())


def test_without_the_kernel_the_numpy_gradients_go_into_the_cats_buffer(monkeypatch):
    """Where no attention kernel is registered, the folded backward's NumPy products are copied into their
    slices: the bytes of eager's NumPy backward."""
    from jitorch.ops import attention
    monkeypatch.setattr(attention, "ATTENTION_KERNEL", None)
    shape = (2, 6, 2, 4)
    x, w0 = _attention_args(7, *shape)
    step = _attention_step(*shape)
    w = w0.clone().requires_grad_()
    compiled = jt.compile(step)
    folded, apart = _folded(compiled.lower(x, w).executable)
    assert len(folded) == 1 and apart == []
    compiled(x, w)
    w_eager = w0.clone().requires_grad_()
    step(x, w_eager)
    assert np.array_equal(w.grad.numpy(), w_eager.grad.numpy())
    expected = _torch_grad(x, w0, *shape, True)
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_a_source_place_needs_the_copy_to_be_a_permutation_of_the_source():
    """`_source_place`: a transposed head's place in the cat's result, and None for a copied value that is not
    its source's dims permuted (a strided slice)."""
    from jitorch.ir.graph import Value
    from jitorch.ir.values import TensorType
    from jitorch.jit.cat_pieces import _source_place
    source = Value("s", TensorType((2, 3, 5, 4), jt.float32, jt.device("cpu")))
    copied = ((2, 5, 3, 4), (60, 4, 20, 1), 0)  # (its transpose(1, 2))
    place = ((2, 5, 3, 4), (180, 36, 4, 1), 12)  # (its slice of a (2, 5, 36) result)
    assert _source_place(source, copied, place) == ((2, 3, 5, 4), (180, 4, 36, 1), 12)
    assert _source_place(source, ((2, 5, 3, 2), (60, 4, 20, 2), 0), ((2, 5, 3, 2), (90, 18, 2, 1), 0)) is None
    assert _source_place(source, ((2, 5, 3, 4), (60, 4, 20, 1), 1), place) is None
