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
    assert y.grad_fn.name() == "_GeluBackward" and y.grad_fn.next_functions[0][0].name() == "AccumulateGrad"
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


def test_gelu_backward_under_a_profiler_runs_as_ops_with_the_same_bits():
    a = np.linspace(-5, 5, 64, dtype=np.float32)
    x = jt.from_numpy(a).requires_grad_()
    y = F.gelu(x)
    y.sum().backward()
    plain = x.grad
    x.grad = None
    y = F.gelu(x)
    with jt.profiler.profile() as prof:
        y.sum().backward()
    assert any(e.key == "aten::erf" for e in prof.key_averages())
    assert x.grad.numpy().tobytes() == plain.numpy().tobytes()
