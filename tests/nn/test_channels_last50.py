"""Session 50: a sweep of ops on channels-last (channels_last, and channels_last_3d where the op takes 5-d)
input against torch: results' values and strides, and the input gradient's values and strides for a contiguous
upstream gradient and for one laid out as the result is, float32 and float64; each op compiled (forward and
``autograd.grad``) against eager, strides included; gradcheck for a few; the activations' input gradient
layouts where size-1 dims leave TensorIterator's order to its operands' order."""

import numpy as np
import pytest
import torch

import jitorch
from jitorch.autograd import gradcheck

RS = np.random.RandomState(50)
X4 = RS.randn(2, 4, 6, 8)
X5 = RS.randn(2, 4, 2, 6, 4)
CL, CL3 = "channels_last", "channels_last_3d"


def _F(L):
    return L.nn.functional


def _channel_vector(L, x, ndim):
    return L.arange(1.0, x.shape[1] + 1, dtype=x.dtype).view(1, -1, *([1] * (ndim - 2)))


# name -> (input array, its format, fn(L, x)) where fn gives a tensor or a tuple (the first has a gradient)
OPS = {
    "stack dim 0": (X4, CL, lambda L, x: L.stack([x, x * 2], 0)),
    "stack dim 1": (X4, CL, lambda L, x: L.stack([x, x * 2, x], 1)),
    "stack dim 2": (X4, CL, lambda L, x: L.stack([x, x * 2], 2)),
    "stack dim 3": (X4, CL, lambda L, x: L.stack([x, x * 2], 3)),
    "stack last dim": (X4, CL, lambda L, x: L.stack([x, x * 2], -1)),
    "stack of channels-last and contiguous": (X4, CL, lambda L, x: L.stack([x, x.contiguous()], 1)),
    "stack 3d dim 1": (X5, CL3, lambda L, x: L.stack([x, x * 2], 1)),
    "stack of 3-d channels-last slices": (X4, CL, lambda L, x: L.stack([x[0], x[1]], 0)),
    "cat dim 0": (X4, CL, lambda L, x: L.cat([x, x * 2], 0)),
    "vstack": (X4, CL, lambda L, x: L.vstack([x, x * 2])),
    "pad reflect": (X4, CL, lambda L, x: _F(L).pad(x, (1, 2, 2, 1), mode="reflect")),
    "pad replicate": (X4, CL, lambda L, x: _F(L).pad(x, (1, 2, 2, 1), mode="replicate")),
    "pad circular": (X4, CL, lambda L, x: _F(L).pad(x, (1, 2, 2, 1), mode="circular")),
    "pad reflect 3d": (X5, CL3, lambda L, x: _F(L).pad(x, (1, 1, 1, 0, 1, 1), mode="reflect")),
    "pad replicate 3d": (X5, CL3, lambda L, x: _F(L).pad(x, (1, 1, 1, 0, 1, 1), mode="replicate")),
    "pad circular 3d": (X5, CL3, lambda L, x: _F(L).pad(x, (1, 1, 1, 0, 1, 1), mode="circular")),
    "pixel_shuffle": (X4, CL, lambda L, x: _F(L).pixel_shuffle(x, 2)),
    "pixel_unshuffle": (X4, CL, lambda L, x: _F(L).pixel_unshuffle(x, 2)),
    "channel_shuffle": (X4, CL, lambda L, x: _F(L).channel_shuffle(x, 2)),
    "channel_shuffle 3d": (X5, CL3, lambda L, x: _F(L).channel_shuffle(x, 2)),
    "interpolate nearest-exact": (X4, CL, lambda L, x: _F(L).interpolate(x, size=(7, 3), mode="nearest-exact")),
    "interpolate bicubic": (X4, CL, lambda L, x: _F(L).interpolate(x, size=(7, 3), mode="bicubic")),
    "interpolate bilinear align_corners": (X4, CL, lambda L, x: _F(L).interpolate(
        x, size=(7, 3), mode="bilinear", align_corners=True)),
    "interpolate bilinear": (X4, CL, lambda L, x: _F(L).interpolate(x, scale_factor=2, mode="bilinear")),
    "interpolate nearest": (X4, CL, lambda L, x: _F(L).interpolate(x, size=(7, 3))),
    "interpolate trilinear": (X5, CL3, lambda L, x: _F(L).interpolate(x, size=(3, 5, 2), mode="trilinear")),
    "interpolate linear of 3-d": (X4[0], "contiguous_format", lambda L, x: _F(L).interpolate(
        x.transpose(1, 2), size=5, mode="linear")),
    "interpolate bilinear antialias": (X4, CL, lambda L, x: _F(L).interpolate(
        x, size=(3, 5), mode="bilinear", antialias=True)),
    "interpolate bicubic antialias": (X4, CL, lambda L, x: _F(L).interpolate(
        x, size=(3, 5), mode="bicubic", antialias=True)),
    "interpolate nearest 3d": (X5, CL3, lambda L, x: _F(L).interpolate(x, scale_factor=2)),
    "interpolate nearest-exact 3d": (X5, CL3, lambda L, x: _F(L).interpolate(x, size=(3, 5, 2), mode="nearest-exact")),
    "interpolate area 3d": (X5, CL3, lambda L, x: _F(L).interpolate(x, size=(1, 2, 3), mode="area")),
    "adaptive_max_pool2d indices": (X4, CL, lambda L, x: _F(L).adaptive_max_pool2d(x, (2, 3), return_indices=True)),
    "adaptive_max_pool3d": (X5, CL3, lambda L, x: _F(L).adaptive_max_pool3d(x, (1, 2, 2))),
    "max_unpool2d": (X4, CL, lambda L, x: _F(L).max_unpool2d(*_F(L).max_pool2d(x, 2, return_indices=True), 2)),
    "max_unpool3d": (X5, CL3, lambda L, x: _F(L).max_unpool3d(*_F(L).max_pool3d(x, 2, return_indices=True), 2)),
    "dropout2d eval": (X4, CL, lambda L, x: _F(L).dropout2d(x, 0.5, training=False)),
    "dropout2d p=0": (X4, CL, lambda L, x: _F(L).dropout2d(x, 0.0, training=True)),
    "dropout3d p=0": (X5, CL3, lambda L, x: _F(L).dropout3d(x, 0.0, training=True)),
    "instance_norm": (X4, CL, lambda L, x: _F(L).instance_norm(x)),
    "instance_norm 3d": (X5, CL3, lambda L, x: _F(L).instance_norm(x)),
    "unfold": (X4, CL, lambda L, x: _F(L).unfold(x, 2, stride=2)),
    "flip": (X4, CL, lambda L, x: x.flip(2)),
    "flip 3d": (X5, CL3, lambda L, x: x.flip(1, 4)),
    "roll": (X4, CL, lambda L, x: x.roll(1, 2)),
    "roll two dims": (X4, CL, lambda L, x: x.roll((1, -2), (3, 1))),
    "roll by its size": (X4, CL, lambda L, x: x.roll(6, 2)),
    "roll flattened": (X4, CL, lambda L, x: x.roll(3)),
    "roll 3d": (X5, CL3, lambda L, x: x.roll(1, 1)),
}
ACTIVATIONS = {
    "relu": lambda L, x: L.relu(x),
    "elu": lambda L, x: _F(L).elu(x),
    "gelu": lambda L, x: _F(L).gelu(x),
    "silu": lambda L, x: _F(L).silu(x),
    "hardswish": lambda L, x: _F(L).hardswish(x),
    "hardsigmoid": lambda L, x: _F(L).hardsigmoid(x),
    "relu6": lambda L, x: _F(L).relu6(x),
    "leaky_relu": lambda L, x: _F(L).leaky_relu(x, 0.1),
    "hardtanh": lambda L, x: _F(L).hardtanh(x),
    "prelu": lambda L, x: _F(L).prelu(x, L.full((4,), 0.2, dtype=x.dtype)),
    "threshold": lambda L, x: _F(L).threshold(x, 0.1, 2.0),
    "softplus": lambda L, x: _F(L).softplus(x),
    "mish": lambda L, x: _F(L).mish(x),
    "sigmoid": lambda L, x: L.sigmoid(x),
    "tanh": lambda L, x: L.tanh(x),
    "add": lambda L, x: x + _channel_vector(L, x, x.ndim),
    "mul": lambda L, x: x * _channel_vector(L, x, x.ndim),
    "div": lambda L, x: x / _channel_vector(L, x, x.ndim),
    "maximum": lambda L, x: L.maximum(x, x.detach() * 0.5),
    "pow": lambda L, x: (x.abs() + 1) ** _channel_vector(L, x, x.ndim),
    "atan2": lambda L, x: L.atan2(x, _channel_vector(L, x, x.ndim)),
    "rrelu eval": lambda L, x: _F(L).rrelu(x),
}
for _name, _fn in ACTIVATIONS.items():
    OPS[_name] = (X4, CL, _fn)
    OPS[_name + " 3d"] = (X5, CL3, _fn)
