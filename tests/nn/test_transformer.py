"""scaled_dot_product_attention and the Transformer layers against NumPy transcriptions of torch's
documented formulas, built from the modules' own parameters."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch import nn
from jitorch.autograd import gradcheck
from jitorch.nn import functional as F

_erf = np.vectorize(math.erf)
ACTIVATIONS = {
    "relu": (lambda x: np.maximum(x, 0)),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
}


def _np(t):
    return t.detach().numpy()


def _t(a, requires_grad=False):
    return jt.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def _np_sdpa(q, k, v, bias, scale):
    """softmax(q k^T * scale + bias) v; rows with every key at -inf give zeros (torch's safe softmax)."""
    s = q @ np.swapaxes(k, -1, -2) * scale + bias
    top = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0))
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0) @ v


# scaled_dot_product_attention -------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(batch=st.sampled_from([(), (2,), (2, 3)]), L=st.integers(1, 4), S=st.integers(1, 5), E=st.integers(1, 4),
       Ev=st.integers(1, 3), kind=st.sampled_from(["none", "bool", "float", "causal"]),
       mask_batch=st.booleans(), scale=st.sampled_from([None, 0.3]), seed=st.integers(0, 2 ** 16))
def test_sdpa_matches_numpy(batch, L, S, E, Ev, kind, mask_batch, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=batch + (L, E)), rng.normal(size=batch + (S, E)), rng.normal(size=batch + (S, Ev))
    # the mask broadcasts against the batch dims: either just (L, S) or with a leading batch of 1s
    mask_shape = ((1,) * len(batch) if mask_batch else ()) + (L, S)
    bias, kwargs = np.zeros(mask_shape), {}
    if kind == "bool":
        allowed = rng.random(mask_shape) > 0.3
        bias, kwargs = np.where(allowed, 0.0, -np.inf), dict(attn_mask=jt.tensor(allowed))
    elif kind == "float":
        bias = rng.normal(size=mask_shape)
        kwargs = dict(attn_mask=_t(bias))
    elif kind == "causal":
        bias, kwargs = np.where(np.tril(np.ones((L, S), bool)), 0.0, -np.inf), dict(is_causal=True)
    got = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), scale=scale, **kwargs)
    expected = _np_sdpa(q, k, v, bias, 1 / math.sqrt(E) if scale is None else scale)
    assert got.shape == expected.shape
    np.testing.assert_allclose(_np(got), expected, rtol=1e-10, atol=1e-12)


def test_sdpa_grouped_query_heads_repeat_key_and_value_heads(rng):
    q, k, v = rng.normal(size=(2, 4, 3, 5)), rng.normal(size=(2, 2, 6, 5)), rng.normal(size=(2, 1, 6, 3))
    got = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), enable_gqa=True)
    expected = _np_sdpa(q, np.repeat(k, 2, axis=1), np.repeat(v, 4, axis=1), 0.0, 1 / math.sqrt(5))
    np.testing.assert_allclose(_np(got), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["float", "causal"])
def test_sdpa_gradcheck(rng, kind):
    q, k, v = (_t(rng.normal(size=s), True) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 3)))
    kwargs = dict(attn_mask=_t(rng.normal(size=(3, 5)))) if kind == "float" else dict(is_causal=True)
    assert gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.5, **kwargs), (q, k, v))


@pytest.mark.parametrize("call, message", [
    (lambda: F.scaled_dot_product_attention(jt.randn(1, 2, 3, 4), jt.randn(1, 2, 3, 4), jt.randn(1, 2, 3, 4),
                                            jt.ones(3, 3, dtype=jt.bool), is_causal=True),
     "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True"),
    (lambda: F.scaled_dot_product_attention(jt.randn(1, 4, 3, 4), jt.randn(1, 3, 3, 4), jt.randn(1, 3, 3, 4),
                                            enable_gqa=True),
     "Number of heads in key and value must divide the number of heads in"),
])
def test_sdpa_errors_as_torch(call, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        call()


# NumPy transcription of torch's layers ---------------------------------------------------------------

def _np_layer_norm(x, norm):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + norm.eps) * _np(norm.weight) + _np(norm.bias)


