"""Linear layers, normalisation, embedding, dropout, activations and attention of jitorch.nn.functional,
against NumPy transcriptions of torch's formulas."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.autograd import gradcheck
from jitorch.jit import tracer
from tests.support import assert_close, shapes


def t64(a, grad=False):
    return jt.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_erf(x):
    return np.vectorize(math.erf)(x)


# Linear layers ------------------------------------------------------------------------------------------

@given(lead=shapes(0, 2, 1, 3), fin=st.integers(1, 4), fout=st.integers(1, 4), bias=st.booleans())
def test_linear(lead, fin, fout, bias):
    rng = np.random.default_rng(len(lead) + fin)
    x, w, b = rng.standard_normal(lead + (fin,)), rng.standard_normal((fout, fin)), rng.standard_normal(fout)
    expected = x @ w.T + (b if bias else 0)
    assert_close(F.linear(t64(x), t64(w), t64(b) if bias else None), expected)


def test_bilinear(rng):
    x1, x2 = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    w, b = rng.standard_normal((5, 3, 2)), rng.standard_normal(5)
    expected = np.einsum("ni,oij,nj->no", x1, w, x2) + b
    assert_close(F.bilinear(t64(x1), t64(x2), t64(w), t64(b)), expected)


def test_linear_and_bilinear_gradcheck(rng):
    x, w, b = (t64(rng.standard_normal(s), True) for s in [(2, 3), (4, 3), (4,)])
    assert gradcheck(F.linear, (x, w, b))
    x2, w2 = t64(rng.standard_normal((2, 2)), True), t64(rng.standard_normal((2, 3, 2)), True)
    assert gradcheck(lambda a, c, w: F.bilinear(a, c, w), (x, x2, w2))


# Normalisation --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 2, 2)])
def test_batch_norm_training_updates_running_stats(rng, shape):
    x = rng.standard_normal(shape)
    w, b = rng.standard_normal(3), rng.standard_normal(3)
    mean0, var0 = rng.standard_normal(3), rng.random(3) + 0.5
    axes = tuple(i for i in range(x.ndim) if i != 1)
    view = [1, 3] + [1] * (x.ndim - 2)
    mean, var = x.mean(axes), x.var(axes)
    n = x.size // 3
    expected = (x - mean.reshape(view)) / np.sqrt(var.reshape(view) + 1e-5) * w.reshape(view) + b.reshape(view)
    running_mean, running_var = t64(mean0), t64(var0)
    y = F.batch_norm(t64(x), running_mean, running_var, t64(w), t64(b), training=True, momentum=0.2)
    assert_close(y, expected)
    assert_close(running_mean, 0.8 * mean0 + 0.2 * mean)
    assert_close(running_var, 0.8 * var0 + 0.2 * var * n / (n - 1))


def test_batch_norm_eval_uses_running_stats(rng):
    x, mean, var = rng.standard_normal((4, 3, 2)), rng.standard_normal(3), rng.random(3) + 0.5
    expected = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-3)
    assert_close(F.batch_norm(t64(x), t64(mean), t64(var), eps=1e-3), expected)


def test_batch_norm_without_running_stats_and_gradcheck(rng):
    x, w, b = t64(rng.standard_normal((3, 2, 2)), True), t64(rng.random(2) + 0.5, True), t64(rng.random(2), True)
    assert gradcheck(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b))


@pytest.mark.parametrize("normalized", [(4,), (3, 4)])
def test_layer_norm(rng, normalized):
    x, w, b = rng.standard_normal((2, 3, 4)), rng.standard_normal(normalized), rng.standard_normal(normalized)
    axes = tuple(range(3 - len(normalized), 3))
    expected = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5) * w + b
    assert_close(F.layer_norm(t64(x), normalized, t64(w), t64(b)), expected)
    assert_close(F.layer_norm(t64(x), list(normalized)), (expected - b) / w)


def test_layer_norm_gradcheck(rng):
    x, w, b = (t64(rng.standard_normal(s), True) for s in [(2, 4), (4,), (4,)])
    assert gradcheck(lambda x, w, b: F.layer_norm(x, 4, w, b), (x, w, b))



def test_eager_layer_norm_is_one_op_and_a_traced_one_stays_composed(rng):
    x, w, b = (t64(rng.standard_normal(s), True) for s in [(2, 3, 4), (4,), (4,)])
    y = F.layer_norm(x, (4,), w, b)
    assert y.grad_fn.name() == "LayerNormBackward0"
    assert {f.name() for f, _ in y.grad_fn.next_functions} == {"torch::autograd::AccumulateGrad"}  # x, w and b directly
    graph = tracer.trace(lambda x: F.layer_norm(x, (4,)), x.detach())
    assert [n.op.name for n in graph.nodes] == ["var.correction", "mean", "sub", "add", "rsqrt", "mul"]


def test_eager_linear_is_one_op_and_a_traced_one_stays_composed(rng):
    x, w, b = (t64(rng.standard_normal(s), True) for s in [(2, 3, 4), (5, 4), (5,)])
    y = F.linear(x, w, b)
    assert y.grad_fn.name() == "LinearBackward0"
    assert_close(y, x.detach().numpy() @ w.detach().numpy().T + b.detach().numpy())
    y.sum().backward()
    assert w.grad.is_contiguous()
    graph = tracer.trace(lambda x: F.linear(x, w.detach(), b.detach()), x.detach())
    assert [n.op.name for n in graph.nodes] == ["t", "matmul", "add"]

# Embedding --------------------------------------------------------------------------------------------------

def test_embedding_picks_rows_and_padding_row_gets_no_gradient(rng):
    idx = np.array([[1, 2, 2], [0, 1, 3]])
    w = rng.standard_normal((4, 3))
    weight = t64(w, True)
    out = F.embedding(jt.tensor(idx), weight, padding_idx=1)
    assert_close(out, w[idx])
    g = rng.standard_normal(out.shape)
    out.backward(t64(g))
    expected = np.zeros_like(w)
    np.add.at(expected, idx.reshape(-1), g.reshape(-1, 3))
    expected[1] = 0
    assert_close(weight.grad, expected)


def test_embedding_scale_grad_by_freq_and_negative_padding_idx(rng):
    idx = np.array([0, 2, 2, 2, 3])
    weight = t64(rng.standard_normal((4, 2)), True)
    F.embedding(jt.tensor(idx), weight, padding_idx=-1, scale_grad_by_freq=True).sum().backward()
    assert_close(weight.grad, np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))


def test_embedding_max_norm_renormalises_picked_rows_in_place(rng):
    w = rng.standard_normal((3, 4)) * 3
    weight = t64(w)
    F.embedding(jt.tensor([0, 0, 2]), weight, max_norm=1.0)
    norms = np.linalg.norm(w, axis=1, keepdims=True)
    expected = w.copy()
    expected[[0, 2]] *= np.where(norms > 1.0, 1.0 / (norms + 1e-7), 1.0)[[0, 2]]
    assert_close(weight, expected)


def test_embedding_gradcheck(rng):
    # padding_idx and scale_grad_by_freq change the gradient on purpose, so only the plain lookup is checked
    weight = t64(rng.standard_normal((4, 2)), True)
    assert gradcheck(lambda w: F.embedding(jt.tensor([[0, 3], [3, 1]]), w), (weight,))


# Dropout -----------------------------------------------------------------------------------------------------

def test_dropout_zeroes_and_scales():
    x = jt.ones(20000, dtype=jt.float64)
    y = F.dropout(x, 0.25).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.75)


def test_dropout_follows_the_generator_and_training_flag(rng):
    x = t64(rng.standard_normal((5, 6)))
    jt.manual_seed(3)
    a = F.dropout(x, 0.5)
    jt.manual_seed(3)
    assert_close(F.dropout(x, 0.5), a.numpy())
    assert F.dropout(x, 0.5, training=False) is x
    assert_close(F.dropout(x, 1.0), np.zeros((5, 6)))


def test_dropout_inplace_writes_the_input(rng):
    x = t64(rng.standard_normal(50))
    y = F.dropout(x, 0.5, inplace=True)
    assert y is x
    assert (x.numpy() == 0).any()


# Activations -----------------------------------------------------------------------------------------------------

ACTIVATIONS = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + np_erf(x / np.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "tanh": (F.tanh, np.tanh),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "logsigmoid": (F.logsigmoid, lambda x: -np.logaddexp(0, -x)),
    "softplus": (lambda x: F.softplus(x, beta=2.0), lambda x: np.where(2 * x > 20, x, np.logaddexp(0, 2 * x) / 2)),
    "elu": (lambda x: F.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "hardtanh": (lambda x: F.hardtanh(x, -2.0, 1.5), lambda x: np.clip(x, -2.0, 1.5)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "mish": (F.mish, lambda x: x * np.tanh(np.logaddexp(0, x))),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_values(rng, name):
    fn, ref = ACTIVATIONS[name]
    x = np.concatenate([rng.standard_normal(20) * 3, [0.0, -50.0, 50.0]])
    assert_close(fn(t64(x)), ref(x))
    assert_close(fn(jt.tensor(x.astype(np.float32))), ref(x).astype(np.float32), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_gradcheck(rng, name):
    x = rng.standard_normal(6)
    x[np.abs(np.abs(x) - 1.0) < 0.1] = 0.5  # away from kinks at 0, -2, +-1.5, +-3, 6
    x[np.abs(x) < 0.1] = 0.5
    assert gradcheck(ACTIVATIONS[name][0], (t64(x, True),))


@pytest.mark.parametrize("fn", [F.relu, F.silu, lambda x, inplace: F.leaky_relu(x, 0.1, inplace=inplace), F.elu,
                                F.relu6, F.hardswish, F.mish])
def test_inplace_activations_write_the_input(rng, fn):
    x = t64(rng.standard_normal(8))
    expected = fn(x.clone(), inplace=False).numpy()
    assert fn(x, inplace=True) is x
    assert_close(x, expected)


def test_logsigmoid_gradient_at_zero_is_one_half():
    x = t64([0.0], True)
    F.logsigmoid(x).sum().backward()
    assert_close(x.grad, np.array([0.5]))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax(rng, dim):
    x = rng.standard_normal((3, 4, 2))
    assert_close(F.softmax(t64(x), dim), np_softmax(x, dim))
    assert_close(F.log_softmax(t64(x), dim), np.log(np_softmax(x, dim)))
    assert F.softmax(t64(x), dim, dtype=jt.float32).dtype is jt.float32


def test_softmax_implicit_dim_warns_and_follows_torch(rng):
    x = rng.standard_normal((3, 4))
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        assert_close(F.softmax(t64(x)), np_softmax(x, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_close(F.log_softmax(t64(x[0])), np.log(np_softmax(x[0], 0)))


def test_softmin_glu_normalize_cosine_similarity(rng):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((1, 4))
    assert_close(F.softmin(t64(x), 0), np_softmax(-x, 0))
    assert_close(F.glu(t64(x), 1), x[:, :2] / (1 + np.exp(-x[:, 2:])))
    norms = (np.abs(x) ** 3).sum(0, keepdims=True) ** (1 / 3)
    assert_close(F.normalize(t64(x), 3.0, 0), x / norms)
    expected = (x * y).sum(-1) / (np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1))
    assert_close(F.cosine_similarity(t64(x), t64(y), -1), expected)
    a, b = t64(x, True), t64(y, True)
    assert gradcheck(lambda a, b: F.cosine_similarity(a, b, -1).sum() + F.normalize(a, dim=0).sum(), (a, b))


def test_one_hot(rng):
    idx = np.array([[0, 3], [2, 1]])
    expected = np.eye(4, dtype=np.int64)[idx]
    out = F.one_hot(jt.tensor(idx))
    assert out.dtype is jt.int64
    assert_close(out, expected)
    assert_close(F.one_hot(jt.tensor(idx), 6), np.eye(6, dtype=np.int64)[idx])


# Attention -------------------------------------------------------------------------------------------------------

def np_attention(q, k, v, bias, scale):
    """torch's reference: softmax(q k^T * scale + bias) v, rows with every key masked giving zeros."""
    s = q @ np.swapaxes(k, -1, -2) * scale + bias
    empty = np.isneginf(s).all(-1, keepdims=True)
    w = np.where(empty, 0.0, np_softmax(np.where(empty, 0.0, s), -1))
    return w @ v