# torch's float64 hardsigmoid backward multiplies by 1/6 rounded to float32 (relative 3e-8 off jitorch's)
GRADIENT_RTOL = {("hardsigmoid", "float64"): 1e-7, ("hardsigmoid 3d", "float64"): 1e-7}



def _t(L, a, dtype):
    return L.tensor(a, dtype=getattr(L, dtype))


def _input(L, name, dtype):
    data, fmt, _ = OPS[name]
    return _t(L, data, dtype).contiguous(memory_format=getattr(L, fmt)).requires_grad_()


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _all(out):
    return list(out) if isinstance(out, tuple) else [out]


def _upstream(L, y, laid_out):
    g = L.tensor(np.linspace(-1, 1, y.numel()).reshape(tuple(y.shape)), dtype=y.dtype)
    return L.empty_like(y).copy_(g) if laid_out else g


def _close(t, j, dtype, rtol=None):
    assert j.stride() == t.stride(), (j.stride(), t.stride())
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=rtol or tol, atol=tol)


def _run(L, name, dtype, laid_out):
    x = _input(L, name, dtype)
    out = OPS[name][2](L, x)
    y = _first(out)
    return _all(out), L.autograd.grad(y, x, _upstream(L, y, laid_out))[0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(OPS))
def test_channels_last_input_gives_torchs_results_and_input_gradient_for_a_contiguous_gradient(name, dtype):
    (t_out, t_grad), (j_out, j_grad) = (_run(L, name, dtype, False) for L in (torch, jitorch))
    for t, j in zip(t_out, j_out):
        _close(t, j, dtype)
    _close(t_grad, j_grad, dtype, GRADIENT_RTOL.get((name, dtype)))


