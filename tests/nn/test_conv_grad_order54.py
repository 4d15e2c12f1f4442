"""A convolution of few filters over many windows computes its weight gradient as ``windows @ grad.T`` (the faster
orientation under OpenBLAS: `nn.functional._weight_gradient_swapped`): its values and gradients against torch's, on
odd sizes, strides, dilation, 1-d, 3-d and channels-last input, which product ran, and the rule's limits."""

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.ops import linalg
from jitorch.runtime import blas_library

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _openblas(monkeypatch):
    """The rule was measured on OpenBLAS and holds where it runs the products (on an Intel CPU with MKL the plain
    product runs): these tests check it there."""
    monkeypatch.setattr(blas_library, "chosen", lambda: blas_library.OPENBLAS)

# (conv, input shape, weight shape, stride, padding, dilation): each has at most 128 filters and 2048 or more
# windows (batch included), and no generated kernel takes its products (`linalg.skinny_shape`)
CASES = {
    "odd sizes": ("conv2d", (2, 32, 33, 35), (16, 32, 3, 3), 1, 1, 1),
    "stride and dilation": ("conv2d", (4, 16, 45, 47), (16, 16, 3, 3), 2, 2, 2),
    "1-d": ("conv1d", (8, 24, 301), (12, 24, 5), 1, 0, 1),
    "3-d": ("conv3d", (2, 8, 10, 10, 11), (16, 8, 3, 3, 3), 1, 1, 1),
}


def _products(monkeypatch, module, name):
    """The (first operand's shape, second's) of every product ``module.name`` makes from now on."""
    seen, real = [], getattr(module, name)

    def spy(a, b, *args, **kwargs):
        seen.append((tuple(a.shape[-2:]), tuple(b.shape[-2:])))
        return real(a, b, *args, **kwargs)
    monkeypatch.setattr(module, name, spy)
    return seen


def _inputs(xshape, wshape, seed=0):
    g = np.random.default_rng(seed)
    return (g.standard_normal(xshape).astype(np.float32), (g.standard_normal(wshape) * 0.1).astype(np.float32),
            g.standard_normal(wshape[0]).astype(np.float32))


def _torch_results(conv, x, w, b, stride, padding, dilation, gy=None, channels_last=False):
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    xin = tx.to(memory_format=torch.channels_last) if channels_last else tx
    y = getattr(torch.nn.functional, conv)(xin, tw, tb, stride=stride, padding=padding, dilation=dilation)
    gy = np.random.default_rng(1).standard_normal(tuple(y.shape)).astype(np.float32) if gy is None else gy
    y.backward(torch.tensor(gy))
    return gy, [y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]


def _windows(xshape, wshape, stride, padding, dilation):
    """(C * K, L * N): the rows and columns of the convolution's windows."""
    spatial = [(s + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for s, k in zip(xshape[2:], wshape[2:])]
    return int(np.prod(wshape[1:])), xshape[0] * int(np.prod(spatial))


@pytest.mark.parametrize("case", list(CASES))
def test_the_swapped_weight_gradient_equals_torchs(case, monkeypatch):
    conv, xshape, wshape, stride, padding, dilation = CASES[case]
    x, w, b = _inputs(xshape, wshape)
    gy, expected = _torch_results(conv, x, w, b, stride, padding, dilation)
    jx, jw, jb = (jt.tensor(a, requires_grad=True) for a in (x, w, b))
    rows, cols = _windows(xshape, wshape, stride, padding, dilation)
    assert F._weight_gradient_swapped(jw, 1, rows, cols)
    seen = _products(monkeypatch, linalg, "array_product")
    y = getattr(F, conv)(jx, jw, jb, stride=stride, padding=padding, dilation=dilation)
    y.backward(jt.tensor(gy))
    # the weight gradient's product: the windows (C*K, L*N) by the output's gradient transposed (L*N, O)
    assert ((rows, cols), (cols, wshape[0])) in seen
    assert ((wshape[0], cols), (cols, rows)) not in seen
    assert jw.grad.is_contiguous()
    for got, want in zip((y, jx.grad, jw.grad, jb.grad), expected):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=1e-4)


