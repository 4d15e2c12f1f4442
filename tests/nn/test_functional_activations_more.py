"""celu, selu, softshrink, hardshrink, tanhshrink, threshold, rrelu, prelu (and their in-place forms and
modules) against torch: values, gradients, a compiled run, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn as jnn
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, check_compiled, same_error

# the kinks of every function here (0, +-0.5, +-1) are on this grid, so their one-sided gradients are compared
_X = np.linspace(-3, 3, 25).astype(np.float32)
_X2 = np.linspace(-2, 2, 2 * 3 * 4).astype(np.float32).reshape(2, 3, 4)

_CALLS = {
    "celu": lambda F, x: F.celu(x),
    "celu_alpha": lambda F, x: F.celu(x, alpha=0.4),
    "celu_negative_alpha": lambda F, x: F.celu(x, alpha=-1.5),
    "selu": lambda F, x: F.selu(x),
    "elu": lambda F, x: F.elu(x, 0.7),
    "softshrink": lambda F, x: F.softshrink(x),
    "softshrink_lambd": lambda F, x: F.softshrink(x, 1.0),
    "hardshrink": lambda F, x: F.hardshrink(x),
    "hardshrink_negative_lambd": lambda F, x: F.hardshrink(x, -1.0),
    "tanhshrink": lambda F, x: F.tanhshrink(x),
    "threshold": lambda F, x: F.threshold(x, 0.5, -2.0),
    "rrelu_eval": lambda F, x: F.rrelu(x, 0.1, 0.3),
}


@pytest.mark.parametrize("name", list(_CALLS))
def test_activation_matches_torch(name):
    check(_CALLS[name], _X)
    # torch computes celu's float64 gradient to about 1e-9 only
    check(_CALLS[name], _X.astype(np.float64), atol=1e-8, rtol=1e-7)


@pytest.mark.parametrize("name", list(_CALLS))
def test_activation_passes_nan_and_infinities_as_torch(name):
    check(_CALLS[name], np.array([np.nan, np.inf, -np.inf, 0.0], np.float32), grad=False)


def test_activations_compile():
    check_compiled(lambda F, x: sum(call(F, x) for call in _CALLS.values()), _X2)


@pytest.mark.parametrize("name, call", [
    ("celu_", lambda F, x: F.celu_(x, 0.5)), ("selu_", lambda F, x: F.selu_(x)), ("elu_", lambda F, x: F.elu_(x)),
    ("threshold_", lambda F, x: F.threshold_(x, 0.0, 3.0)), ("rrelu_", lambda F, x: F.rrelu_(x)),
    ("leaky_relu_", lambda F, x: F.leaky_relu_(x, 0.2)), ("hardtanh_", lambda F, x: F.hardtanh_(x, -0.5, 0.5)),
    ("celu_inplace", lambda F, x: F.celu(x, inplace=True)), ("selu_inplace", lambda F, x: F.selu(x, inplace=True)),
])
def test_inplace_form_writes_its_input_as_torch(name, call):
    t, j = torch.tensor(_X2), jt.tensor(_X2)
    assert call(JF, j) is j
    call(torch.nn.functional, t)
    np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("call, x", [
    (lambda F, x: F.celu(x, alpha=0.0), _X),
    (lambda F, x: F.softshrink(x, -1.0), _X),
    (lambda F, x: F.softshrink(x, -1.0), _X.astype(np.float64)),
    (lambda F, x: F.rrelu(x, 0.5, 0.1), _X),
    (lambda F, x: F.rrelu(x, 0.5, 0.1, training=True), _X),
    (lambda F, x: F.selu(x), np.arange(3)),
    (lambda F, x: F.celu(x), np.arange(3)),
    (lambda F, x: F.softshrink(x), np.arange(3)),
    (lambda F, x: F.hardshrink(x), np.arange(3)),
])
def test_activation_bad_input_raises_as_torch(call, x):
    same_error(call, x)


def test_threshold_keeps_integer_input_integer():
    check(lambda F, x: F.threshold(x, 1, 5), np.arange(4), grad=False)


def test_rrelu_training_scales_each_negative_element_by_its_own_slope_in_range():
    x = jt.tensor(np.linspace(-3, 3, 400).astype(np.float32), requires_grad=True)
    y = JF.rrelu(x, 0.1, 0.3, training=True)
    y.sum().backward()
    xs, ys, grads = x.detach().numpy(), y.detach().numpy(), x.grad.numpy()
    negative = xs < 0
    slopes = ys[negative] / xs[negative]
    assert ((slopes >= 0.1) & (slopes <= 0.3)).all() and np.ptp(slopes) > 0.1
    np.testing.assert_allclose(grads[negative], slopes, rtol=1e-5)
    np.testing.assert_array_equal(ys[~negative], xs[~negative])
    assert (grads[xs > 0] == 1).all()


def test_rrelu_training_compiles_with_a_fresh_draw_per_call():
    x = jt.tensor(-np.ones(64, np.float32))
    step = jt.compile(lambda x: JF.rrelu(x, training=True))
    first, second = step(x).numpy(), step(x).numpy()
    assert ((-first >= 1 / 8) & (-first <= 1 / 3)).all()
    assert not np.array_equal(first, second)


# prelu --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, slopes", [((2, 3, 4), 3), ((2, 3, 4), 1), ((2, 3), 3), ((5,), 1), ((2, 3, 2, 2), 3)])
def test_prelu_matches_torch(shape, slopes):
    x = np.linspace(-2, 2, int(np.prod(shape))).astype(np.float32).reshape(shape)
    weight = np.linspace(0.1, 0.5, slopes).astype(np.float32)
    check(lambda F, x, w: F.prelu(x, w), x, weight, compiled=True)


def test_prelu_takes_a_zero_dim_weight():
    check(lambda F, x, w: F.prelu(x, w), _X2, np.float32(0.3))


@pytest.mark.parametrize("x, w", [(np.zeros((2, 4)), np.ones(3)), (np.zeros((2, 4)), np.ones((1, 1))),
                                  (np.zeros(4), np.ones(4)), (np.zeros(()), np.ones(2))])
def test_prelu_bad_input_raises_as_torch(x, w):
    same_error(lambda F, x, w: F.prelu(x, w), x.astype(np.float32), w.astype(np.float32))


# modules --------------------------------------------------------------------------------------------------

_MODULES = [("CELU", (2.0, True)), ("CELU", ()), ("SELU", ()), ("SELU", (True,)), ("Softshrink", (1.5,)),
            ("Hardshrink", ()), ("Tanhshrink", ()), ("Threshold", (0.1, 20.0)), ("Threshold", (0.1, 2, True)),
            ("RReLU", ()), ("RReLU", (0.2, 0.4, True)), ("PReLU", ()), ("PReLU", (3, 0.1)), ("Softmax2d", ())]


@pytest.mark.parametrize("name, args", _MODULES)
def test_activation_module_matches_torch(name, args):
    t_mod, j_mod = getattr(torch.nn, name)(*args).eval(), getattr(jnn, name)(*args).eval()
    assert repr(j_mod) == repr(t_mod)
    t_x, j_x = torch.tensor(_X2).requires_grad_(), jt.tensor(_X2, requires_grad=True)
    # an in-place module writes its input, which a leaf that requires grad refuses (in both libraries)
    t_y = t_mod(t_x * 1.0)
    j_y = j_mod(j_x * 1.0)
    np.testing.assert_allclose(j_y.detach().numpy(), t_y.detach().numpy(), rtol=1e-5, atol=1e-6)
    t_y.sum().backward()
    j_y.sum().backward()
    np.testing.assert_allclose(j_x.grad.numpy(), t_x.grad.numpy(), rtol=1e-5, atol=1e-6)
    for (t_name, t_p), (j_name, j_p) in zip(t_mod.named_parameters(), j_mod.named_parameters()):
        assert t_name == j_name
        np.testing.assert_allclose(j_p.grad.numpy(), t_p.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_softmax2d_refuses_2d_input_as_torch():
    with pytest.raises(ValueError) as expected:
        torch.nn.Softmax2d()(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=str(expected.value)):
        jnn.Softmax2d()(jt.zeros(2, 3))


def test_prelu_module_learns_its_slope():
    m = jnn.PReLU()
    m(jt.tensor([-2.0, 1.0])).sum().backward()
    assert m.weight.grad.tolist() == [-2.0]


@pytest.mark.parametrize("inplace", [False, True])
def test_leaky_relu_of_float64_multiplies_by_the_slope_in_float64(inplace):
    """The slope went through a float32 tensor (0.1 as 0.10000000149...), so float64 results and gradients were
    off by 1.5e-8 relative (found by hand against torch, session 36)."""
    values = [-0.3, 0.5, -7.0]
    want = torch.nn.functional.leaky_relu(torch.tensor(values, dtype=torch.float64), 0.1)
    x = jt.tensor(values, dtype=jt.float64, requires_grad=True)
    out = JF.leaky_relu(x * 1, 0.1, inplace=inplace)
    assert out.tolist() == want.tolist()
    out.sum().backward()
    assert x.grad.tolist() == [0.1, 1.0, 0.1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_leaky_relu_by_a_factor_gives_torchs_bits_and_gradient(dtype):
    """float32/float64 leaky_relu is one product by a factor of 1 or the slope (two eager ops, a one-product
    backward; the select form cost ~2x in an eager DCGAN step): torch's bits, gradients and in-place result on
    signed zeros, infinities, NaN and subnormals, for slopes float32 cannot hold exactly."""
    a = np.concatenate([np.random.default_rng(0).standard_normal(200),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, -1e-310]]).astype(dtype)
    for slope in (0.01, 0.2, 1 / 3):
        x, tx = jt.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        y, ty = jt.nn.functional.leaky_relu(x, slope), torch.nn.functional.leaky_relu(tx, slope)
        y.backward(jt.full_like(y, 3.7))
        ty.backward(torch.full_like(ty, 3.7))
        assert y.detach().numpy().tobytes() == ty.detach().numpy().tobytes()
        assert x.grad.numpy().tobytes() == tx.grad.numpy().tobytes()
        z = jt.tensor(a)
        jt.nn.functional.leaky_relu(z, slope, inplace=True)
        assert z.numpy().tobytes() == ty.detach().numpy().tobytes()
