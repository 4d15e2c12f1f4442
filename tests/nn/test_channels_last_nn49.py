"""Session 49: convolution, normalisation, pooling, interpolation and padding of channels-last input against torch:
results' and input gradients' values and strides, gradcheck on channels-last input, ``Module.to(memory_format=)``,
and a channels-last network compiled against eager (values, strides, parameter gradients)."""

import numpy as np
import pytest
import torch

import jitorch
from jitorch.autograd import gradcheck

RS = np.random.RandomState(49)
X4 = RS.randn(2, 3, 6, 7)
X5 = RS.randn(2, 3, 4, 5, 6)
W4 = RS.randn(4, 3, 3, 3)
W5 = RS.randn(2, 3, 1, 2, 2)


def _t(L, a, dtype):
    return L.tensor(a, dtype=getattr(L, dtype))


# name -> (input array, input format, fn(L, x, dtype)); the formats are names of both libraries' attributes
OPS = {
    "conv2d": (X4, "channels_last", lambda L, x, d: L.nn.functional.conv2d(x, _t(L, W4, d), padding=1)),
    "conv2d stride bias": (X4, "channels_last", lambda L, x, d: L.nn.functional.conv2d(
        x, _t(L, W4, d), _t(L, W4[:, 0, 0, 0], d), stride=2)),
    "conv2d channels-last weight": (X4, "contiguous_format", lambda L, x, d: L.nn.functional.conv2d(
        x, _t(L, W4, d).contiguous(memory_format=L.channels_last))),
    "conv2d groups": (X4, "channels_last", lambda L, x, d: L.nn.functional.conv2d(
        x, _t(L, W4[:3, :1], d), groups=3)),
    "conv_transpose2d": (X4, "channels_last", lambda L, x, d: L.nn.functional.conv_transpose2d(
        x, _t(L, W4.transpose(1, 0, 2, 3).copy(), d))),
    "conv3d": (X5, "channels_last_3d", lambda L, x, d: L.nn.functional.conv3d(x, _t(L, W5, d))),
    "batch_norm train": (X4, "channels_last", lambda L, x, d: L.nn.functional.batch_norm(
        x, None, None, _t(L, W4[0, :, 0, 0], d), None, training=True)),
    "batch_norm eval": (X4, "channels_last", lambda L, x, d: L.nn.functional.batch_norm(
        x, _t(L, W4[1, :, 0, 0], d), _t(L, np.abs(W4[2, :, 0, 0]), d), training=False)),
    "batch_norm 3d": (X5, "channels_last_3d", lambda L, x, d: L.nn.functional.batch_norm(x, None, None, training=True)),
    "group_norm": (X4, "channels_last", lambda L, x, d: L.nn.functional.group_norm(x, 3)),
    "max_pool2d": (X4, "channels_last", lambda L, x, d: L.nn.functional.max_pool2d(x, 2)),
    "max_pool2d padded ceil": (X4, "channels_last", lambda L, x, d: L.nn.functional.max_pool2d(
        x, 3, stride=2, padding=1, ceil_mode=True)),
    "max_pool2d indices": (X4, "channels_last", lambda L, x, d: L.nn.functional.max_pool2d(
        x, 2, return_indices=True)),
    "max_pool3d": (X5, "channels_last_3d", lambda L, x, d: L.nn.functional.max_pool3d(x, 2)),
    "avg_pool2d": (X4, "channels_last", lambda L, x, d: L.nn.functional.avg_pool2d(x, 2, padding=1)),
    "avg_pool3d": (X5, "channels_last_3d", lambda L, x, d: L.nn.functional.avg_pool3d(x, 2)),
    "adaptive_avg_pool2d": (X4, "channels_last", lambda L, x, d: L.nn.functional.adaptive_avg_pool2d(x, (2, 3))),
    "adaptive_avg_pool2d 1": (X4, "channels_last", lambda L, x, d: L.nn.functional.adaptive_avg_pool2d(x, 1)),
    "adaptive_avg_pool3d 1": (X5, "channels_last_3d", lambda L, x, d: L.nn.functional.adaptive_avg_pool3d(x, 1)),
    "adaptive_avg_pool3d": (X5, "channels_last_3d", lambda L, x, d: L.nn.functional.adaptive_avg_pool3d(x, 2)),
    "adaptive_max_pool2d": (X4, "channels_last", lambda L, x, d: L.nn.functional.adaptive_max_pool2d(x, (2, 3))),
    "interpolate nearest": (X4, "channels_last", lambda L, x, d: L.nn.functional.interpolate(x, scale_factor=2)),
    "interpolate bilinear": (X4, "channels_last", lambda L, x, d: L.nn.functional.interpolate(
        x, size=(5, 9), mode="bilinear")),
    "interpolate area": (X4, "channels_last", lambda L, x, d: L.nn.functional.interpolate(
        x, size=(3, 4), mode="area")),
    "interpolate trilinear": (X5, "channels_last_3d", lambda L, x, d: L.nn.functional.interpolate(
        x, scale_factor=2, mode="trilinear")),
    "pad": (X4, "channels_last", lambda L, x, d: L.nn.functional.pad(x, (1, 2, 0, 1), value=0.5)),
    "relu": (X4, "channels_last", lambda L, x, d: L.relu(x)),
}


def _input(L, name, dtype, requires_grad=False):
    data, fmt, _ = OPS[name]
    x = _t(L, data, dtype).contiguous(memory_format=getattr(L, fmt))
    return x.requires_grad_(requires_grad)


