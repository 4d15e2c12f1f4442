"""jitorch.compile of functions built from jitorch.nn.functional equals eager, gradients included."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from tests.support import assert_close


def _params(rng):
    shapes = [(4, 2, 3, 3), (4,), (3, 4 * 3 * 3), (3,), (4 * 3 * 3,), (4 * 3 * 3,)]
    return [rng.standard_normal(s).astype(np.float32) * 0.5 for s in shapes]


def _leaves(arrays):
    return [jt.tensor(a, requires_grad=True) for a in arrays]


def _cnn_step(x, target, conv_w, conv_b, fc_w, fc_b, gamma, beta):
    h = F.max_pool2d(F.relu(F.conv2d(x, conv_w, conv_b, padding=1)), 2)
    h = F.avg_pool2d(F.pad(h, (0, 1, 0, 1), mode="replicate"), 2, stride=1)
    h = F.layer_norm(h.flatten(1), h[0].numel(), gamma, beta)
    loss = F.cross_entropy(F.linear(h, fc_w, fc_b), target, label_smoothing=0.1)
    loss.backward()
    return loss


def test_compiled_cnn_step_equals_eager(rng):
    x = jt.tensor(rng.standard_normal((5, 2, 6, 6)).astype(np.float32))
    target = jt.tensor(rng.integers(0, 3, 5))
    arrays = _params(rng)
    eager, compiled = _leaves(arrays), _leaves(arrays)
    step = jt.compile(_cnn_step)
    for _ in range(2):  # the second call reuses the cached graph
        for p in eager + compiled:
            p.grad = None
        loss_e, loss_c = _cnn_step(x, target, *eager), step(x, target, *compiled)
        assert_close(loss_c, loss_e.detach().numpy(), atol=1e-5, rtol=1e-5)
        for a, b in zip(eager, compiled):
            assert_close(b.grad, a.grad.numpy(), atol=1e-5, rtol=1e-5)


def test_compiled_batch_norm_updates_running_stats_like_eager(rng):
    x = jt.tensor(rng.standard_normal((4, 3, 5)).astype(np.float32))
    stats = {kind: (jt.zeros(3), jt.ones(3)) for kind in ("eager", "compiled")}

    def make(kind):
        mean, var = stats[kind]
        return lambda x: F.batch_norm(x, mean, var, training=True, momentum=0.3) * 2

    eager, compiled = make("eager"), jt.compile(make("compiled"))
    for _ in range(2):
        assert_close(compiled(x), eager(x).numpy(), atol=1e-5, rtol=1e-5)
    for a, b in zip(stats["eager"], stats["compiled"]):
        assert_close(b, a.numpy(), atol=1e-6, rtol=1e-6)


def test_compiled_attention_and_bce_equal_eager(rng):
    q, k, v = (jt.tensor(rng.standard_normal((2, 4, 3)).astype(np.float32)) for _ in range(3))
    y = jt.tensor(rng.random((2, 4, 3)).astype(np.float32))

    def fn(q, k, v, y):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.binary_cross_entropy_with_logits(out, y, reduction="none") + F.gelu(out, approximate="tanh")

    assert_close(jt.compile(fn)(q, k, v, y), fn(q, k, v, y).numpy(), atol=1e-5, rtol=1e-5)


def _attention_block(x, w_qkv, b_qkv, heads, lib=jt):
    """nanoGPT's causal self-attention (no dropout) under ``lib``: one linear to q, k, v, heads split off,
    the attention, heads merged back; the loss is a sum of squares."""
    B, T, C = x.shape
    q, k, v = lib.nn.functional.linear(x, w_qkv, b_qkv).split(C, dim=2)
    q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
    y = lib.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
    return (y.transpose(1, 2).contiguous().view(B, T, C) ** 2).sum()


@pytest.mark.parametrize("batch, length, dims, heads, threads", [
    (3, 7, 8, 2, 1),
    (8, 65, 128, 4, 2),  # products large enough to split on the pool: the linear's by rows, q k^T's by batch
])
def test_compiled_attention_training_equals_torch(monkeypatch, rng, batch, length, dims, heads, threads):
    import torch
    from jitorch.runtime import threads as settings
    monkeypatch.setitem(settings._settings, "threads", threads)
    monkeypatch.setitem(settings._settings, "split_products", True)

    def step(x, w, b):
        loss = _attention_block(x, w, b, heads=heads)
        loss.backward()
        return loss

    shapes = ((batch, length, dims), (3 * dims, dims), (3 * dims,))  # odd lengths
    x, w, b = (rng.standard_normal(s).astype(np.float32) * 0.5 for s in shapes)
    ours = [jt.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    compiled = jt.compile(step)
    loss = compiled(*ours)
    want = _attention_block(*theirs, heads=heads, lib=torch)
    want.backward()
    assert_close(loss, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    for a, t in zip(ours, theirs):  # (float32 sums of many terms: errors scale with the largest gradient)
        assert_close(a.grad, t.grad.numpy(), rtol=1e-4, atol=1e-5 * float(t.grad.abs().max()))
    names = [n.op.name for n in jt.explain(compiled, *ours).executable.graph.nodes]
    # the linear and its two gradients' products; the attention is one fused op each way (ops/attention.py)
    assert names.count("matmul") == 3 and names.count("_attention") == names.count("_attention_backward") == 1
