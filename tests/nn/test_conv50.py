"""Eager convolutions whose forward product reads the windows in place (`nn.functional._windows_in_place`, where
nothing records the call): the same bits as the copied windows' product that autograd's path and the compiled
graph compute, torch's values and strides, and the calls that keep the copy (a gradient to record, groups, a
batch whose runs the tiles cross)."""

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen import gemm

torch = pytest.importorskip("torch")

TAKES = gemm.for_products()  # (the generated products run only on an AVX-512 machine: elsewhere the copy stays)


@pytest.fixture
def windows():
    """How many products read their windows in place since the test began."""
    start = gemm.counters["windows"]
    return lambda: gemm.counters["windows"] - start


def _tensors(xshape, wshape, dtype, seed=0):
    g = jt.Generator().manual_seed(seed)
    dt = getattr(jt, dtype)
    return (jt.randn(*xshape, generator=g, dtype=dt), jt.randn(*wshape, generator=g, dtype=dt) * 0.2,
            jt.randn(wshape[0], generator=g, dtype=dt))


def _bits(t):
    a = t.detach().numpy()
    return np.ascontiguousarray(a).view(f"u{a.itemsize}")


# (conv, input shape, weight shape, keywords): cnn's conv2, dcgan's discriminator input layer (stride 2, padding
# 1), a dilated one, a 1-d and a 3-d one
CASES = [(F.conv2d, (64, 8, 26, 26), (16, 8, 3, 3), {}),
         (F.conv2d, (64, 3, 32, 32), (64, 3, 4, 4), {"stride": 2, "padding": 1}),
         (F.conv2d, (64, 4, 14, 14), (8, 4, 3, 3), {"padding": 2, "dilation": 2}),
         (F.conv1d, (64, 5, 400), (6, 5, 5), {"padding": 2}),
         (F.conv3d, (64, 2, 12, 12, 12), (8, 2, 2, 2, 2), {"stride": 2})]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=["cnn_conv2", "dcgan_d1", "dilated", "conv1d", "conv3d"])
def test_a_forward_reading_windows_in_place_has_the_bits_of_the_recorded_one_and_torchs_values(windows, dtype, case):
    conv, xshape, wshape, kw = case
    x, w, b = _tensors(xshape, wshape, dtype)
    y = conv(x, w, b, **kw)
    assert windows() == TAKES
    recorded = conv(x, w.clone().requires_grad_(), b, **kw)  # (autograd's path: the windows copied and saved)
    assert windows() == TAKES
    assert np.array_equal(_bits(y), _bits(recorded))
    tconv = getattr(torch.nn.functional, conv.__name__)
    ty = tconv(*(torch.from_numpy(t.numpy()) for t in (x, w, b)), **kw)
    tol = 2e-4 if dtype == "float32" else 1e-11
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=tol, atol=tol)
    assert y.stride() == tuple(ty.stride()) and y.dtype == x.dtype


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_compiled_convolution_gives_the_eager_bits_of_the_windows_read_in_place(windows, dtype):
    compiled = jt.compile(lambda x, w, b: F.relu(F.conv2d(x, w, b)))
    for seed in (0, 1):  # (a trace that took the shortcut would hold the first call's result as a constant)
        x, w, b = _tensors((64, 8, 26, 26), (16, 8, 3, 3), dtype, seed)
        with jt.no_grad():
            before = windows()
            got = compiled(x, w, b)
            assert windows() == before  # (the graph's product reads the copied windows)
            eager = F.relu(F.conv2d(x, w, b))
        assert np.array_equal(_bits(got), _bits(eager))


def test_a_gradient_to_record_groups_and_runs_the_tiles_cross_keep_the_copy(windows):
    x, w, b = _tensors((64, 8, 26, 26), (16, 8, 3, 3), "float32")
    y = F.conv2d(x.clone().requires_grad_(), w, b)
    y.sum().backward()  # (the windows were saved: the weight gradient is not asked, the input's is)
    x2, w2, _ = _tensors((64, 8, 26, 26), (16, 4, 3, 3), "float32")
    grouped = F.conv2d(x2, w2, groups=2)
    x3, w3, _ = _tensors((50, 3, 32, 32), (64, 3, 4, 4), "float32")  # (stride 2: runs of 50, tiles of 64)
    odd = F.conv2d(x3, w3, stride=2, padding=1)
    assert windows() == 0
    for got, args, kw in ((grouped, (x2, w2), {"groups": 2}), (odd, (x3, w3), {"stride": 2, "padding": 1})):
        want = torch.nn.functional.conv2d(*(torch.from_numpy(t.numpy()) for t in args), **kw)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-4, atol=2e-4)


def test_a_channels_last_input_reads_its_windows_in_place_with_torchs_strides(windows):
    x, w, b = _tensors((64, 8, 26, 26), (16, 8, 3, 3), "float32")
    xc = x.contiguous(memory_format=jt.channels_last)
    y = F.conv2d(xc, w, b)
    assert windows() == TAKES
    ty = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()).contiguous(memory_format=torch.channels_last),
                                    *(torch.from_numpy(t.numpy()) for t in (w, b)))
    assert y.stride() == tuple(ty.stride())
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=2e-4, atol=2e-4)
    assert np.array_equal(_bits(y), _bits(F.conv2d(x, w, b).contiguous(memory_format=jt.channels_last)))
