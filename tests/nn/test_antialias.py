"""interpolate with antialias=True (bilinear, bicubic) and of uint8 input (jitorch/nn/antialias.py) against torch:
uint8 bit for bit (torch's integer weights and rounding; channel counts that take torch's AVX kernel and its
generic one), float values and gradients, torch's errors, and a compiled call equal to eager in one graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch as jt
import jitorch.nn.functional as JF
from jitorch.nn.antialias import aa_window, uint8_window
from tests.nn.torch_oracle import check, normal, same_error
from tests.support import assert_close

CASES = [
    ((1, 3, 16, 16), {"size": (5, 7)}),  # a downscale in both dims
    ((2, 5, 9, 13), {"size": (4, 20)}),  # one dim down, one up; 5 channels (torch's generic uint8 kernel)
    ((1, 3, 30, 8), {"scale_factor": (0.3, 2.0)}),  # the scale given: 1 / scale, not in / out
    ((1, 4, 7, 7), {"size": (7, 3)}),  # an unchanged dim is left alone
    ((1, 2, 20, 20), {"size": (3, 3), "align_corners": True}),
    ((1, 1, 9, 40), {"scale_factor": 0.13}),  # a wide window: 2 ceil(support) + 1 = 33 taps
]


@pytest.mark.parametrize("shape,kwargs", CASES)
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [True, False])
def test_uint8_is_torchs_bit_for_bit(shape, kwargs, mode, antialias):
    a = (np.random.default_rng([150, *shape]).random(shape) * 256).astype(np.uint8)
    expected = TF.interpolate(torch.tensor(a), mode=mode, antialias=antialias, **kwargs).numpy()
    got = JF.interpolate(jt.tensor(a), mode=mode, antialias=antialias, **kwargs)
    assert got.dtype == jt.uint8
    np.testing.assert_array_equal(got.numpy(), expected)


def test_uint8_extremes_clamp_to_the_byte_range_as_torchs():
    """Bicubic overshoots at a step between 0 and 255: the rounded sums fall outside [0, 255] and clamp."""
    a = np.zeros((1, 1, 6, 12), np.uint8)
    a[..., 6:] = 255
    for antialias in (False, True):
        expected = TF.interpolate(torch.tensor(a), size=(6, 17), mode="bicubic", antialias=antialias).numpy()
        got = JF.interpolate(jt.tensor(a), size=(6, 17), mode="bicubic", antialias=antialias).numpy()
        np.testing.assert_array_equal(got, expected)
    assert got.max() == 255 and got.min() == 0


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
@pytest.mark.parametrize("shape,kwargs", CASES)
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialias_matches_torch_with_gradients(dtype, tol, shape, kwargs, mode):
    check(lambda F, x: F.interpolate(x, mode=mode, antialias=True, **kwargs), normal(shape, 1).astype(dtype),
          atol=tol, rtol=tol)


def test_antialias_weights_sum_to_one_over_each_window_and_widen_with_the_downscale():
    xmin, xsize, weights = aa_window(100, 10, None, False, False, np.float64)
    assert xsize.max() == 20 and weights.shape[1] == 21  # support 10 each way; 2 * 10 + 1 taps
    np.testing.assert_allclose(weights.sum(1), 1.0, rtol=1e-14)
    assert (weights[np.arange(21) >= xsize[:, None]] == 0).all()
    xmin, weights, precision = uint8_window(100, 10, None, False, True, True)
    # the most bits that keep the largest weight, doubled, within int16; each window sums to 1 << precision, up
    # to a rounding per tap
    assert weights.max() < (1 << 15) <= 2 * weights.max() + 1
    assert np.abs(weights.sum(1) - (1 << precision)).max() <= weights.shape[1]


def test_a_nan_outside_an_output_window_does_not_reach_it():
    """Each output sums only its window's taps (torch's loop stops at the window's size): a NaN next to a
    window, where a zero-weight tap of the padded window stands, leaves that output finite."""
    a = np.ones((1, 1, 1, 12), np.float32)
    a[..., -1] = np.nan
    t = TF.interpolate(torch.tensor(a), size=(1, 4), mode="bilinear", antialias=True).numpy()
    j = JF.interpolate(jt.tensor(a), size=(1, 4), mode="bilinear", antialias=True).numpy()
    np.testing.assert_array_equal(np.isnan(j), np.isnan(t))
    assert np.isfinite(j[..., :3]).all()


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_an_inf_inside_windows_gives_torchs_infs_and_nans_with_all_taps_gathered_at_once(mode):
    """All of a dim's taps come from one index_select, a tap past a window reading an appended zero: an inf at
    the last column and row give torch's infs (not a NaN from a tap past the window standing on the inf), a
    NaN torch's NaNs; a transposed input and an empty batch give torch's values and shapes."""
    a = normal((2, 3, 13, 17), 5).astype(np.float32)
    a[0, 0, 4, -1], a[1, 2, -1, 8], a[1, 1, -1, 3] = np.inf, -np.inf, np.nan
    for x in (a, np.ascontiguousarray(a.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2), a[:0]):
        t = TF.interpolate(torch.tensor(x), size=(5, 6), mode=mode, antialias=True).numpy()
        j = JF.interpolate(jt.tensor(x), size=(5, 6), mode=mode, antialias=True).numpy()
        assert j.shape == t.shape
        np.testing.assert_array_equal(np.isnan(j), np.isnan(t))
        np.testing.assert_array_equal(np.isinf(j), np.isinf(t))
        ok = np.isfinite(t)
        np.testing.assert_allclose(j[ok], t[ok], rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("call,dtype", [
    (lambda F, x: F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True), np.float16),
    (lambda F, x: F.interpolate(x, size=(3, 3), mode="bicubic", antialias=True), np.int64),
    (lambda F, x: F.interpolate(x, size=(3, 3), mode="nearest", antialias=True), np.float32),
    (lambda F, x: F.interpolate(x[0], size=(3,), mode="linear", antialias=True), np.float32),
    (lambda F, x: F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True), np.bool_),
])
def test_antialias_errors_are_torchs(call, dtype):
    same_error(call, np.ones((1, 2, 6, 6), dtype))


def test_antialias_compiles_to_one_graph_equal_to_eager():
    x = normal((1, 2, 12, 9), 2).astype(np.float32)
    check(lambda F, x: F.interpolate(x, size=(4, 5), mode="bicubic", antialias=True), x, atol=2e-6, rtol=2e-6,
          compiled=True)
    fn = jt.compile(lambda x: JF.interpolate(x, size=(4, 5), mode="bilinear", antialias=True), fullgraph=True)
    lowered = fn.lower(jt.tensor(x))
    names = [node.op.name for node in lowered.graph.nodes]
    # one index_select of all its taps per resized dim
    assert names.count("index_select") == 2 and names.count("sum") == 2 and lowered.kernels
    assert_close(fn(jt.tensor(x)), JF.interpolate(jt.tensor(x), size=(4, 5), mode="bilinear",
                                                  antialias=True).numpy(), atol=0, rtol=0)


def test_uint8_compiles_equal_to_eager():
    """uint8's integer sums are float64 products with each dim's weight matrix (exact): one matmul per resized
    dim, compiled as eager and torch's bytes."""
    data = (np.random.default_rng(3).random((1, 3, 9, 9)) * 256).astype(np.uint8)
    a = jt.tensor(data)
    fn = jt.compile(lambda x: JF.interpolate(x, size=(4, 13), mode="bicubic"), fullgraph=True)
    np.testing.assert_array_equal(fn(a).numpy(), JF.interpolate(a, size=(4, 13), mode="bicubic").numpy())
    np.testing.assert_array_equal(fn(a).numpy(), TF.interpolate(torch.tensor(data), size=(4, 13), mode="bicubic"))
    names = [node.op.name for node in fn.lower(a).graph.nodes]
    assert names.count("matmul") == 2 and "index_select" not in names


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [False, True])
def test_uint8_of_a_wide_input_sums_its_taps_where_the_dense_matrix_would_be_mostly_zeros(mode, antialias):
    """A dim of more than `DENSE_PER_TAP` inputs per tap (300 columns to 100 with antialias: 7 or 13 taps;
    300 to 290 without: 2 or 4) gathers its taps instead of the dense product; torch's bytes either way, the
    narrow dim by the product."""
    from jitorch.nn.antialias import DENSE_PER_TAP
    data = (np.random.default_rng(4).random((1, 3, 9, 300)) * 256).astype(np.uint8)
    size = (5, 100) if antialias else (5, 290)
    taps = uint8_window(300, size[1], None, False, mode == "bicubic", antialias)[1].shape[1]
    assert 300 > DENSE_PER_TAP * taps
    fn = jt.compile(lambda x: JF.interpolate(x, size=size, mode=mode, antialias=antialias), fullgraph=True)
    names = [node.op.name for node in fn.lower(jt.tensor(data)).graph.nodes]
    assert names.count("index_select") == 1 and names.count("matmul") == 1
    expected = TF.interpolate(torch.tensor(data), size=size, mode=mode, antialias=antialias).numpy()
    np.testing.assert_array_equal(JF.interpolate(jt.tensor(data), size=size, mode=mode, antialias=antialias).numpy(),
                                  expected)
    np.testing.assert_array_equal(fn(jt.tensor(data)).numpy(), expected)


