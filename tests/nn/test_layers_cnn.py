"""GroupNorm / InstanceNorm, the transposed convolutions, interpolate / Upsample, pixel (un)shuffle and the
channel dropouts: values against NumPy transcriptions of torch's definitions, gradients by finite
differences, torch's errors and reprs, and a compiled training step equal to eager."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
import jitorch.nn.functional as F
from jitorch import nn
from jitorch.autograd import gradcheck
from tests.support import assert_close


def t64(a, grad=False):
    return jt.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _per_channel(v, ndim):
    return v.reshape([1, -1] + [1] * (ndim - 2))


# NumPy oracles ------------------------------------------------------------------------------------------

def np_group_norm(x, groups, w=None, b=None, eps=1e-5):
    g = x.reshape(x.shape[0], groups, -1)
    out = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + eps)).reshape(x.shape)
    if w is not None:
        out = out * _per_channel(w, x.ndim)
    if b is not None:
        out = out + _per_channel(b, x.ndim)
    return out


def np_conv_transpose(x, w, b, stride, padding, output_padding, dilation, groups):
    """The definition: input position i with kernel offset q adds ``x[i] * w[q]`` at output ``i s + q d - p``."""
    n, c_in, *sizes = x.shape
    kernel, c_out_g, c_in_g = w.shape[2:], w.shape[1], c_in // groups
    full = [(i - 1) * s + d * (k - 1) + 1 + o for i, s, d, k, o in zip(sizes, stride, dilation, kernel, output_padding)]
    out = np.zeros((n, c_out_g * groups, *full))
    for g in range(groups):
        xs, ws = x[:, g * c_in_g:(g + 1) * c_in_g], w[g * c_in_g:(g + 1) * c_in_g]
        for pos in itertools.product(*map(range, sizes)):
            for q in itertools.product(*map(range, kernel)):
                at = tuple(i * s + j * d for i, j, s, d in zip(pos, q, stride, dilation))
                out[(slice(None), slice(g * c_out_g, (g + 1) * c_out_g)) + at] += (
                    xs[(slice(None), slice(None)) + pos] @ ws[(slice(None), slice(None)) + q])
    out = out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]
    return out if b is None else out + _per_channel(b, out.ndim)


def np_source(dst, n, out, scale, mode, align_corners):
    """torch's source coordinate of output position ``dst`` (upsample kernels' ``*_compute_source_index``)."""
    if mode == "linear" and align_corners:
        return dst * (n - 1) / (out - 1) if out > 1 else 0.0
    step = 1.0 / scale if scale else n / out
    if mode == "linear":
        return max(step * (dst + 0.5) - 0.5, 0.0)
    return min(math.floor((dst + (0.5 if mode == "nearest-exact" else 0.0)) * step), n - 1)


def np_interpolate(x, sizes, scales, mode, align_corners=False):
    """Each output element from its source elements: the one nearest, or the 2^d corners around its source
    point weighted by the products of the per-dim distances."""
    out = np.zeros(x.shape[:2] + tuple(sizes))
    for dst in itertools.product(*map(range, sizes)):
        src = [np_source(o, n, m, s, "linear" if "linear" in mode else mode, align_corners)
               for o, n, m, s in zip(dst, x.shape[2:], sizes, scales)]
        if "linear" not in mode:
            out[(...,) + dst] = x[(...,) + tuple(src)]
            continue
        for corner in itertools.product((0, 1), repeat=len(src)):
            at, weight = [], 1.0
            for c, s, n in zip(corner, src, x.shape[2:]):
                low = int(s)
                at.append(min(low + c, n - 1))
                weight *= (s - low) if c else 1 - (s - low)
            out[(...,) + dst] += weight * x[(...,) + tuple(at)]
    return out


# Group and instance normalisation ----------------------------------------------------------------------

@given(n=st.integers(1, 3), groups=st.integers(1, 3), per_group=st.integers(1, 3),
       spatial=st.lists(st.integers(1, 4), max_size=2), affine=st.booleans(), seed=st.integers(0, 99))
def test_group_norm_matches_numpy(n, groups, per_group, spatial, affine, seed):
    rng = np.random.default_rng(seed)
    c = groups * per_group
    x = rng.standard_normal((n, c, *spatial))
    w, b = (rng.standard_normal(c), rng.standard_normal(c)) if affine else (None, None)
    if per_group * math.prod(spatial) == 1:
        return  # one element per group: the variance is 0 and the output just the bias, as checked below
    y = F.group_norm(t64(x), groups, None if w is None else t64(w), None if b is None else t64(b), eps=1e-3)
    assert_close(y, np_group_norm(x, groups, w, b, eps=1e-3), atol=1e-10, rtol=1e-10)


def test_group_norm_single_element_groups_give_the_bias(rng):
    b = rng.standard_normal(4)
    y = F.group_norm(t64(rng.standard_normal((2, 4))), 4, t64(np.ones(4)), t64(b))
    assert_close(y, np.broadcast_to(b, (2, 4)))


def test_group_norm_module_and_gradcheck(rng):
    m = nn.GroupNorm(2, 6).double()
    with jt.no_grad():
        m.weight.copy_(t64(rng.standard_normal(6)))
        m.bias.copy_(t64(rng.standard_normal(6)))
    x = rng.standard_normal((3, 6, 5))
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    assert_close(m(t64(x)), np_group_norm(x, 2, w, b), atol=1e-10, rtol=1e-10)
    assert [p.shape for p in m.parameters()] == [(6,), (6,)]
    args = (t64(x, True), t64(rng.standard_normal(6), True), t64(rng.standard_normal(6), True))
    assert gradcheck(lambda x, w, b: F.group_norm(x, 3, w, b), args)


def test_instance_norm_statistics_and_running_update(rng):
    x = rng.standard_normal((3, 4, 5, 2))
    w, b = rng.standard_normal(4), rng.standard_normal(4)
    rm, rv = jt.zeros(4, dtype=jt.float64), jt.ones(4, dtype=jt.float64)
    y = F.instance_norm(t64(x), rm, rv, t64(w), t64(b), momentum=0.3)
    # instance norm is group norm with a group per channel
    assert_close(y, np_group_norm(x, 4, w, b), atol=1e-10, rtol=1e-10)
    # the running statistics move toward the batch's average instance mean and unbiased variance
    flat = x.reshape(3, 4, -1)
    assert_close(rm, 0.3 * flat.mean(2).mean(0))
    assert_close(rv, 0.7 + 0.3 * flat.var(2, ddof=1).mean(0))
    # without input statistics the running ones normalise
    expected = (x - _per_channel(rm.numpy(), 4)) / np.sqrt(_per_channel(rv.numpy(), 4) + 1e-5)
    assert_close(F.instance_norm(t64(x), rm, rv, use_input_stats=False), expected)


def test_instance_norm_gradcheck(rng):
    args = (t64(rng.standard_normal((2, 3, 4)), True), t64(rng.standard_normal(3), True),
            t64(rng.standard_normal(3), True))
    assert gradcheck(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), args)


def test_instance_norm_modules(rng):
    x = rng.standard_normal((2, 3, 4, 4))
    m = nn.InstanceNorm2d(3)
    assert m.weight is None and m.running_mean is None
    assert_close(m(t64(x)), np_group_norm(x, 3), atol=1e-10, rtol=1e-10)
    # unbatched (C, L) input
    x1 = rng.standard_normal((3, 6))
    assert_close(nn.InstanceNorm1d(3)(t64(x1)), np_group_norm(x1[None], 3)[0], atol=1e-10, rtol=1e-10)
    tracked = nn.InstanceNorm1d(3, affine=True, track_running_stats=True).double()
    xs = rng.standard_normal((4, 3, 6))
    tracked(t64(xs))
    assert_close(tracked.running_mean, 0.1 * xs.mean(2).mean(0))
    tracked.eval()
    rm, rv = tracked.running_mean.numpy(), tracked.running_var.numpy()
    assert_close(tracked(t64(xs)), (xs - rm[:, None]) / np.sqrt(rv[:, None] + 1e-5))


@pytest.mark.parametrize("call, exc, message", [
    (lambda: F.group_norm(jt.ones(2, 6, 4), 4), RuntimeError,
     "Expected number of channels in input to be divisible by num_groups, but got input of shape [2, 6, 4] and "
     "num_groups=4"),
    (lambda: F.group_norm(jt.ones(2, 6, 4), 3, jt.ones(5)), RuntimeError,
     "Expected weight to be a vector of size equal to the number of channels in input, but got weight of shape [5] "
     "and input of shape [2, 6, 4]"),
    (lambda: F.group_norm(jt.ones(6), 3), RuntimeError,
     "Expected at least 2 dimensions for input tensor but received 1"),
    (lambda: nn.GroupNorm(4, 6), ValueError, "num_channels (6) must be divisible by num_groups (4)"),
    (lambda: F.instance_norm(jt.ones(2, 3, 1)), ValueError, "Expected more than 1 spatial element when training"),
    (lambda: F.instance_norm(jt.ones(2, 3, 4), jt.zeros(3)), ValueError,
     "running_mean and running_var must either both be None or neither be None"),
    (lambda: nn.InstanceNorm1d(3)(jt.ones(2, 3, 4, 5)), ValueError, "expected 2D or 3D input (got 4D input)"),
    (lambda: nn.InstanceNorm2d(3)(jt.ones(2, 3)), ValueError, "expected 3D or 4D input (got 2D input)"),
    (lambda: nn.InstanceNorm1d(3, affine=True)(jt.ones(2, 4, 5)), ValueError,
     "expected input's size at dim=1 to match num_features (3), but got: 4."),
])
def test_normalisation_errors(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert message in str(info.value)


def test_instance_norm_without_affine_warns_on_a_channel_mismatch():
    with pytest.warns(UserWarning, match="input's size at dim=1 does not match num_features"):
        y = nn.InstanceNorm1d(3)(jt.randn(2, 4, 5))
    assert y.shape == (2, 4, 5)


@pytest.mark.parametrize("module, text", [
    (nn.GroupNorm(2, 4), "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)"),
    (nn.GroupNorm(2, 4, affine=False), "GroupNorm(2, 4, eps=1e-05, affine=False, bias=False)"),
    (nn.InstanceNorm2d(3), "InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, bias=False, "
                           "track_running_stats=False)"),
    (nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1),
     "ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(2, 2), output_padding=(1, 1))"),
    (nn.ConvTranspose1d(2, 3, 3, dilation=2, padding=1, bias=False),
     "ConvTranspose1d(2, 3, kernel_size=(3,), stride=(1,), padding=(1,), dilation=(2,), bias=False)"),
    (nn.Upsample(scale_factor=2, mode="bilinear"), "Upsample(scale_factor=2.0, mode='bilinear')"),
    (nn.Upsample(size=(3, 4)), "Upsample(size=(3, 4), mode='nearest')"),
    (nn.PixelShuffle(2), "PixelShuffle(upscale_factor=2)"),
    (nn.PixelUnshuffle(3), "PixelUnshuffle(downscale_factor=3)"),
    (nn.Dropout2d(0.3), "Dropout2d(p=0.3, inplace=False)"),
    (nn.Dropout1d(), "Dropout1d(p=0.5, inplace=False)"),
])
def test_repr(module, text):
    assert repr(module) == text


# Transposed convolutions ---------------------------------------------------------------------------------

@given(nd=st.sampled_from([1, 2]), n=st.integers(1, 2), groups=st.sampled_from([1, 2]), cg=st.integers(1, 2),
       og=st.integers(1, 2), size=st.integers(1, 4), k=st.integers(1, 3), stride=st.integers(1, 3),
       pad=st.integers(0, 2), dil=st.integers(1, 2), op=st.integers(0, 2), bias=st.booleans(),
       seed=st.integers(0, 99))
def test_conv_transpose_matches_definition(nd, n, groups, cg, og, size, k, stride, pad, dil, op, bias, seed):
    op = op % max(stride, dil)  # torch's bound: smaller than the stride or the dilation
    if (size - 1) * stride + dil * (k - 1) + 1 + op - 2 * pad <= 0:
        return  # no output: the error is tested below
    rng = np.random.default_rng(seed)
    kernel = (k, max(k - 1, 1))[:nd]
    sizes = (size, size + 1)[:nd]
    x = rng.standard_normal((n, groups * cg, *sizes))
    w = rng.standard_normal((groups * cg, og, *kernel))
    b = rng.standard_normal(groups * og) if bias else None
    f = F.conv_transpose1d if nd == 1 else F.conv_transpose2d
    y = f(t64(x), t64(w), None if b is None else t64(b), stride, pad, op, groups, dil)
    expected = np_conv_transpose(x, w, b, (stride,) * nd, (pad,) * nd, (op,) * nd, (dil,) * nd, groups)
    assert_close(y, expected, atol=1e-10, rtol=1e-10)


def test_conv_transpose_is_the_input_gradient_of_conv(rng):
    # <conv_transpose2d(g, w), x> == <g, conv2d(x, w)> for every x, g: the two are adjoint
    x = t64(rng.standard_normal((2, 4, 7, 6)), True)
    w = t64(rng.standard_normal((6, 2, 3, 2)))
    kw = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    y = F.conv2d(x, w, **kw)
    g = t64(rng.standard_normal(y.shape))
    (y * g).sum().backward()
    assert_close(F.conv_transpose2d(g, w, output_padding=(0, 0), **kw), x.grad.numpy(), atol=1e-10, rtol=1e-10)


def test_conv_transpose_unbatched_3d_and_gradcheck(rng):
    x, w, b = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2, 2)), rng.standard_normal(3)
    assert_close(F.conv_transpose2d(t64(x), t64(w), t64(b), 2, 1, 1),
                 np_conv_transpose(x[None], w, b, (2, 2), (1, 1), (1, 1), (1, 1), 1)[0], atol=1e-10, rtol=1e-10)
    x3, w3 = rng.standard_normal((1, 2, 2, 3, 2)), rng.standard_normal((2, 2, 2, 1, 2))
    assert_close(F.conv_transpose3d(t64(x3), t64(w3), stride=(1, 2, 2), groups=2),
                 np_conv_transpose(x3, w3, None, (1, 2, 2), (0,) * 3, (0,) * 3, (1,) * 3, 2), atol=1e-10,
                 rtol=1e-10)
    args = (t64(rng.standard_normal((2, 4, 3, 3)), True), t64(rng.standard_normal((4, 1, 2, 3)), True),
            t64(rng.standard_normal(2), True))
    assert gradcheck(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2,
                                                        dilation=(1, 2)), args)


def test_conv_transpose_module_and_output_size(rng):
    m = nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2).double()
    assert m.weight.shape == (4, 3, 3, 3) and m.transposed
    x = rng.standard_normal((1, 4, 5, 5))
    assert m(t64(x)).shape == (1, 6, 11, 11)
    y = m(t64(x), output_size=[1, 6, 12, 11])
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    expected = np_conv_transpose(x, w, b, (2, 2), (0, 0), (1, 0), (1, 1), 2)
    assert_close(y, expected, atol=1e-10, rtol=1e-10)
    with pytest.raises(ValueError, match=r"requested an output size of \[13, 13\], but valid sizes range from "
                                         r"\[11, 11\] to \[12, 12\]"):
        m(t64(x), output_size=(13, 13))
    with pytest.raises(ValueError, match="ConvTranspose2D: for 4D input, output_size must have 2 or 4 elements"):
        m(t64(x), output_size=(12,))
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported for ConvTranspose1d'):
        nn.ConvTranspose1d(2, 2, 3, padding_mode="reflect")


@pytest.mark.parametrize("call, exc, message", [
    (lambda: F.conv_transpose1d(jt.ones(1, 4, 5), jt.ones(4, 2, 3), stride=2, output_padding=2), RuntimeError,
     "output padding must be smaller than either stride or dilation, but got output_padding_height: 0 "
     "output_padding_width: 2 stride_height: 1 stride_width: 2 dilation_height: 1 dilation_width: 1"),
    (lambda: F.conv_transpose2d(jt.ones(1, 4, 5, 5), jt.ones(4, 2, 3, 3), padding=5), RuntimeError,
     "Given input size per channel: (5 x 5). Calculated output size per channel: (-3 x -3). Output size is too "
     "small"),
    (lambda: F.conv_transpose1d(jt.ones(1, 3, 5), jt.ones(4, 2, 3)), RuntimeError,
     "Given transposed=1, weight of size [4, 2, 3], expected input[1, 3, 5] to have 4 channels, but got 3 channels "
     "instead"),
    (lambda: F.conv_transpose1d(jt.ones(1, 4, 5), jt.ones(4, 2, 3), bias=jt.ones(3)), RuntimeError,
     "Given transposed=1, weight of size [4, 2, 3], expected bias to be 1-dimensional with 2 elements, but got bias "
     "of size [3] instead"),
    (lambda: F.conv_transpose1d(jt.ones(1, 4, 5), jt.ones(4, 2, 3), groups=3), RuntimeError,
     "Given groups=3, expected weight to be divisible by 3 at dimension 0"),
    (lambda: F.conv_transpose1d(jt.ones(4, 4, 5, 5), jt.ones(4, 2, 3)), RuntimeError,
     "Expected 2D (unbatched) or 3D (batched) input to conv_transpose1d, but got input of size: [4, 4, 5, 5]"),
    (lambda: F.conv_transpose2d(jt.ones(1, 4, 5, 5), jt.ones(4, 2, 3, 3), padding=-1), RuntimeError,
     "negative padding is not supported"),
    (lambda: F.conv_transpose2d(jt.ones(1, 4, 5, 5), jt.ones(4, 2, 3, 3), output_padding=-1), RuntimeError,
     "negative output_padding is not supported"),
    (lambda: F.conv_transpose1d(jt.ones(1, 4, 5), jt.ones(4, 2, 3), padding="same"), TypeError,
     "conv_transpose1d(): argument 'padding' must be tuple of ints, not str"),
    (lambda: nn.ConvTranspose1d(4, 3, 3, groups=2), ValueError, "out_channels must be divisible by groups"),
])
def test_conv_transpose_errors(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert message in str(info.value)


# Resampling ------------------------------------------------------------------------------------------

@given(mode=st.sampled_from(["nearest", "nearest-exact", "linear"]), nd=st.sampled_from([1, 2]),
       sizes=st.tuples(st.integers(1, 5), st.integers(1, 5)), target=st.tuples(st.integers(1, 7), st.integers(1, 7)),
       by_scale=st.booleans(), align_corners=st.booleans(), seed=st.integers(0, 99))
def test_interpolate_matches_numpy(mode, nd, sizes, target, by_scale, align_corners, seed):
    x = np.random.default_rng(seed).standard_normal((2, 2, *sizes[:nd]))
    if mode == "linear":
        mode = ("linear", "bilinear")[nd - 1]
    align = align_corners if "linear" in mode else None
    if by_scale:
        scales = [t / 2 for t in target[:nd]]  # factors from 0.5 to 3.5, not all integers
        out = [math.floor(n * s) for n, s in zip(x.shape[2:], scales)]
        if min(out) == 0:
            return  # an empty output
        y = F.interpolate(t64(x), scale_factor=scales, mode=mode, align_corners=align)
    else:
        scales, out = [None] * nd, list(target[:nd])
        y = F.interpolate(t64(x), size=out, mode=mode, align_corners=align)
    assert_close(y, np_interpolate(x, out, scales, mode, bool(align)), atol=1e-12, rtol=1e-12)


def test_interpolate_known_values_and_modules():
    x = t64([[[[1.0, 2.0], [3.0, 4.0]]]])
    assert_close(F.interpolate(x, size=3, mode="bilinear", align_corners=True),
                 [[[[1, 1.5, 2], [2, 2.5, 3], [3, 3.5, 4]]]])
    assert_close(nn.Upsample(scale_factor=2)(x), [[np.kron([[1, 2], [3, 4]], np.ones((2, 2)))]])
    assert_close(nn.Upsample(scale_factor=2, mode="bilinear")(x)[0, 0, 0], [1, 1.25, 1.75, 2])
    # area: the mean of each output's share of the input, as adaptive average pooling
    assert_close(F.interpolate(t64(np.arange(8.0).reshape(1, 1, 8)), size=3, mode="area"), [[[1, 3.5, 6]]])


def test_interpolate_gradcheck(rng):
    x = t64(rng.standard_normal((1, 2, 3, 4)), True)
    assert gradcheck(lambda x: F.interpolate(x, scale_factor=(1.5, 0.75), mode="bilinear"), (x,))
    assert gradcheck(lambda x: F.interpolate(x, size=(5, 2), mode="bilinear", align_corners=True), (x,))
    assert gradcheck(lambda x: F.interpolate(x, size=(5, 7)), (x,))


@pytest.mark.parametrize("call, exc, message", [
    (lambda: F.interpolate(jt.ones(1, 2, 4, 4), scale_factor=2, mode="linear"), NotImplementedError,
     "Got 4D input, but linear mode needs 3D input"),
    (lambda: F.interpolate(jt.ones(1, 2, 4), scale_factor=2, mode="bilinear"), NotImplementedError,
     "Got 3D input, but bilinear mode needs 4D input"),
    (lambda: F.interpolate(jt.ones(1, 2, 4, 4)), ValueError, "either size or scale_factor should be defined"),
    (lambda: F.interpolate(jt.ones(1, 2, 4, 4), size=3, scale_factor=2), ValueError,
     "only one of size or scale_factor should be defined"),
    (lambda: F.interpolate(jt.ones(1, 2, 4, 4), size=(3, 3, 3)), ValueError,
     "Input and output must have the same number of spatial dimensions, but got input with spatial dimensions of "
     "[4, 4] and output size of (3, 3, 3)"),
    (lambda: F.interpolate(jt.ones(1, 2, 4, 4), scale_factor=(2, 2, 2)), ValueError,
     "Input and scale_factor must have the same number of spatial dimensions"),
    (lambda: F.interpolate(jt.ones(1, 2, 4, 4), size=3, align_corners=True), ValueError,
     "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear"),
    (lambda: F.interpolate(jt.ones(1, 2, 4, 4), size=3, mode="foo"), NotImplementedError,
     "Input Error: Only 3D, 4D and 5D input Tensors supported (got 4D)"),
])
def test_interpolate_errors(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert message in str(info.value)


def test_pixel_shuffle_and_unshuffle(rng):
    x = rng.standard_normal((2, 3, 8, 2, 3))
    y = F.pixel_shuffle(t64(x), 2)
    assert y.shape == (2, 3, 2, 4, 6)
    # out[c, h r + i, w r + j] = in[c r^2 + i r + j, h, w]
    c, i, j, h, w = np.meshgrid(*map(np.arange, (2, 2, 2, 2, 3)), indexing="ij")
    expected = np.zeros((2, 3, 2, 4, 6))
    expected[..., c, h * 2 + i, w * 2 + j] = x[..., c * 4 + i * 2 + j, h, w]
    assert_close(y, expected)
    assert_close(nn.PixelUnshuffle(2)(y), x)
    assert_close(nn.PixelShuffle(2)(t64(x)), expected)
    assert gradcheck(lambda t: F.pixel_unshuffle(F.pixel_shuffle(t, 2) * t64(np.arange(24.0).reshape(4, 6)), 2),
                     (t64(x[0], True),))


@pytest.mark.parametrize("call, message", [
    (lambda: F.pixel_shuffle(jt.ones(1, 5, 2, 2), 2), "pixel_shuffle expects its input's 'channel' dimension to be "
                                                      "divisible by the square of upscale_factor, but input.size(-3)=5 "
                                                      "is not divisible by 4"),
    (lambda: F.pixel_shuffle(jt.ones(5, 2), 2), "pixel_shuffle expects input to have at least 3 dimensions, but got "
                                                "input with 2 dimension(s)"),
    (lambda: F.pixel_unshuffle(jt.ones(1, 1, 3, 2), 2), "pixel_unshuffle expects height to be divisible by "
                                                        "downscale_factor, but input.size(-2)=3 is not divisible by 2"),
    (lambda: F.pixel_unshuffle(jt.ones(1, 1, 4, 3), 2), "pixel_unshuffle expects width to be divisible by "
                                                        "downscale_factor, but input.size(-1)=3 is not divisible by 2"),
])
def test_pixel_shuffle_errors(call, message):
    with pytest.raises(RuntimeError) as info:
        call()
    assert message in str(info.value)


# Channel dropout -------------------------------------------------------------------------------------

def test_dropout2d_zeroes_whole_channels():
    jt.manual_seed(0)
    x = jt.ones(16, 8, 3, 3)
    y = nn.Dropout2d(0.5)(x).numpy()
    per_channel = y[:, :, :1, :1]
    assert (y == per_channel).all()  # one draw per channel
    assert set(np.unique(per_channel)) == {0.0, 2.0}  # dropped, or scaled by 1 / (1 - p)
    assert 0.3 < (per_channel == 0).mean() < 0.7
    m = nn.Dropout2d(0.5).eval()
    assert m(x) is x


def test_dropout1d_unbatched_inplace_and_gradient():
    jt.manual_seed(1)
    x = jt.ones(6, 4, requires_grad=True)
    y = F.dropout1d(x, 0.5)
    y.sum().backward()
    kept = y.detach().numpy()[:, :1]
    assert (y.detach().numpy() == kept).all()
    assert_close(x.grad, np.broadcast_to(kept, (6, 4)))  # the gradient is the mask
    z = jt.ones(2, 6, 4)
    assert F.dropout1d(z, 0.5, inplace=True) is z
    written = z.numpy()
    assert (written == written[:, :, :1]).all() and set(np.unique(written)) <= {0.0, 2.0}


def test_channel_dropout_errors_and_warnings():
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input, but received a 4D input"):
        F.dropout1d(jt.ones(2, 3, 4, 4))
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        F.dropout2d(jt.ones(2, 3, 4, 4), 1.5)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got -0.1"):
        nn.Dropout1d(-0.1)
    with pytest.warns(UserWarning, match="assuming that channel-wise 1D dropout behavior is desired"):
        y = F.dropout2d(jt.ones(2, 3, 4), 0.5)
    assert (y.numpy() == y.numpy()[:, :, :1]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.dropout2d(jt.ones(2, 3, 4, 4), 0.5)  # 4-D input: no warning


# Compiled --------------------------------------------------------------------------------------------

def _decoder(seed):
    jt.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(),
        nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), nn.InstanceNorm2d(3, affine=True),
        nn.Upsample(scale_factor=0.5, mode="bilinear"), nn.PixelUnshuffle(2),
    )


def test_compiled_training_step_equals_eager(rng):
    eager, compiled = _decoder(0), _decoder(0)

    def step_of(model):
        def step(x, target):
            loss = F.mse_loss(model(x), target)
            loss.backward()
            return loss
        return step

    x = jt.tensor(rng.standard_normal((2, 2, 6, 6)).astype(np.float32))
    target = jt.tensor(rng.standard_normal((2, 12, 3, 3)).astype(np.float32))
    run = jt.compile(step_of(compiled))
    for _ in range(2):  # the second call reuses the compiled graph
        eager.zero_grad()
        compiled.zero_grad()
        assert_close(run(x, target), step_of(eager)(x, target).detach().numpy(), atol=1e-5, rtol=1e-5)
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            assert b.grad is not None, name
            assert_close(b.grad, a.grad.numpy(), atol=1e-4, rtol=1e-4)
    assert run.lower(x, target).kernels


def test_the_older_2d_upsampling_names_are_upsample_with_fixed_modes():
    x = jt.arange(4.0).reshape(1, 1, 2, 2)
    bilinear = nn.UpsamplingBilinear2d(scale_factor=2)
    assert repr(bilinear) == "UpsamplingBilinear2d(scale_factor=2.0, mode='bilinear')"
    expected = np.array([[0, 1 / 3, 2 / 3, 1], [2 / 3, 1, 4 / 3, 5 / 3], [4 / 3, 5 / 3, 2, 7 / 3], [2, 7 / 3, 8 / 3, 3]])
    np.testing.assert_allclose(bilinear(x)[0, 0].numpy(), expected, rtol=1e-6, atol=1e-6)  # align_corners=True
    nearest = nn.UpsamplingNearest2d(size=3)
    assert repr(nearest) == "UpsamplingNearest2d(size=3, mode='nearest')"
    np.testing.assert_array_equal(nearest(x)[0, 0].numpy(), [[0, 0, 1], [0, 0, 1], [2, 2, 3]])
