"""Transposing CPU kernels computed tile by tile into stack buffers and stored transposed in registers
(`codegen.kernel.staged_tiles`): a convolution's batch-innermost result copied to NCHW was stored with scatters
(2.1 ms for cnn's (16, 24, 24, 64) output on the Zen 4 host, 0.24 ms staged). Each element is the same
expression at the same indices, so compiled results equal eager ones bit for bit, for every dtype."""

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen import kernel as kernel_module


def kernels_of(fn, *args):
    return jt.compile(fn).lower(*args).kernels


def staged(k):
    """Whether a lowered kernel is a staged transposing one (its tiles transposed by shuffles)."""
    return "shufflevector" in k._kernel.source.llvm_ir


DTYPES = [jt.float32, jt.float64, jt.float16, jt.bfloat16, jt.int64, jt.int32, jt.int8, jt.bool]


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_last_to_nchw_copy_is_staged_and_exact(dtype):
    """cnn's conv2 output (C, H, W, N) copied to (N, C, H, W), the copy that LLVM stored with scatters."""
    src = jt.randn(16, 24, 24, 64) * 8
    src = src > 0 if dtype is jt.bool else src.to(dtype)
    fn = lambda t: t.permute(3, 0, 1, 2).contiguous()  # noqa: E731
    (k,) = kernels_of(fn, src)
    assert staged(k)
    got = jt.compile(fn)(src)
    assert got.stride() == (9216, 576, 24, 1)
    np.testing.assert_array_equal(got.to(jt.float32 if dtype in (jt.float16, jt.bfloat16) else dtype).numpy(),
                                  fn(src).to(jt.float32 if dtype in (jt.float16, jt.bfloat16) else dtype).numpy())


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_staged_kernel_with_bias_relu_and_mask_outputs_matches_eager_bits(dtype):
    """A convolution epilogue as the compiled step fuses it: the product's (C, L, N) result permuted to NCHW, a
    bias, relu and the mask its backward keeps: two outputs of two dtypes, each staged and stored transposed."""
    m, bias = jt.randn(16, 24 * 24 * 64, dtype=dtype), jt.randn(16, dtype=dtype)

    def fn(m, bias):
        y = (m.view(16, 24, 24, 64).permute(3, 0, 1, 2) + bias.view(1, 16, 1, 1)).contiguous().relu()
        return y, y <= 0
    kernels = kernels_of(fn, m, bias)
    assert any(staged(k) for k in kernels)
    got, expected = jt.compile(fn)(m, bias), fn(m, bias)
    for g, e in zip(got, expected):
        assert g.stride() == e.stride()
        np.testing.assert_array_equal(g.numpy(), e.numpy())


@pytest.mark.parametrize("shape,dims", [((64, 64), (1, 0)), ((3, 64, 80), (0, 2, 1)), ((80, 5, 32), (2, 1, 0)),
                                        ((2, 64, 3, 32), (0, 3, 2, 1))])
def test_staged_transposes_of_several_tiles_and_outer_dims_match_eager(shape, dims):
    """Tiles of one and several per dim, outer dims the tiles do not cut, a dim between the two tiled ones; the
    kernel's chunks over its outer loop run on two threads."""
    x = jt.randn(*shape)
    fn = lambda t: (t.permute(*dims) * 3 - 1).contiguous()  # noqa: E731
    (k,) = kernels_of(fn, x)
    assert staged(k)
    with_threads = jt.get_num_threads()
    try:
        for n in (1, 2):
            jt.set_num_threads(n)
            np.testing.assert_array_equal(jt.compile(fn)(x).numpy(), fn(x).numpy())
    finally:
        jt.set_num_threads(with_threads)


def test_transposes_that_do_not_divide_into_tiles_keep_the_element_loop():
    """A transpose whose dims are not whole tiles is not cut (`_tiled`), so not staged, and still matches."""
    x = jt.randn(20, 36)
    fn = lambda t: t.t().contiguous() + 1  # noqa: E731
    (k,) = kernels_of(fn, x)
    assert not staged(k)
    np.testing.assert_array_equal(jt.compile(fn)(x).numpy(), fn(x).numpy())


def test_in_place_updates_are_staged_only_where_they_read_what_they_overwrite():
    """An output written into an input's buffer (an in-place update: Adam's moments and weights, read beside a
    transposed gradient) is staged only where every read of that buffer is at the element written: a staged tile
    reads all of its elements before it writes any."""
    fake = type("Builder", (), {"target": kernel_module.CPU, "aliases": {1: 2}})()
    tiled, written = [4, 4, 16, 16], [1024, 16, 64, 1]
    assert kernel_module._stages(fake, [64, 64], tiled, [written], [((written, 0), written)])
    assert not kernel_module._stages(fake, [64, 64], tiled, [written], [(([16, 1024, 1, 64], 0), written)])
    assert not kernel_module._stages(fake, [64, 64], tiled, [written], [((written, 1), written)])
    x, y = jt.randn(64, 64), jt.randn(64, 64)

    def fn(u, t):
        u.mul_(2).add_(t.t())
        return u
    (k,) = kernels_of(fn, x.clone(), y)
    assert staged(k)
    eager_u, compiled_u = x.clone(), x.clone()
    fn(eager_u, y)
    jt.compile(fn)(compiled_u, y)
    np.testing.assert_array_equal(compiled_u.numpy(), eager_u.numpy())