# torch's CPU kernels fuse the cubic filter's multiply-adds in its AVX2/AVX512 builds, which jitorch follows
# (docs/differences-from-torch.md); on a machine where torch runs its generic build, it rounds them apart.
_TORCH_FUSES = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def _torch_weights(n, m, mode, dtype, align_corners):
    """torch's (m, n) weights of one dim, read through one-hot inputs: output i of input ``eye[k]`` is the weight
    of input k in output i exactly (its other taps add zeros)."""
    x = torch.eye(n, dtype=dtype).reshape(n, 1, 1, n)
    y = TF.interpolate(x, size=(1, m), mode=mode, antialias=True, align_corners=align_corners)
    return y.reshape(n, m).T.numpy()


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("n,m", [(2, 14), (3, 21), (5, 3), (7, 5), (9, 40), (40, 9), (13, 17), (100, 7)])
def test_antialias_window_weights_are_torchs_bit_for_bit_with_fused_cubic_multiply_adds(mode, dtype, align_corners,
                                                                                      n, m):
    """Each weight of `aa_window` equals torch's (one-hot inputs), up- and downscaling: torch's CPU kernels
    (AVX2/AVX512 builds) fuse the cubic filter's multiply-adds; rounded apart, 1318 of 1444 float32 size pairs
    up to 39 differed in the last bits (bilinear's triangle has none to fuse and already matched)."""
    xmin, xsize, w = aa_window(n, m, None, align_corners, mode == "bicubic", dtype)
    dense = np.zeros((m, n), dtype)
    for i in range(m):
        dense[i, xmin[i]:xmin[i] + xsize[i]] = w[i, :xsize[i]]
    expected = _torch_weights(n, m, mode, torch.float32 if dtype == np.float32 else torch.float64, align_corners)
    eye = np.eye(n, dtype=dtype).reshape(n, 1, 1, n)
    got = JF.interpolate(jt.tensor(eye), size=(1, m), mode=mode, antialias=True, align_corners=align_corners)
    for weights in (dense, got.numpy().reshape(n, m).T):
        if _TORCH_FUSES:
            np.testing.assert_array_equal(weights, expected)
        else:  # torch's generic build rounds the cubic's products apart: up to 5 ulps from jitorch's (measured)
            np.testing.assert_allclose(weights, expected, rtol=0, atol=8 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype,n,m,k", [(np.float32, 2, 14, 0), (np.float64, 5, 3, 2), (np.float64, 7, 5, 3)])
def test_bicubic_antialias_inf_inside_a_window_is_torchs_inf_not_nan(dtype, n, m, k):
    """An inf at input k, inside an output's window where torch's fused-cubic weight is ~1e-14 (float32, 2 to
    14, output 10) or ~1e-32 (float64): the product and sum rounded apart made that weight exactly 0 and the
    output inf * 0 = NaN; torch gives +-inf."""
    a = np.ones((1, 1, 1, n), dtype)
    a[..., k] = np.inf
    j = JF.interpolate(jt.tensor(a), size=(1, m), mode="bicubic", antialias=True).numpy()
    assert np.isnan(j).sum() <= 1 and np.isinf(j).sum() >= 2
    if _TORCH_FUSES:  # (torch's generic build makes the weight 0 itself and gives NaN there)
        np.testing.assert_array_equal(j, TF.interpolate(torch.tensor(a), size=(1, m), mode="bicubic",
                                                        antialias=True).numpy())
