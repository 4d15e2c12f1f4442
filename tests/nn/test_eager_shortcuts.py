"""nn.functional's eager shortcuts where no history is recorded (no grad mode, or tensors that do not require
grad): ``F.embedding`` as one gather and ``F.gelu`` as the composition's kernels, torch's values and errors;
in grad mode ``F.gelu`` as one node whose backward gives the composition's bits."""

import contextlib

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.nn import functional as F
from jitorch.ops import registry
from tests.support import general_path


@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_rows_match_torch(index_dtype, padding_idx):
    w = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    i = np.array([[1, 2, 9], [0, 0, 3]], index_dtype)
    got = F.embedding(jt.from_numpy(i), jt.from_numpy(w), padding_idx)
    want = torch.nn.functional.embedding(torch.from_numpy(i), torch.from_numpy(w), padding_idx)
    assert got.tolist() == want.tolist() and got.stride() == want.stride() and got.grad_fn is None
    assert got.data_ptr() != jt.from_numpy(w).data_ptr()


def test_under_no_grad_a_parameter_gives_no_history_and_in_grad_mode_its_node():
    layer = jt.nn.Embedding(5, 3)
    with jt.no_grad():
        assert layer(jt.tensor([1, 4])).grad_fn is None
    out = layer(jt.tensor([1, 4]))
    out.sum().backward()
    assert out.grad_fn is not None and layer.weight.grad[1].tolist() == [1.0] * 3


@pytest.mark.parametrize("index", [[5], [-1]])
def test_an_index_out_of_range_raises_torchs_index_error(index):
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(jt.tensor(index), jt.ones(5, 3))