@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float"])
def test_scaled_dot_product_attention(rng, kind):
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 2))
    bias, kwargs = np.zeros((3, 5)), {}
    if kind == "causal":
        bias = np.where(np.tril(np.ones((3, 5), bool)), 0.0, -np.inf)
        kwargs = dict(is_causal=True)
    elif kind == "bool":
        mask = rng.random((3, 5)) > 0.4
        mask[1] = False
        bias = np.where(mask, 0.0, -np.inf)
        kwargs = dict(attn_mask=jt.tensor(mask))
    elif kind == "float":
        bias = rng.standard_normal((3, 5))
        kwargs = dict(attn_mask=t64(bias))
    got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), scale=0.7, **kwargs)
    assert_close(got, np_attention(q, k, v, bias, 0.7))
    default = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), **kwargs)
    assert_close(default, np_attention(q, k, v, bias, 1 / np.sqrt(4)))


def test_scaled_dot_product_attention_gqa_and_gradcheck(rng):
    q, k, v = rng.standard_normal((1, 4, 2, 3)), rng.standard_normal((1, 2, 3, 3)), rng.standard_normal((1, 2, 3, 2))
    rep = lambda a: np.repeat(a, 2, axis=1)  # noqa: E731
    got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), enable_gqa=True)
    assert_close(got, np_attention(q, rep(k), rep(v), 0.0, 1 / np.sqrt(3)))
    mask = jt.tensor(np.array([[True, False, True], [False, False, False]]))
    assert gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask),
                     (t64(q[0, :2], True), t64(k[0], True), t64(v[0], True)))


