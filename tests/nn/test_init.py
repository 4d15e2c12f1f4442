"""nn.init: gains, fans, and the distributions each initialiser draws from (bounds and moments)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn
from jitorch.nn import init

N = 100_000  # enough draws that moments sit within 1% of their values


@pytest.mark.parametrize("name, param, gain", [
    ("linear", None, 1), ("conv2d", None, 1), ("sigmoid", None, 1), ("tanh", None, 5.0 / 3),
    ("relu", None, math.sqrt(2.0)), ("leaky_relu", None, math.sqrt(2.0 / (1 + 0.01 ** 2))),
    ("leaky_relu", 0.2, math.sqrt(2.0 / 1.04)), ("leaky_relu", 1, 1.0), ("selu", None, 0.75),
])
def test_calculate_gain(name, param, gain):
    assert init.calculate_gain(name, param) == pytest.approx(gain)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity softsign"):
        init.calculate_gain("softsign")
    with pytest.raises(ValueError, match="negative_slope True not a valid number"):
        init.calculate_gain("leaky_relu", True)


@pytest.mark.parametrize("shape, fans", [((5, 3), (3, 5)), ((8, 4, 3, 2), (24, 48)), ((2, 3, 7), (21, 14))])
def test_fan_in_and_fan_out(shape, fans):
    assert init._calculate_fan_in_and_fan_out(jt.empty(shape)) == fans


def test_fan_needs_two_dims():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(jt.empty(4))


def test_kaiming_bad_mode():
    with pytest.raises(ValueError, match=r"Mode fan_avg not supported, please use one of \['fan_in', 'fan_out'\]"):
        init.kaiming_uniform_(jt.empty(3, 3), mode="fan_avg")


def _uniform_check(values, bound):
    assert values.min() >= -bound and values.max() <= bound
    assert values.min() < -0.99 * bound and values.max() > 0.99 * bound
    np.testing.assert_allclose(values.std(), bound / math.sqrt(3), rtol=1e-2)
    assert abs(values.mean()) < 1e-2 * bound


def _normal_check(values, mean, std):
    np.testing.assert_allclose(values.mean(), mean, atol=1e-2 * std)
    np.testing.assert_allclose(values.std(), std, rtol=1e-2)


def test_uniform_normal_constant():
    t = jt.empty(N)
    v = init.uniform_(t, -2.0, 3.0).numpy()
    assert v.min() >= -2 and v.max() < 3 and abs(v.mean() - 0.5) < 0.02
    _normal_check(init.normal_(t, 1.5, 0.5).numpy(), 1.5, 0.5)
    assert init.constant_(t, 0.25).numpy().max() == 0.25
    assert init.ones_(t).numpy().min() == 1 and init.zeros_(t).numpy().max() == 0


def test_init_does_not_record_gradients():
    p = nn.Parameter(jt.empty(3, 4))
    for fn in (init.uniform_, init.normal_, init.xavier_uniform_, init.kaiming_normal_, init.trunc_normal_,
               init.ones_):
        assert fn(p) is p or fn(p).data_ptr() == p.data_ptr()
        assert p.is_leaf and p.grad_fn is None


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_xavier(gain):
    t = jt.empty(400, 500)
    std = gain * math.sqrt(2.0 / 900)
    _uniform_check(init.xavier_uniform_(t, gain).numpy(), math.sqrt(3) * std)
    _normal_check(init.xavier_normal_(t, gain).numpy(), 0.0, std)


@pytest.mark.parametrize("a, mode, nonlinearity", [
    (0, "fan_in", "leaky_relu"), (math.sqrt(5), "fan_in", "leaky_relu"), (0, "fan_out", "relu"), (0, "FAN_IN", "tanh"),
])
def test_kaiming(a, mode, nonlinearity):
    t = jt.empty(300, 200, 2)  # fan_in 400, fan_out 600
    fan = 400 if mode.lower() == "fan_in" else 600
    std = init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    _uniform_check(init.kaiming_uniform_(t, a, mode, nonlinearity).numpy(), math.sqrt(3) * std)
    _normal_check(init.kaiming_normal_(t, a, mode, nonlinearity).numpy(), 0.0, std)


def test_kaiming_on_an_empty_tensor_warns():
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        init.kaiming_uniform_(jt.empty(0, 3))


def _truncated_moments(mean, std, a, b):
    """Mean and std of N(mean, std^2) truncated to [a, b] (the textbook formulas)."""
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: (1 + math.erf(x / math.sqrt(2))) / 2  # noqa: E731
    z = cdf(beta) - cdf(alpha)
    m = mean + std * (pdf(alpha) - pdf(beta)) / z
    var = std ** 2 * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2)
    return m, math.sqrt(var)


@pytest.mark.parametrize("mean, std, a, b", [(0.0, 1.0, -2.0, 2.0), (1.0, 2.0, -1.0, 4.0), (0.0, 0.02, -0.04, 0.04)])
def test_trunc_normal(mean, std, a, b):
    v = init.trunc_normal_(jt.empty(N), mean, std, a, b).numpy()
    assert v.min() >= a and v.max() <= b
    m, s = _truncated_moments(mean, std, a, b)
    np.testing.assert_allclose(v.mean(), m, atol=1e-2 * s)
    np.testing.assert_allclose(v.std(), s, rtol=1e-2)


def test_trunc_normal_warns_far_mean():
    with pytest.warns(UserWarning, match="mean is more than 2 std from"):
        init.trunc_normal_(jt.empty(10), mean=10.0)


def test_erfinv_inverts_erf():
    y = np.linspace(-0.9999, 0.9999, 2001)
    x = init._erfinv(jt.tensor(y)).numpy()
    np.testing.assert_allclose(np.vectorize(math.erf)(x), y, rtol=0, atol=1e-14)
    assert init._erfinv(jt.tensor([-1.0, 1.0], dtype=jt.float64)).tolist() == [-math.inf, math.inf]


def test_same_seed_same_start():
    jt.manual_seed(3)
    a = nn.Linear(5, 4).weight.detach().numpy().copy()
    jt.manual_seed(3)
    b = nn.Linear(5, 4).weight.detach().numpy()
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make, fan_in", [
    (lambda: nn.Linear(300, 400), 300), (lambda: nn.Conv2d(20, 300, 3), 180), (lambda: nn.Conv1d(30, 300, 5), 150),
])
def test_layer_default_initialisation(make, fan_in):
    layer = make()
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives exactly this bound for the weight
    _uniform_check(layer.weight.detach().numpy(), bound)
    b = layer.bias.detach().numpy()
    assert b.min() >= -bound and b.max() <= bound


def test_other_layer_defaults():
    emb = nn.Embedding(1000, 200, padding_idx=3)
    w = emb.weight.detach().numpy()
    _normal_check(np.delete(w, 3, axis=0), 0.0, 1.0)
    assert not w[3].any()
    bn = nn.BatchNorm1d(4)
    assert bn.weight.tolist() == [1.0] * 4 and bn.bias.tolist() == [0.0] * 4
    ln = nn.LayerNorm((2, 3))
    assert ln.weight.detach().numpy().min() == 1 and ln.bias.detach().numpy().max() == 0
    bil = nn.Bilinear(100, 30, 50)
    _uniform_check(bil.weight.detach().numpy(), 0.1)
    mha = nn.MultiheadAttention(240, 4)
    _uniform_check(mha.in_proj_weight.detach().numpy(), math.sqrt(6.0 / (240 + 720)))
    assert not mha.in_proj_bias.detach().numpy().any() and not mha.out_proj.bias.detach().numpy().any()