class _PassingHook:
    """A dispatch hook that takes no call: while it is installed, nn.functional composes its ops."""
    passes_on = True

    def call(self, op, args, out):
        return NotImplemented


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_gives_the_compositions_bits_and_torchs_values(dtype):
    a = (np.random.default_rng(0).standard_normal((3, 50)) * 4).astype(dtype)
    a[0, :3] = [np.inf, -np.inf, np.nan]
    fast = F.gelu(jt.from_numpy(a))
    registry.DISPATCH_HOOKS.append(_PassingHook())
    try:
        composed = F.gelu(jt.from_numpy(a))
    finally:
        registry.DISPATCH_HOOKS.pop()
    assert np.array_equal(fast.numpy(), composed.numpy(), equal_nan=True) and fast.is_contiguous()
    # (torch's vectorised float32 gelu gives NaN at +inf, where the composition gives inf)
    np.testing.assert_allclose(fast.numpy()[:, 3:], torch.nn.functional.gelu(torch.from_numpy(a[:, 3:])).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_gelu_keeps_a_transposed_layout_and_records_history_in_grad_mode():
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    assert F.gelu(jt.from_numpy(a).t()).stride() == torch.nn.functional.gelu(torch.from_numpy(a).t()).stride()
    assert F.gelu(jt.from_numpy(a).requires_grad_()).grad_fn is not None


def _gelu_grads(a, g, general, create_graph=False):
    """(output, input gradient, and with ``create_graph`` the gradient of ``sum(grad * g)``) of exact GELU."""
    with (general_path() if general else contextlib.nullcontext()):
        x = jt.from_numpy(a.copy()).requires_grad_()
        y = F.gelu(x)
        (grad,) = jt.autograd.grad(y, x, jt.from_numpy(g), create_graph=create_graph)
        second = jt.autograd.grad((grad * jt.from_numpy(g)).sum(), x)[0] if create_graph else None
    return y, grad, second


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 47, 200])
def test_gelu_in_grad_mode_gives_the_compositions_bits_forward_and_backward(monkeypatch, dtype, n):
    monkeypatch.setattr(F, "_GELU_CHUNK", 48)  # chunk ends inside the tensor
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((n, 3)) * 4).astype(dtype)
    a.flat[:4] = [np.inf, -np.inf, np.nan, -0.0][:a.size]
    g = rng.standard_normal(a.shape).astype(dtype)
    y, grad, _ = _gelu_grads(a, g, general=False)
    assert y.grad_fn.name() == "_GeluBackward"
    assert y.grad_fn.next_functions[0][0].name() == "torch::autograd::AccumulateGrad"
    y0, grad0, _ = _gelu_grads(a, g, general=True)
    assert y0.grad_fn.name() == "MulBackward0"  # (the composition's five nodes)
    for got, want in ((y, y0), (grad, grad0)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.detach().numpy().view(np.uint8), want.detach().numpy().view(np.uint8))
    t = torch.from_numpy(a[1:]).requires_grad_()
    torch.autograd.backward(torch.nn.functional.gelu(t), torch.from_numpy(g[1:]))
    np.testing.assert_allclose(grad.numpy()[1:], t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gelu_double_backward_gives_the_compositions_bits():
    rng = np.random.default_rng(5)
    a, g = rng.standard_normal((4, 7)) * 3, rng.standard_normal((4, 7))
    _, grad, second = _gelu_grads(a, g, general=False, create_graph=True)
    _, grad0, second0 = _gelu_grads(a, g, general=True, create_graph=True)
    assert grad.grad_fn is not None
    assert grad.detach().numpy().tobytes() == grad0.detach().numpy().tobytes()
    assert second.numpy().tobytes() == second0.numpy().tobytes()


def test_gelu_of_an_input_written_in_place_since_fails_its_backward_as_torchs():
    for lib in (jt, torch):
        x = lib.ones(5, requires_grad=True) * 2
        y = lib.nn.functional.gelu(x)
        x.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_gelu_backward_under_a_profiler_runs_as_unprofiled_with_the_same_bits():
    """The backward node of a GELU made unprofiled, run under a profiler: its own computation, as unprofiled (it ran
    the composition's rules as ops; `tests/profiler/test_gelu47.py`: those rounded the kernel's gradient otherwise)."""
    a = np.linspace(-5, 5, 64, dtype=np.float32)
    x = jt.from_numpy(a).requires_grad_()
    y = F.gelu(x)
    y.sum().backward()
    plain = x.grad
    x.grad = None
    y = F.gelu(x)
    with jt.profiler.profile() as prof:
        y.sum().backward()
    assert not any(e.key == "aten::_normal_cdf" for e in prof.key_averages())
    assert any(e.kind == "backward" and "Gelu" in e.name for e in prof.events())
    assert x.grad.numpy().tobytes() == plain.numpy().tobytes()


def _pool_grads(a, g, general, create_graph=False, **kw):
    """(values, input gradient) of ``max_pool2d(a, **kw)`` for the values' gradient ``g``, by the shortcut or
    (``general``) the composition; with ``create_graph`` the gradient records its history."""
    with (general_path() if general else contextlib.nullcontext()):
        x = jt.from_numpy(a.copy()).requires_grad_()
        y = F.max_pool2d(x, **kw)
        gt = jt.from_numpy(g).requires_grad_(create_graph)
        (grad,) = jt.autograd.grad(y, x, gt, create_graph=create_graph)
    return y, grad, gt


def _pool_input(shape, dtype, seed):
    """Values with ties (-0.0 against 0.0, repeated maxima), NaNs and infinities among random ones."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 3, shape).astype(dtype) * rng.choice([1.0, -1.0], shape).astype(dtype)
    flat = a.reshape(-1)
    flat[rng.integers(0, flat.size, 6)] = np.nan
    flat[rng.integers(0, flat.size, 3)] = np.inf
    flat[rng.integers(0, flat.size, 3)] = -np.inf
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, kw", [((2, 3, 8, 8), {"kernel_size": 2}), ((3, 7, 8), {"kernel_size": 3}),
                                       ((2, 2, 9, 10), {"kernel_size": (2, 3), "stride": (2, 3)}),
                                       ((1, 2, 4, 6), {"kernel_size": 2, "ceil_mode": True})])
def test_max_pool2d_tiling_shortcut_gives_the_compositions_bits(dtype, shape, kw):
    a = _pool_input(shape, dtype, sum(shape))
    y_out = F.max_pool2d(jt.from_numpy(a), **kw)  # (no grad: values alone)
    with general_path():
        y0_out = F.max_pool2d(jt.from_numpy(a), **kw)
    g = np.random.default_rng(1).standard_normal(tuple(y_out.shape)).astype(dtype)
    g.reshape(-1)[:3] = [-0.0, np.nan, np.inf][:g.size]
    y, grad, _ = _pool_grads(a, g, general=False, **kw)
    y0, grad0, _ = _pool_grads(a, g, general=True, **kw)
    assert y.grad_fn.name() == "_MaxPoolBackward" and y0.grad_fn.name() == "MaxBackward0"
    for got, want in ((y_out, y0_out), (y, y0), (grad, grad0)):
        assert got.shape == want.shape and got.dtype == want.dtype and got.is_contiguous()
        assert got.detach().numpy().tobytes() == want.detach().numpy().tobytes()
    t = torch.from_numpy(np.nan_to_num(a)).requires_grad_()
    want = torch.nn.functional.max_pool2d(t, **kw)
    np.testing.assert_array_equal(F.max_pool2d(jt.from_numpy(np.nan_to_num(a)), **kw).numpy(), want.detach().numpy())


def test_max_pool2d_double_backward_and_profiled_backward_give_the_compositions_bits():
    a = _pool_input((2, 2, 6, 6), "float32", 3)
    g = np.random.default_rng(2).standard_normal((2, 2, 3, 3)).astype(np.float32)
    _, grad, gt = _pool_grads(a, g, general=False, create_graph=True, kernel_size=2)
    _, grad0, gt0 = _pool_grads(a, g, general=True, create_graph=True, kernel_size=2)
    assert grad.grad_fn is not None and grad.detach().numpy().tobytes() == grad0.detach().numpy().tobytes()
    w = np.arange(a.size, dtype=np.float32).reshape(a.shape)
    (second,) = jt.autograd.grad((grad * jt.from_numpy(w)).sum(), gt)
    (second0,) = jt.autograd.grad((grad0 * jt.from_numpy(w)).sum(), gt0)
    assert second.numpy().tobytes() == second0.numpy().tobytes()
    x = jt.from_numpy(a.copy()).requires_grad_()
    y = F.max_pool2d(x, 2)
    with jt.profiler.profile() as prof:
        y.backward(jt.from_numpy(g))
    # (profiled, the node computes as unprofiled: its span, no ops of the composition's)
    assert not any(e.key == "aten::max" for e in prof.key_averages())
    assert any(e.kind == "backward" and "_MaxPoolBackward" in e.name for e in prof.events())
    assert x.grad.numpy().tobytes() == grad0.detach().numpy().tobytes()


@pytest.mark.parametrize("pool, shape, k", [(F.max_pool1d, (2, 3, 9), 3), (F.max_pool3d, (1, 2, 4, 6, 5), 2)])
def test_max_pool1d_and_3d_tiling_shortcut_gives_the_compositions_bits(pool, shape, k):
    a = _pool_input(shape, "float32", 7)
    outs = []
    for general in (False, True):
        with (general_path() if general else contextlib.nullcontext()):
            x = jt.from_numpy(a.copy()).requires_grad_()
            y = pool(x, k)
            g = jt.from_numpy(np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(np.float32))
            outs.append((y.detach().numpy().tobytes(), jt.autograd.grad(y, x, g)[0].numpy().tobytes(), y.grad_fn.name()))
    assert outs[0][:2] == outs[1][:2] and outs[0][2] == "_MaxPoolBackward" and outs[1][2] == "MaxBackward0"