def test_channels_last_input_takes_it_with_torchs_layouts():
    conv, xshape, wshape, stride, padding, dilation = CASES["odd sizes"]
    x, w, b = _inputs(xshape, wshape, seed=3)
    gy, expected = _torch_results(conv, x, w, b, stride, padding, dilation, channels_last=True)
    jx, jw, jb = (jt.tensor(a, requires_grad=True) for a in (x, w, b))
    y = F.conv2d(jx.to(memory_format=jt.channels_last), jw, jb, stride=stride, padding=padding, dilation=dilation)
    assert y.is_contiguous(memory_format=jt.channels_last)
    y.backward(jt.tensor(gy))
    for got, want in zip((y, jx.grad, jw.grad, jb.grad), expected):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_compiled_step_computes_the_same_gradients_by_the_swapped_product():
    conv, xshape, wshape, stride, padding, dilation = CASES["stride and dilation"]
    x, w, b = _inputs(xshape, wshape, seed=5)
    gy = jt.tensor(np.random.default_rng(6).standard_normal((4, 16, 23, 24)).astype(np.float32))

    def step(x, w, b, gy):
        (F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation) * gy).sum().backward()
        return x.grad, w.grad, b.grad
    def leaves():
        return [jt.tensor(a, requires_grad=True) for a in (x, w, b)]
    eager = step(*leaves(), gy)
    compiled_step = jt.compile(step)
    compiled = compiled_step(*leaves(), gy)
    products = [tuple(tuple(a.type.shape[-2:]) for a in n.args[:2]) for s in compiled_step.lower(*leaves(), gy).steps
                for n in getattr(s, "nodes", ()) if n.op.name == "matmul"]
    rows, cols = _windows(xshape, wshape, stride, padding, dilation)
    assert ((rows, cols), (cols, wshape[0])) in products
    assert ((wshape[0], cols), (cols, rows)) not in products
    for got, want in zip(compiled, eager):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_the_rule_keeps_many_filters_groups_short_sums_and_generated_kernels_to_the_plain_product():
    w = jt.zeros(16, 32, 3, 3, requires_grad=True)
    assert F._weight_gradient_swapped(w, 1, 288, 2048)
    assert not F._weight_gradient_swapped(w, 1, 288, 2047)  # a short sum
    assert not F._weight_gradient_swapped(w, 2, 288, 4096)  # groups
    assert not F._weight_gradient_swapped(jt.zeros(16, 32, 3, 3), 1, 288, 4096)  # no gradient wanted
    with jt.no_grad():
        assert not F._weight_gradient_swapped(w, 1, 288, 4096)
    # 256 filters (dcgan's third discriminator layer: 256 x 2048 x 1024 was 1.02x the plain product's time)
    assert not F._weight_gradient_swapped(jt.zeros(256, 128, 4, 4, requires_grad=True), 1, 2048, 4096)
    # cnn's second convolution: the long-sum kernel takes its weight gradient, the columns kernel its forward
    assert not F._weight_gradient_swapped(jt.zeros(16, 8, 3, 3, requires_grad=True), 1, 72, 36864)
    # float16 is no float BLAS computes here
    assert not F._weight_gradient_swapped(jt.zeros(16, 32, 3, 3, dtype=jt.float16, requires_grad=True), 1, 288, 4096)


def test_mkl_keeps_the_plain_product(monkeypatch):
    monkeypatch.setattr(blas_library, "chosen", lambda: blas_library.MKL)
    assert not F._weight_gradient_swapped(jt.zeros(16, 32, 3, 3, requires_grad=True), 1, 288, 4096)


def test_many_filters_keep_the_plain_product_and_torchs_values(monkeypatch):
    xshape, wshape = (2, 8, 33, 33), (130, 8, 3, 3)
    x, w, b = _inputs(xshape, wshape, seed=7)
    gy, expected = _torch_results("conv2d", x, w, b, 1, 1, 1)
    jx, jw, jb = (jt.tensor(a, requires_grad=True) for a in (x, w, b))
    seen = _products(monkeypatch, linalg, "array_product")
    y = F.conv2d(jx, jw, jb, padding=1)
    y.backward(jt.tensor(gy))
    rows, cols = _windows(xshape, wshape, 1, 1, 1)
    assert not any(shapes == ((rows, cols), (cols, 130)) for shapes in seen)
    for got, want in zip((y, jx.grad, jw.grad, jb.grad), expected):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=1e-4)
