"""conv1d/conv2d, pad and the pools of jitorch.nn.functional against NumPy transcriptions of torch's kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.autograd import gradcheck, gradgradcheck
from tests.support import assert_close


# NumPy oracles -------------------------------------------------------------------------------------

def np_conv(x, w, b, stride, padding, dilation, groups):
    """torch's convolution by its definition: ``y[n, o, p] = b[o] + sum_{c, k} xp[n, c, p*s + k*d] w[o, c, k]``."""
    nd = w.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(padding))
    k = w.shape[2:]
    out = [(xp.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    og, cg = w.shape[0] // groups, x.shape[1] // groups
    y = np.zeros((x.shape[0], w.shape[0], *out))
    for pos in np.ndindex(*out):
        window = tuple(slice(p * s, p * s + d * (kk - 1) + 1, d) for p, s, d, kk in zip(pos, stride, dilation, k))
        for g in range(groups):
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + window]
            y[(slice(None), slice(g * og, (g + 1) * og)) + pos] = np.tensordot(
                patch, w[g * og:(g + 1) * og], axes=(list(range(1, nd + 2)), list(range(1, nd + 2))))
    if b is not None:
        y += b.reshape(-1, *[1] * nd)
    return y


def np_pool_out(n, k, s, p, d, ceil_mode):
    """torch's pooling_output_shape."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def np_max_pool2d(x, k, s, p, d, ceil_mode):
    """torch's max_pool2d CPU loop: the first maximum of each window (NaN wins), its flat h*W+w index."""
    H, W = x.shape[-2:]
    oh, ow = (np_pool_out(n, k[i], s[i], p[i], d[i], ceil_mode) for i, n in enumerate((H, W)))
    values = np.zeros(x.shape[:-2] + (oh, ow))
    indices = np.zeros(values.shape, dtype=np.int64)
    for lead in np.ndindex(*x.shape[:-2]):
        for i in range(oh):
            for j in range(ow):
                best, where = -math.inf, -1
                for a in range(k[0]):
                    for c in range(k[1]):
                        h, w = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + c * d[1]
                        if 0 <= h < H and 0 <= w < W and (x[lead + (h, w)] > best or where < 0):
                            best, where = x[lead + (h, w)], h * W + w
                values[lead + (i, j)], indices[lead + (i, j)] = best, where
    return values, indices


def np_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad, divisor_override):
    """torch's avg_pool2d CPU loop."""
    H, W = x.shape[-2:]
    oh, ow = (np_pool_out(n, k[i], s[i], p[i], 1, ceil_mode) for i, n in enumerate((H, W)))
    y = np.zeros(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
            h1, w1 = min(h0 + k[0], H + p[0]), min(w0 + k[1], W + p[1])
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
            total = x[..., h0:h1, w0:w1].sum((-2, -1))
            divisor = divisor_override or (size if count_include_pad else (h1 - h0) * (w1 - w0))
            y[..., i, j] = total / divisor
    return y


def np_adaptive_avg_pool2d(x, out):
    H, W = x.shape[-2:]
    y = np.zeros(x.shape[:-2] + tuple(out))
    for i in range(out[0]):
        for j in range(out[1]):
            h0, h1 = (i * H) // out[0], math.ceil((i + 1) * H / out[0])
            w0, w1 = (j * W) // out[1], math.ceil((j + 1) * W / out[1])
            y[..., i, j] = x[..., h0:h1, w0:w1].mean((-2, -1))
    return y


def t64(a, grad=False):
    return jt.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


# Convolution --------------------------------------------------------------------------------------------

@given(n=st.integers(1, 2), groups=st.sampled_from([1, 2]), cg=st.integers(1, 2), og=st.integers(1, 2),
       size=st.tuples(st.integers(5, 7), st.integers(5, 7)), k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)), pad=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       dil=st.tuples(st.integers(1, 2), st.integers(1, 2)), bias=st.booleans(), seed=st.integers(0, 99))
