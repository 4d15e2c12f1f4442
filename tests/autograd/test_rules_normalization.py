"""layer_norm's derivative rule: on plain CPU arrays (no recording backward, hook or autocast) it runs the rule's
ops' NumPy kernels itself, with the bits of the rule run as ops; a recording backward still differentiates."""

import contextlib

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.support import general_path


def _grads(general, x, w, b, g, shape):
    """The input, weight and bias gradients of layer_norm (as bytes; None where there is no such argument)."""
    with (general_path() if general else contextlib.nullcontext()):
        leaves = [None if a is None else jt.from_numpy(a.copy()).requires_grad_() for a in (x, w, b)]
        y = jt.nn.functional.layer_norm(leaves[0], shape, leaves[1], leaves[2], 1e-5)
        assert y.grad_fn.name() == "LayerNormBackward0"
        y.backward(jt.from_numpy(g))
    return [None if t is None else t.grad.numpy().tobytes() for t in leaves]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs, shape", [((4, 6, 32), (32,)), ((3, 4, 5), (4, 5)), ((9,), (9,))])
@pytest.mark.parametrize("affine", ["both", "none", "weight"])
def test_layer_norm_backward_on_arrays_gives_the_ops_bits(dtype, xs, shape, affine):
    rng = np.random.default_rng(len(xs))
    x = (rng.standard_normal(xs) * 3).astype(dtype)
    w = rng.standard_normal(shape).astype(dtype) if affine != "none" else None
    b = rng.standard_normal(shape).astype(dtype) if affine == "both" else None
    g = rng.standard_normal(xs).astype(dtype)
    assert _grads(False, x, w, b, g, shape) == _grads(True, x, w, b, g, shape)


def test_layer_norm_double_backward_and_a_strided_gradient_take_the_ops():
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    xj, wj = (jt.from_numpy(t.detach().numpy().copy()).requires_grad_() for t in (x, w))
    gt = torch.randn(8, 3, dtype=torch.float64).t()  # (a transposed gradient: the rule's ops serve it)
    outs = []
    for lib, xx, ww, gg in ((torch, x, w, gt), (jt, xj, wj, jt.from_numpy(gt.numpy().T.copy()).t())):
        y = lib.nn.functional.layer_norm(xx, (8,), ww)
        (dx,) = lib.autograd.grad(y, xx, gg, create_graph=True)
        (ddw,) = lib.autograd.grad((dx * dx).sum(), ww)
        outs.append((dx.detach().numpy(), ddw.numpy()))
    for got, want in zip(outs[1], outs[0]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