def test_batch_norm_refuses_a_momentum_that_is_no_number_as_torch():
    """Found comparing with torch (stop 35): ``F.batch_norm(..., momentum=None)`` (BatchNorm's cumulative average is
    the module's, not the function's) raised jitorch's ``1 - None`` TypeError; torch's binding names the argument.
    Numbers, bools and tensors are taken, training or not."""
    torch = pytest.importorskip("torch")

    def outcomes(T):
        out = []
        for momentum in (None, "a", True, 1, 0.5):
            for training in (True, False):
                try:
                    y = T.nn.functional.batch_norm(T.ones(2, 3), T.zeros(3), T.ones(3), momentum=momentum,
                                                   training=training)
                    out.append(y.tolist())
                except TypeError as e:
                    out.append(str(e))
        return out
    want = outcomes(torch)
    assert outcomes(jt) == want
    assert want[0] == want[1] == "batch_norm(): argument 'momentum' (position 7) must be float, not NoneType"


def test_embedding_max_norm_scales_rows_by_torchs_double_scale():
    """torch's embedding_renorm_ reads each row's norm as a double and computes ``max_norm / (norm + 1e-7)``
    in double, rounded once to the weight's dtype; jitorch computed the scale in float32 and 70 of 1,200
    renormalised rows differed from torch's in the last bit. With 1-norms (the same bits as torch's) the
    renormalised weight and the output are torch's bit for bit."""
    import torch
    rng = np.random.default_rng(0)
    w = (rng.normal(size=(50, 7)) * 3).astype(np.float32)
    ids = rng.integers(0, 50, (40,))
    for max_norm in (0.5, 1.3, 4.0):
        jw, tw = jt.tensor(w), torch.from_numpy(w.copy())
        out = jt.nn.functional.embedding(jt.tensor(ids), jw, max_norm=max_norm, norm_type=1.0)
        want = torch.nn.functional.embedding(torch.from_numpy(ids), tw, max_norm=max_norm, norm_type=1.0)
        assert jw.numpy().tobytes() == tw.numpy().tobytes()
        assert out.numpy().tobytes() == want.numpy().tobytes()


def test_embedding_of_a_weight_that_is_not_a_matrix_raises_torchs_error():
    for weight in (jt.zeros(6), jt.zeros(2, 3, 4)):
        with pytest.raises(RuntimeError, match="'weight' must be 2-D"):
            jt.nn.functional.embedding(jt.tensor([0, 1]), weight)