CONVS = [  # (transposed, input shape, weight shape, kwargs)
    (False, (4, 3, 16, 16), (16, 3, 3, 3), {}),
    (False, (2, 4, 18, 20), (8, 2, 3, 3), {"stride": 2, "padding": 1, "groups": 2}),
    (False, (3, 4, 17, 16), (16, 4, 2, 3), {"dilation": 2, "padding": (1, 2)}),
    (True, (4, 8, 8, 8), (8, 4, 4, 4), {"stride": 2, "padding": 1}),
    (True, (2, 16, 4, 4), (16, 8, 4, 4), {"stride": 2, "padding": 1, "groups": 2, "output_padding": 1}),
]


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_compiled_convolution_with_relu_epilogue_matches_eager_and_torch(case, dtype):
    """Forward, input and weight gradients of a convolution with bias and relu, compiled (whose NCHW result and
    gradient permutes are the staged kernels) against eager jitorch (bit for bit) and torch."""
    transposed, xs, ws, kwargs = CONVS[case]
    rng = np.random.default_rng(case)
    np_dtype = np.float32 if dtype is jt.float32 else np.float64
    x, w = rng.standard_normal(xs).astype(np_dtype), (rng.standard_normal(ws) * 0.3).astype(np_dtype)
    bias = rng.standard_normal(ws[1] * kwargs.get("groups", 1) if transposed else ws[0]).astype(np_dtype)
    name = "conv_transpose2d" if transposed else "conv2d"

    def step(lib, x, w, b, g):
        y = getattr(lib.nn.functional, name)(x, w, b, **kwargs).relu()
        (y * g).sum().backward()
        return y * 1, x.grad, w.grad, b.grad

    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, bias)]
    shape = getattr(torch.nn.functional, name)(*theirs, **kwargs).shape
    g = rng.standard_normal(tuple(shape)).astype(np_dtype)
    expected = step(torch, *theirs, torch.tensor(g))
    eager = step(jt, *[jt.tensor(a, requires_grad=True) for a in (x, w, bias)], jt.tensor(g))
    compiled = jt.compile(lambda x, w, b, g: step(jt, x, w, b, g))
    for _ in range(2):
        got = compiled(*[jt.tensor(a, requires_grad=True) for a in (x, w, bias)], jt.tensor(g))
        tol = 2e-4 if dtype is jt.float32 else 1e-10
        for a, e, t in zip(got, eager, expected):
            np.testing.assert_allclose(a.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)
            np.testing.assert_allclose(a.detach().numpy(), e.detach().numpy(), rtol=tol, atol=tol)


def test_cnn_convolution_output_copy_is_staged():
    """The cnn model's conv2 epilogue (bias, relu, the mask) as one staged kernel in the compiled step."""
    x, w, b = jt.randn(64, 8, 26, 26), jt.randn(16, 8, 3, 3), jt.randn(16)
    kernels = kernels_of(lambda x, w, b: F.relu(F.conv2d(x, w, b)), x, w, b)
    assert any(staged(k) and "relu" in k.ops for k in kernels), [k.ops for k in kernels]


def test_momentum_step_of_a_transposed_convolution_is_staged_in_place_and_matches_eager():
    """A compiled training step whose optimizer updates a transposed convolution's weight in place (its gradient
    read transposed, as dcgan's generator's Adam does): the update kernel is staged over the aliased momentum
    buffer and weight, and three steps give eager's parameters (to float rounding: the compiled step's loss and
    backward round apart from eager's, staged or not)."""
    seen = []
    stages = kernel_module._stages

    def recording(bld, sizes, tiled, strides, in_place=()):
        staged_here = stages(bld, sizes, tiled, strides, in_place)
        seen.append((bool(bld.aliases), staged_here))
        return staged_here

    def make():
        jt.manual_seed(0)
        net = jt.nn.Sequential(jt.nn.ConvTranspose2d(64, 16, 4, 2, 1, bias=False), jt.nn.Tanh())
        return net, jt.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

    x = jt.randn(4, 64, 4, 4, generator=jt.Generator().manual_seed(1))
    nets = [make(), make()]

    def step(net, opt, x):
        opt.zero_grad()
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        return loss
    compiled = jt.compile(lambda x: step(*nets[1], x))
    monkey = pytest.MonkeyPatch()
    monkey.setattr(kernel_module, "_stages", recording)
    try:
        for _ in range(3):
            step(*nets[0], x)
            compiled(x)
    finally:
        monkey.undo()
    for a, b in zip(nets[0][0].parameters(), nets[1][0].parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert (True, True) in seen, seen