def test_conv2d_matches_definition(n, groups, cg, og, size, k, stride, pad, dil, bias, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, groups * cg, *size)).astype(np.float32)
    w = rng.standard_normal((groups * og, cg, *k)).astype(np.float32)
    b = rng.standard_normal(groups * og).astype(np.float32) if bias else None
    y = F.conv2d(jt.tensor(x), jt.tensor(w), None if b is None else jt.tensor(b), stride, pad, dil, groups)
    assert_close(y, np_conv(x, w, b, stride, [(p, p) for p in pad], dil, groups), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("k, dil", [((3, 3), 1), ((2, 4), (1, 2)), ((3, 1), 2)])
def test_conv2d_same_pads_the_extra_on_the_right(rng, k, dil):
    x, w = rng.standard_normal((1, 2, 6, 7)), rng.standard_normal((3, 2, *k))
    dil2 = (dil, dil) if isinstance(dil, int) else dil
    totals = [d * (kk - 1) for kk, d in zip(k, dil2)]
    expected = np_conv(x, w, None, (1, 1), [(t // 2, t - t // 2) for t in totals], dil2, 1)
    y = F.conv2d(t64(x), t64(w), padding="same", dilation=dil)
    assert y.shape == x.shape[:1] + (3,) + x.shape[2:]
    assert_close(y, expected)
    assert_close(F.conv2d(t64(x), t64(w), padding="valid", dilation=dil),
                 np_conv(x, w, None, (1, 1), [(0, 0)] * 2, dil2, 1))


def test_conv2d_unbatched_and_conv1d(rng):
    x, w, b = rng.standard_normal((4, 5, 6)), rng.standard_normal((2, 4, 2, 3)), rng.standard_normal(2)
    assert_close(F.conv2d(t64(x), t64(w), t64(b), padding=1), np_conv(x[None], w, b, (1, 1), [(1, 1)] * 2,
                                                                       (1, 1), 1)[0])
    x1, w1 = rng.standard_normal((2, 4, 9)), rng.standard_normal((6, 2, 3))
    assert_close(F.conv1d(t64(x1), t64(w1), stride=2, padding=2, dilation=2, groups=2),
                 np_conv(x1, w1, None, (2,), [(2, 2)], (2,), 2))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=(2, 1), groups=2, padding=(1, 0)),
                                dict(padding="same", dilation=2)])
def test_conv2d_gradcheck(rng, kw):
    x = t64(rng.standard_normal((2, 2, 5, 4)), True)
    w = t64(rng.standard_normal((2, 2 // kw.get("groups", 1), 2, 3)), True)
    b = t64(rng.standard_normal(2), True)
    assert gradcheck(lambda x, w, b: F.conv2d(x, w, b, **kw), (x, w, b))


def test_conv2d_and_max_pool2d_gradgradcheck(rng):
    x = t64(rng.permutation(32).reshape(1, 2, 4, 4) / 10.0, True)
    w = t64(rng.standard_normal((2, 1, 2, 2)), True)
    assert gradgradcheck(lambda x, w: F.max_pool2d(F.conv2d(x, w, stride=1, padding=1, groups=2), 2), (x, w))


def test_conv1d_gradcheck(rng):
    x, w = t64(rng.standard_normal((1, 2, 7)), True), t64(rng.standard_normal((3, 2, 2)), True)
    assert gradcheck(lambda x, w: F.conv1d(x, w, stride=2, padding=1, dilation=2), (x, w))


@pytest.mark.parametrize("padding", [0, 1])
def test_a_batch_of_one_has_the_contiguous_strides_of_torchs_result(rng, padding):
    """A convolution of one image returned a view whose batch stride was 1 (its layout's permute), where
    torch's result has contiguous strides ((14, 7, 1), not (1, 7, 1)); a batch of two was right already."""
    x, w = t64(rng.standard_normal((1, 4, 9)), True), t64(rng.standard_normal((2, 4, 3)))
    y = F.conv1d(x, w, padding=padding)
    length = 7 + 2 * padding
    assert y.stride() == (2 * length, length, 1)
    assert F.conv2d(t64(rng.standard_normal((1, 3, 5, 5))), t64(rng.standard_normal((2, 3, 3, 3))),
                    padding=padding).stride() == (2 * (3 + 2 * padding) ** 2, (3 + 2 * padding) ** 2, 3 + 2 * padding, 1)
    t = F.conv_transpose1d(t64(rng.standard_normal((1, 4, 5))), t64(rng.standard_normal((4, 2, 3))), padding=padding)
    assert t.stride() == (2 * (7 - 2 * padding), 7 - 2 * padding, 1)
    assert_close(y, np_conv(x.detach().numpy(), w.numpy(), None, (1,), [(padding, padding)], (1,), 1))
    y.sum().backward()
    assert x.grad.shape == x.shape


# Padding ----------------------------------------------------------------------------------------------------

NP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@given(shape=st.tuples(st.integers(1, 2), st.integers(3, 5), st.integers(3, 5)),
       widths=st.lists(st.integers(0, 2), min_size=2, max_size=4).filter(lambda w: len(w) % 2 == 0),
       mode=st.sampled_from(["reflect", "replicate", "circular"]))
def test_pad_modes_match_numpy(shape, widths, mode):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    pairs = [(widths[2 * i], widths[2 * i + 1]) for i in range(len(widths) // 2)]
    expected = np.pad(x, [(0, 0)] * (x.ndim - len(pairs)) + pairs[::-1], mode=NP_MODES[mode])
    assert_close(F.pad(jt.tensor(x), widths, mode=mode), expected)


def test_pad_constant_with_value_and_negative_widths(rng):
    x = rng.standard_normal((2, 3, 4))
    expected = np.pad(x[:, :-1, 1:], [(1, 1), (0, 0), (0, 1)], constant_values=2.5)
    assert_close(F.pad(t64(x), (-1, 1, 0, -1, 1, 1), value=2.5), expected)
    assert_close(F.pad(t64(x), (1, 2)), np.pad(x, [(0, 0), (0, 0), (1, 2)]))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_gradcheck(rng, mode):
    x = t64(rng.standard_normal((1, 3, 4)), True)
    assert gradcheck(lambda x: F.pad(x, (2, 1, 1, 2), mode=mode), (x,))


# Pools --------------------------------------------------------------------------------------------------------

POOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True),
]


def _pool_args(kw):
    k = kw["kernel_size"]
    k = (k, k) if isinstance(k, int) else k
    s = kw.get("stride", k)
    s = (s, s) if isinstance(s, int) else s
    p = kw.get("padding", 0)
    p = (p, p) if isinstance(p, int) else p
    return k, s, p


@pytest.mark.parametrize("kw", POOL_CASES + [dict(kernel_size=2, dilation=2, padding=1, ceil_mode=True)])
def test_max_pool2d_values_and_indices(rng, kw):
    x = rng.standard_normal((2, 2, 7, 6))
    x[0, 0, :3, :3] = 0.0  # ties: torch keeps the first maximum
    k, s, p = _pool_args(kw)
    d = kw.get("dilation", 1)
    values, indices = np_max_pool2d(x, k, s, p, (d, d), kw.get("ceil_mode", False))
    got, got_indices = F.max_pool2d(t64(x), return_indices=True, **kw)
    assert_close(got, values)
    assert_close(got_indices, indices)
    assert got_indices.dtype is jt.int64
    assert_close(F.max_pool2d(t64(x[0]), **kw), values[0])


@pytest.mark.parametrize("kw", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(rng, kw, count_include_pad):
    x = rng.standard_normal((2, 3, 7, 6))
    k, s, p = _pool_args(kw)
    expected = np_avg_pool2d(x, k, s, p, kw.get("ceil_mode", False), count_include_pad, None)
    assert_close(F.avg_pool2d(t64(x), count_include_pad=count_include_pad, **kw), expected)


def test_avg_pool2d_divisor_override(rng):
    x = rng.standard_normal((1, 2, 5, 5))
    assert_close(F.avg_pool2d(t64(x), 3, padding=1, divisor_override=4),
                 np_avg_pool2d(x, (3, 3), (3, 3), (1, 1), False, True, 4))


@pytest.mark.parametrize("out, expected", [(1, (1, 1)), (3, (3, 3)), ((4, 5), (4, 5)), ((None, 2), (7, 2)),
                                           (7, (7, 7))])
def test_adaptive_avg_pool2d(rng, out, expected):
    x = rng.standard_normal((2, 3, 7, 6))
    assert_close(F.adaptive_avg_pool2d(t64(x), out), np_adaptive_avg_pool2d(x, expected))


def test_pools_gradcheck(rng):
    x = t64(rng.permutation(60).reshape(1, 3, 5, 4) / 10.0, True)  # distinct values: no max ties
    assert gradcheck(lambda x: F.max_pool2d(x, 3, 2, padding=1, ceil_mode=True), (x,))
    assert gradcheck(lambda x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False), (x,))
    assert gradcheck(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), (x,))


def test_max_pool2d_gradient_goes_to_the_first_tie():
    x = t64(np.zeros((1, 1, 2, 2)), True)
    F.max_pool2d(x, 2).sum().backward()
    assert_close(x.grad, np.array([[[[1.0, 0.0], [0.0, 0.0]]]]))


def test_one_dimensional_pools_match_the_two_dimensional_oracles(rng):
    x = rng.standard_normal((2, 3, 9))
    values, indices = np_max_pool2d(x[..., None, :], (1, 3), (1, 2), (0, 1), (1, 1), True)
    got, got_indices = F.max_pool1d(t64(x), 3, 2, padding=1, ceil_mode=True, return_indices=True)
    assert_close(got, values[..., 0, :])
    assert_close(got_indices, indices[..., 0, :])
    expected = np_avg_pool2d(x[..., None, :], (1, 3), (1, 2), (0, 1), True, False, None)[..., 0, :]
    assert_close(F.avg_pool1d(t64(x), 3, 2, padding=1, ceil_mode=True, count_include_pad=False), expected)
    assert_close(F.adaptive_avg_pool1d(t64(x), 4), np_adaptive_avg_pool2d(x[..., None, :], (1, 4))[..., 0, :])


def test_conv3d(rng):
    x, w = rng.standard_normal((1, 4, 4, 5, 4)), rng.standard_normal((2, 2, 2, 3, 2))
    assert_close(F.conv3d(t64(x), t64(w), stride=(1, 2, 1), padding=1, groups=2),
                 np_conv(x, w, None, (1, 2, 1), [(1, 1)] * 3, (1, 1, 1), 2))
