"""Resampling by source coordinates: bicubic ``interpolate``'s taps, ``affine_grid`` and ``grid_sample``.

Each is a composition of registry ops (index selects and gathers of the input, weights computed from the
coordinates), so autograd gives the gradients with respect to the input and the grid, and the compiler
fuses them; nothing here has a rule or kernel of its own. The weights follow torch's CPU kernels: cubic
convolution with A = -0.75, taps clamped to the edge (interpolate) or padded (grid_sample), computed in
the input's precision (float32 for float32 and 16-bit floats, as torch's ``opmath`` type).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

import jitorch as jt
from jitorch.autograd.engine import saving
from jitorch.ops.registry import scalar_name

CUBIC_A = -0.75


def _opmath(dtype):
    """The NumPy type torch's kernels compute coordinates and weights in for a floating ``dtype``."""
    return np.float64 if dtype == jt.float64 else np.float32


def cubic_weights(t):
    """torch's ``get_cubic_upsample_coefficients``: the four tap weights of fractions ``t`` (any array
    type: NumPy for constant taps, tensors for a grid's)."""
    a = CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    rest = 1.0 - t
    return [far(t + 1.0), near(t), near(rest), far(rest + 1.0)]


def cubic_taps(n, out, scale, align_corners, dtype):
    """The four source indices (clamped into ``[0, n)``) and weights of each output position of a bicubic
    resampling of ``n`` elements to ``out``, computed as torch's ``compute_indices_weights_cubic``."""
    ft = _opmath(dtype)
    dst = np.arange(out, dtype=ft)
    if align_corners:
        step = ft(n - 1) / ft(out - 1) if out > 1 else ft(0)
        src = step * dst
    else:
        step = ft(1.0 / scale) if scale else ft(n) / ft(out)
        src = step * (dst + ft(0.5)) - ft(0.5)  # not clamped at 0, unlike linear: the taps reach below
    base = np.minimum(np.floor(src).astype(np.int64), n - 1)
    t = np.minimum(np.maximum(src - base.astype(ft), ft(0)), ft(1))
    weights = cubic_weights(t)
    indices = [np.clip(base - 1 + j, 0, n - 1) for j in range(4)]
    return indices, weights



# affine_grid ----------------------------------------------------------------------------------------------

_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                  "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                  "grid_sample for details.")


def _align(align_corners):
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=3)
        return False
    return bool(align_corners)


def _base_coordinates(theta, n, align_corners):
    """torch's ``linspace_from_neg_one``: ``n`` pixel centres in [-1, 1] (0 alone for one pixel)."""
    if n <= 1:
        return jt.zeros(1, dtype=theta.dtype, device=theta.device)
    line = jt.linspace(-1, 1, n, dtype=theta.dtype, device=theta.device)
    return line if align_corners else line * (n - 1) / n


def affine_grid(theta, size, align_corners=None):
    """The sampling grid of a batch of affine maps: ``(N, H, W, 2)`` from ``theta`` ``(N, 2, 3)`` and ``size``
    ``(N, C, H, W)``, or ``(N, D, H, W, 3)`` from ``(N, 3, 4)`` and a 5-D size. As torch's
    ``affine_grid_generator``: the homogeneous pixel centres ``(x, y[, z], 1)`` times ``theta`` transposed,
    one batched product."""
    align_corners = _align(align_corners)
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    given, size = size, tuple(size)  # (torch's messages show the size as given: a list, a tuple)
    nd = len(size) - 2
    if nd not in (2, 3):
        raise NotImplementedError("affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {given}.")
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (nd, nd + 1):
        kind = "2D" if nd == 2 else "3D"
        raise ValueError(f"Expected a batch of {kind} affine matrices of shape Nx{nd}x{nd + 1} for size {given}. "
                         f"Got {theta.shape}.")
    spatial = size[2:]
    if align_corners and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation "
                      "of affine_grid for details.", stacklevel=2)
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {given}")
    n = size[0]
    # coordinate k of the grid runs along spatial dim nd - 1 - k (x along the last)
    axes = []
    for k in range(nd):
        shape = [1] * nd
        shape[nd - 1 - k] = spatial[nd - 1 - k]
        axes.append(_base_coordinates(theta, spatial[nd - 1 - k], align_corners).reshape(shape).expand(*spatial))
    axes.append(jt.ones(spatial, dtype=theta.dtype, device=theta.device))
    base = jt.stack(axes, -1).reshape(1, -1, nd + 1).expand(n, -1, nd + 1)
    return jt.bmm(base, theta.transpose(1, 2)).reshape(n, *spatial, nd)


# grid_sample ----------------------------------------------------------------------------------------------