def _np_attention(m, x, mem, bias):
    """MultiheadAttention on batch-first (N, L, E) inputs with an additive (N or 1, L, S) bias."""
    E, H = m.embed_dim, m.num_heads
    wq, wk, wv = np.split(_np(m.in_proj_weight), 3)
    bq, bk, bv = np.split(_np(m.in_proj_bias), 3)
    heads = lambda t: t.reshape(t.shape[0], t.shape[1], H, E // H).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(x @ wq.T + bq), heads(mem @ wk.T + bk), heads(mem @ wv.T + bv)
    out = _np_sdpa(q, k, v, bias[:, None], 1 / math.sqrt(E // H))
    out = out.transpose(0, 2, 1, 3).reshape(x.shape)
    return out @ _np(m.out_proj.weight).T + _np(m.out_proj.bias)


def _np_ff(layer, x, act):
    h = act(x @ _np(layer.linear1.weight).T + _np(layer.linear1.bias))
    return h @ _np(layer.linear2.weight).T + _np(layer.linear2.bias)


def _np_encoder_layer(layer, x, bias, act):
    """torch's TransformerEncoderLayer.forward (eval mode) on batch-first x."""
    sa = lambda y: _np_attention(layer.self_attn, y, y, bias)  # noqa: E731
    if layer.norm_first:
        x = x + sa(_np_layer_norm(x, layer.norm1))
        return x + _np_ff(layer, _np_layer_norm(x, layer.norm2), act)
    x = _np_layer_norm(x + sa(x), layer.norm1)
    return _np_layer_norm(x + _np_ff(layer, x, act), layer.norm2)


def _np_decoder_layer(layer, x, mem, tgt_bias, mem_bias, act):
    """torch's TransformerDecoderLayer.forward (eval mode) on batch-first x and memory."""
    sa = lambda y: _np_attention(layer.self_attn, y, y, tgt_bias)  # noqa: E731
    ca = lambda y: _np_attention(layer.multihead_attn, y, mem, mem_bias)  # noqa: E731
    if layer.norm_first:
        x = x + sa(_np_layer_norm(x, layer.norm1))
        x = x + ca(_np_layer_norm(x, layer.norm2))
        return x + _np_ff(layer, _np_layer_norm(x, layer.norm3), act)
    x = _np_layer_norm(x + sa(x), layer.norm1)
    x = _np_layer_norm(x + ca(x), layer.norm2)
    return _np_layer_norm(x + _np_ff(layer, x, act), layer.norm3)


def _randomise(module, rng):
    """Random values in every parameter, so zero biases and unit norms do not hide a swapped term."""
    with jt.no_grad():
        for p in module.parameters():
            p.copy_(_t(rng.normal(scale=0.5, size=p.shape)))
    return module


def _seq_first(a, batch_first):
    return a if batch_first else np.swapaxes(a, 0, 1)


# Encoder ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_numpy(rng, norm_first, batch_first, activation):
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=6, activation=activation, batch_first=batch_first,
                                       norm_first=norm_first, layer_norm_eps=1e-3).to(jt.float64).eval()
    _randomise(layer, rng)
    x = rng.normal(size=(3, 4, 8))  # batch-first (N, S, E)
    padded = np.zeros((3, 4), bool)
    padded[1, 2:] = True
    # bool masks, True = masked out (MultiheadAttention's convention); key 0 stays open to every query
    src_mask = rng.random((4, 4)) < 0.4
    src_mask[:, 0] = False
    got = layer(_t(_seq_first(x, batch_first)), src_mask=jt.tensor(src_mask), src_key_padding_mask=jt.tensor(padded))
    bias = np.where(src_mask[None] | padded[:, None, :], -np.inf, 0.0)
    expected = _np_encoder_layer(layer, x, bias, ACTIVATIONS[activation])
    np.testing.assert_allclose(_np(got), _seq_first(expected, batch_first), rtol=1e-9, atol=1e-10)


def test_encoder_stack_with_causal_mask_and_callable_activation_matches_numpy(rng):
    layer = nn.TransformerEncoderLayer(6, 3, dim_feedforward=5, activation=jt.tanh, batch_first=True)
    encoder = _randomise(nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(6)).to(jt.float64).eval(), rng)
    x = rng.normal(size=(2, 5, 6))
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=jt.float64)
    got = encoder(_t(x), mask=mask, is_causal=True)
    expected = x
    for lay in encoder.layers:
        expected = _np_encoder_layer(lay, expected, _np(mask)[None], np.tanh)
    np.testing.assert_allclose(_np(got), _np_layer_norm(expected, encoder.norm), rtol=1e-9, atol=1e-10)


def test_unbatched_input_equals_a_batch_of_one(rng):
    layer = _randomise(nn.TransformerEncoderLayer(4, 2, 8).to(jt.float64).eval(), rng)
    x = _t(rng.normal(size=(5, 4)))
    np.testing.assert_allclose(_np(layer(x)), _np(layer(x.unsqueeze(1)))[:, 0], rtol=1e-12, atol=1e-12)


def test_encoder_state_dict_names_and_shapes_as_torch():
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, norm=nn.LayerNorm(8))
    shapes = {k: tuple(v.shape) for k, v in encoder.state_dict().items()}
    per_layer = {
        "self_attn.in_proj_weight": (24, 8), "self_attn.in_proj_bias": (24,), "self_attn.out_proj.weight": (8, 8),
        "self_attn.out_proj.bias": (8,), "linear1.weight": (16, 8), "linear1.bias": (16,),
        "linear2.weight": (8, 16), "linear2.bias": (8,), "norm1.weight": (8,), "norm1.bias": (8,),
        "norm2.weight": (8,), "norm2.bias": (8,),
    }
    expected = {f"layers.{i}.{k}": s for i in range(2) for k, s in per_layer.items()}
    expected.update({"norm.weight": (8,), "norm.bias": (8,)})
    assert shapes == expected
    assert list(shapes)[:2] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias"]
    # deep copies: equal values at the start, separate parameters to train
    a, b = encoder.layers[0].linear1.weight, encoder.layers[1].linear1.weight
    assert a is not b and np.array_equal(_np(a), _np(b))