def _results(out):
    return list(out) if isinstance(out, tuple) else [out]


def _close(t, j, dtype):
    assert j.stride() == t.stride(), (j.stride(), t.stride())
    rtol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(OPS))
def test_channels_last_input_gives_torchs_result_and_input_gradient_layout(name, dtype):
    fn = OPS[name][2]
    outs = {}
    for L in (torch, jitorch):
        x = _input(L, name, dtype, requires_grad=True)
        results = _results(fn(L, x, dtype))
        y = results[0]
        # a contiguous upstream gradient: torch's kernels still give the input's gradient in their format
        g = L.tensor(np.linspace(-1, 1, y.numel()).reshape(tuple(y.shape)), dtype=y.dtype)
        outs[L] = results, L.autograd.grad(y, x, g)[0]
    (t_results, t_grad), (j_results, j_grad) = outs[torch], outs[jitorch]
    for t, j in zip(t_results, j_results):
        _close(t, j, dtype)
    _close(t_grad, j_grad, dtype)


GRADCHECKED = ["conv2d", "conv2d channels-last weight", "conv_transpose2d", "batch_norm train", "max_pool2d",
               "avg_pool2d", "adaptive_avg_pool2d", "adaptive_avg_pool2d 1", "interpolate bilinear", "pad"]


@pytest.mark.parametrize("name", GRADCHECKED)
def test_gradients_of_channels_last_input_pass_gradcheck(name):
    data, fmt, fn = OPS[name]
    x = _input(jitorch, name, "float64", requires_grad=True)
    assert gradcheck(lambda a: _results(fn(jitorch, a, "float64"))[0], (x,))


def test_module_to_channels_last_lays_out_4d_parameters_as_torch():
    for L in (torch, jitorch):
        net = L.nn.Sequential(L.nn.Conv2d(3, 4, 3), L.nn.BatchNorm2d(4), L.nn.Flatten(), L.nn.Linear(4, 2))
        weight = net[0].weight
        assert net.to(memory_format=L.channels_last) is net
        assert net[0].weight is weight and net[0].weight.is_leaf  # (the Parameter kept, its data laid out)
        assert [p.stride() for p in net.parameters()] == [(27, 1, 9, 3), (1,), (1,), (1,), (4, 1), (1,)]
        assert [b.stride() for b in net.buffers()] == [(1,), (1,), ()]
        net.to(L.float64, memory_format=L.channels_last)
        assert net[0].weight.dtype == L.float64 and net[0].weight.stride() == (27, 1, 9, 3)
        conv3d = L.nn.Conv3d(3, 2, 2).to(memory_format=L.channels_last_3d)
        assert conv3d.weight.stride() == (24, 1, 12, 6, 3)
        with pytest.raises(RuntimeError, match="^required rank 4 tensor to use channels_last format$"):
            L.nn.Conv3d(3, 2, 2).to(memory_format=L.channels_last)
        with pytest.raises(TypeError, match="to\\(\\) received an invalid combination of arguments - got "
                                            "\\(memory_format=int, \\)"):
            net.to(memory_format=1)


class _Net(jitorch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = jitorch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = jitorch.nn.BatchNorm2d(8)
        self.head = jitorch.nn.Linear(8, 5)

    def forward(self, x):
        y = jitorch.relu(self.bn(self.conv(x)))
        pooled = jitorch.nn.functional.max_pool2d(y, 2)
        features = jitorch.nn.functional.adaptive_avg_pool2d(pooled, 1).flatten(1)
        return self.head(features), y, pooled


def test_a_channels_last_network_compiles_to_eagers_values_strides_and_gradients():
    jitorch.manual_seed(0)
    eager = _Net().to(memory_format=jitorch.channels_last)
    compiled_net = _Net().to(memory_format=jitorch.channels_last)
    compiled_net.load_state_dict(eager.state_dict())
    step = jitorch.compile(lambda net, x: net(x))
    x = jitorch.tensor(X4, dtype=jitorch.float32).contiguous(memory_format=jitorch.channels_last)
    outs_e, outs_c = eager(x), step(compiled_net, x)
    for e, c in zip(outs_e, outs_c):
        assert c.stride() == e.stride()
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert outs_e[1].is_contiguous(memory_format=jitorch.channels_last)
    assert outs_e[2].is_contiguous(memory_format=jitorch.channels_last)
    outs_e[0].square().sum().backward()
    outs_c[0].square().sum().backward()
    for (name, pe), pc in zip(eager.named_parameters(), compiled_net.parameters()):
        assert pc.grad.stride() == pe.grad.stride() == pe.stride(), name
        np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert eager.conv.weight.grad.is_contiguous(memory_format=jitorch.channels_last)


@pytest.mark.parametrize("name", ["conv2d", "batch_norm eval", "max_pool2d indices", "adaptive_avg_pool2d",
                                  "adaptive_avg_pool2d 1", "interpolate nearest", "pad", "conv3d"])
def test_channels_last_layers_compile_to_eagers_strides(name):
    fn = OPS[name][2]
    x = _input(jitorch, name, "float32")
    eager = _results(fn(jitorch, x, "float32"))
    compiled = _results(jitorch.compile(lambda a: fn(jitorch, a, "float32"))(x))
    for e, c in zip(eager, compiled):
        assert c.stride() == e.stride()
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