@pytest.mark.parametrize("name", list(OPS))
def test_channels_last_input_gives_torchs_input_gradient_for_a_gradient_laid_out_as_the_result(name):
    # (float64 alone: the layouts are the dtype's in both libraries, and its values are the stricter test)
    (_, t_grad), (_, j_grad) = (_run(L, name, "float64", True) for L in (torch, jitorch))
    _close(t_grad, j_grad, "float64", GRADIENT_RTOL.get((name, "float64")))


@pytest.mark.parametrize("name", [n for n in OPS if n.removesuffix(" 3d") not in ACTIVATIONS or n in ACTIVATIONS])
def test_channels_last_ops_compile_to_eagers_values_and_strides_forward_and_backward(name):
    fn = OPS[name][2]

    def step(x, g):
        out = fn(jitorch, x)
        return (*_all(out), jitorch.autograd.grad(_first(out), x, g)[0])

    x = _input(jitorch, name, "float32")
    g = _upstream(jitorch, _first(fn(jitorch, x)), False)
    eager, compiled = step(x, g), jitorch.compile(step)(x, g)
    for e, c in zip(eager, compiled):
        assert c.stride() == e.stride()
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=1e-5, atol=1e-6)


GRADCHECKED = ["stack dim 1", "pad reflect", "pad replicate 3d", "pixel_shuffle", "channel_shuffle 3d",
               "interpolate bilinear antialias", "adaptive_max_pool3d", "max_unpool2d", "instance_norm", "roll",
               "leaky_relu", "hardtanh 3d"]


@pytest.mark.parametrize("name", GRADCHECKED)
def test_gradients_of_channels_last_input_pass_gradcheck(name):
    data, fmt, fn = OPS[name]
    x = _t(jitorch, data[:1, :, :4, :4] if data.ndim == 4 else data[:1, :, :, :4, :2], "float64")
    x = x.contiguous(memory_format=getattr(jitorch, fmt)).requires_grad_()
    assert gradcheck(lambda a: _first(fn(jitorch, a)), (x,))


