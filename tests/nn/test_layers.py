"""Layers: forward against NumPy transcriptions of torch's formulas (parameters set explicitly),
parameter gradients by gradcheck, reprs as torch prints them, constructor errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch import nn
from jitorch.autograd import gradcheck


def _set(module, rng, dtype=jt.float64, **fixed):
    """Give every parameter of ``module`` random values (or ``fixed[name]``) in ``dtype``."""
    module.to(dtype)
    with jt.no_grad():
        for name, p in module.named_parameters():
            value = fixed.get(name, rng.normal(size=tuple(p.shape)))
            p.copy_(jt.tensor(np.asarray(value)))
    return module


def _np(t):
    return t.detach().numpy()


def _check_param_grads(module, *inputs):
    """gradcheck of ``module(*inputs)`` with respect to its inputs and every parameter (float64)."""
    params = list(module.parameters())
    assert gradcheck(lambda *args: module(*args[:len(inputs)]), (*inputs, *params))


# Linear, Bilinear, Identity ---------------------------------------------------------------------------

def test_linear(rng):
    layer = _set(nn.Linear(4, 3), rng)
    x = rng.normal(size=(2, 5, 4))
    out = layer(jt.tensor(x))
    np.testing.assert_allclose(_np(out), x @ _np(layer.weight).T + _np(layer.bias), rtol=1e-12)
    _check_param_grads(layer, jt.tensor(x[0, :2], requires_grad=True))
    no_bias = _set(nn.Linear(4, 3, bias=False), rng)
    assert no_bias.bias is None and [n for n, _ in no_bias.named_parameters()] == ["weight"]
    np.testing.assert_allclose(_np(no_bias(jt.tensor(x))), x @ _np(no_bias.weight).T, rtol=1e-12)


def test_linear_factory_kwargs():
    layer = nn.Linear(2, 3, dtype=jt.float64, device="cpu")
    assert layer.weight.dtype is jt.float64 and layer.bias.dtype is jt.float64


def test_bilinear(rng):
    layer = _set(nn.Bilinear(3, 2, 4), rng)
    x1, x2 = rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    expected = np.einsum("ni,oij,nj->no", x1, _np(layer.weight), x2) + _np(layer.bias)
    np.testing.assert_allclose(_np(layer(jt.tensor(x1), jt.tensor(x2))), expected, rtol=1e-12)
    _check_param_grads(layer, jt.tensor(x1[:2], requires_grad=True), jt.tensor(x2[:2], requires_grad=True))


def test_identity_ignores_arguments():
    x = jt.ones(2)
    assert nn.Identity(3, key="v")(x) is x


# Convolutions ------------------------------------------------------------------------------------------

def _np_conv2d(x, w, b, stride, padding, dilation, groups):
    """torch's conv2d (cross-correlation) written out with loops over the output."""
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (x.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (x.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, co, oh, ow))
    per_group = co // groups
    for o in range(co):
        g = o // per_group
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(oh):
            for j in range(ow):
                patch = xs[:, :, i * stride[0]:i * stride[0] + dilation[0] * (kh - 1) + 1:dilation[0],
                           j * stride[1]:j * stride[1] + dilation[1] * (kw - 1) + 1:dilation[1]]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3))
    return out + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize("kwargs", [
    dict(), dict(stride=2, padding=1), dict(padding=(2, 1), dilation=(2, 1)), dict(groups=2, bias=False),
    dict(stride=(1, 2), padding=1, dilation=2, groups=2),
])
def test_conv2d(rng, kwargs):
    layer = _set(nn.Conv2d(4, 6, (3, 2), **kwargs), rng)
    x = rng.normal(size=(2, 4, 7, 6))
    conv = layer
    expected = _np_conv2d(x, _np(conv.weight), None if conv.bias is None else _np(conv.bias), conv.stride,
                          conv.padding, conv.dilation, conv.groups)
    np.testing.assert_allclose(_np(layer(jt.tensor(x))), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(layer(jt.tensor(x[0]))), expected[0], rtol=1e-10, atol=1e-12)  # unbatched