_MODES = ("bilinear", "nearest", "bicubic")
_PADDINGS = ("zeros", "border", "reflection")


def _check_grid_sample(input, grid, mode, padding_mode):
    """torch's checks of ``grid_sample``, in its order (the functional's, ``check_grid_sampler_common``,
    the 2-D/3-D one, then the kernel's dtype dispatch)."""
    if mode not in _MODES:
        raise ValueError("nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                         f"got: '{mode}'")
    if padding_mode not in _PADDINGS:
        raise ValueError("nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    if input.device != grid.device:
        raise RuntimeError("grid_sampler(): expected input and grid to be on same device, but input is on "
                           f"{input.device} and grid is on {grid.device}")
    sizes = f"input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got {sizes}")
    if grid.shape[-1] != input.ndim - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {input.ndim - 2} in last dimension, but got "
                           f"grid with sizes {list(grid.shape)}")
    for i in range(2, input.ndim):
        if input.shape[i] <= 0:
            raise RuntimeError("grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                               f"sizes {list(input.shape)} with dimension {i} being empty")
    want = 4 if input.ndim == 4 else 5
    if input.ndim != want or grid.ndim != want:
        raise RuntimeError(f"grid_sampler(): expected {want}D input and grid with same number of dimensions, but got "
                           f"{sizes}")
    if want == 5 and mode == "bicubic":
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if not input.dtype.is_floating_point:
        kernel = "grid_sampler_2d_cpu_kernel_impl" if want == 4 else "grid_sampler3d_cpu"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(input.dtype)}'")
    if grid.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {scalar_name(input.dtype)} but found {scalar_name(grid.dtype)}")


def _clip(x, n):
    """Coordinates clipped into ``[0, n - 1]``; as torch's ``clip_coordinates`` the gradient passes strictly
    inside only (the borders count as out of bounds), and NaN becomes 0."""
    hi = float(n - 1)
    return jt.where(x > 0, jt.where(x < hi, x, hi), 0.0)


def _reflect(x, n, align_corners):
    """torch's ``reflect_coordinates``: ``x`` folded into the pixel span (centres with ``align_corners``, else
    edges) by reflections at its ends, then clipped."""
    if align_corners:
        if n == 1:
            return jt.zeros_like(x)
        low, span = 0.0, float(n - 1)
    else:
        low, span = -0.5, float(n)
    x = (x - low).abs()
    extra = jt.fmod(x, span)
    odd = jt.fmod(jt.floor(x / span), 2) != 0
    return _clip(jt.where(odd, span - extra, extra) + low, n)


def _source(coord, n, padding_mode, align_corners, pad):
    """Pixel coordinates of normalized ``coord`` along a dim of ``n`` pixels (torch's
    ``grid_sampler_compute_source_index``; with ``pad`` False, unnormalized only, as bicubic takes them)."""
    x = coord * ((n - 1) / 2 if align_corners else n / 2) + (n - 1) / 2
    if pad and padding_mode == "border":
        return _clip(x, n)
    if pad and padding_mode == "reflection":
        return _reflect(x, n, align_corners)
    return x  # (an infinite one gives NaN weights, as torch's kernels do)


def _tap_index(x, n, padding_mode, align_corners):
    """A bicubic tap's whole coordinate, padded as torch's ``compute_coordinates``."""
    if padding_mode == "border":
        return _clip(x, n)
    if padding_mode == "reflection":
        return _reflect(x, n, align_corners)
    return x


def _gather(input, coords):
    """``input`` at whole pixel coordinates (float tensors, one per spatial dim, broadcasting to the batch
    then the output's dims), 0 outside; ``(N, C, *out)``. Each dim's test and integer part are taken before
    the coordinates broadcast (a tap's row once for its four columns). The input is padded with zeros after
    each spatial dim's end, where a coordinate outside points, so nothing is chosen on the broadcast
    positions or on the C times larger values (and a NaN or inf of the input at a clamped tap cannot leak in)."""
    n, c = input.shape[:2]
    spatial = input.shape[2:]
    padded = jt.nn.functional.pad(input, (0, 1) * len(spatial))
    flat, oks = None, []
    for x, extent in zip(coords, spatial):
        ok = (x >= 0) & (x < extent)
        oks.append(ok)
        i = jt.where(ok, x, float(extent)).long()
        flat = i if flat is None else flat * (extent + 1) + i
    out = tuple(flat.shape[1:])
    # (sizes spelled out: -1 is ambiguous in an empty batch)
    index = flat.reshape(n, 1, math.prod(out)).expand(n, c, math.prod(out))
    values = padded.reshape(n, c, math.prod(padded.shape[2:])).gather(2, index).reshape(n, c, *out)
    if not coords[0].requires_grad:
        return values
    # a coordinate requiring grad (nearest's) links in by a branch never taken: its gradient is zeros, as torch's
    inside = oks[0]
    for ok in oks[1:]:
        inside = inside & ok
    return jt.where(inside.unsqueeze(1), values, jt.where(inside, coords[0], 0.0).unsqueeze(1))