def test_bias_false_drops_every_bias():
    layer = nn.TransformerEncoderLayer(4, 2, 8, bias=False)
    assert [k for k in layer.state_dict() if "bias" in k] == []


def test_layer_errors_as_torch():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(4, 2, activation="tanh")
    layer = nn.TransformerEncoderLayer(4, 2, 8)
    x = jt.randn(3, 2, 4)
    with pytest.raises(AssertionError, match="only bool and floating types of src_mask are supported"):
        layer(x, src_mask=jt.zeros(3, 3, dtype=jt.int64))
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        layer(x, is_causal=True)
    with pytest.warns(UserWarning, match="Support for mismatched src_key_padding_mask and src_mask is deprecated"):
        layer(x, src_mask=jt.zeros(3, 3), src_key_padding_mask=jt.zeros(2, 3, dtype=jt.bool))
    model = nn.Transformer(4, 2, 1, 1, 8)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        model(jt.randn(3, 2, 4), jt.randn(3, 1, 4))
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
        model(jt.randn(3, 2, 4), jt.randn(3, 2, 5))


# Decoder and Transformer ---------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_matches_numpy(rng, norm_first):
    model = nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=6,
                           norm_first=norm_first, batch_first=True).to(jt.float64).eval()
    _randomise(model, rng)
    src, tgt = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 3, 8))
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(3, dtype=jt.float64)
    mem_padded = np.zeros((2, 5), bool)
    mem_padded[0, -2:] = True
    got = model(_t(src), _t(tgt), tgt_mask=tgt_mask, src_key_padding_mask=jt.tensor(mem_padded),
                memory_key_padding_mask=jt.tensor(mem_padded))
    pad_bias = np.where(mem_padded, -np.inf, 0.0)[:, None, :]
    memory = src
    for lay in model.encoder.layers:
        memory = _np_encoder_layer(lay, memory, pad_bias, ACTIVATIONS["relu"])
    memory = _np_layer_norm(memory, model.encoder.norm)
    out = tgt
    for lay in model.decoder.layers:
        out = _np_decoder_layer(lay, out, memory, _np(tgt_mask)[None], pad_bias, ACTIVATIONS["relu"])
    np.testing.assert_allclose(_np(got), _np_layer_norm(out, model.decoder.norm), rtol=1e-9, atol=1e-10)


def test_transformer_init_and_names():
    model = nn.Transformer(8, 2, 1, 1, 16)
    names = list(model.state_dict())
    assert "decoder.layers.0.multihead_attn.in_proj_weight" in names and "decoder.norm.bias" in names
    assert "encoder.layers.0.norm2.weight" in names and len(names) == 12 + 2 + 18 + 2
    # xavier_uniform_ on every matrix: the bound is sqrt(6 / (fan_in + fan_out))
    w = _np(model.encoder.layers[0].linear1.weight)
    assert np.abs(w).max() <= math.sqrt(6 / 24) and w.std() > 0.5 * math.sqrt(2 / 24)
    mask = _np(nn.Transformer.generate_square_subsequent_mask(3))
    np.testing.assert_array_equal(mask, np.triu(np.full((3, 3), -np.inf), 1))


# Compiled training step --------------------------------------------------------------------------------------

def _encoder_training(compiled):
    """Three SGD steps of a 1-layer encoder + linear head; (losses, final parameters, step fn, args).

    SGD, not Adam: the key projection's bias has a zero gradient in exact arithmetic (softmax
    ignores a shift shared by all keys), and Adam would scale its rounding noise up to lr."""
    jt.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 1)
    head = nn.Linear(8, 3)
    params = list(encoder.parameters()) + list(head.parameters())
    opt = jt.optim.SGD(params, lr=0.1, momentum=0.9)
    rng = np.random.default_rng(1)
    x = jt.tensor(rng.normal(size=(2, 4, 8)).astype(np.float32))
    y = jt.tensor(np.array([0, 2]))
    mask = nn.Transformer.generate_square_subsequent_mask(4)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(head(encoder(x, mask=mask)[:, -1]), y)
        loss.backward()
        opt.step()
        return loss

    run = jt.compile(step, fullgraph=True) if compiled else step
    losses = [run(x, y).item() for _ in range(3)]
    return losses, [_np(p).copy() for p in params], run, (x, y)


def test_compiled_encoder_training_step_equals_eager():
    eager_losses, eager_params, _, _ = _encoder_training(False)
    losses, params, run, args = _encoder_training(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    assert eager_losses[2] < eager_losses[0]  # the step trains: the loss falls
    for got, exp in zip(params, eager_params):
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)
    assert run.lower(*args).kernels