def test_pixel_shuffles_of_channels_last_3d_input_raise_torchs_error():
    for L in (torch, jitorch):
        x = L.zeros(1, 2, 4, 4, 4).contiguous(memory_format=L.channels_last_3d)
        for op in (_F(L).pixel_shuffle, _F(L).pixel_unshuffle):
            with pytest.raises(RuntimeError, match="^Unsupported memory format. Supports only ChannelsLast, "
                                                   "Contiguous$"):
                op(x, 2)


KERNEL_ORDER_SHAPES = [(2, 3, 4, 5), (2, 3, 1, 5), (1, 3, 1, 4, 3), (2, 1, 2, 1, 3)]


def _in(L, a, fmt):
    formats = {"c": L.contiguous_format, "cl": L.channels_last if a.ndim == 4 else L.channels_last_3d}
    return L.tensor(a).contiguous(memory_format=formats[fmt])


@pytest.mark.parametrize("shape", KERNEL_ORDER_SHAPES)
@pytest.mark.parametrize("name", ["elu", "hardtanh", "relu6", "hardsigmoid", "softplus", "leaky_relu", "selu", "celu",
                                  "relu", "gelu", "silu", "mish", "hardswish", "threshold", "prelu"])
def test_channels_last_activation_input_gradient_takes_torchs_kernel_layout_under_a_contiguous_gradient(name, shape):
    # elu, hardtanh, relu6, hardsigmoid, softplus, selu and celu gave the input's layout where torch's kernels
    # order (grad_output, input), leaky_relu the gradient's where torch's orders (input, grad_output); gelu,
    # silu, hardswish and prelu where size-1 dims leave TensorIterator's order to the operands' order
    fns = {"selu": lambda L, x: _F(L).selu(x), "celu": lambda L, x: _F(L).celu(x, 0.5),
           "prelu": lambda L, x: _F(L).prelu(x, L.full((x.shape[1],), 0.2, dtype=x.dtype))}
    fn = fns.get(name) or ACTIVATIONS[name]
    rs = np.random.RandomState(1)
    a, g = rs.randn(*shape), rs.randn(*shape)
    grads = [L.autograd.grad(fn(L, x), x, _in(L, g, "c"))[0] for L in (torch, jitorch)
             for x in [_in(L, a, "cl").requires_grad_()]]
    assert grads[1].stride() == grads[0].stride()
    np.testing.assert_allclose(grads[1].numpy(), grads[0].numpy(), rtol=1e-7, atol=1e-12)


def test_in_place_activations_and_double_backward_keep_working_with_the_kernel_layout():
    x = jitorch.randn(2, 3, 4, 5).contiguous(memory_format=jitorch.channels_last).requires_grad_()
    y = _F(jitorch).elu(x)
    g, = jitorch.autograd.grad(y, x, jitorch.ones(2, 3, 4, 5), create_graph=True)
    assert g.stride() == (60, 20, 5, 1) and g.requires_grad
    gg, = jitorch.autograd.grad(g.sum(), x)
    t = torch.tensor(x.detach().numpy()).requires_grad_()
    tg, = torch.autograd.grad(torch.nn.functional.elu(t), t, torch.ones(2, 3, 4, 5), create_graph=True)
    np.testing.assert_allclose(gg.numpy(), torch.autograd.grad(tg.sum(), t)[0].numpy(), rtol=1e-5, atol=1e-7)
    z = x * 1
    assert _F(jitorch).leaky_relu_(z, 0.1) is z


def test_rrelu_of_channels_last_input_is_contiguous_as_torchs_in_training_too():
    # jitorch's kept the input's layout: torch's rrelu_with_noise writes into a new contiguous tensor
    for L in (torch, jitorch):
        x = _t(L, X4, "float32").contiguous(memory_format=L.channels_last)
        for y in (_F(L).rrelu(x), _F(L).rrelu(x, training=True), L.nn.RReLU()(x)):
            assert y.stride() == (192, 48, 8, 1)
        y = x.clone()
        assert _F(L).rrelu_(y, training=True) is y and y.stride() == x.stride()
