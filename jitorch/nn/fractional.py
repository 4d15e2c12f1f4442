"""Fractional max pooling (Graham 2014), 2-D and 3-D, as torch's CPU kernels pick the windows.

Each plane (sample and channel) draws one number ``u`` in [0, 1) per pooled dim (``_random_samples``, from
jitorch's generator unless given); along a dim of ``n`` inputs pooled to ``o`` outputs by windows of ``k``,
window ``i`` starts at ``int((i + u) * alpha) - int(u * alpha)`` with ``alpha = (n - k) / (o - 1)``, computed
in the input's precision, and the last window ends at the input's end. The windows' elements are gathered
(one gather of the flattened plane, the candidates in torch's scan order) and ``max`` picks each window's
place; the output is a gather of those places, so autograd sends each output's gradient to its maximum (one
scatter of the outputs), and the compiler fuses it, with nothing of its own here.
"""

from __future__ import annotations

import numpy as np

import jitorch as jt

_DIMS = ("time", "height", "width")


def _pair_or_triple(value, nd, what, name):
    value = (value,) * nd if isinstance(value, int) else tuple(value)
    if len(value) == 1:
        value = value * nd
    if len(value) != nd:
        raise RuntimeError(f"{name}: {what} must either be a single Int or tuple of Ints")
    return value


def _check(input, kernel, output, samples, nd, name):
    """torch's checks of the native op: the input's dims and sizes, the windows' fit, then the samples."""
    prefix = f"{name}()" if nd == 2 else f"{name}_out()"
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{prefix}: Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(input.shape)}")
    for i in range(1, input.ndim):
        if input.shape[i] <= 0:
            raise RuntimeError(f"{prefix}: Expected input to have non-zero size for non-batch dimensions, but got"
                               f"{list(input.shape)} with dimension {i} being empty.")
    fits = list(zip(_DIMS[-nd:], kernel, output, input.shape[-nd:]))
    for dim, k, o, n in fits if nd == 2 else [fits[0], fits[2], fits[1]]:  # (torch's 3-D order: time, width, height)
        # torch's 3-D kernel leaves one input past the last window's end; its 2-D kernel does not
        if o + k - 1 > n - (nd == 3):
            raise RuntimeError(f"{prefix}: pool {dim} {k} too large relative to input {dim} {n}")
    if samples.dtype != input.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if samples.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.ndim}")
    batch, channels = (1, input.shape[0]) if input.ndim == nd + 1 else input.shape[:2]
    if samples.shape[0] < batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != channels:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != nd:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nd}; got {samples.shape[2]}.")


def _starts(u, n, o, k):
    """Each window's first index ``(N, C, o)`` along a dim, from the planes' samples ``u`` ``(N, C)``."""
    if o <= 0:
        return jt.zeros((*u.shape, 0), dtype=jt.int64, device=u.device)
    last = jt.full((*u.shape, 1), n - k, dtype=jt.int64, device=u.device)
    if o == 1:
        return last
    ft = np.float64 if u.dtype == jt.float64 else np.float32
    alpha = float(ft(n - k) / ft(o - 1))  # exact in the samples' dtype
    steps = jt.arange(o - 1, dtype=u.dtype, device=u.device)
    first = ((steps + u.unsqueeze(-1)) * alpha).floor() - (u * alpha).floor().unsqueeze(-1)
    return jt.cat([first.long(), last], -1)


def fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, nd):
    """``fractional_max_pool{nd}d`` (see the module's docstring): the pooled input, and with ``return_indices``
    each maximum's flat index in its plane."""
    name = f"fractional_max_pool{nd}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        if nd == 2 and len(output_ratio) > 2:  # (a number has no len(): TypeError, as torch's 2-D form)
            raise ValueError(f"{name} requires output_ratio to either be a single Int or tuple of Ints.")
        ratio = (output_ratio,) * nd if isinstance(output_ratio, (int, float)) else tuple(output_ratio)
        ratio = ratio * nd if len(ratio) == 1 else ratio
        output_size = [int(input.size(d - nd) * r) for d, r in enumerate(ratio)]
    samples = _random_samples
    if samples is None:
        batch = 1 if input.ndim == nd + 1 else input.size(0)
        samples = jt.rand(batch, input.size(-nd - 1), nd, dtype=input.dtype, device=input.device)
    kernel = _pair_or_triple(kernel_size, nd, "kernel_size", name)
    output = _pair_or_triple(output_size, nd, "output_size", name)
    _check(input, kernel, output, samples, nd, name)
    batched = input.ndim == nd + 2
    x = input if batched else input.unsqueeze(0)
    n, c, spatial = x.shape[0], x.shape[1], tuple(x.shape[2:])
    u = samples[:n].detach()
    # torch's 2-D kernel draws width's sample first, its 3-D kernel time's (then height's, width's)
    order = (1, 0) if nd == 2 else (0, 1, 2)
    starts = [_starts(u[..., s], size, o, k) for s, size, o, k in zip(order, spatial, output, kernel)]
    strides = [int(np.prod(spatial[d + 1:])) for d in range(nd)]
    # the windows' elements (N, C, *output, K) in torch's scan order (np.ndindex of the kernel), as flat indices
    offsets = np.array(list(np.ndindex(*kernel)), np.int64).reshape(-1, nd)
    index = None
    for d, start in enumerate(starts):
        shape = [n, c] + [1] * nd + [1]
        shape[2 + d] = output[d]
        along = jt.tensor(offsets[:, d], device=x.device)
        term = (start.reshape(shape) + along) * strides[d]
        index = term if index is None else index + term
    flat = x.reshape(n, c, -1)
    with jt.no_grad():  # (the maxima's places: the values come from a gather of just those)
        candidates = flat.gather(2, index.reshape(n, c, -1)).reshape(index.shape)
        where = index.gather(-1, candidates.max(-1)[1].unsqueeze(-1)).squeeze(-1)
    out = flat.gather(2, where.reshape(n, c, -1)).reshape(where.shape)
    if not batched:
        out, where = out.squeeze(0), where.squeeze(0)
    return (out, where) if return_indices else out


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """Fractional max pooling of ``(N, C, H, W)`` or ``(C, H, W)`` input: values and flat ``h * W + w`` indices."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, True, _random_samples, 2)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Fractional max pooling of ``(N, C, H, W)`` or ``(C, H, W)`` input to ``output_size`` (or
    ``output_ratio`` of the input's size) by ``kernel_size`` windows at pseudo-random steps."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 2)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """Fractional max pooling of ``(N, C, T, H, W)`` or ``(C, T, H, W)`` input: values and flat indices."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, True, _random_samples, 3)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                          _random_samples=None):
    """Fractional max pooling of ``(N, C, T, H, W)`` or ``(C, T, H, W)`` input (see `fractional_max_pool2d`)."""
    return fractional_max_pool(input, kernel_size, output_size, output_ratio, return_indices, _random_samples, 3)
