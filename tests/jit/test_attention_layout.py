"""A compiled step writes an attention's output ``[B, H, T, D]`` in the memory order ``[B, T, H, D]`` where its
one reader is the model's ``transpose(1, 2)`` then ``view(B, T, H * D)`` (`executor.permuted_for_products` with an
eager writer, `ops.attention.attention_into`): the transpose and view are tensor headers, and no copy kernel
moves the heads; values bit for bit those of the plan with the copy, and eager's and torch's within rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.jit import executor
from jitorch.jit.executor import EagerStep, KernelStep

B, T, H, D = 2, 6, 2, 4
C = H * D


def _block(lib, x, w, proj, returned=False):
    """A GPT attention block's training step (the loss; the gradients of ``w`` and ``proj`` set)."""
    fn = F if lib is jt else torch.nn.functional
    q, k, v = (x @ w).split(C, dim=2)
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
    heads = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = heads.transpose(1, 2).contiguous().view(B, T, C)
    loss = ((y @ proj) ** 2).sum()
    loss.backward()
    return (loss, heads) if returned else loss


def _weights(lib=jt):
    gen = np.random.default_rng(5)
    arrays = [gen.standard_normal(s).astype(np.float32) for s in ((B, T, C), (C, 3 * C), (C, C))]
    x, w, proj = (lib.tensor(a) for a in arrays)
    return x, w.mul(0.3).requires_grad_(), proj.mul(0.3).requires_grad_()


def _attention_steps(ex):
    return [s for s in ex.steps if isinstance(s, EagerStep) and any(n.op.name == "_attention" for n in s.nodes)]


def _copies_of_attention(ex):
    return [s for s in ex.steps if isinstance(s, KernelStep) and s.group.kind == "view"
            and any(v.node is not None and v.node.op.name == "_attention" for v in s.inputs)]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_attention_output_is_written_where_the_product_reads_it(threads, monkeypatch):
    before = jt.get_num_threads()
    jt.set_num_threads(threads)
    try:
        x, w, proj = _weights()
        ex = jt.compile(lambda *a: _block(jt, *a)).lower(x, w, proj).executable
        (step,) = _attention_steps(ex)
        (strides,) = step.laid_out.values()
        assert strides == (T * H * D, D, H * D, 1) and not _copies_of_attention(ex)
        views = []
        real = executor._view_or_compute
        monkeypatch.setattr(executor, "_view_or_compute", lambda node, env: views.append(node.op.name) or real(node, env))
        compiled = jt.compile(lambda *a: _block(jt, *a))
        loss = compiled(x, w, proj)
        assert "transpose" not in views and "view" not in views  # (headers of the attention's memory)
    finally:
        jt.set_num_threads(before)
    xc, wc, pc = _weights()
    monkeypatch.setattr(executor, "_WRITERS_LAID_OUT", {})  # (the plan with the copy kernel)
    copied = jt.compile(lambda *a: _block(jt, *a))
    assert len(_copies_of_attention(copied.lower(xc, wc, pc).executable)) == 1
    assert copied(xc, wc, pc).item() == loss.item()
    assert np.array_equal(w.grad.numpy(), wc.grad.numpy()) and np.array_equal(proj.grad.numpy(), pc.grad.numpy())
    for lib in (jt, torch):
        xe, we, pe = _weights(lib)
        np.testing.assert_allclose(loss.item(), _block(lib, xe, we, pe).item(), rtol=1e-5)
        np.testing.assert_allclose(w.grad.numpy(), we.grad.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(proj.grad.numpy(), pe.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_a_returned_attention_output_keeps_eagers_layout():
    # the heads leave the call: their memory is eager's (compact), and the transpose is copied as before
    x, w, proj = _weights()
    ex = jt.compile(lambda *a: _block(jt, *a, returned=True)).lower(x, w, proj).executable
    (step,) = _attention_steps(ex)
    assert not step.laid_out and len(_copies_of_attention(ex)) == 1
    loss, heads = jt.compile(lambda *a: _block(jt, *a, returned=True))(x, w, proj)
    xe, we, pe = _weights()
    eager_loss, eager_heads = _block(jt, xe, we, pe, returned=True)
    assert heads.stride() == eager_heads.stride() == (H * T * D, T * D, D, 1)
    np.testing.assert_allclose(heads.detach().numpy(), eager_heads.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss.item(), eager_loss.item(), rtol=1e-5)