@given(groups=st.sampled_from([1, 2]), k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 2), st.integers(1, 2)), padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), bias=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_conv2d_configurations(groups, k, stride, padding, dilation, bias, seed):
    rng = np.random.default_rng(seed)
    layer = _set(nn.Conv2d(2, 4, k, stride, padding, dilation, groups, bias), rng)
    x = rng.normal(size=(2, 2, 6, 5))
    expected = _np_conv2d(x, _np(layer.weight), _np(layer.bias) if bias else None, stride, padding, dilation, groups)
    np.testing.assert_allclose(_np(layer(jt.tensor(x))), expected, rtol=1e-10, atol=1e-12)


def test_conv2d_gradients(rng):
    layer = _set(nn.Conv2d(2, 2, 2, stride=1, padding=1, groups=2), rng)
    _check_param_grads(layer, jt.tensor(rng.normal(size=(1, 2, 3, 3)), requires_grad=True))


@pytest.mark.parametrize("mode, np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_conv2d_padding_modes(rng, mode, np_mode):
    layer = _set(nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode), rng)
    x = rng.normal(size=(1, 2, 5, 6))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)), mode=np_mode)
    expected = _np_conv2d(padded, _np(layer.weight), _np(layer.bias), (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(_np(layer(jt.tensor(x))), expected, rtol=1e-10)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv_string_padding(rng, padding):
    layer = _set(nn.Conv2d(2, 3, (3, 4), padding=padding, dilation=(1, 2)), rng)
    x = rng.normal(size=(1, 2, 6, 9))
    pads = ((1, 1), (3, 3)) if padding == "same" else ((0, 0), (0, 0))
    padded = np.pad(x, ((0, 0), (0, 0), *pads))
    expected = _np_conv2d(padded, _np(layer.weight), _np(layer.bias), (1, 1), (0, 0), (1, 2), 1)
    out = layer(jt.tensor(x))
    if padding == "same":
        expected = expected[..., :9]  # total horizontal padding 6 is split 3/3 in torch for even totals
        assert out.shape == (1, 3, 6, 9)
    np.testing.assert_allclose(_np(out), expected, rtol=1e-10)


def test_conv1d(rng):
    layer = _set(nn.Conv1d(2, 4, 3, stride=2, padding=1, groups=2), rng)
    x = rng.normal(size=(3, 2, 9))
    expected = _np_conv2d(x[:, :, None], _np(layer.weight)[:, :, None], _np(layer.bias), (1, 2), (0, 1), (1, 1), 2)
    np.testing.assert_allclose(_np(layer(jt.tensor(x))), expected[:, :, 0], rtol=1e-10)
    assert layer.weight.shape == (4, 1, 3)


def test_conv1d_same_with_reflect_mode(rng):
    layer = _set(nn.Conv1d(1, 1, 4, padding="same", padding_mode="reflect"), rng)
    assert layer._reversed_padding_repeated_twice == (1, 2)
    x = rng.normal(size=(1, 1, 8))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 2)), mode="reflect")
    expected = _np_conv2d(padded[:, :, None], _np(layer.weight)[:, :, None], _np(layer.bias), (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(_np(layer(jt.tensor(x))), expected[:, :, 0], rtol=1e-10)


@pytest.mark.parametrize("kwargs, message", [
    (dict(groups=0), "groups must be a positive integer"),
    (dict(groups=3), "in_channels must be divisible by groups"),
    (dict(in_channels=3, groups=3), "out_channels must be divisible by groups"),
    (dict(padding="full"), "Invalid padding string 'full'"),
    (dict(padding="same", stride=2), "padding='same' is not supported for strided convolutions"),
    (dict(padding_mode="mirror"), "padding_mode must be one of"),
])
def test_conv_constructor_errors(kwargs, message):
    args = dict(in_channels=4, out_channels=8, kernel_size=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        nn.Conv2d(**args)


# Pooling ------------------------------------------------------------------------------------------------

def _np_pool(x, k, s, p, reduce, pad_value):
    x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=pad_value)
    oh, ow = (x.shape[2] - k) // s + 1, (x.shape[3] - k) // s + 1
    out = np.empty(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return out


def test_max_pool2d(rng):
    x = rng.normal(size=(2, 3, 7, 6))
    np.testing.assert_allclose(_np(nn.MaxPool2d(2)(jt.tensor(x))), _np_pool(x, 2, 2, 0, np.max, 0), rtol=1e-12)
    np.testing.assert_allclose(_np(nn.MaxPool2d(3, 2, 1)(jt.tensor(x))), _np_pool(x, 3, 2, 1, np.max, -np.inf),
                               rtol=1e-12)
    out, idx = nn.MaxPool2d(2, return_indices=True)(jt.tensor(x))
    assert idx.dtype is jt.int64 and idx.shape == out.shape


def test_avg_pool2d(rng):
    x = rng.normal(size=(2, 3, 7, 6))
    np.testing.assert_allclose(_np(nn.AvgPool2d(2)(jt.tensor(x))), _np_pool(x, 2, 2, 0, np.mean, 0), rtol=1e-12)
    np.testing.assert_allclose(_np(nn.AvgPool2d(3, 1, 1)(jt.tensor(x))), _np_pool(x, 3, 1, 1, np.mean, 0),
                               rtol=1e-12)


def test_adaptive_avg_pool2d(rng):
    x = rng.normal(size=(2, 3, 7, 6))
    np.testing.assert_allclose(_np(nn.AdaptiveAvgPool2d((1, 1))(jt.tensor(x))), x.mean(axis=(2, 3), keepdims=True),
                               rtol=1e-12)
    out = nn.AdaptiveAvgPool2d(3)(jt.tensor(x))
    # torch's windows: start = floor(i * in / out), end = ceil((i + 1) * in / out)
    rows = [(math.floor(i * 7 / 3), math.ceil((i + 1) * 7 / 3)) for i in range(3)]
    cols = [(math.floor(j * 6 / 3), math.ceil((j + 1) * 6 / 3)) for j in range(3)]
    expected = np.array([[x[:, :, r0:r1, c0:c1].mean(axis=(2, 3)) for c0, c1 in cols] for r0, r1 in rows])
    np.testing.assert_allclose(_np(out), expected.transpose(2, 3, 0, 1), rtol=1e-12)


# Normalisation ------------------------------------------------------------------------------------------

def test_batch_norm_running_stats_over_steps(rng):
    bn = _set(nn.BatchNorm2d(3, momentum=0.2), rng)
    mean, var = np.zeros(3), np.ones(3)
    for _ in range(4):
        x = rng.normal(2.0, 3.0, size=(4, 3, 2, 5))
        out = bn(jt.tensor(x))
        m, v = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        shape = (1, 3, 1, 1)
        expected = (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + 1e-5) * _np(bn.weight).reshape(shape) \
            + _np(bn.bias).reshape(shape)
        np.testing.assert_allclose(_np(out), expected, rtol=1e-9, atol=1e-12)
        n = x.size / 3
        mean = 0.8 * mean + 0.2 * m
        var = 0.8 * var + 0.2 * v * n / (n - 1)  # the running variance is unbiased
        np.testing.assert_allclose(_np(bn.running_mean), mean, rtol=1e-10)
        np.testing.assert_allclose(_np(bn.running_var), var, rtol=1e-10)
    assert bn.num_batches_tracked.item() == 4 and bn.num_batches_tracked.dtype is jt.int64
    bn.eval()
    x = rng.normal(size=(2, 3, 2, 2))
    expected = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5) \
        * _np(bn.weight).reshape(1, 3, 1, 1) + _np(bn.bias).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(_np(bn(jt.tensor(x))), expected, rtol=1e-9)
    assert bn.num_batches_tracked.item() == 4


def test_batch_norm_cumulative_average_and_no_tracking(rng):
    bn = nn.BatchNorm1d(2, momentum=None, affine=False).double()
    xs = [rng.normal(size=(5, 2)) for _ in range(3)]
    for x in xs:
        bn(jt.tensor(x))
    np.testing.assert_allclose(_np(bn.running_mean), np.mean([x.mean(0) for x in xs], axis=0), rtol=1e-10)
    free = nn.BatchNorm1d(2, track_running_stats=False).double()
    assert free.running_mean is None and list(free.state_dict()) == ["weight", "bias"]
    x = rng.normal(size=(6, 2, 3))
    expected = (x - x.mean(axis=(0, 2), keepdims=True)) / np.sqrt(x.var(axis=(0, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(_np(free.eval()(jt.tensor(x))), expected, rtol=1e-9)  # batch stats even in eval


def test_batch_norm_gradients(rng):
    bn = _set(nn.BatchNorm1d(2), rng)
    _check_param_grads(bn, jt.tensor(rng.normal(size=(4, 2)), requires_grad=True))


def test_batch_norm_state_dict_keys():
    assert list(nn.BatchNorm1d(3).state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                                    "num_batches_tracked"]
    assert list(nn.BatchNorm1d(3, bias=False).state_dict()) == ["weight", "running_mean", "running_var",
                                                                "num_batches_tracked"]



def test_batch_norm_loads_a_state_dict_without_its_batch_counter():
    # torch fills a missing num_batches_tracked (checkpoints older than the counter) with the current one
    net = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    net[1].num_batches_tracked.fill_(4)
    state = {k: v.clone() + 1 for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert tuple(net.load_state_dict(state)) == ([], [])
    assert net[1].num_batches_tracked.item() == 4 and net[1].running_var.tolist() == [2.0, 2.0, 2.0]
    assert "1.num_batches_tracked" not in state
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "1.running_mean"'):
        net.load_state_dict({k: v for k, v in state.items() if k != "1.running_mean"})

@pytest.mark.parametrize("layer, x_shape, message", [
    (nn.BatchNorm1d(3), (2, 3, 4, 5), r"expected 2D or 3D input \(got 4D input\)"),
    (nn.BatchNorm2d(3), (2, 3), r"expected 4D input \(got 2D input\)"),
])
def test_batch_norm_input_dims(layer, x_shape, message):
    with pytest.raises(ValueError, match=message):
        layer(jt.ones(x_shape))


@pytest.mark.parametrize("shape, kwargs", [((4,), {}), ((2, 4), {}), ((4,), dict(bias=False)),
                                           ((4,), dict(elementwise_affine=False))])
def test_layer_norm(rng, shape, kwargs):
    ln = _set(nn.LayerNorm(shape, eps=1e-3, **kwargs), rng)
    x = rng.normal(size=(3, 2, 4))
    axes = tuple(range(-len(shape), 0))
    expected = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-3)
    if ln.weight is not None:
        expected = expected * _np(ln.weight)
    if ln.bias is not None:
        expected = expected + _np(ln.bias)
    np.testing.assert_allclose(_np(ln(jt.tensor(x))), expected, rtol=1e-9, atol=1e-12)
    _check_param_grads(ln, jt.tensor(x[:1], requires_grad=True))


# Embedding, dropout, reshaping --------------------------------------------------------------------------

def test_embedding(rng):
    emb = _set(nn.Embedding(6, 3, padding_idx=-2), rng)
    assert emb.padding_idx == 4
    idx = np.array([[0, 4, 5], [4, 1, 1]])
    out = emb(jt.tensor(idx))
    np.testing.assert_array_equal(_np(out), _np(emb.weight)[idx])
    out.sum().backward()
    counts = np.bincount(idx.ravel(), minlength=6).astype(float)
    counts[4] = 0  # the padding row gets no gradient
    np.testing.assert_array_equal(_np(emb.weight.grad), np.repeat(counts[:, None], 3, axis=1))


def test_embedding_from_pretrained():
    weights = jt.tensor([[1.0, 2.0], [3.0, 4.0]])
    emb = nn.Embedding.from_pretrained(weights)
    assert not emb.weight.requires_grad and emb(jt.tensor([1])).tolist() == [[3.0, 4.0]]
    assert nn.Embedding.from_pretrained(weights, freeze=False, padding_idx=0).weight.requires_grad
    with pytest.raises(AssertionError, match="Embeddings parameter is expected to be 2-dimensional"):
        nn.Embedding.from_pretrained(jt.ones(3))
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(3, 2, padding_idx=3)
    with pytest.raises(AssertionError, match="Shape of weight does not match num_embeddings and embedding_dim"):
        nn.Embedding(3, 2, _weight=jt.ones(2, 2))


def test_dropout():
    x = jt.ones(1000)
    drop = nn.Dropout(0.25)
    out = _np(drop(x))
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)} and 0.15 < (out == 0).mean() < 0.35
    assert drop.eval()(x) is x or np.array_equal(_np(drop(x)), _np(x))
    assert not _np(nn.Dropout(1.0)(x)).any()
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)


def test_flatten_and_unflatten():
    x = jt.arange(24.0).view(2, 3, 4)
    assert nn.Flatten()(x).shape == (2, 12) and nn.Flatten(0, 1)(x).shape == (6, 4)
    assert nn.Unflatten(1, (3, 1))(x).shape == (2, 3, 1, 4)
    with pytest.raises(TypeError, match="unflattened_size must be a tuple of ints, but found type int"):
        nn.Unflatten(1, 3)
    with pytest.raises(TypeError, match="found element of type str at pos 1"):
        nn.Unflatten(1, (2, "a"))


# Activations -------------------------------------------------------------------------------------------

def _np_softmax(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


_ERF = np.vectorize(math.erf)

ACTIVATIONS = [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.GELU(), lambda x: 0.5 * x * (1 + _ERF(x / math.sqrt(2)))),
    (nn.GELU("tanh"), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.Softmax(dim=1), lambda x: _np_softmax(x, 1)),
    (nn.LogSoftmax(dim=-1), lambda x: np.log(_np_softmax(x, -1))),
    (nn.LeakyReLU(0.25), lambda x: np.where(x > 0, x, 0.25 * x)),
]


@pytest.mark.parametrize("module, formula", ACTIVATIONS, ids=lambda v: repr(v) if isinstance(v, nn.Module) else "")
def test_activation(rng, module, formula):
    x = rng.normal(size=(3, 4)) * 3
    np.testing.assert_allclose(_np(module(jt.tensor(x))), formula(x), rtol=1e-10, atol=1e-12)
    assert gradcheck(module, (jt.tensor(x[:1], requires_grad=True),))


def test_inplace_activation_writes_input():
    x = jt.tensor([-1.0, 2.0])
    nn.ReLU(inplace=True)(x)
    assert x.tolist() == [0.0, 2.0]


# Reprs as torch prints them ------------------------------------------------------------------------------

@pytest.mark.parametrize("module, text", [
    (nn.Conv2d(3, 8, 3), "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1))"),
    (nn.Conv2d(3, 8, (3, 5), stride=2, padding=1, dilation=2, bias=False, padding_mode="reflect"),
     "Conv2d(3, 8, kernel_size=(3, 5), stride=(2, 2), padding=(1, 1), dilation=(2, 2), bias=False, "
     "padding_mode=reflect)"),
    (nn.Conv1d(2, 4, 3, padding="same", groups=2),
     "Conv1d(2, 4, kernel_size=(3,), stride=(1,), padding=same, groups=2)"),
    (nn.MaxPool2d(2), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"),
    (nn.AvgPool2d(3, 1, 1), "AvgPool2d(kernel_size=3, stride=1, padding=1)"),
    (nn.AdaptiveAvgPool2d((1, 1)), "AdaptiveAvgPool2d(output_size=(1, 1))"),
    (nn.BatchNorm1d(3), "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)"),
    (nn.BatchNorm2d(4, momentum=None, affine=False),
     "BatchNorm2d(4, eps=1e-05, momentum=None, affine=False, bias=False, track_running_stats=True)"),
    (nn.LayerNorm(5), "LayerNorm((5,), eps=1e-05, elementwise_affine=True, bias=True)"),
    (nn.LayerNorm([2, 3], bias=False), "LayerNorm((2, 3), eps=1e-05, elementwise_affine=True, bias=False)"),
    (nn.Embedding(10, 3, padding_idx=0), "Embedding(10, 3, padding_idx=0)"),
    (nn.Dropout(), "Dropout(p=0.5, inplace=False)"),
    (nn.Flatten(), "Flatten(start_dim=1, end_dim=-1)"),
    (nn.Unflatten(1, (2, 3)), "Unflatten(dim=1, unflattened_size=(2, 3))"),
    (nn.Identity(), "Identity()"),
    (nn.ReLU(inplace=True), "ReLU(inplace=True)"),
    (nn.GELU("tanh"), "GELU(approximate='tanh')"),
    (nn.SiLU(), "SiLU()"),
    (nn.Softmax(), "Softmax(dim=None)"),
    (nn.LogSoftmax(-1), "LogSoftmax(dim=-1)"),
    (nn.LeakyReLU(0.2, True), "LeakyReLU(negative_slope=0.2, inplace=True)"),
    (nn.Bilinear(2, 3, 4), "Bilinear(in1_features=2, in2_features=3, out_features=4, bias=True)"),
    (nn.Linear(2, 3, bias=False), "Linear(in_features=2, out_features=3, bias=False)"),
])
def test_repr(module, text):
    assert repr(module) == text
