"""MultiheadAttention against a NumPy transcription of torch's multi_head_attention_forward."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn
from jitorch.autograd import gradcheck


def _np(t):
    return t.detach().numpy()


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_mha(m, q, k, v, attn_mask=None, key_padding_mask=None):
    """Sequence-first (L, N, E) inputs; float or bool masks; returns (output, per-head weights)."""
    E, H = m.embed_dim, m.num_heads
    hd = E // H
    if m._qkv_same_embed_dim:
        wq, wk, wv = np.split(_np(m.in_proj_weight), 3)
    else:
        wq, wk, wv = _np(m.q_proj_weight), _np(m.k_proj_weight), _np(m.v_proj_weight)
    bq, bk, bv = np.split(_np(m.in_proj_bias), 3) if m.in_proj_bias is not None else (0, 0, 0)
    Q, K, V = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    L, N, _ = Q.shape
    if m.bias_k is not None:
        K = np.concatenate([K, np.repeat(_np(m.bias_k), N, axis=1)])
        V = np.concatenate([V, np.repeat(_np(m.bias_v), N, axis=1)])
    heads = lambda t: t.reshape(t.shape[0], N * H, hd).transpose(1, 0, 2)  # noqa: E731
    Q, K, V = heads(Q), heads(K), heads(V)
    if m.add_zero_attn:
        K = np.concatenate([K, np.zeros((N * H, 1, hd))], axis=1)
        V = np.concatenate([V, np.zeros((N * H, 1, hd))], axis=1)
    S = K.shape[1]
    mask = np.zeros((N * H, L, S))
    if attn_mask is not None:
        am = np.where(attn_mask, -np.inf, 0.0) if attn_mask.dtype == bool else attn_mask
        mask[..., :am.shape[-1]] += am
    if key_padding_mask is not None:
        kpm = np.where(key_padding_mask, -np.inf, 0.0)
        mask[..., :kpm.shape[-1]] += np.repeat(kpm, H, axis=0)[:, None, :]
    weights = _softmax(Q @ K.transpose(0, 2, 1) / math.sqrt(hd) + mask)
    out = (weights @ V).transpose(1, 0, 2).reshape(L, N, E) @ _np(m.out_proj.weight).T
    if m.out_proj.bias is not None:
        out = out + _np(m.out_proj.bias)
    return out, weights.reshape(N, H, L, S)


def _mha(rng, *args, **kwargs):
    m = nn.MultiheadAttention(*args, **kwargs).double()
    with jt.no_grad():
        for p in m.parameters():
            p.copy_(jt.tensor(rng.normal(size=tuple(p.shape)) * 0.5))
    return m


def test_parameter_names_match_torch():
    assert list(nn.MultiheadAttention(8, 2).state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                            "out_proj.bias"]
    assert list(nn.MultiheadAttention(8, 2, kdim=3, vdim=5, bias=False).state_dict()) == [
        "q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"]
    assert list(nn.MultiheadAttention(8, 2, add_bias_kv=True).state_dict())[2:4] == ["bias_k", "bias_v"]


def test_self_attention(rng):
    m = _mha(rng, 8, 2)
    x = rng.normal(size=(5, 3, 8))
    out, w = m(jt.tensor(x), jt.tensor(x), jt.tensor(x))
    exp_out, exp_w = _np_mha(m, x, x, x)
    np.testing.assert_allclose(_np(out), exp_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(w), exp_w.mean(axis=1), rtol=1e-10, atol=1e-12)
    t = jt.tensor(x)
    out2, w2 = m(t, t, t, average_attn_weights=False)  # the packed self-attention projection
    np.testing.assert_allclose(_np(out2), exp_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(w2), exp_w, rtol=1e-10, atol=1e-12)


def test_batch_first_cross_attention_with_masks(rng):
    m = _mha(rng, 6, 3, batch_first=True)
    q, kv = rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 5, 6))
    attn_mask = rng.uniform(size=(4, 5)) > 0.7
    attn_mask[:, 0] = False  # every query keeps a key
    kpm = np.array([[False] * 5, [False, False, False, True, True]])
    out, w = m(jt.tensor(q), jt.tensor(kv), jt.tensor(kv), key_padding_mask=jt.tensor(kpm),
               attn_mask=jt.tensor(attn_mask))
    exp_out, exp_w = _np_mha(m, q.transpose(1, 0, 2), kv.transpose(1, 0, 2), kv.transpose(1, 0, 2), attn_mask, kpm)
    np.testing.assert_allclose(_np(out), exp_out.transpose(1, 0, 2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(w), exp_w.mean(axis=1), rtol=1e-10, atol=1e-12)
    float_mask = rng.normal(size=(2 * 3, 4, 5))
    out, _ = m(jt.tensor(q), jt.tensor(kv), jt.tensor(kv), attn_mask=jt.tensor(float_mask))
    exp_out, _ = _np_mha(m, q.transpose(1, 0, 2), kv.transpose(1, 0, 2), kv.transpose(1, 0, 2), float_mask)
    np.testing.assert_allclose(_np(out), exp_out.transpose(1, 0, 2), rtol=1e-10, atol=1e-12)


def test_without_weights_uses_sdpa_and_agrees(rng):
    m = _mha(rng, 8, 4, batch_first=True)
    x = jt.tensor(rng.normal(size=(2, 5, 8)))
    causal = jt.triu(jt.ones(5, 5, dtype=jt.bool), diagonal=1)
    with_weights, _ = m(x, x, x, attn_mask=causal)
    out, weights = m(x, x, x, attn_mask=causal, need_weights=False)
    assert weights is None
    np.testing.assert_allclose(_np(out), _np(with_weights), rtol=1e-10, atol=1e-12)
    hinted, _ = m(x, x, x, attn_mask=causal, need_weights=False, is_causal=True)
    np.testing.assert_allclose(_np(hinted), _np(with_weights), rtol=1e-10, atol=1e-12)


def test_unbatched(rng):
    m = _mha(rng, 4, 2)
    x = rng.normal(size=(3, 4))
    out, w = m(jt.tensor(x), jt.tensor(x), jt.tensor(x))
    exp_out, exp_w = _np_mha(m, x[:, None], x[:, None], x[:, None])
    assert out.shape == (3, 4) and w.shape == (3, 3)
    np.testing.assert_allclose(_np(out), exp_out[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(w), exp_w.mean(axis=1)[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kwargs", [dict(kdim=3, vdim=5), dict(add_bias_kv=True), dict(add_zero_attn=True),
                                    dict(bias=False, add_bias_kv=True, add_zero_attn=True)])
def test_variants(rng, kwargs):
    m = _mha(rng, 4, 2, **kwargs)
    q = rng.normal(size=(3, 2, 4))
    k, v = rng.normal(size=(5, 2, m.kdim)), rng.normal(size=(5, 2, m.vdim))
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[1, 4] = True
    out, w = m(jt.tensor(q), jt.tensor(k), jt.tensor(v), key_padding_mask=jt.tensor(kpm))
    exp_out, exp_w = _np_mha(m, q, k, v, key_padding_mask=kpm)
    np.testing.assert_allclose(_np(out), exp_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(w), exp_w.mean(axis=1), rtol=1e-10, atol=1e-12)


def test_eval_turns_dropout_off(rng):
    m = _mha(rng, 4, 1, dropout=0.9).eval()
    x = rng.normal(size=(3, 1, 4))
    np.testing.assert_allclose(_np(m(jt.tensor(x), jt.tensor(x), jt.tensor(x))[0]), _np_mha(m, x, x, x)[0],
                               rtol=1e-10, atol=1e-12)


def test_gradients(rng):
    m = _mha(rng, 4, 2)
    q = jt.tensor(rng.normal(size=(2, 1, 4)), requires_grad=True)
    kv = jt.tensor(rng.normal(size=(3, 1, 4)), requires_grad=True)
    assert gradcheck(lambda q, kv, *params: m(q, kv, kv)[0], (q, kv, *m.parameters()))


@pytest.mark.parametrize("call, exc, message", [
    (lambda m, x: m(x, x, x, is_causal=True), RuntimeError, "Need attn_mask if specifying the is_causal hint"),
    (lambda m, x: m(x, x, x, attn_mask=jt.zeros(2, 2)), RuntimeError,
     r"The shape of the 2D attn_mask is jitorch.Size\(\[2, 2\]\), but should be \(3, 3\)."),
    (lambda m, x: m(x, x, x, attn_mask=jt.zeros(3, 3, 3)), RuntimeError,
     r"The shape of the 3D attn_mask is jitorch.Size\(\[3, 3, 3\]\), but should be \(4, 3, 3\)."),
    (lambda m, x: m(x, x, x, attn_mask=jt.zeros(3, 3, dtype=jt.int64)), AssertionError,
     "only bool and floating types of attn_mask are supported"),
    (lambda m, x: m(x[0, 0], x[0, 0], x[0, 0]), AssertionError,
     "query should be unbatched 2D or batched 3D tensor but received 1-D query tensor"),
    (lambda m, x: m(x, x[0], x), AssertionError, "expected `key` and `value` to be 3-D but found 2-D and 3-D"),
    (lambda m, x: m(x, x, x, key_padding_mask=jt.zeros(2, 2, dtype=jt.bool)), AssertionError,
     "Expected key_padded_mask.shape\\[1\\] to be 3, but got 2"),
])
def test_errors(call, exc, message):
    m = nn.MultiheadAttention(4, 2)
    with pytest.raises(exc, match=message):
        call(m, jt.ones(3, 2, 4))


def test_constructor_errors():
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        nn.MultiheadAttention(5, 2)
    with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0, got embed_dim=0"):
        nn.MultiheadAttention(0, 2)


def test_repr():
    assert repr(nn.MultiheadAttention(4, 2)) == (
        "MultiheadAttention(\n"
        "  (out_proj): NonDynamicallyQuantizableLinear(in_features=4, out_features=4, bias=True)\n"
        ")")