@saving("input", "grid")
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """``input`` ``(N, C, *in)`` sampled at the normalized coordinates of ``grid`` ``(N, *out, nd)`` (x along
    the last spatial dim), 2-D or 3-D; ``mode`` bilinear (trilinear in 3-D), nearest (ties to even) or
    bicubic (2-D), ``padding_mode`` zeros, border or reflection, as torch's ``grid_sampler``. Gathers of the
    flattened input weighted by the coordinates' fractions: differentiable in both input and grid."""
    align_corners = _align(align_corners)
    _check_grid_sample(input, grid, mode, padding_mode)
    if input.dtype in (jt.float16, jt.bfloat16):  # torch's kernels compute in float32 and round once
        return _sample(input.float(), grid.float(), mode, padding_mode, align_corners).to(input.dtype)
    return _sample(input, grid, mode, padding_mode, align_corners)


def _sample(input, grid, mode, padding_mode, align_corners):
    """grid_sample of checked arguments."""
    spatial = input.shape[2:]
    nd = len(spatial)
    # grid's component k addresses spatial dim nd - 1 - k
    coords = [grid[..., nd - 1 - d] for d in range(nd)]
    if mode == "bicubic":
        return _bicubic(input, coords, padding_mode, align_corners)
    xs = [_source(x, n, padding_mode, align_corners, True) for x, n in zip(coords, spatial)]
    if mode == "nearest":
        return _gather(input, [jt.round(x) for x in xs])
    # the 2**nd corners in one gather, corner (b_0, ..., b_nd-1) along dims 2 to nd + 1 (C order: torch's order
    # of the terms), weighted by the product of each dim's fraction (bit 1) or its complement (bit 0) in dim order
    n, points = xs[0].shape[0], tuple(xs[0].shape[1:])
    both = jt.stack(xs, 1)  # (N, nd, *points): every dim's floor and fractions at once
    lows = jt.floor(both).detach()
    f = both - lows
    fractions = jt.stack([1 - f, f], 2)  # (N, nd, 2, *points)
    bits = jt.tensor([0.0, 1.0], dtype=both.dtype, device=both.device)
    corners, weights = [], None
    for d in range(nd):
        shape = [n] + [1] * nd + list(points)
        shape[1 + d] = 2
        corners.append(lows[:, d].reshape(n, *([1] * nd), *points) + bits.reshape([2 if i == 1 + d else 1
                                                                                   for i in range(len(shape))]))
        w = fractions[:, d].reshape(shape)
        weights = w if weights is None else weights * w
    terms = _gather(input, corners) * weights.unsqueeze(1)
    return terms.reshape(n, input.shape[1], 2 ** nd, *points).sum(2)


def _bicubic(input, coords, padding_mode, align_corners):
    """grid_sample's bicubic mode: 4 x 4 taps around each point in one gather, each row's four weighted by
    torch's cubic coefficients of the x fraction and added in order, then the rows by those of the y
    fraction; each tap's coordinate padded on its own."""
    (h, w), (cy, cx) = input.shape[2:], coords
    ys, xs = (_source(c, n, padding_mode, align_corners, False) for c, n in ((cy, h), (cx, w)))
    n, points = ys.shape[0], tuple(ys.shape[1:])
    rest = [1] * len(points)
    # both dims' weights at once (elementwise: the same values as dim by dim, half the ops)
    both = jt.stack([ys, xs], 1)  # (N, 2, *points)
    low = jt.floor(both).detach()
    weights = jt.stack(cubic_weights(both - low), 2).unsqueeze(1)  # (N, 1, 2, 4, *points)
    y0, x0 = low[:, 0], low[:, 1]
    steps = jt.arange(-1, 3, dtype=ys.dtype, device=ys.device)
    y = _tap_index(y0.unsqueeze(1).unsqueeze(1) + steps.reshape(1, 4, 1, *rest), h, padding_mode, align_corners)
    x = _tap_index(x0.unsqueeze(1).unsqueeze(1) + steps.reshape(1, 1, 4, *rest), w, padding_mode, align_corners)
    taps = _gather(input, [y.detach(), x.detach()])  # (N, C, 4, 4, *points)
    wy, wx = weights[:, :, 0], weights[:, :, 1].unsqueeze(2)  # (N, 1, 4, *points), (N, 1, 1, 4, *points)
    return ((taps * wx).sum(3) * wy).sum(2)
