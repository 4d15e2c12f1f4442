"""Separable resampling as torch's CPU kernels do it for ``interpolate(..., antialias=True)`` (bilinear and
bicubic) and for uint8 input (bilinear and bicubic, with or without antialias).

Each resized dim (the last first, then the one before; a dim whose size does not change is left alone) takes,
for each output position, a window of source elements and their weights. With antialias the window widens with
the downscale factor and the weights are Pillow's filters (triangle; Keys cubic with a = -0.5) normalised to sum
to 1, computed in the input's float type as torch's ``_compute_indices_min_size_weights_aa``. For uint8 the
weights come in double (antialias: the same windows; without: torch's two or four taps, weights of taps past
an edge added to the edge tap) and are scaled to integers with torch's precision (Pillow's "multiplication
trick"), the sum rounded by adding half the scale, shifted back and clamped to [0, 255], each dim's result
stored as uint8 before the next.

Every dim is one ``index_select`` of all its taps and a weighted sum over them (registry ops), so autograd and the
compiler need nothing of their own.
"""

from __future__ import annotations

import functools
import math

import numpy as np

import jitorch as jt
from jitorch.ops.special_cephes import fma

# uint8 sums go through the dense (n, out) weight matrix while n is at most this many times the taps per output:
# BLAS does a product about 15 times faster than NumPy's gather, multiply and sum do a tap
DENSE_PER_TAP = 16
CUBIC_AA_A = -0.5  # Pillow's (Keys'); torch's bicubic without antialias uses -0.75
CUBIC_A = -0.75


def _filter(x, cubic, a, ft):
    """Pillow's triangle, or the cubic convolution kernel with ``a``, of the array ``x`` (in ``ft``). The cubic's
    multiply-adds are fused, each rounded once, as GCC contracts them in torch's vectorised CPU builds (AVX2,
    AVX512): rounded apart, a weight near the window's edge can come out 0 where torch's is ~1e-14, and an
    infinity there gives NaN where torch's gives the infinity."""
    x = np.abs(x).astype(ft)
    if not cubic:
        return np.where(x < 1, ft(1) - x, ft(0)).astype(ft)
    a = ft(a)
    near = fma(fma(a + ft(2), x, -(a + ft(3)), ft) * x, x, ft(1), ft)
    far = fma(fma(fma(a, x, -ft(5) * a, ft), x, ft(8) * a, ft), x, -ft(4) * a, ft)
    return np.where(x < 1, near, np.where(x < 2, far, ft(0))).astype(ft)


def _scale(n, out, align_corners, scale, ft):
    """torch's ``area_pixel_compute_scale`` in ``ft``."""
    if align_corners:
        return ft(ft(n - 1) / ft(out - 1)) if out > 1 else ft(0)
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return ft(ft(n) / ft(out))


def _frozen(fn):
    """``fn`` computed once per argument tuple (a resize's windows depend on its sizes only), its arrays
    read-only."""
    @functools.lru_cache(maxsize=256)
    def cached(*args):
        results = fn(*args)
        for r in results:
            if isinstance(r, np.ndarray):
                r.setflags(write=False)
        return results
    cached.__doc__ = fn.__doc__
    return cached


@_frozen
def aa_window(n, out, scale, align_corners, cubic, ft):
    """The antialiasing window of each output position: (xmin, xsize, weights (out, taps)), the weights in
    ``ft`` normalised to sum to 1 over the first xsize taps and 0 beyond, as torch computes them."""
    s = _scale(n, out, align_corners, scale, ft)
    interp = 4 if cubic else 2
    support = ft((interp * 0.5) * float(s)) if s >= 1.0 else ft(interp * 0.5)
    taps = int(math.ceil(support)) * 2 + 1
    invscale = ft(1.0 / float(s)) if s >= 1.0 else ft(1.0)
    i = np.arange(out)
    center = (float(s) * (i + 0.5)).astype(ft)
    xmin = np.maximum(((center - support).astype(np.float64) + 0.5).astype(np.int64), 0)
    xsize = np.clip(np.minimum(((center + support).astype(np.float64) + 0.5).astype(np.int64), n) - xmin, 0, taps)
    weights = np.zeros((out, taps), ft)
    total = np.zeros(out, ft)
    for j in range(taps):
        arg = (((j + xmin).astype(ft) - center).astype(np.float64) + 0.5) * float(invscale)
        w = np.where(j < xsize, _filter(arg.astype(ft), cubic, CUBIC_AA_A, ft), ft(0))
        weights[:, j] = w
        total = (total + w).astype(ft)
    nonzero = total != 0
    weights[nonzero] = (weights[nonzero] / total[nonzero, None]).astype(ft)
    return xmin, xsize, weights


