"""The activation, pooling, Conv3d, loss and distance modules over existing functionals: forward against
NumPy transcriptions of torch's formulas, in-place variants, reprs as torch 2.13 prints them, errors."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import jitorch as jt
from jitorch import nn
from jitorch.autograd import gradcheck


def _np(t):
    return t.detach().numpy()


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    return np.log1p(np.exp(x))


def _relu6(x):
    return np.clip(x, 0, 6)


def _softmax(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


# Activations ------------------------------------------------------------------------------------------

ACTIVATIONS = [
    ("ELU", lambda: nn.ELU(0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    ("Softplus", lambda: nn.Softplus(2.0, 3.0), lambda x: np.where(2 * x > 3, x, _softplus(2 * x) / 2)),
    ("Hardtanh", lambda: nn.Hardtanh(-0.5, 1.5), lambda x: np.clip(x, -0.5, 1.5)),
    ("ReLU6", lambda: nn.ReLU6(), _relu6),
    ("Hardsigmoid", lambda: nn.Hardsigmoid(), lambda x: _relu6(x + 3) / 6),
    ("Hardswish", lambda: nn.Hardswish(), lambda x: x * _relu6(x + 3) / 6),
    ("Mish", lambda: nn.Mish(), lambda x: x * np.tanh(_softplus(x))),
    ("Softsign", lambda: nn.Softsign(), lambda x: x / (1 + np.abs(x))),
    ("LogSigmoid", lambda: nn.LogSigmoid(), lambda x: np.log(_sigmoid(x))),
    ("GLU", lambda: nn.GLU(), lambda x: x[..., :3] * _sigmoid(x[..., 3:])),
    ("GLU-dim0", lambda: nn.GLU(0), lambda x: x[:2] * _sigmoid(x[2:])),
    ("Softmin", lambda: nn.Softmin(1), lambda x: _softmax(-x, 1)),
]


@pytest.mark.parametrize("make, reference", [a[1:] for a in ACTIVATIONS], ids=[a[0] for a in ACTIVATIONS])
def test_activation_forward_and_gradient(rng, make, reference):
    x = rng.normal(scale=3.0, size=(4, 6))
    module = make()
    np.testing.assert_allclose(_np(module(jt.tensor(x))), reference(x), rtol=1e-12, atol=1e-14)
    assert gradcheck(module, (jt.tensor(x[:, :4] * 0.9 + 0.05, requires_grad=True),))


INPLACE = [
    ("ELU", lambda: nn.ELU(inplace=True), lambda x: np.where(x > 0, x, np.expm1(x))),
    ("Hardtanh", lambda: nn.Hardtanh(inplace=True), lambda x: np.clip(x, -1, 1)),
    ("ReLU6", lambda: nn.ReLU6(inplace=True), _relu6),
    ("Hardsigmoid", lambda: nn.Hardsigmoid(inplace=True), lambda x: _relu6(x + 3) / 6),
    ("Hardswish", lambda: nn.Hardswish(inplace=True), lambda x: x * _relu6(x + 3) / 6),
    ("Mish", lambda: nn.Mish(inplace=True), lambda x: x * np.tanh(_softplus(x))),
]


@pytest.mark.parametrize("make, reference", [a[1:] for a in INPLACE], ids=[a[0] for a in INPLACE])
def test_activation_inplace_writes_input(rng, make, reference):
    x = rng.normal(scale=4.0, size=(3, 5))
    t = jt.tensor(x)
    out = make()(t)
    np.testing.assert_allclose(_np(t), reference(x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_np(out), reference(x), rtol=1e-12, atol=1e-14)


REPRS = [
    (nn.ELU(), "ELU(alpha=1.0)"), (nn.ELU(0.5, True), "ELU(alpha=0.5, inplace=True)"),
    (nn.Softplus(), "Softplus(beta=1.0, threshold=20.0)"), (nn.Hardtanh(), "Hardtanh(min_val=-1.0, max_val=1.0)"),
    (nn.Hardtanh(0, 2, True), "Hardtanh(min_val=0, max_val=2, inplace=True)"), (nn.ReLU6(), "ReLU6()"),
    (nn.ReLU6(True), "ReLU6(inplace=True)"), (nn.Hardsigmoid(True), "Hardsigmoid()"),
    (nn.Hardswish(True), "Hardswish()"), (nn.Mish(True), "Mish(inplace=True)"), (nn.Softsign(), "Softsign()"),
    (nn.LogSigmoid(), "LogSigmoid()"), (nn.GLU(), "GLU(dim=-1)"), (nn.Softmin(), "Softmin(dim=None)"),
    (nn.MaxPool1d(3), "MaxPool1d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False)"),
    (nn.MaxPool1d(3, 2, 1, 2, ceil_mode=True),
     "MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)"),
    (nn.AvgPool1d(3), "AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))"),
    (nn.AvgPool1d(3, 2, 1), "AvgPool1d(kernel_size=(3,), stride=(2,), padding=(1,))"),
    (nn.AdaptiveAvgPool1d(4), "AdaptiveAvgPool1d(output_size=4)"),
    (nn.Conv3d(2, 4, 3), "Conv3d(2, 4, kernel_size=(3, 3, 3), stride=(1, 1, 1))"),
    (nn.Conv3d(2, 4, (1, 2, 3), stride=2, padding=1, bias=False),
     "Conv3d(2, 4, kernel_size=(1, 2, 3), stride=(2, 2, 2), padding=(1, 1, 1), bias=False)"),
    (nn.KLDivLoss(), "KLDivLoss()"), (nn.HuberLoss(delta=2.0), "HuberLoss()"), (nn.SmoothL1Loss(), "SmoothL1Loss()"),
    (nn.CosineSimilarity(), "CosineSimilarity()"), (nn.PairwiseDistance(), "PairwiseDistance()"),
]


@pytest.mark.parametrize("module, text", REPRS, ids=[r[1].split("(")[0] + str(i) for i, r in enumerate(REPRS)])
def test_repr(module, text):
    assert repr(module) == text


def test_relu6_is_a_hardtanh():
    m = nn.ReLU6()
    assert isinstance(m, nn.Hardtanh) and (m.min_val, m.max_val) == (0.0, 6.0)


def test_hardtanh_deprecated_keywords():
    with pytest.warns(FutureWarning, match="keyword argument `min_value` is deprecated and renamed to `min_val`"):
        m = nn.Hardtanh(min_value=-2.0)
    assert repr(m) == "Hardtanh(min_val=-2.0, max_val=1.0)"


def test_hardtanh_bounds_error():
    with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater than min_val \(2.0\)"):
        nn.Hardtanh(2.0, 1.0)


# Pooling ----------------------------------------------------------------------------------------------

def test_max_pool1d(rng):
    x = rng.normal(size=(2, 3, 9))
    expected = sliding_window_view(x, 3, -1)[..., ::2, :].max(-1)
    np.testing.assert_array_equal(_np(nn.MaxPool1d(3, 2)(jt.tensor(x))), expected)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1)], constant_values=-np.inf)
    windows = sliding_window_view(padded, 5, -1)[..., ::2, ::2]  # kernel 3 dilated by 2
    out, idx = nn.MaxPool1d(3, 2, 1, 2, return_indices=True)(jt.tensor(x))
    np.testing.assert_array_equal(_np(out), windows.max(-1))
    starts = np.arange(windows.shape[-2]) * 2 - 1
    np.testing.assert_array_equal(_np(idx), starts + 2 * windows.argmax(-1))


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool1d(rng, count_include_pad):
    x = rng.normal(size=(2, 10))
    padded = np.pad(x, [(0, 0), (1, 1)])
    ones = np.pad(np.ones_like(x), [(0, 0), (1, 1)])
    sums = sliding_window_view(padded, 3, -1)[:, ::2].sum(-1)
    counts = 3 if count_include_pad else sliding_window_view(ones, 3, -1)[:, ::2].sum(-1)
    out = nn.AvgPool1d(3, 2, 1, count_include_pad=count_include_pad)(jt.tensor(x))
    np.testing.assert_allclose(_np(out), sums / counts, rtol=1e-12)


def test_adaptive_avg_pool1d(rng):
    x = rng.normal(size=(2, 3, 10))
    n, out_size = 10, 4
    # torch's window i: [floor(i n / out), ceil((i + 1) n / out)).
    bounds = [((i * n) // out_size, -(-((i + 1) * n) // out_size)) for i in range(out_size)]
    expected = np.stack([x[..., lo:hi].mean(-1) for lo, hi in bounds], -1)
    np.testing.assert_allclose(_np(nn.AdaptiveAvgPool1d(out_size)(jt.tensor(x))), expected, rtol=1e-12)


# Conv3d -----------------------------------------------------------------------------------------------

def _conv3d_reference(x, w, b, stride, padding):
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    windows = sliding_window_view(x, w.shape[2:], (2, 3, 4))[:, :, ::stride[0], ::stride[1], ::stride[2]]
    return np.einsum("ncdhwijk,ocijk->nodhw", windows, w) + b[None, :, None, None, None]


def test_conv3d(rng):
    layer = nn.Conv3d(2, 3, (2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1)).to(jt.float64)
    x = rng.normal(size=(2, 2, 4, 5, 3))
    expected = _conv3d_reference(x, _np(layer.weight), _np(layer.bias), (1, 2, 1), (1, 0, 1))
    np.testing.assert_allclose(_np(layer(jt.tensor(x))), expected, rtol=1e-10, atol=1e-12)
    assert layer.weight.shape == (3, 2, 2, 3, 2)


def test_conv3d_gradients(rng):
    layer = nn.Conv3d(1, 2, 2, bias=True).to(jt.float64)
    x = jt.tensor(rng.normal(size=(1, 1, 3, 3, 2)), requires_grad=True)
    assert gradcheck(lambda inp, w, b: layer(inp), (x, layer.weight, layer.bias))


def test_conv3d_reflect_padding_mode(rng):
    layer = nn.Conv3d(1, 1, 3, padding=1, padding_mode="reflect", bias=False).to(jt.float64)
    x = rng.normal(size=(1, 1, 3, 4, 5))
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1), (1, 1)], mode="reflect")
    expected = _conv3d_reference(padded, _np(layer.weight), np.zeros(1), (1, 1, 1), (0, 0, 0))
    np.testing.assert_allclose(_np(layer(jt.tensor(x))), expected, rtol=1e-10, atol=1e-12)


# Losses -----------------------------------------------------------------------------------------------

def _huber(d, delta):
    return np.where(np.abs(d) < delta, 0.5 * d * d, delta * (np.abs(d) - 0.5 * delta))


def test_smooth_l1_and_huber_losses(rng):
    x, y = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    d = x - y
    out = nn.SmoothL1Loss(beta=0.5)(jt.tensor(x), jt.tensor(y))
    np.testing.assert_allclose(_np(out), np.mean(_huber(d, 0.5) / 0.5), rtol=1e-12)
    out = nn.HuberLoss(reduction="sum", delta=0.7)(jt.tensor(x), jt.tensor(y))
    np.testing.assert_allclose(_np(out), np.sum(_huber(d, 0.7)), rtol=1e-12)
    out = nn.HuberLoss(reduction="none")(jt.tensor(x), jt.tensor(y))
    np.testing.assert_allclose(_np(out), _huber(d, 1.0), rtol=1e-12)


@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_loss(rng, log_target):
    logits = rng.normal(size=(4, 5))
    log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    q = _softmax(rng.normal(size=(4, 5)), 1)
    target = np.log(q) if log_target else q
    out = nn.KLDivLoss(reduction="batchmean", log_target=log_target)(jt.tensor(log_p), jt.tensor(target))
    np.testing.assert_allclose(_np(out), np.sum(q * (np.log(q) - log_p)) / 4, rtol=1e-12)


def test_legacy_reduction_flags_warn():
    with pytest.warns(UserWarning, match="please use reduction='sum' instead"):
        loss = nn.SmoothL1Loss(size_average=False)
    assert loss.reduction == "sum"
    with pytest.warns(UserWarning, match="please use reduction='none' instead"):
        assert nn.KLDivLoss(reduce=False).reduction == "none"


# Distances --------------------------------------------------------------------------------------------

def test_cosine_similarity(rng):
    a, b = rng.normal(size=(3, 4, 2)), rng.normal(size=(4, 1))
    norms = np.maximum(np.linalg.norm(a, axis=1), 1e-8) * np.maximum(np.linalg.norm(b, axis=0), 1e-8)
    np.testing.assert_allclose(_np(nn.CosineSimilarity()(jt.tensor(a), jt.tensor(b))), (a * b).sum(1) / norms,
                               rtol=1e-12)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, np.inf, 0.0])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance(rng, p, keepdim):
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(4,))
    diff = np.abs(a - b + 1e-6)
    if p == 0:
        expected = (diff != 0).sum(-1, keepdims=keepdim).astype(float)
    elif np.isinf(p):
        expected = diff.max(-1, keepdims=keepdim)
    else:
        expected = (diff ** p).sum(-1, keepdims=keepdim) ** (1 / p)
    out = nn.PairwiseDistance(p, keepdim=keepdim)(jt.tensor(a), jt.tensor(b))
    np.testing.assert_allclose(_np(out), expected, rtol=1e-12)


def test_pairwise_distance_values_torch_prints():
    # Values printed by torch 2.13 for [[1, 2, 3]] and [[1, 0, -1]]: p=-1 leaves just eps.
    a, b = jt.tensor([[1.0, 2.0, 3.0]]), jt.tensor([[1.0, 0.0, -1.0]])
    assert nn.PairwiseDistance(-1)(a, b).shape == (1,)
    np.testing.assert_allclose(_np(nn.PairwiseDistance(-1)(a, b)), [1e-6], rtol=1e-4)
    assert nn.PairwiseDistance()(jt.tensor(1.0), jt.tensor(3.0)).shape == ()


def test_pairwise_distance_gradient(rng):
    a = jt.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    b = jt.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    assert gradcheck(nn.PairwiseDistance(), (a, b))


def test_pairwise_distance_shape_error():
    with pytest.raises(RuntimeError, match=r"size of tensor a \(4\) must match the size of tensor b \(5\)"):
        nn.PairwiseDistance()(jt.ones(3, 4), jt.ones(3, 5))