def _edge_window(n, out, scale, align_corners, cubic):
    """torch's uint8 window without antialias: two or four taps from the source index below (clamped into
    the input), the weights (double) of taps past an edge added to the edge's tap."""
    s = _scale(n, out, align_corners, scale, np.float64)
    taps = 4 if cubic else 2
    half = taps // 2
    xmin, xsize = np.zeros(out, np.int64), np.zeros(out, np.int64)
    weights = np.zeros((out, taps))
    running_max = 0.0
    for i in range(out):
        src = float(s) * i if align_corners else float(s) * (i + 0.5) - 0.5
        if not cubic and src < 0:
            src = 0.0
        index = min(int(math.floor(src)), n - 1)
        lam = min(max(src - index, 0.0), 1.0)
        low = index - half + 1
        xmin[i] = max(low, 0)
        xsize[i] = min(max(min(index + half + 1, n) - xmin[i], 0), taps)
        at = 0
        for j in range(taps):
            w = float(_filter(np.array([j + 1 - half - lam]), cubic, CUBIC_A, np.float64)[0])
            if low + j <= 0:
                at = 0
            elif low + j >= n - 1:
                at = xsize[i] - 1
            weights[i, at] += w
            running_max = max(running_max, weights[i, at])
            at += 1
    return xmin, xsize, weights, running_max


@_frozen
def uint8_window(n, out, scale, align_corners, cubic, antialias):
    """(xmin, integer weights (out, taps), precision) of torch's uint8 resampling of one dim."""
    if antialias:
        xmin, xsize, weights = aa_window(n, out, scale, align_corners, cubic, np.float64)
        largest = float(weights.max(initial=0.0))
    else:
        xmin, xsize, weights, largest = _edge_window(n, out, scale, align_corners, cubic)
    precision = 0
    while precision < 22 and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    v = weights * (1 << precision)
    scaled = np.where(v < 0, np.trunc(v - 0.5), np.trunc(v + 0.5)).astype(np.int64)
    return xmin, np.where(np.arange(weights.shape[1]) < xsize[:, None], scaled, 0), precision


def _taps_sum(x, dim, xmin, weights, valid):
    """``sum_j x[xmin + j] * weights[:, j]`` along ``dim``, tap by tap in order; taps outside a window
    (``valid`` False) add nothing, not even a NaN of the element they stand on. One ``index_select`` takes
    every tap (laid out tap-major, so that the sum runs over a dim that is not the innermost: in order); a
    tap outside reads a zero appended along ``dim``, its weight being 0."""
    n, (out, taps) = x.shape[dim], weights.shape
    index = np.minimum(xmin[None, :] + np.arange(taps)[:, None], n - 1)
    if not valid.all():
        x = jt.cat([x, x.new_zeros((*x.shape[:dim], 1, *x.shape[dim + 1:]))], dim)
        index = np.where(valid.T, index, n)
    rest = x.shape[dim + 1:]
    picked = x.index_select(dim, jt.tensor(index.reshape(-1), device=x.device))
    picked = picked.reshape(*x.shape[:dim], taps, out, *rest)
    w = jt.tensor(weights.T.reshape(taps, out, *([1] * len(rest))), dtype=x.dtype, device=x.device)
    return (picked * w).sum(dim)


def _integer_sums(x, dim, xmin, weights):
    """``sum_j x[xmin + j] * weights[:, j]`` along ``dim`` (one of the last two) of uint8 ``x`` and integer
    ``weights``, exactly: one float64 product with the (n, out) matrix of the weights, whose products and
    partial sums are integers below 2**53 (255 times weights below 2**16, a few hundred taps), so that no
    order or contraction of the adds rounds."""
    n, (out, taps) = x.shape[dim], weights.shape
    dense = np.zeros((n, out))
    rows = xmin[:, None] + np.arange(taps)[None, :]
    used = rows < n  # (taps past the input's end have weight 0)
    dense[rows[used], np.broadcast_to(np.arange(out)[:, None], rows.shape)[used]] = weights[used]
    values = x.to(jt.float64)
    if dim == x.ndim - 1:
        return values @ jt.tensor(dense, device=x.device)
    return jt.tensor(dense.T.copy(), device=x.device) @ values


def resample(input, sizes, scales, cubic, align_corners, antialias):
    """``input`` (N, C, H, W) resized to ``sizes`` as torch's separable CPU kernels do (see the module)."""
    out = input
    for dim in reversed(range(2, input.ndim)):
        n, m, scale = input.shape[dim], sizes[dim - 2], scales[dim - 2]
        if n == m:
            continue
        if input.dtype == jt.uint8:
            xmin, weights, precision = uint8_window(n, m, scale, align_corners, cubic, antialias)
            if n <= DENSE_PER_TAP * weights.shape[1]:
                wide = _integer_sums(out, dim, xmin, weights).to(jt.int64)
            else:  # (a wide input's dense matrix would be mostly zeros: the taps, in int32, summed in int64)
                wide = _taps_sum(out.to(jt.int32), dim, xmin, weights, np.ones(weights.shape, bool))
            rounded = (wide + (1 << (precision - 1))).bitwise_right_shift(precision)
            out = rounded.clamp(0, 255).to(jt.uint8)
        else:
            ft = np.float64 if input.dtype == jt.float64 else np.float32
            xmin, xsize, weights = aa_window(n, m, scale, align_corners, cubic, ft)
            out = _taps_sum(out, dim, xmin, weights, np.arange(weights.shape[1]) < xsize[:, None])
    return out if out is not input else input.clone()
