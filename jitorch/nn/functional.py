"""``jitorch.nn.functional``: layers, activations and losses as functions, with torch's signatures.

Every function is a composition of registry ops, so autograd differentiates it,
the tracer records it and the compiler fuses it with no code of its own here.
Convolutions and pools gather their windows as one strided view of a padded input
(im2col), copied once where a reshape merges them; the backward accumulates through
the same view (col2im, `_as_strided_add`). In a compiled call, DCGAN's 4x4 stride-2
convolutions of 32 channels or more take Winograd's F(2x2, 2x2) instead
(`_winograd_conv`). A convolution lays its input out batch innermost, so that every
image's windows are the columns of one GEMM per group and both copies move whole
batch rows.

Checks that need tensor values (a class index out of range, BCE inputs outside
[0, 1]) go through `jitorch.ops.value_checks.check`: at once eagerly, and as a
check node of the graph while tracing, which a compiled call runs at each call.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from typing import NamedTuple

import numpy as np

import jitorch as jt
from jitorch.autograd.engine import not_differentiable, saves_also, saving as _saves
from jitorch.compiler import is_compiling, reruns_eagerly
from jitorch.ops.attention import (attention_fast, fused as _fused_attention,
                                   saves_output as _attention_saves_output)
from jitorch.ops import linalg
from jitorch.ops.autocast import autocasts
from jitorch.ops.pointwise import _normal_cdf, _normal_pdf
from jitorch.nn.ctc import ctc_loss
from jitorch.nn.fractional import (fractional_max_pool2d, fractional_max_pool2d_with_indices, fractional_max_pool3d,
                                   fractional_max_pool3d_with_indices)
from jitorch.nn import mha
from jitorch.nn.antialias import resample as antialias_resample
from jitorch.nn.sampling import affine_grid, cubic_taps, grid_sample
from jitorch.ops.reductions import moments  # (not var_mean: its mean carries torch's Welford infinities)
from jitorch.ops.value_checks import EagerRerun, check as _check_values
from jitorch.ops.registry import DISPATCH_HOOKS as _HOOKS, OPS as _OPS, cpp_name, hooks_take_calls, scalar_name
from jitorch.runtime import blas_library, cuda_backend, fp_errors, profiling
from jitorch.runtime.autocast_mode import STATE as _AUTOCAST
from jitorch.ops.views import contiguous_format, format_strides, suggest_memory_format
from jitorch.runtime.strided import contiguous_strides, is_contiguous, iterator_strides

__all__ = [
    "linear", "bilinear", "conv1d", "conv2d", "conv3d", "pad", "max_pool1d", "max_pool2d", "avg_pool1d",
    "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "batch_norm", "layer_norm", "embedding",
    "dropout", "relu", "relu_", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax", "leaky_relu",
    "logsigmoid", "softplus", "elu", "hardtanh", "relu6", "hardsigmoid", "hardswish", "mish", "softsign", "glu",
    "softmin", "normalize", "cosine_similarity", "pairwise_distance", "one_hot", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "kl_div", "cross_entropy", "nll_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "scaled_dot_product_attention",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "group_norm", "instance_norm", "interpolate",
    "pixel_shuffle", "pixel_unshuffle", "dropout1d", "dropout2d",
    "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
    "cosine_embedding_loss", "triplet_margin_loss", "poisson_nll_loss", "gaussian_nll_loss", "multi_margin_loss",
    "max_pool3d", "avg_pool3d", "elu_", "celu", "celu_", "selu", "selu_", "softshrink", "hardshrink", "tanhshrink",
    "threshold", "threshold_", "rrelu", "rrelu_", "prelu", "leaky_relu_", "hardtanh_",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices", "lp_pool1d", "lp_pool2d", "lp_pool3d",
    "max_unpool1d", "max_unpool2d", "max_unpool3d", "channel_shuffle", "native_channel_shuffle", "unfold", "fold",
    "upsample", "upsample_nearest", "upsample_bilinear", "rms_norm", "local_response_norm", "dropout3d",
    "alpha_dropout", "feature_alpha_dropout", "gumbel_softmax", "pdist", "multilabel_margin_loss",
    "triplet_margin_with_distance_loss", "embedding_bag",
    "affine_grid", "grid_sample", "ctc_loss", "fractional_max_pool2d", "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d", "fractional_max_pool3d_with_indices", "multi_head_attention_forward", "conv_tbc",
    "linear_cross_entropy",
]


# Argument helpers ---------------------------------------------------------------------------------

def _tuple(value, n):
    """An int or a sequence of ints as an n-tuple (torch's ``_ntuple``; a 1-sequence repeats)."""
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    return value * n if len(value) == 1 else value


def _has_data(t):
    """Whether a check may read ``t``'s values now: False for the fake tensors of a trace, and for every tensor
    while tracing (a captured one holds values, but what the trace's ops make of it does not, and a check on
    them would send the whole function back to eager; the graph's indexing steps check at each call)."""
    return not is_compiling() and (t._storage.data is not None or t._storage.on_device)


def _sizes(shape):
    return "x".join(str(n) for n in shape)


# Linear layers -------------------------------------------------------------------------------------

_LINEAR_FAST = _OPS["linear"].fast
_NORMAL_CDF = _OPS["_normal_cdf"]
_LAYER_NORM_FAST = _OPS["layer_norm"].fast


@autocasts("linear", first=_LINEAR_FAST, arity=3)  # (nn.Linear's call)
def linear(input, weight, bias=None):
    """``input @ weight.T + bias``: the op ``linear`` in eager code (a 2-d weight, CPU float32 or float64 of one
    dtype); a matmul and an add in a traced step, where the add fuses."""
    if not _HOOKS:  # (a trace or a profile takes every call through the registry's dispatch)
        out = _LINEAR_FAST((input, weight, bias))
        if out is not None:
            return out
    if (not is_compiling() and weight.ndim == 2 and input.ndim >= 1 and input.shape[-1] == weight.shape[1]
            and input.dtype in (jt.float32, jt.float64) and input.device.type == "cpu"
            and all(t is None or (t.dtype is input.dtype and t.device.type == "cpu") for t in (weight, bias))
            and (bias is None or tuple(bias.shape) in ((), (weight.shape[0],)))):
        return _OPS["linear"](input, weight, bias)
    out = jt.matmul(input, weight.t() if weight.ndim == 2 else weight)
    return out if bias is None else out + bias


@autocasts("bilinear")
def bilinear(input1, input2, weight, bias=None):
    """``y_o = x1 W_o x2 + b_o`` over the last dims of ``input1`` and ``input2``."""
    for k, x in ((1, input1), (2, input2)):
        if x.shape[-1] != weight.shape[k]:
            raise RuntimeError(f"bilinear(): input{k} size does not match weight size: got {x.shape[-1]} "
                               f"but expected {weight.shape[k]}")
    out = jt.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else out + bias


# Padding ---------------------------------------------------------------------------------------------

def _index_pad(x, dim, left, right, mode):
    """``x`` padded along ``dim`` by gathering each output position's source index."""
    n = x.shape[dim]
    pos = np.arange(-left, n + right)
    if mode == "replicate":
        src = np.clip(pos, 0, n - 1)
    elif mode == "circular":
        # torch trims the negative widths first, then wraps around what is left
        start = max(-left, 0)
        kept = n - start - max(-right, 0)
        src = start + np.arange(-max(left, 0), kept + max(right, 0)) % max(kept, 1)
    else:  # reflect: mirror about the edge elements, which are not repeated
        period = 2 * (n - 1)
        src = np.abs(pos) % period if period else np.zeros_like(pos)
        src = np.where(src >= n, period - src, src)
    return x.index_select(dim, jt.tensor(src, dtype=jt.int64, device=x.device))


def _padded_dims(input, pad, k):
    """(dim, left, right, size) of each of the last ``k`` dims, last dim first (the order of ``pad``)."""
    return [(input.ndim - 1 - i, pad[2 * i], pad[2 * i + 1], input.shape[input.ndim - 1 - i]) for i in range(k)]


def _check_circular_pad(input, pad, k):
    """torch's checks of a circular pad, then one of jitorch's own: a width beyond what the negative
    widths of its dim leave would wrap twice, where torch copies memory it has not written yet."""
    dims = _padded_dims(input, pad, k)
    for _, left, right, n in dims:
        if left > n or right > n:
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if n + left + right < 0:
            raise RuntimeError("Negative padding value is resulting in an empty dimension")
    for _, left, right, n in dims:
        kept = n - max(-left, 0) - max(-right, 0)
        if max(left, right) > kept:
            raise RuntimeError(f"Padding value causes wrapping around more than once: padding ({left}, {right}) "
                               f"wraps around the {kept} elements that the negative padding leaves of a dim of {n}")


def _check_edge_pad(input, pad, mode, k):
    """torch's checks of a reflect or replicate pad: reflect widths below the size, and an output that
    is neither empty in every padded dim nor negative in any."""
    dims = _padded_dims(input, pad, k)
    for dim, left, right, n in dims:
        if mode == "reflect" and (left >= n or right >= n):
            raise RuntimeError(f"Argument #{2 * max(k, 2)}: Padding size should be less than the corresponding "
                               f"input dimension, but got: padding ({left}, {right}) at dimension {dim} of input "
                               f"{list(input.shape)}")
    sizes = [n for *_, n in reversed(dims)]
    out = [n + left + right for _, left, right, n in reversed(dims)]
    if all(o < 1 for o in out):
        axes = ("D", "H", "W")[3 - k:]
        given = ", ".join(f"{a}: {n}" for a, n in zip(axes[-2:], sizes[-2:]))
        if k == 3:
            given = f"D: {sizes[0]} {given}"
        raise RuntimeError(f"input ({given}) is too small. Calculated output "
                           + " ".join(f"{a}: {o}" for a, o in zip(axes, out)))
    negative = [o for o in out if o < 0]
    if negative:
        shape = list(input.shape[:input.ndim - k]) + out
        raise RuntimeError(f"Trying to create tensor with negative dimension {negative[0]}: {shape}")


def _constant_pad(x, pad, value):
    """``x`` cropped by the negative widths, then grown by the positive ones: always a new tensor, as torch's
    (a pad of zero or negative widths is a copy, not the input or a view of it, which a write would reach)."""
    dims = [(x.ndim - 1 - k, pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)]
    source = x  # (torch's constant_pad_nd keeps a channels-last layout)
    if x.requires_grad and jt.is_grad_enabled() and suggest_memory_format(x._shape, x._stride) is not contiguous_format:
        x = _GradInFormat.apply(x, None)  # (its backward is a pad of the gradient, in the gradient's format)
    for dim, left, right in dims:  # (cropped first: the last cat's result is compact, as torch's)
        if left < 0:
            x = x.narrow(dim, -left, x.shape[dim] + left)
        if right < 0:
            x = x.narrow(dim, 0, x.shape[dim] + right)
    if all(w <= 0 for w in pad):
        return x.clone()
    for dim, left, right in dims:
        parts = []
        for width in (max(left, 0), max(right, 0)):
            shape = list(x.shape)
            shape[dim] = width
            parts.append(jt.full(shape, value, dtype=x.dtype, device=x.device) if width else None)
        if parts[0] is not None or parts[1] is not None:
            x = jt.cat([p for p in (parts[0], x, parts[1]) if p is not None], dim)
    return _in_format_of(source, x)


def _pad_op(input, pad, mode="constant", value=None):
    """The op torch's ``pad`` runs, as autocast's lists name it."""
    kind = {"reflect": "reflection_pad", "replicate": "replication_pad"}.get(mode)
    return None if kind is None else f"{kind}{len(pad) // 2}d"


@autocasts(_pad_op)
def pad(input, pad, mode="constant", value=None):
    """Pad the last ``len(pad) // 2`` dims: ``pad = (last_left, last_right, prev_left, ...)``.

    ``mode`` is 'constant' (with ``value``, default 0; negative widths crop), 'reflect',
    'replicate' or 'circular' (these pad the last 1-3 dims of a batched or unbatched input).
    """
    pad = tuple(pad)
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError("Padding length should be less than or equal to two times the input dimension but got "
                           f"padding length {len(pad)} and input of dimension {input.ndim}")
    if mode == "constant":
        return _constant_pad(input, pad, 0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    k = len(pad) // 2
    if k not in (1, 2, 3) or input.ndim not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {input.ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    if mode == "circular":
        _check_circular_pad(input, pad, k)
    else:
        _check_edge_pad(input, pad, mode, k)
    if mode == "circular":
        return _pads(input, pad, mode, k)
    x = _edge_pad(input, pad, mode, k)
    saves_also(x, (input,))  # (torch's reflection and replication pads are one node that saves the input)
    return x


# Sliding windows ---------------------------------------------------------------------------------------

def _window_steps(strides, stride, dilation):
    """Per spatial dim of a tensor with ``strides``: the element step between a window's kernel positions
    (``dilation`` apart) and between windows (``stride`` apart). Every window view (im2col) and every
    accumulation through one (col2im, `_as_strided_add`) is laid out from these."""
    return tuple(d * t for d, t in zip(dilation, strides)), tuple(s * t for s, t in zip(stride, strides))


def _patches(x, kernel, stride, dilation, out, dim):
    """The windows of the trailing ``len(kernel)`` dims of ``x`` (already padded), stacked along ``dim``.

    Result: ``x``'s shape with its trailing dims replaced by the output positions ``out`` and a new
    dim of the kernel positions (row-major) at ``dim``. All windows are one strided view of ``x``
    (``as_strided``), copied once by the reshape that merges the kernel positions: the backward is one
    accumulation of the overlapping windows' gradients, not a scatter into zeros per kernel position.
    """
    nd = len(kernel)
    offsets, steps = _window_steps(x.stride()[-nd:], stride, dilation)
    windows = tuple(x.shape[:-nd]) + tuple(out)
    window_strides = tuple(x.stride()[:-nd]) + steps
    view = x.as_strided(windows[:dim] + tuple(kernel) + windows[dim:],
                        window_strides[:dim] + offsets + window_strides[dim:], x.storage_offset())
    return view.reshape(windows[:dim] + (math.prod(kernel),) + windows[dim:])


def _batch_last(x, pads=()):
    """``(N, C, *spatial)`` as a contiguous ``(C, *padded spatial, N)``: the layout a convolution gathers its
    windows from and accumulates them into. With the batch innermost, every kernel position's slice of the
    windows is a run of whole batch rows (long unit-stride copies and adds, where the image layout has runs
    of one output row, ``stride`` apart), and all images' windows are the columns of one GEMM operand."""
    t = x.permute(1, *range(2, x.ndim), 0)
    if not any(l or r for l, r in pads):
        return t.contiguous()
    # the input written once into the interior of zeros (its gradient: a strided view of theirs)
    shape = (t.shape[0], *(m + l + r for m, (l, r) in zip(t.shape[1:-1], pads)), t.shape[-1])
    strides = contiguous_strides(shape)
    offset = sum(l * st for (l, _), st in zip(pads, strides[1:-1]))
    return jt.as_strided_scatter(t.new_zeros(shape), t, tuple(t.shape), strides, offset)


def _batch_first(t):
    """A ``(C, *spatial, N)`` result as the contiguous ``(N, C, *spatial)`` tensor a convolution returns."""
    if t.shape[-1] == 1:  # a batch of one: a view, whose batch stride is contiguous as torch's (permute's is 1)
        return t.contiguous().view(1, *t.shape[:-1])
    return t.permute(t.ndim - 1, *range(t.ndim - 1)).contiguous()


def _grouped_windows(shape, groups, kernel, stride, dilation, out):
    """The geometry ``(size, stride)`` of the windows of a contiguous ``(C, *spatial, N)`` tensor of ``shape`` as
    ``(groups, C / groups, *kernel, *out, N)``: merged, these dims are the ``(groups, C / groups * K, L * N)``
    columns of a grouped convolution's GEMM (im2col), and accumulating through them is col2im. Channel-major, as
    a weight's ``(C / groups, *kernel)`` dims lie: the GEMM reads the weight as it is (a convolution's as a
    matrix, a transposed convolution's as a transposed one), with no copy each call, and its gradient is the
    weight's layout."""
    strides = contiguous_strides(shape)
    c, n = shape[0], shape[-1]
    offsets, steps = _window_steps(strides[1:-1], stride, dilation)
    size = (groups, c // groups, *kernel, *out, n)
    return size, ((c // groups) * strides[0], strides[0], *offsets, *steps, 1)


def _check_spatial(value, n, what):
    if len(value) != n:
        raise RuntimeError(f"expected {what} to be a single integer value or a list of {n} values to match the "
                           f"convolution dimensions, but got {what}={list(value)}")


# Winograd's F(2x2, 2x2) for 4x4 kernels at stride 2 --------------------------------------------------------------
#
# A stride-2 4x4 kernel is four 2x2 kernels of stride 1 over the input's space-to-depth channels (C, a, b): pixel
# (2r + a, 2s + b) of channel c is pixel (r, s) of channel (c, a, b). F(2x2, 2x2) computes each 2x2 tile of outputs of
# a 2x2 kernel from a 3x3 tile of inputs with 9 products where the direct sum takes 16, its transforms only adds: the
# GEMM of a convolution becomes nine (O, 4C) @ (4C, L / 4) products of 9/16 of its multiply-adds, and so do the two
# products of each backward (autograd transposes every step). Measured on DCGAN's layers (one thread, OpenBLAS,
# process CPU, interleaved): the nine products took 0.52-0.58 of the one GEMM's time, forward and both gradients;
# a compiled layer's forward and backward 0.70-0.76 of the direct one's, the compiled DCGAN step 0.76 (one thread,
# thread CPU, in turns in one process). Eager calls keep the direct GEMM: their step took 1.06-1.12 of the direct
# one's at 1-2 threads (more, smaller ops, each a NumPy pass).
# Small channel counts keep the direct GEMM, whose im2col is the cheaper of the two gathers there. Rounding differs
# from the direct sum's (float32: relative 1e-6 of the outputs' scale against torch), and the transforms subtract
# inputs: an infinite input gives NaN in the outputs of its tiles where the direct sum may give an infinity. So
# only a compiled call that reruns eagerly takes it (`jitorch.compiler.reruns_eagerly`), and its graph checks the
# sum of each result, and of each result's gradient, finite (`_winograd_checked`): where one is not, the call
# raises before it writes anything and runs eagerly, by direct sums.
WINOGRAD_MIN_CHANNELS = 32


def _winograd_fits(weight, groups, stride, dilation, channels, spatial):
    """Whether a 2-d convolution (a transposed one: its input's) takes `_winograd_conv`: in a compiled call that reruns
    eagerly where a value is not finite (`_winograd_checked`), a float CPU ``(O, C, 4, 4)``
    weight (a transposed convolution's is ``(C_in, C_out, 4, 4)``) at stride 2, no dilation, one group, both channel
    counts at least ``WINOGRAD_MIN_CHANNELS`` and ``spatial`` (the padded input's sizes, less 2; a transposed one's:
    its input's) made of whole tiles."""
    return (reruns_eagerly() and weight.ndim == 4 and tuple(weight.shape[2:]) == (4, 4) and tuple(stride) == (2, 2)
            and tuple(dilation) == (1, 1) and groups == 1 and weight.dtype in (jt.float32, jt.float64)
            and weight.device.type == "cpu" and min(channels) >= WINOGRAD_MIN_CHANNELS
            and all(s > 0 and s % 4 == 0 for s in spatial))


def _f22_data(d0, d1, d2):
    """F(2, 2)'s input transform Bᵀ of a tile's three inputs."""
    return [d0 - d1, d1, d2 - d1]


def _f22_data_adjoint(v0, v1, v2):
    """B: the adjoint of `_f22_data`."""
    return [v0, v1 - v0 - v2, v2]


def _f22_taps(g0, g1):
    """F(2, 2)'s kernel transform G of two taps; also Aᵀ's adjoint (A = G)."""
    return [g0, g0 + g1, g1]


def _f22_out(m0, m1, m2):
    """F(2, 2)'s output transform Aᵀ of the three products: a tile's two outputs."""
    return [m0 + m1, m1 + m2]


def _f22_tiles(t, fn):
    """``fn`` applied along ``t``'s first dim (a tile's rows), then along its second (its columns): the 2-d
    transform's pieces stacked, rows outer. Through unbind and stack, whose gradients are each other; each piece an
    expression of ``t``'s elements, which one kernel computes (the rows' transform, unbound after, was a kernel and
    a buffer of its own)."""
    d = [row.unbind(0) for row in t.unbind(0)]
    columns = [fn(*(row[j] for row in d)) for j in range(len(d[0]))]
    return jt.stack([q for x in range(len(columns[0])) for q in fn(*(column[x] for column in columns))])


def _f22_windows(shape):
    """(size, strides) of the input tiles over a contiguous ``(C, 4 Th + 2, 4 Tw + 2, N)`` tensor, as
    ``(3, 3, C, 2, 2, Th, Tw, N)``: element ``(i, j, c, a, b, ti, tj, n)`` is
    ``x[c, 4 ti + 2 i + a, 4 tj + 2 j + b, n]``, row i and column j of tile (ti, tj) of space-to-depth channel
    (c, a, b)."""
    c, hp, wp, n = shape
    sc, sh, sw = hp * wp * n, wp * n, n
    return (3, 3, c, 2, 2, (hp - 2) // 4, (wp - 2) // 4, n), (2 * sh, 2 * sw, sc, sh, sw, 4 * sh, 4 * sw, 1)


def _f22_weight(weight):
    """A ``(O, C, 4, 4)`` weight as the nine ``(O, 4C)`` matrices G g Gᵀ of its 2x2 kernels over the space-to-depth
    channels (C, a, b), in the order of `_f22_tiles`' pieces."""
    o, c = weight.shape[:2]
    # (u, v, O, C, a, b): kernel row 2u + a, column 2v + b, gathered by a reshape (a copy) of the weight permuted
    # to (row, column, O, C), whose gradient is a copy of the permuted gradient (0.5 ms for a 256 x 128 weight, one
    # thread); a view of the weight as (O, C, u, a, v, b) gathered its gradient in 2.3, and unbinding and stacking
    # its rows and columns in 3.2, copying runs of 2 and 4 elements
    taps = weight.permute(2, 3, 0, 1).reshape(2, 2, 2, 2, o, c).permute(0, 2, 4, 5, 1, 3)
    return _f22_tiles(taps, _f22_taps).reshape(9, o, 4 * c)


def _winograd_checked(products):
    """``products``, a Winograd convolution's nine, with checks that the sum of their values, and of their
    gradient's in a backward, is finite at each call of the compiled graph: the values are then finite, and so are
    the transforms' of the inputs, weight and result gradient that made them (an infinity or NaN there gives a NaN
    or an infinity in the products), the same as the direct sum's up to rounding; else the call reruns eagerly
    (`ops.value_checks.EagerRerun`). The products and their gradient are in memory anyway (a product's result and
    operand), where the convolution's result and its gradient are its kernels' (fused with their neighbours): each
    check is one reduction's pass over memory, and keeps the kernels as they were."""
    _check_finite(products)
    if products.requires_grad:
        products.register_hook(_check_finite)
    return products


def _check_finite(t):
    """The graph's check that ``t`` sums to a finite value (`_winograd_checked`); as a gradient hook, leaves it."""
    with jt.no_grad():
        _check_values(EagerRerun.RULE, [t.detach().sum()])


def _winograd_conv(xt, weight):
    """conv2d at stride 2 of a padded batch-last ``(C, 4 Th + 2, 4 Tw + 2, N)`` input (`_batch_last`) with a
    ``(O, C, 4, 4)`` weight, by F(2x2, 2x2): the result batch-last, ``(O, 2 Th, 2 Tw, N)``, as the direct product
    leaves it (the normalisations after a convolution reduce it per channel, over contiguous memory)."""
    size, strides = _f22_windows(tuple(xt.shape))
    c, th, tw, n = size[2], size[5], size[6], size[7]
    o = weight.shape[0]
    v = _f22_tiles(xt.as_strided(size, strides, xt.storage_offset()), _f22_data).reshape(9, 4 * c, th * tw * n)
    m = _winograd_checked(jt.bmm(_f22_weight(weight), v)).view(3, 3, o, th, tw, n)
    y = _f22_tiles(m, _f22_out).view(2, 2, o, th, tw, n)  # (p, q, O, ti, tj, N): output (2 ti + p, 2 tj + q)
    return y.permute(2, 3, 0, 4, 1, 5).reshape(o, 2 * th, 2 * tw, n)


def _winograd_conv_transpose(z, weight):
    """conv_transpose2d at stride 2 of ``(N, O, 2 Th, 2 Tw)`` input with a ``(O, C, 4, 4)`` weight, no padding: the
    adjoint of `_winograd_conv`, each step transposed, the tiles' inputs summed into the ``(C, 4 Th + 2, 4 Tw + 2, N)``
    result (batch-last, uncropped) through the windows they were read from (col2im)."""
    n, o, h, w = z.shape
    c, th, tw = weight.shape[1], h // 2, w // 2
    parts = z.view(n, o, th, 2, tw, 2).permute(3, 5, 1, 2, 4, 0)  # (p, q, O, ti, tj, N)
    m = _f22_tiles(parts, _f22_taps).reshape(9, o, th * tw * n)
    v = _winograd_checked(jt.bmm(_f22_weight(weight).transpose(1, 2), m)).view(3, 3, c, 2, 2, th, tw, n)
    shape = (c, 4 * th + 2, 4 * tw + 2, n)
    size, strides = _f22_windows(shape)
    flat = jt.zeros(math.prod(shape), dtype=z.dtype, device=z.device)
    return _OPS["_as_strided_add"](flat, _f22_tiles(v, _f22_data_adjoint).view(size), size, strides, 0).view(shape)


# Convolutions ------------------------------------------------------------------------------------------------

def _conv_padding(padding, nd, kernel, stride, dilation):
    """Per dim (left, right) padding from an int, a tuple or torch's 'valid' / 'same'."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nd
        if padding != "same":
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in totals]
    padding = _tuple(padding, nd)
    _check_spatial(padding, nd, "padding")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    return [(p, p) for p in padding]


def _check_conv(input, weight, bias, groups, nd, name, transposed=False):
    """torch's argument checks of a convolution; a transposed one's weight is (C_in, C_out/groups, *k)."""
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got input "
                           f"of size: {list(input.shape)}")
    if bias is not None and bias.dtype is not input.dtype and not transposed:
        # (a transposed convolution adds its bias in the result's dtype, as torch's)
        raise RuntimeError(f"Input type ({cpp_name(input.dtype)}) and bias type ({cpp_name(bias.dtype)}) should be "
                           "the same")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"expected scalar type {scalar_name(input.dtype)} but found {scalar_name(weight.dtype)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{list(weight.shape)}] instead")
    if transposed:
        in_channels, out_channels, given = weight.shape[0], weight.shape[1] * groups, "Given transposed=1, "
    else:
        in_channels, out_channels, given = weight.shape[1] * groups, weight.shape[0], f"Given groups={groups}, "
    channels = input.shape[1] if input.ndim == nd + 2 else input.shape[0]
    if channels != in_channels:
        shape = list(input.shape) if input.ndim == nd + 2 else [1] + list(input.shape)
        raise RuntimeError(f"{given}weight of size {list(weight.shape)}, expected input{shape} to have "
                           f"{in_channels} channels, but got {channels} channels instead")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_channels):
        prefix = given if transposed else "Given "
        raise RuntimeError(f"{prefix}weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
                           f"{out_channels} elements, but got bias of size {list(bias.shape)} instead")


def _conv_steps(weight, stride, dilation, nd):
    """``stride`` and ``dilation`` as checked n-tuples."""
    spatial = weight.ndim - 2
    stride, dilation = _tuple(stride, nd), _tuple(dilation, nd)
    _check_spatial(stride, spatial, "stride")
    _check_spatial(dilation, spatial, "dilation")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    return stride, dilation


class _GradInFormat(jt.autograd.Function):
    """The identity, whose backward lays its gradient out in a memory format (None: the one the gradient itself
    suggests): torch's convolution, normalisation and pooling kernels compute their inputs' gradients in the format
    of their forward's result."""

    @staticmethod
    def forward(ctx, x, fmt):
        ctx.fmt = fmt
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        fmt = suggest_memory_format(g._shape, g._stride) if ctx.fmt is None else ctx.fmt
        return _laid_out_as(g, fmt), None


def _laid_out_as(t, fmt):
    """``t`` with exactly the strides of memory format ``fmt`` (as torch's kernels allocate their results), a copy
    where its strides differ (a size-1 dim's included); ``t`` itself where a channels-last format is not of its
    rank (an unbatched input's result)."""
    if fmt is contiguous_format:
        return t if t._stride == contiguous_strides(t.shape) else t.clone(memory_format=fmt)
    if t.ndim != _format_rank(fmt):
        return t
    return t if t._stride == format_strides(fmt, t.shape) else t.clone(memory_format=fmt)


def _in_format_of(input, out):
    """``out`` laid out in the memory format ``input`` suggests (a channels-last one: torch's kernels that
    allocate their result in it, as ``resize_(sizes, input.suggest_memory_format())``), else ``out`` itself."""
    fmt = suggest_memory_format(input._shape, input._stride)
    return out if fmt is contiguous_format else _laid_out_as(out, fmt)


def _format_rank(fmt):
    return 4 if fmt is jt.channels_last else 5


def _same_format(args, fmt):
    return fmt, fmt


def _in_suggested_format(*names, formats=_same_format):
    """Decorate a composite of a torch kernel that computes in its input's suggested memory format (convolution,
    normalisation, pooling): where a tensor argument of ``names`` (the input first) is laid out channels-last by
    torch's ``suggest_memory_format``, the results (a tensor or a tuple of them) and the gradients of the arguments
    ``names`` are laid out in the formats that ``formats(positional args, that format)`` gives (result's,
    gradients'), that format for both by default. Other layouts go through as the composite gives them."""
    def decorate(fn):
        params = list(inspect.signature(fn).parameters)
        positions = [(params.index(n), n) for n in names]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            fmt = contiguous_format
            for i, n in positions:
                t = args[i] if i < len(args) else kwargs.get(n)
                if isinstance(t, jt.Tensor) and t.ndim in (4, 5):
                    fmt = suggest_memory_format(t._shape, t._stride)
                    if fmt is not contiguous_format:
                        break
            if fmt is contiguous_format:
                return fn(*args, **kwargs)
            out_format, grad_format = formats(args, fmt)
            if jt.is_grad_enabled():
                args, kwargs = list(args), dict(kwargs)
                for i, n in positions:
                    held, key = (args, i) if i < len(args) else (kwargs, n)
                    t = held[key] if held is args else held.get(key)
                    if isinstance(t, jt.Tensor) and t.requires_grad and t.ndim == _format_rank(fmt):
                        held[key] = _GradInFormat.apply(t, grad_format)
            out = fn(*args, **kwargs)
            if isinstance(out, tuple):
                return tuple(_laid_out_as(o, out_format) for o in out)
            return _laid_out_as(out, out_format)
        return call
    return decorate


class _GradAsKernel(jt.autograd.Function):
    """The identity, whose backward lays its gradient out as torch's one backward kernel of the op allocates
    it: with the strides ``rule(upstream, own)`` gives from the (shape, strides) of the result's gradient, as a
    pre-hook on the result's node noted it, and of this input."""

    @staticmethod
    def forward(ctx, x, noted, rule):
        ctx.noted, ctx.rule, ctx.geometry = noted, rule, (x._shape, x._stride)
        # (``x[...]``, not view_as: a view normalises the strides of dims of one element, which changes the memory
        # format a channels-last input of one image suggests to the op composed after it; nor as_strided, which a
        # graph cannot take of a captured slice)
        return x[...]

    @staticmethod
    def backward(ctx, g):
        if not ctx.noted:
            return g, None, None
        upstream = ctx.noted[0]
        if upstream == ctx.geometry and g._stride == upstream[1] and ctx.rule in (_grad_first, _input_first):
            return g, None, None  # (TensorIterator's strides over operands of one layout are theirs)
        strides = ctx.rule(upstream, ctx.geometry) or contiguous_strides(g._shape)
        if g._stride != strides:
            g = jt.empty_strided(g._shape, strides, dtype=g.dtype, device=g.device).copy_(g)
        return g, None, None


def _grad_first(upstream, own):
    """TensorIterator's strides over (grad_output, input): most activations' backward kernels."""
    return iterator_strides(own[0], [upstream, own], True)


def _input_first(upstream, own):
    """TensorIterator's strides over (input, grad_output): leaky_relu's and prelu's backward kernels (prelu's
    weight operand, broadcast but along the channels, decides no order)."""
    return iterator_strides(own[0], [own, upstream], True)


def _upstream_format(upstream, own):
    """The strides of the memory format the result's gradient suggests: the backward kernels of the upsampling
    modes and of the pixel and channel shuffles."""
    fmt = suggest_memory_format(*upstream)
    return None if fmt is contiguous_format else format_strides(fmt, own[0])


def _grad_as_kernel(rule):
    """Decorate an op composed of ops whose torch backward is one kernel: its input's gradient gets the strides
    ``rule`` gives (`_GradAsKernel`), not the layout the composition's last backward op gives (they differ
    where the result's gradient is laid out otherwise than the input: a channels-last input under a contiguous
    gradient). An in-place call's, and a contiguous input's (`_as_kernel`), is its composition's."""
    def decorate(fn):
        in_place = _arguments_named_inplace(fn)

        @functools.wraps(fn)
        def call(input, *args, **kwargs):
            if in_place(args, kwargs):
                return fn(input, *args, **kwargs)
            return _as_kernel(rule, fn, input, *args, **kwargs)
        return call
    return decorate


def _as_kernel(rule, fn, input, *args, **kwargs):
    """``fn(input, ...)`` whose input gradient has the strides ``rule`` gives (`_grad_as_kernel`) where grad
    mode records it and the input is not contiguous. (A contiguous input's gradient keeps its composition's
    layout: the identity node would cost every traced graph of a contiguous network fusion across it.)"""
    if not (input._requires_grad and jt.is_grad_enabled()) or is_contiguous(input._shape, input._stride):
        return fn(input, *args, **kwargs)
    noted = []
    out = fn(_GradAsKernel.apply(input, noted, rule), *args, **kwargs)

    def note(grads):
        noted[:] = [(grads[0]._shape, grads[0]._stride)]
    out.grad_fn.register_prehook(note)
    return out


def _contiguous_grad(upstream, own):
    """Contiguous strides: torch's bicubic and 3-d nearest upsampling backward kernels'."""
    return None


def _arguments_named_inplace(fn):
    """A function of a call's ``(args, kwargs)`` after the input: whether ``fn``'s ``inplace`` argument is true."""
    params = list(inspect.signature(fn).parameters)[1:]
    if "inplace" not in params:
        return lambda args, kwargs: False
    i = params.index("inplace")
    return lambda args, kwargs: bool(args[i] if i < len(args) else kwargs.get("inplace", False))


def _contiguous_formats(args, fmt):
    """Contiguous results and gradients: torch's instance norm normalises ``input.contiguous()``, and its
    unfold's gradient is col2im's new contiguous tensor."""
    return contiguous_format, contiguous_format


def _conv_formats(args, fmt):
    """torch's CPU convolution computes in channels-last where oneDNN runs it; its float64 3-d convolution (the
    slow path) gives contiguous results and gradients."""
    if fmt is jt.channels_last_3d and args[0].dtype is jt.float64:
        return contiguous_format, contiguous_format
    return fmt, fmt


def _avg_pool_formats(args, fmt):
    """torch's CPU average and adaptive max pooling, and 2-d max unpooling, keep channels_last; of
    channels_last_3d input they give contiguous results and gradients."""
    return (fmt, fmt) if fmt is jt.channels_last else (contiguous_format, contiguous_format)


def _pads(input, pad, mode, k):
    """``input`` padded along each of its last ``k`` dims in turn by `_index_pad`."""
    x = input
    for dim, left, right, _ in _padded_dims(input, pad, k):
        x = _index_pad(x, dim, left, right, mode)
    return x


@_in_suggested_format("input")
def _edge_pad(input, pad, mode, k):
    """A reflection or replication pad: torch's kernels lay out a channels-last input's result and gradient
    channels-last (its circular pad, a composition of cats, gives contiguous ones)."""
    return _pads(input, pad, mode, k)


def _adaptive_avg_pool_formats(args, fmt):
    """An output of size 1 is torch's mean (its gradient contiguous, its result in the input's format); otherwise
    average pooling's formats."""
    sizes = _adaptive_sizes(args[1], args[2], args[3])
    if all(s == 1 for s in sizes):
        return fmt, contiguous_format
    return _avg_pool_formats(args, fmt)


def _windows_in_place(w, xt, size, steps):
    """A convolution's product ``w @ windows`` computed on the windows where they lie in ``xt`` (no im2col copy:
    `ops.linalg.window_product`, the bits of the copied windows' product) where nothing records it (no autograd
    graph to save the windows for, no trace or profile: `_numpy_shortcut`) and the rule takes it; else None."""
    # (a training step's call, whose weight requires grad, is refused by the first test: 0.75 us a call, 3.4 before)
    if (w.requires_grad or xt.requires_grad) and jt.is_grad_enabled() \
            or not (_numpy_shortcut(xt) and w.dtype is xt.dtype and w._storage._data is not None):
        return None
    array = linalg.window_product(w._array()[0], xt._array(), size, steps) if w.shape[0] == 1 else None
    return None if array is None else jt.Tensor._fresh(array, xt.dtype)


# A convolution's weight gradient is ``(O, L*N) @ (L*N, C*K)``, its windows read transposed. Where O is small and the
# sum long, OpenBLAS computed it 6-25% faster the other way round, ``(C*K, L*N) @ (L*N, O)``, even with the
# transposed result copied back (one thread, float32, process CPU time, the two in turns: O x C*K x L*N = 128x1024x4096
# 0.87, 64x576x12544 0.88, 128x1152x3136 0.91, 128x576x8192 0.94, 64x1024x4096 0.84, 32x288x16384 0.75), and slower
# from 256 rows (256x2048x1024 1.02, 256x2304x784 1.05, 512x4608x196 2.15). MKL's orientations were not measured.
SWAPPED_GRAD_MAX_ROWS, SWAPPED_GRAD_MIN_SUM = 128, 2048


def _weight_gradient_swapped(weight, groups, sum_rows, columns):
    """Whether a convolution's product takes its weight as a column-major matrix (a transposed copy, one
    call's): then matmul's backward computes the weight's gradient as ``windows @ grad.T`` and transposes it
    (`autograd.rules.structural`'s column-major rule), the faster orientation by the measurements above, where
    the gradient is wanted and OpenBLAS computes it (a float product the generated kernels do not take:
    `ops.linalg.skinny_shape`, where `runtime.blas_library` chose OpenBLAS)."""
    o = weight.shape[0]
    return (groups == 1 and weight.requires_grad and jt.is_grad_enabled() and o > 1
            and weight.dtype in (jt.float32, jt.float64) and weight.device.type == "cpu"
            and o <= SWAPPED_GRAD_MAX_ROWS and columns >= SWAPPED_GRAD_MIN_SUM
            and linalg.skinny_shape(np.dtype(weight.dtype.name), o, columns, sum_rows) is None
            and linalg.skinny_shape(np.dtype(weight.dtype.name), o, sum_rows, columns) is None
            and blas_library.chosen() == blas_library.OPENBLAS)


def _direct_product(xt, weight, groups, kernel, stride, dilation, out):
    """A convolution's one GEMM per group over all images, ``(G, O/G, C/G * K) @ (G, C/G * K, L * N)``: the columns
    gathered from the batch-last ``xt`` (`_batch_last`) in the weight's (channel, kernel position) order."""
    o, c, k = weight.shape[0], xt.shape[0], math.prod(kernel)
    size, steps = _grouped_windows(tuple(xt.shape), groups, kernel, stride, dilation, out)
    w = weight.reshape(groups, o // groups, -1)
    product = _windows_in_place(w, xt, size, steps)
    if product is None:
        cols = xt.as_strided(size, steps, xt.storage_offset()).reshape(groups, k * (c // groups), -1)
        if _weight_gradient_swapped(weight, groups, k * c, cols.shape[-1]):
            w = weight.reshape(o, -1).t().contiguous().t()
            cols = cols.reshape(k * c, -1)
        product = jt.matmul(w, cols)
    return product


@_saves("input", "weight")
@_in_suggested_format("input", "weight", formats=_conv_formats)
def _conv(input, weight, bias, stride, padding, dilation, groups, nd):
    name = f"conv{nd}d"
    _check_conv(input, weight, bias, groups, nd, name)
    stride, dilation = _conv_steps(weight, stride, dilation, nd)
    kernel = tuple(weight.shape[2:])
    pads = _conv_padding(padding, nd, kernel, stride, dilation)
    unbatched = input.ndim == nd + 1
    x = input.unsqueeze(0) if unbatched else input
    padded = [n + l + r for n, (l, r) in zip(x.shape[2:], pads)]
    spans = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    if any(s > p for s, p in zip(spans, padded)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, spans))}). Kernel size can't be greater than actual input size")
    out = [(p - s) // st + 1 for p, s, st in zip(padded, spans, stride)]
    n, c, o = x.shape[0], x.shape[1], weight.shape[0]
    xt = _batch_last(x, pads)
    if _winograd_fits(weight, groups, stride, dilation, (c, o), [p - 2 for p in padded]):
        y = _batch_first(_winograd_conv(xt, weight))
    else:
        y = _batch_first(_direct_product(xt, weight, groups, kernel, stride, dilation, out).reshape(o, *out, n))
    if bias is not None:
        y = y + bias.reshape(-1, *([1] * nd))
    return y.squeeze(0) if unbatched else y


@autocasts("conv1d")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution (cross-correlation) of ``(N, C, L)`` or ``(C, L)`` input with ``(O, C/groups, K)`` weight."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1)


@autocasts("conv2d")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) of ``(N, C, H, W)`` or ``(C, H, W)`` input with
    ``(O, C/groups, kH, kW)`` weight; ``padding`` may be an int, a pair, 'valid' or 'same'."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2)


@autocasts("conv3d")
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3)


# Transposed convolutions ---------------------------------------------------------------------------------------

def _as_2d_at_least(values, fill):
    """Per-dim values as torch's messages show them: a 1-d convolution runs as a 2-d one of height 1."""
    return (fill, *values) if len(values) == 1 else tuple(values)


@_saves("input", "weight")
@_in_suggested_format("input", "weight", formats=_conv_formats)
def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd):
    """The gradient of ``conv{nd}d`` with respect to its input, as a layer.

    Each input position scatters ``weight``'s kernel (times its value) into the output window it would be
    read from: one matmul gives every position's kernel-sized contribution, and one ``_as_strided_add``
    (col2im) accumulates them through the overlapping windows of the (uncropped) output, as the backward of
    a convolution's window view does; ``padding`` then crops the border.
    """
    name = f"conv_transpose{nd}d"
    if isinstance(padding, str):
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    _check_conv(input, weight, bias, groups, nd, name, transposed=True)
    stride, dilation = _conv_steps(weight, stride, dilation, nd)
    padding, output_padding = _tuple(padding, nd), _tuple(output_padding, nd)
    _check_spatial(padding, nd, "padding")
    _check_spatial(output_padding, nd, "output_padding")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(o >= s and o >= d for o, s, d in zip(output_padding, stride, dilation)):
        axes = ("depth", "height", "width")[-max(nd, 2):]
        parts = [f"{what}_{axis}: {v}" for what, values in (("output_padding", _as_2d_at_least(output_padding, 0)),
                                                             ("stride", _as_2d_at_least(stride, 1)),
                                                             ("dilation", _as_2d_at_least(dilation, 1)))
                 for axis, v in zip(axes, values)]
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got {' '.join(parts)}")
    unbatched = input.ndim == nd + 1
    x = input.unsqueeze(0) if unbatched else input
    kernel, sizes = tuple(weight.shape[2:]), tuple(x.shape[2:])
    full = [(n - 1) * s + d * (k - 1) + 1 + o
            for n, s, d, k, o in zip(sizes, stride, dilation, kernel, output_padding)]
    out = [f - 2 * p for f, p in zip(full, padding)]
    if any(o <= 0 for o in out):
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, _as_2d_at_least(sizes, 1)))}). "
                           f"Calculated output size per channel: ({' x '.join(map(str, _as_2d_at_least(out, 1)))}). "
                           "Output size is too small")
    n, c_in, c_out = x.shape[0], x.shape[1], weight.shape[1] * groups
    k = math.prod(kernel)
    shape = (c_out, *full, n)
    if _winograd_fits(weight, groups, stride, dilation, (c_in, c_out), [2 * s for s in sizes]) \
            and not any(output_padding):
        y = _winograd_conv_transpose(x, weight)
    else:
        # (G, C_out/G * K, C_in/G) @ (G, C_in/G, L * N): every input position's kernel-sized contribution, laid out
        # as the windows of a (C_out, *full, N) output (``_batch_last``'s layout) that one col2im sums up; the
        # weight read transposed as it lies
        xt = _batch_last(x).reshape(groups, c_in // groups, -1)
        w = weight.reshape(groups, c_in // groups, -1).transpose(1, 2)
        cols = jt.matmul(w, xt)
        size, steps = _grouped_windows(shape, groups, kernel, stride, dilation, sizes)
        flat = jt.zeros(math.prod(shape), dtype=x.dtype, device=x.device)
        y = _OPS["_as_strided_add"](flat, cols.reshape(size), size, steps, 0).view(shape)
    # ``padding`` crops the border: one strided view (whose gradient is one scatter into zeros)
    strides = contiguous_strides(shape)
    y = y.as_strided((c_out, *out, n), strides, sum(p * st for p, st in zip(padding, strides[1:-1])))
    y = _batch_first(y)
    if bias is not None:
        y = y + bias.reshape(-1, *([1] * nd)).to(y.dtype)
    return y.squeeze(0) if unbatched else y


@autocasts("conv_transpose1d")
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-D transposed convolution of ``(N, C_in, L)`` or ``(C_in, L)`` input with ``(C_in, C_out/groups, K)``
    weight; the output length is ``(L - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1``."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 1)


@autocasts("conv_transpose2d")
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution ("deconvolution") of ``(N, C_in, H, W)`` or ``(C_in, H, W)`` input with
    ``(C_in, C_out/groups, kH, kW)`` weight: the gradient of ``conv2d`` with respect to its input."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 2)


@autocasts("conv_transpose3d")
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """3-D transposed convolution of ``(N, C_in, D, H, W)`` or ``(C_in, D, H, W)`` input."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 3)


# Pooling ----------------------------------------------------------------------------------------------------

def _pool_out(n, k, s, p, d, ceil_mode):
    """torch's pooling_output_shape: the last window must start inside the input or the left padding."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_arg(value, nd, name, arg):
    """A pool's ``kernel_size``/``stride``/``padding``/``dilation`` as an nd-tuple; any other length is
    refused with the message torch's pool ``name`` gives."""
    values = _tuple(value, nd)
    if len(values) == nd:
        return values
    got = len(values)
    if name == "avg_pool1d":
        raise RuntimeError(f"avg_pool1d() argument '{arg}' should contain one int (got {got})")
    if name == "max_pool1d":
        kinds = {"stride": "None, an int, list of ints, or tuple of ints",
                 "padding": "an int, list of ints, or tuple of ints"}
        raise RuntimeError(f"max_pool1d() {arg} must be {kinds.get(arg, 'an int, list of ints or tuple of ints')} "
                           f"of size 1 but got size {got}")
    must = "must be either" if arg == "dilation" else "must be" if name == "avg_pool3d" else "must either be"
    single = "omitted, a single int" if arg == "stride" else "a single int"
    raise RuntimeError(f"{name}: {arg} {must} {single}, or a tuple of {('two', 'three')[nd - 2]} ints")


class _Pool:
    """The geometry of a pooling call over the trailing ``nd`` dims of ``input`` (checked as torch)."""

    def __init__(self, input, name, nd, kernel_size, stride, padding, dilation, ceil_mode):
        self.kernel = _pool_arg(kernel_size, nd, name, "kernel_size")
        omitted = stride is None or stride == [] or stride == ()
        self.stride = self.kernel if omitted else _pool_arg(stride, nd, name, "stride")
        self.padding = _pool_arg(padding, nd, name, "padding")
        self.dilation = _pool_arg(dilation, nd, name, "dilation")
        if input.ndim not in (nd + 1, nd + 2) or 0 in input.shape[-nd - 1:]:
            raise RuntimeError(f"non-empty {nd + 1}D or {nd + 2}D (batch mode) tensor expected for input")
        if any(s <= 0 for s in self.stride):
            raise RuntimeError(f"stride should be greater than zero, but got stride: {list(self.stride)}")
        if any(d <= 0 for d in self.dilation):
            raise RuntimeError(f"dilation should be greater than zero, but got dilation: {list(self.dilation)}")
        for k, p, d in zip(self.kernel, self.padding, self.dilation):
            if p < 0 or p > ((k - 1) * d + 1) // 2:
                raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                                   f"kernel_size={k} and dilation={d}")
        self.size = tuple(input.shape[-nd:])
        self.out = tuple(_pool_out(n, k, s, p, d, ceil_mode) for n, k, s, p, d in
                         zip(self.size, self.kernel, self.stride, self.padding, self.dilation))
        if any(o <= 0 for o in self.out):
            lead = input.shape[-nd - 1]
            raise RuntimeError(f"Given input size: ({_sizes((lead,) + self.size)}). Calculated output size: "
                               f"({_sizes((lead,) + self.out)}). Output size is too small")

    def windows(self, x, fill):
        """``x`` padded with ``fill`` (and on the right as far as ceil_mode's last window reaches),
        its windows stacked along a new last dim: ``(*lead, *out, K)``."""
        widths = []
        for n, k, s, p, d, o in zip(self.size, self.kernel, self.stride, self.padding, self.dilation, self.out):
            reach = (o - 1) * s + d * (k - 1) + 1
            widths.append((p, max(reach - n - p, p)))
        if any(l or r for l, r in widths):
            x = _constant_pad(x, [w for l, r in reversed(widths) for w in (l, r)], fill)
        return _patches(x, self.kernel, self.stride, self.dilation, self.out, x.ndim)


def _lowest(dtype):
    return -math.inf if dtype.is_floating_point else jt.iinfo(dtype).min


def _numpy_shortcut(input):
    """Whether an op may compute on ``input``'s NumPy array instead of through its composition: a CPU float32 or
    float64 tensor with values, and no dispatch hook (a trace or a profile sees the composition) or autocast."""
    return (not _HOOKS and _AUTOCAST.key is None and input.device.type == "cpu"
            and input.dtype in (jt.float32, jt.float64) and input._storage._data is not None)


def _backward_records(g):
    """Whether a shortcut's backward must run its composition's rules as ops: the backward records a graph
    (create_graph), is traced (a dispatch hook takes calls), runs under autocast, or ``g`` is not on the CPU. A
    profiled one computes as it does unprofiled (its node is the profile's span): the rules as ops rounded a GELU
    gradient otherwise (1 ulp) and took 10x its time."""
    return (jt.is_grad_enabled() or bool(_HOOKS) and hooks_take_calls() or _AUTOCAST.key is not None
            or g.device.type != "cpu")


def _tiling_pool(input, geo):
    """Whether the windows of pooling ``geo`` tile ``input``'s trailing dims without overlap or padding
    (stride = kernel, the usual ``max_pool2d(x, 2)``), where `_numpy_shortcut` allows: then `_tiled_max` may
    serve it."""
    return (_numpy_shortcut(input) and geo.stride == geo.kernel and not any(geo.padding)
            and all(d == 1 for d in geo.dilation)
            and all(o == n // k for o, n, k in zip(geo.out, geo.size, geo.kernel)))


def _tiles(x, geo):
    """The windows of a tiling pool over ``x``'s trailing dims as a view ``(*kernel, *lead, *out)``: kernel
    positions first, in the row-major order of the composition's windows."""
    nd = len(geo.kernel)
    lead = x.shape[:-nd]
    x = x[(Ellipsis,) + tuple(slice(0, o * k) for o, k in zip(geo.out, geo.kernel))]
    split = x.reshape(lead + tuple(n for o, k in zip(geo.out, geo.kernel) for n in (o, k)))
    first = len(lead)
    kernel_axes = tuple(first + 2 * i + 1 for i in range(nd))
    return split.transpose(kernel_axes + tuple(range(first)) + tuple(first + 2 * i for i in range(nd)))


def _select_into(out, a, mask):
    """``out |= (a where mask else +0.0)`` on the bits of float arrays: a selection by a random mask without
    branches (``np.where`` and ``copyto(where=)`` mispredict on one: ten times slower)."""
    bits = np.dtype(f"i{a.itemsize}")
    ones = mask.astype(bits)
    np.negative(ones, out=ones)  # all bits set where chosen
    np.bitwise_and(ones, a.view(bits), out=ones)
    np.bitwise_or(out.view(bits), ones, out=out.view(bits))


def _tiled_max(x, geo):
    """``(values, index)`` of each window's maximum (index: its kernel position), as max.dim picks it over the
    composition's windows: the first maximum (-0.0 and 0.0 tie), the first NaN if any, and that element's bits.
    One copy of the windows kernel-position-major, then branch-free passes over them: NumPy's argmax over a
    last dim of 4, and its gathers, are several times slower."""
    k = math.prod(geo.kernel)
    windows = np.ascontiguousarray(_tiles(x, geo)).reshape((k,) + x.shape[:-len(geo.kernel)] + tuple(geo.out))
    top = np.maximum.reduce(windows, axis=0)  # (NaN where a window holds one)
    index = np.zeros(top.shape, np.int32)
    values = np.zeros(top.shape, top.dtype)
    found = None
    for position in range(k):
        hit = np.equal(windows[position], top)
        if top.dtype.kind == "f":
            hit |= np.isnan(windows[position])
        first = hit if found is None else hit & ~found  # this position holds the window's first maximum
        found = hit if found is None else found | hit
        if position:
            index += first * np.int32(position)
        _select_into(values, windows[position], first)
    return values, index.astype(np.int64)


def _tiled_max_backward(g, index, shape, geo):
    """The input's gradient of a tiling max pool: each window's gradient on the element it chose, +0.0 elsewhere
    (the composition's ``where(positions == indices, g, 0)`` read back through the windows)."""
    k = math.prod(geo.kernel)
    windows = np.zeros((k,) + g.shape, g.dtype)
    for position in range(k):
        _select_into(windows[position], g, np.equal(index, position))
    grad = np.zeros(shape, g.dtype)
    _tiles(grad, geo)[...] = windows.reshape(tuple(geo.kernel) + g.shape)
    return grad


class _MaxPool(jt.autograd.Function):
    """A tiling max pool (`_tiling_pool`) in grad mode as one backward node with the composition's bits."""

    @staticmethod
    def forward(ctx, x, geo):
        values, index = _tiled_max(x._array(), geo)
        ctx.geo, ctx.shape = geo, tuple(x.shape)
        ctx.save_for_backward(jt.Tensor._fresh(index, jt.int64))
        return jt.Tensor._fresh(values, x.dtype)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        geo = ctx.geo
        if _backward_records(g):
            # a backward that records (create_graph) or is traced: the composition's, on an input
            # whose windows choose what these chose (one 1.0 each, at its index)
            chosen = _tiled_max_backward(np.ones(index.shape, np.float32), index._array(), ctx.shape, geo)
            with jt.enable_grad():
                x = jt.from_numpy(chosen).to(g.dtype).requires_grad_()
                values = geo.windows(x, _lowest(x.dtype)).max(-1)[0]
                return jt.autograd.grad(values, x, g, create_graph=jt.is_grad_enabled())[0], None
        grad = _tiled_max_backward(np.ascontiguousarray(g._array()), index._array(), ctx.shape, geo)
        return jt.Tensor._fresh(grad, g.dtype), None


@_saves("input")
@_in_suggested_format("input")
def _max_pool(input, nd, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    geo = _Pool(input, f"max_pool{nd}d", nd, kernel_size, stride, padding, dilation, ceil_mode)
    if not return_indices and _tiling_pool(input, geo):
        if input._requires_grad and jt.is_grad_enabled():
            return _MaxPool.apply(input, geo)
        return jt.Tensor._fresh(_tiled_max(input._array(), geo)[0], input.dtype)
    values, argmax = geo.windows(input, _lowest(input.dtype)).max(-1)
    if not return_indices:
        return values
    # the flat index into the input's trailing dims of each window's chosen element
    flat = None
    rest = argmax
    for i in reversed(range(nd)):
        k, s, p, d = geo.kernel[i], geo.stride[i], geo.padding[i], geo.dilation[i]
        offset = rest % k
        rest = rest // k
        start = jt.arange(geo.out[i], device=input.device).reshape([-1] + [1] * (nd - 1 - i)) * s - p
        coord = start + offset * d
        stride_in = math.prod(geo.size[i + 1:])
        flat = coord * stride_in if flat is None else flat + coord * stride_in
    return values, flat


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of the last dim of ``(N, C, L)`` or ``(C, L)`` input."""
    return _max_pool(input, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of the last two dims (padding counts as -inf); with
    ``return_indices`` also the flat ``h * W + w`` index of each maximum, as torch."""
    return _max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max over sliding windows of the last three dims of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input; with
    ``return_indices`` also the flat ``(d * H + h) * W + w`` index of each maximum."""
    return _max_pool(input, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    """`max_pool1d` with its indices."""
    return _max_pool(input, 1, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    """`max_pool2d` with its indices."""
    return _max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    """`max_pool3d` with its indices."""
    return _max_pool(input, 3, kernel_size, stride, padding, dilation, ceil_mode, True)


def _avg_divisor(geo, count_include_pad):
    """Per output position, what torch's avg_pool divides the window sum by (a number when uniform)."""
    counts = []
    for n, k, s, p, o in zip(geo.size, geo.kernel, geo.stride, geo.padding, geo.out):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        counts.append(end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0))
    divisor = counts[0]
    for c in counts[1:]:
        divisor = np.multiply.outer(divisor, c)
    if (divisor == divisor.flat[0]).all():
        return int(divisor.flat[0])
    return divisor


@_saves("input")
@_in_suggested_format("input", formats=_avg_pool_formats)
def _avg_pool(input, nd, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    geo = _Pool(input, f"avg_pool{nd}d", nd, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    integer = not input.dtype.is_floating_point
    if integer and input.dtype is not jt.int64:  # torch's CPU kernels take int64 alone of the integer types
        kernel = "avg_pool3d_out_frame" if nd == 3 else "avg_pool2d"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(input.dtype)}'")
    total = geo.windows(input, 0).sum(-1)
    divisor = divisor_override or _avg_divisor(geo, count_include_pad)
    if not isinstance(divisor, int):
        divisor = jt.tensor(divisor, dtype=total.dtype, device=total.device)
    # int64 means are int64, rounded toward zero as C's integer division (torch's kernel)
    return total.div(divisor, rounding_mode="trunc") if integer else total / divisor


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over sliding windows of the last dim."""
    return _avg_pool(input, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over sliding windows of the last two dims (zero padding, counted unless ``count_include_pad=False``;
    ``divisor_override`` replaces the window size)."""
    return _avg_pool(input, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over sliding windows of the last three dims, as ``avg_pool2d``."""
    return _avg_pool(input, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _adaptive_matrix(n, out, like):
    """``(out, n)`` averaging weights: output i averages ``[floor(i n / out), ceil((i + 1) n / out))``."""
    m = np.zeros((out, n))
    for i in range(out):
        start, end = (i * n) // out, -((-(i + 1) * n) // out)
        m[i, start:end] = 1.0 / (end - start)
    return jt.tensor(m, dtype=like.dtype, device=like.device)


def _adaptive_sizes(output_size, nd, name):
    """torch's ``output_size``: one int (or None) for every dim, or exactly ``nd`` of them (None keeps a dim)."""
    sizes = (output_size,) * nd if output_size is None or isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != nd:
        if nd == 1:
            raise RuntimeError(f"{name}() argument 'output_size' should contain one int (got {len(sizes)})")
        raise RuntimeError(f"{name}: output_size must be {nd}")
    if any(s is not None and s < 0 for s in sizes):
        raise RuntimeError(f"{name}: elements of output_size must be greater than or equal to 0 but received "
                           f"{{{', '.join(map(str, sizes))}}}")
    return sizes


def _check_output_size_dims(input, output_size, nd):
    """torch.nn.functional's own check of a 2-d or 3-d adaptive pooling's ``output_size`` sequence (its
    ``_list_with_default``), before the op's: a ValueError where the input has no more dims than it."""
    if nd > 1 and not isinstance(output_size, int) and output_size is not None and len(output_size) >= input.ndim:
        raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")


@_saves("input")
@_in_suggested_format("input", formats=_adaptive_avg_pool_formats)
def _adaptive_avg_pool(input, output_size, nd, name):
    _check_output_size_dims(input, output_size, nd)
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got {list(input.shape)}")
    output_size = _adaptive_sizes(output_size, nd, name)
    out = input
    for i, size in enumerate(output_size):
        dim = input.ndim - nd + i
        n = input.shape[dim]
        size = n if size is None else size
        m = _adaptive_matrix(n, size, input)
        # contract the dim with the weights, then put the new dim back in its place
        out = jt.matmul(out.movedim(dim, -1), m.t()).movedim(-1, dim)
    return out


def adaptive_avg_pool1d(input, output_size):
    """Average pooling of the last dim to ``output_size`` positions, as torch splits it."""
    return _adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input, output_size):
    """Average pooling of the last two dims to ``output_size`` (an int or a pair; None keeps a dim)."""
    return _adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")


def adaptive_avg_pool3d(input, output_size):
    """Average pooling of the last three dims to ``output_size`` (an int or a triple; None keeps a dim)."""
    return _adaptive_avg_pool(input, output_size, 3, "adaptive_avg_pool3d")


def _adaptive_windows(size, out):
    """``(prod(out), K)`` flat input indices of each adaptive window over the spatial ``size``: torch's
    ``[floor(i n / o), ceil((i + 1) n / o))`` per dim, shorter windows padded by repeating their first element
    (a repeat changes neither the max nor which element is first to reach it)."""
    per_dim = []
    for n, o in zip(size, out):
        starts = np.arange(o) * n // o
        lengths = -((-(np.arange(o) + 1) * n) // o) - starts
        k = int(lengths.max()) if o else 1
        per_dim.append(starts[:, None] + np.where(np.arange(k) < lengths[:, None], np.arange(k), 0).astype(np.int64))
    table = np.zeros((1, 1), np.int64)
    for n, idx in zip(size, per_dim):
        # (outs so far, K so far) x (o, k) -> (outs * o, K * k), row-major over both
        table = (table[:, None, :, None] * n + idx[None, :, None, :]).reshape(
            table.shape[0] * idx.shape[0], table.shape[1] * idx.shape[1])
    return table


@_saves("input")
@_in_suggested_format("input", formats=_avg_pool_formats)
def _adaptive_max_pool(input, output_size, return_indices, nd):
    name = f"adaptive_max_pool{nd}d"
    _check_output_size_dims(input, output_size, nd)
    if nd == 1 and input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for argument #1 "
                           "'self' (while checking arguments for adaptive_max_pool1d)")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got: {list(input.shape)}")
    sizes = _adaptive_sizes(output_size, nd, name)
    _check_floating(input, name)
    lead, size = tuple(input.shape[:-nd]), tuple(input.shape[-nd:])
    for i in range(1, input.ndim):  # (torch's loop: dim 0 may be empty, batched or not)
        if input.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(input.shape)} with dimension {i} being empty")
    out = tuple(n if o is None else o for n, o in zip(size, sizes))
    table = jt.tensor(_adaptive_windows(size, out), device=input.device)
    windows = input.reshape(*lead, math.prod(size)).index_select(-1, table.reshape(-1)).reshape(*lead, *out, table.shape[1])
    values, arg = windows.max(-1)
    if not return_indices:
        return values
    flat = table.reshape(*out, table.shape[1]).expand(*lead, *out, table.shape[1])
    return values, flat.gather(-1, arg.unsqueeze(-1)).squeeze(-1)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max over adaptive windows of the last dim: output ``i`` of ``o`` covers
    ``[floor(i L / o), ceil((i + 1) L / o))``; with ``return_indices`` also each maximum's position."""
    return _adaptive_max_pool(input, output_size, return_indices, 1)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max over adaptive windows of the last two dims (an int or a pair; None keeps a dim); with
    ``return_indices`` also each maximum's flat ``h * W + w`` index."""
    return _adaptive_max_pool(input, output_size, return_indices, 2)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Max over adaptive windows of the last three dims; with ``return_indices`` also each maximum's flat index."""
    return _adaptive_max_pool(input, output_size, return_indices, 3)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    """`adaptive_max_pool1d` with its indices."""
    return _adaptive_max_pool(input, output_size, True, 1)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    """`adaptive_max_pool2d` with its indices."""
    return _adaptive_max_pool(input, output_size, True, 2)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):
    """`adaptive_max_pool3d` with its indices."""
    return _adaptive_max_pool(input, output_size, True, 3)


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, nd):
    """torch's formula: the p-th root of ``prod(kernel)`` times the mean of ``x^p`` over each window, a
    negative mean (odd ``p``) clamped to 0."""
    kernel = _tuple(kernel_size, nd)
    out = _avg_pool(input.pow(norm_type), nd, kernel_size, stride, 0, ceil_mode, True, None)
    return (out.sign() * out.abs().relu()).mul(math.prod(kernel)).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling of the last dim: ``(sum x^p)^(1/p)`` over each window."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling of the last two dims: ``(sum x^p)^(1/p)`` over each window."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling of the last three dims: ``(sum x^p)^(1/p)`` over each window."""
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


def _unpool_arg(value, nd, name, arg):
    values = _tuple(value, nd)
    if len(values) != nd:
        raise RuntimeError(f"{name}: {arg} must be a single int, or a tuple of {('one', 'two', 'three')[nd - 1]} "
                           f"ints, but got {arg}={list(values)}")
    return values


def _unpool_output_size(input, kernel, stride, padding, output_size):
    """torch's ``_unpool_output_size``: the pool's input size by default, or a checked ``output_size``
    (spatial, or with the batch and channel dims)."""
    nd = len(kernel)
    default = [(input.shape[input.ndim - nd + d] - 1) * stride[d] + kernel[d] - 2 * padding[d] for d in range(nd)]
    if output_size is None:
        return default
    output_size = list(output_size)
    if len(output_size) == nd + 2:
        output_size = output_size[2:]
    if len(output_size) != nd:
        raise ValueError(f"output_size should be a sequence containing {nd} or {nd + 2} elements, but it has a "
                         f"length of '{len(output_size)}'")
    for d in range(nd):
        low, high = default[d] - stride[d], default[d] + stride[d]
        if not low < output_size[d] < high:
            raise ValueError(f'invalid output_size "{tuple(output_size)}" (dim {d} must be between {low} and {high})')
    return output_size


def _check_unpool(input, indices, out, nd):
    """torch's max_unpooling kernel checks; a 1-d unpool runs as a 2-d one of width 1, as torch's messages show."""
    if indices.dtype is not jt.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: {scalar_name(indices.dtype)}")
    shown = 3 if nd == 3 else 2
    ndim, shapes = input.ndim + (nd == 1), [list(input.shape), list(indices.shape)]
    if nd == 1:
        shapes = [s + [1] for s in shapes]
    if ndim not in (shown + 1, shown + 2):
        raise RuntimeError(f"Input to max_unpooling{shown}d should be a {shown + 1}d or {shown + 2}d Tensor, but got "
                           f"a tensor with {ndim} dimensions.")
    if shapes[0] != shapes[1]:
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor ({shapes[0]}) but got "
                           f"indices tensor with shape: {shapes[1]}")
    volume = math.prod(out)
    _check_values("unpool_indices", [indices], volume, list(out) + [1] * (nd == 1))


@_in_suggested_format("input", formats=_avg_pool_formats)
def _max_unpool(input, indices, kernel_size, stride, padding, output_size, nd):
    name = f"max_unpool{nd}d"
    kernel = _unpool_arg(kernel_size, nd, name, "kernel_size")
    stride = kernel if stride is None else _unpool_arg(stride, nd, name, "stride")
    padding = _unpool_arg(padding, nd, name, "padding")
    out = _unpool_output_size(input, kernel, stride, padding, output_size)
    _check_unpool(input, indices, out, nd)
    lead = tuple(input.shape[:-nd])
    flat = jt.zeros((*lead, math.prod(out)), dtype=input.dtype, device=input.device)
    flat = flat.scatter(-1, indices.reshape(*lead, -1), input.reshape(*lead, -1))
    return flat.reshape(*lead, *out)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of ``max_pool1d``: each value of ``input`` placed at its ``indices`` (as
    ``return_indices`` gave them) in a zero tensor of the pooled input's length (or ``output_size``)."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of ``max_pool2d``: each value placed at its flat ``h * W + w`` index in zeros."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of ``max_pool3d``: each value placed at its flat index in zeros."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3)


# Resampling --------------------------------------------------------------------------------------------------

_INTERPOLATE_MODES = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"
_LINEAR_MODES = {"linear": 3, "bilinear": 4, "trilinear": 5, "bicubic": 4}


def _interpolate_geometry(input, size, scale_factor, recompute_scale_factor):
    """torch's output sizes, and the scales the source coordinates use (None: ``in / out``)."""
    nd = input.ndim - 2
    spatial = list(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        if not isinstance(size, int):
            if len(size) != nd:
                raise ValueError("Input and output must have the same number of spatial dimensions, but got input "
                                 f"with spatial dimensions of {spatial} and output size of {size}. Please provide "
                                 "input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) "
                                 "format.")
        return list(_tuple(size, nd)), [None] * nd
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    if isinstance(scale_factor, (int, float)):
        scales = [float(scale_factor)] * nd
    else:
        if len(scale_factor) != nd:
            raise ValueError("Input and scale_factor must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {spatial} and scale_factor of shape {scale_factor}. Please "
                             "provide input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, "
                             "...,sK) format.")
        scales = [float(f) for f in scale_factor]
    sizes = [math.floor(n * f) for n, f in zip(spatial, scales)]
    return sizes, [None] * nd if recompute_scale_factor else scales


def _check_blendable(input, mode):
    """torch's refusal of integer and bool input to the modes that weigh source elements (their weights,
    cast to the input's dtype, would be 0 or 1), named by the kernel torch refuses it in."""
    if input.dtype.is_floating_point or mode in ("bilinear", "bicubic") and input.dtype == jt.uint8:
        return  # (uint8: torch's rounding integer kernels, jitorch/nn/antialias.py)
    if mode == "area":
        kernel = "adaptive_avg_pool3d_cpu" if input.ndim == 5 else "adaptive_avg_pool2d"
    elif mode == "bicubic":
        kernel = "compute_indices_weights_cubic"
    else:
        kernel = "upsample_bilinear2d_channels_last" if mode == "bilinear" else "compute_indices_weights_linear"
    raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(input.dtype)}'")


def _nearest_index(n, out, scale, exact):
    """torch's nearest source index of each output position (in float32, as its kernels compute it)."""
    step = np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(out)
    offset = np.float32(0.5) if exact else np.float32(0.0)
    return np.minimum(np.floor((np.arange(out, dtype=np.float32) + offset) * step).astype(np.int64), n - 1)


def _linear_source(n, out, scale, align_corners):
    """torch's two source indices and weights of each output position of a linear resampling."""
    dst = np.arange(out, dtype=np.float64)
    if align_corners:
        src = dst * ((n - 1) / (out - 1) if out > 1 else 0.0)
    else:
        step = 1.0 / scale if scale else n / out
        src = np.maximum(step * (dst + 0.5) - 0.5, 0.0)
    low = src.astype(np.int64)
    high = low + (low < n - 1)
    frac = np.minimum(src - low, 1.0)
    return low, high, 1.0 - frac, frac


_UPSAMPLE_OPS = {"nearest": "upsample_nearest", "nearest-exact": "_upsample_nearest_exact", "area": "adaptive_avg_pool",
                 "linear": "upsample_linear", "bilinear": "upsample_bilinear", "bicubic": "upsample_bicubic",
                 "trilinear": "upsample_trilinear"}


def _interpolate_op(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                    recompute_scale_factor=None, antialias=False):
    """The op torch's ``interpolate`` runs, as autocast's lists name it."""
    kind = _UPSAMPLE_OPS.get(mode)
    return None if kind is None else f"{kind}{input.ndim - 2}d" + ("_aa" if antialias else "")


@autocasts(_interpolate_op)
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resample the spatial dims of ``(N, C, *)`` input to ``size``, or to ``floor(in * scale_factor)``.

    ``mode`` 'nearest' / 'nearest-exact' pick a source element, 'linear' / 'bilinear' / 'trilinear' (3-, 4-,
    5-D input) blend the two nearest along each dim in turn (``align_corners`` maps the corner pixels'
    centres onto each other), 'bicubic' (4-D) the four nearest by torch's cubic convolution (A = -0.75,
    taps clamped to the edge), 'area' averages as ``adaptive_avg_pool``. Each dim is an ``index_select``
    per tap (and a weighted sum): autograd and the compiler need nothing of their own.
    """
    if mode not in ("nearest", "nearest-exact", "area", *_LINEAR_MODES):
        if mode == "lanczos":
            raise NotImplementedError(f"interpolate: jitorch does not implement mode='{mode}'")
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
                                  f"the modes: {_INTERPOLATE_MODES} (got {mode})")
    if align_corners is not None and mode not in _LINEAR_MODES:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if input.ndim not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
                                  f"the modes: {_INTERPOLATE_MODES} (got {mode})")
    sizes, scales = _interpolate_geometry(input, size, scale_factor, recompute_scale_factor)
    if antialias and not (mode in ("bilinear", "bicubic") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D "
                         "tensor as input")
    if mode == "bicubic" and input.ndim != 4:  # (torch has no bicubic 1-D or 3-D kernel to name)
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
                                  f"the modes: {_INTERPOLATE_MODES} (got {mode})")
    if mode in _LINEAR_MODES and input.ndim != _LINEAR_MODES[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {_LINEAR_MODES[mode]}D input")
    if mode != "area" and min(*input.shape[2:], *sizes) <= 0:
        # torch's upsample kernels' check ('area' pools adaptively, which allows an empty output)
        axes = ("D", "H", "W")[-len(sizes):]
        shown = [", ".join(f"{a}: {n}" for a, n in zip(axes, dims)) for dims in (input.shape[2:], sizes)]
        joint = " and" if len(sizes) == 1 else ""  # torch's 1-D message alone says "and output"
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({shown[0]}){joint} "
                           f"output ({shown[1]})")
    if antialias and input.dtype not in (jt.float32, jt.float64, jt.uint8):
        raise NotImplementedError(f"\"compute_index_ranges_weights\" not implemented for '{scalar_name(input.dtype)}'")
    if mode in _LINEAR_MODES or mode == "area":
        _check_blendable(input, mode)  # in the kernels, after torch's checks of the sizes
    if mode == "area":
        return _adaptive_avg_pool(input, sizes, input.ndim - 2, f"adaptive_avg_pool{input.ndim - 2}d")
    # torch's upsampling backward kernels write the input's gradient in the format the result's gradient
    # suggests, the bicubic ones and the 3-d nearest ones contiguously
    contiguous = mode == "bicubic" or input.ndim == 5 and mode in ("nearest", "nearest-exact")
    rule = _contiguous_grad if contiguous else _upstream_format
    return _as_kernel(rule, _upsample, input, sizes, scales, mode, align_corners, antialias)


def _upsample(input, sizes, scales, mode, align_corners, antialias):
    """`interpolate` of checked arguments but mode 'area', laid out in the memory format ``input`` suggests (as
    torch's upsampling kernels)."""
    if antialias or input.dtype == jt.uint8 and mode in ("bilinear", "bicubic"):
        return _in_format_of(input, antialias_resample(input, sizes, scales, mode == "bicubic", bool(align_corners),
                                                       antialias))
    out = input
    for dim, (n, m, scale) in enumerate(zip(input.shape[2:], sizes, scales), 2):
        if mode in _LINEAR_MODES:
            if mode == "bicubic":
                indices, weights = cubic_taps(n, m, scale, bool(align_corners), input.dtype)
            else:
                low, high, w_low, w_high = _linear_source(n, m, scale, bool(align_corners))
                indices, weights = (low, high), (w_low, w_high)
            shape = [m] + [1] * (input.ndim - 1 - dim)
            taps = [out.index_select(dim, jt.tensor(index, device=input.device))
                    * jt.tensor(w.reshape(shape), dtype=input.dtype, device=input.device)
                    for index, w in zip(indices, weights)]
            out = functools.reduce(jt.add, taps)
        else:
            index = _nearest_index(n, m, scale, mode == "nearest-exact")
            out = out.index_select(dim, jt.tensor(index, device=input.device))
    return _in_format_of(input, out)  # (torch's upsample kernels keep channels-last input's layout)


def _check_pixel_factor(op, input, factor, what):
    """torch's checks of a pixel (un)shuffle: at least 3 dims and a positive factor; returns the factor."""
    if input.ndim < 3:
        raise RuntimeError(f"{op} expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if factor <= 0:
        raise RuntimeError(f"{op} expects a positive {what}, but got {factor}")
    if suggest_memory_format(input._shape, input._stride) is jt.channels_last_3d:
        raise RuntimeError("Unsupported memory format. Supports only ChannelsLast, Contiguous")
    return factor


@_grad_as_kernel(_upstream_format)
def pixel_shuffle(input, upscale_factor):
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)``: each group of ``r^2`` channels becomes an ``r x r`` block."""
    r = _check_pixel_factor("pixel_shuffle", input, upscale_factor, "upscale_factor")
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError("pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    b = len(batch)
    x = input.reshape(*batch, c // (r * r), r, r, h, w)
    # (*, C, r, r, H, W) -> (*, C, H, r, W, r)
    x = x.permute(*range(b), b, b + 3, b + 1, b + 4, b + 2)
    return _in_format_of(input, x.reshape(*batch, c // (r * r), h * r, w * r))


@_grad_as_kernel(_upstream_format)
def pixel_unshuffle(input, downscale_factor):
    """``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``, the inverse of ``pixel_shuffle``."""
    r = _check_pixel_factor("pixel_unshuffle", input, downscale_factor, "downscale_factor")
    *batch, c, h, w = input.shape
    for name, n, d in (("height", h, -2), ("width", w, -1)):
        if n % r:
            raise RuntimeError(f"pixel_unshuffle expects {name} to be divisible by downscale_factor, but "
                               f"input.size({d})={n} is not divisible by {r}")
    b = len(batch)
    x = input.reshape(*batch, c, h // r, r, w // r, r)
    # (*, C, H, r, W, r) -> (*, C, r, r, H, W)
    x = x.permute(*range(b), b, b + 2, b + 4, b + 1, b + 3)
    return _in_format_of(input, x.reshape(*batch, c * r * r, h // r, w // r))



@_grad_as_kernel(_upstream_format)
def channel_shuffle(input, groups):
    """``(N, C, *)`` with its channels read as a ``(groups, C / groups)`` grid and written transposed: the
    shuffle of ShuffleNet between grouped convolutions."""
    if input.ndim <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with sizes "
                           f"{list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    n, c, *rest = input.shape
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    return _in_format_of(input, input.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(input.shape))


def native_channel_shuffle(input, groups):
    """`channel_shuffle` (torch's native entry point of the same function)."""
    return channel_shuffle(input, groups)


_SLIDING_AXES = ("height", "width")


def _sliding_args(**named):
    """``unfold``/``fold``'s pair arguments, checked as torch's im2col and col2im check them."""
    pairs = {}
    for what, value in named.items():
        value = _tuple(value, 2)
        if len(value) != 2:
            raise RuntimeError(f"It is expected {what} equals to 2, but got size {len(value)}")
        pairs[what] = value
    for what, shown, ok in (("kernel_size", "kernel size should be greater than zero", lambda v: v > 0),
                            ("stride", "stride should be greater than zero", lambda v: v > 0),
                            ("dilation", "dilation should be greater than zero", lambda v: v > 0),
                            ("padding", "padding should be non-negative", lambda v: v >= 0)):
        values = pairs[what]
        if not all(ok(v) for v in values):
            prefix = {"kernel_size": "kernel", "padding": "pad"}.get(what, what)
            parts = " ".join(f"{prefix}_{axis}: {v}" for axis, v in zip(_SLIDING_AXES, values))
            raise RuntimeError(f"{shown}, but got {parts}")
    return pairs


def _sliding_blocks(size, a):
    """Sliding blocks per spatial dim of a padded ``size``."""
    return tuple((n + 2 * p - (d * (k - 1) + 1)) // s + 1
                 for n, k, d, p, s in zip(size, a["kernel_size"], a["dilation"], a["padding"], a["stride"]))


def _sliding_geometry(a):
    return (f"kernel_size={a['kernel_size']}, dilation={a['dilation']}, padding={a['padding']}, "
            f"stride={a['stride']}")


@_in_suggested_format("input", formats=_contiguous_formats)
def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: the sliding ``kernel_size`` blocks of ``(N, C, H, W)`` (or ``(C, H, W)``) input as the columns of
    ``(N, C * kH * kW, L)``, ``L`` the number of blocks."""
    a = _sliding_args(kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride)
    if input.ndim not in (3, 4) or 0 in input.shape[-3:]:
        raise RuntimeError("Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
                           f"dimensions for input, but got: {list(input.shape)}")
    if input.dtype is not jt.bool:  # (torch's im2col kernel serves bool beside the float types, as col2im)
        _check_floating(input, "im2col_out_cpu")
    out = _sliding_blocks(input.shape[-2:], a)
    if min(out) < 1:
        raise RuntimeError(f"Given input with spatial size {tuple(input.shape[-2:])}, kernel_size={a['kernel_size']}, "
                           f"dilation={a['dilation']}, padding={a['padding']}, calculated shape of the array of "
                           f"sliding blocks as {out}, but its components must be at least one.")
    x = input if input.ndim == 4 else input.unsqueeze(0)
    ph, pw = a["padding"]
    if ph or pw:
        x = _constant_pad(x, (pw, pw, ph, ph), 0)
    cols = _patches(x, a["kernel_size"], a["stride"], a["dilation"], out, 2)
    cols = cols.reshape(x.shape[0], x.shape[1] * cols.shape[2], out[0] * out[1])
    return cols if input.ndim == 4 else cols.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im, the adjoint of `unfold`: the blocks in the columns of ``(N, C * kH * kW, L)`` summed into their
    places in ``(N, C, *output_size)`` (overlaps add up)."""
    a = _sliding_args(output_size=output_size, kernel_size=kernel_size, dilation=dilation, padding=padding,
                      stride=stride)
    if input.ndim not in (2, 3) or 0 in input.shape[-2:]:
        raise RuntimeError("Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {list(input.shape)}")
    kernel = a["kernel_size"]
    rows, length = input.shape[-2:]
    if rows % (kernel[0] * kernel[1]):
        raise RuntimeError("Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={rows} and kernel_size={kernel}.")
    blocks = _sliding_blocks(a["output_size"], a)
    if blocks[0] * blocks[1] != length:
        raise RuntimeError(f"Given output_size={a['output_size']}, {_sliding_geometry(a)}, expected size of input's "
                           f"dimension 2 to match the calculated number of sliding blocks {blocks[0]} * {blocks[1]} "
                           f"= {blocks[0] * blocks[1]}, but got input.size(2)={length}.")
    if min(blocks) < 1:
        raise RuntimeError(f"Given output_size={a['output_size']}, {_sliding_geometry(a)}, calculated shape of the "
                           f"array of sliding blocks as {blocks}, which is too small (non-positive)")
    if input.dtype is not jt.bool:  # (torch's col2im kernel serves bool, summing as or, and the float types)
        _check_floating(input, "col2im_out_cpu")
    x = input if input.ndim == 3 else input.unsqueeze(0)
    n, c = x.shape[0], rows // (kernel[0] * kernel[1])
    (h, w), (ph, pw) = a["output_size"], a["padding"]
    full = (h + 2 * ph, w + 2 * pw)
    # the window view of the padded output (the geometry ``_patches`` reads blocks with), accumulated into once
    (dh, dw), (sh, sw) = a["dilation"], a["stride"]
    geometry = (n, c, *kernel, *blocks)
    strides = (c * full[0] * full[1], full[0] * full[1], dh * full[1], dw, sh * full[1], sw)
    flat = jt.zeros(n * c * full[0] * full[1], dtype=x.dtype, device=x.device)
    y = _OPS["_as_strided_add"](flat, x.reshape(geometry), geometry, strides, 0).view(n, c, *full)
    y = y[:, :, ph:ph + h, pw:pw + w]
    return y if input.ndim == 3 else y.squeeze(0)


def _deprecated_upsample(name):
    warnings.warn(f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` instead.", stacklevel=3)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of `interpolate` (with torch's warning)."""
    _deprecated_upsample("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: `interpolate` with mode 'nearest' (with torch's warning)."""
    _deprecated_upsample("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: `interpolate` with mode 'bilinear' and ``align_corners=True`` (with torch's warning)."""
    _deprecated_upsample("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# Normalisation and embedding ------------------------------------------------------------------------------

def _channel_view(t, ndim):
    """A per-channel ``(C,)`` tensor shaped to broadcast over dim 1 of an ``ndim``-d input."""
    return t.reshape([-1] + [1] * (ndim - 2))


def _computed_in_float32(norm):
    """A normalisation of float16 or bfloat16 input computed in float32 and returned in the input's dtype,
    as torch's kernels do, whether its parameters have the input's dtype or are float32 (as a module's are
    under autocast)."""
    @functools.wraps(norm)
    def in_float32(input, *args, **kwargs):
        if getattr(input, "dtype", None) not in (jt.float16, jt.bfloat16):
            return norm(input, *args, **kwargs)
        return norm(input.float(), *args, **kwargs).to(input.dtype)
    return in_float32


@_saves("input", "weight")
@not_differentiable("native_batch_norm", "running_mean", "running_var")
@_in_suggested_format("input")
@_computed_in_float32
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalise over every dim but the channel dim 1. In training, batch statistics are used and the
    running ones (if given) move toward them by ``momentum``, the variance unbiased, in place."""
    if not isinstance(momentum, (int, float, np.number, jt.Tensor)):  # (torch's binding parses it as a double)
        raise TypeError(f"batch_norm(): argument 'momentum' (position 7) must be float, not {type(momentum).__name__}")
    if input.ndim < 2:
        return _batch_norm_of_a_vector(input, running_mean, running_var, weight, bias, training)
    channels = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {t.numel()}")
    dims = [0] + list(range(2, input.ndim))
    count = input.numel() // max(channels, 1)
    if training:
        if count == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape!r}")
        if count == 0:  # an empty batch: torch's empty result, the running statistics left as they are
            return input.clone()
        var, mean = moments(input, dims, 0, False)
        if running_mean is not None or running_var is not None:
            with jt.no_grad():
                if running_mean is not None:
                    running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                if running_var is not None:
                    running_var.mul_(1 - momentum).add_(var.detach() * (momentum * count / (count - 1)))
    else:
        for name, t in (("running_mean", running_mean), ("running_var", running_var)):
            if t is None:
                raise RuntimeError(f"{name} must be defined in evaluation mode")
        mean, var = running_mean, running_var
    out = (input - _channel_view(mean, input.ndim)) * _channel_view((var + eps).rsqrt(), input.ndim)
    out = _channel_affine(out, weight, bias)
    if not training:
        # torch's node saves the running statistics too; in training its kernel's own update of them bumps no
        # version (two forwards before one backward are no error), so only evaluation's are checked here
        saves_also(out, (running_mean, running_var))
    return out


def _batch_norm_of_a_vector(input, running_mean, running_var, weight, bias, training):
    """torch's batch_norm of a 0-d or 1-d input, which has no channel dim: its functional's batch-size
    check in training, then zero channels (a non-empty statistic or parameter is refused), an empty input
    returned as an empty copy, the evaluation mode's statistics required, and then an IndexError for the
    missing dim 1."""
    if training and (input.ndim == 0 or input.shape[0] == 1):
        if input.ndim == 0:
            raise IndexError("list index out of range")
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape!r}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != 0:
            raise RuntimeError(f"{name} should contain 0 elements not {t.numel()}")
    if input.numel() == 0:
        return input.clone()
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is None and not training:
            raise RuntimeError(f"{name} must be defined in evaluation mode")
    raise IndexError(f"Dimension out of range (expected to be in range of [{-max(input.ndim, 1)}, "
                     f"{max(input.ndim, 1) - 1}], but got 1)")


def _channel_affine(out, weight, bias):
    """``out * weight + bias`` with per-channel ``(C,)`` parameters (either may be None)."""
    if weight is not None:
        out = out * _channel_view(weight, out.ndim)
    if bias is not None:
        out = out + _channel_view(bias, out.ndim)
    return out


def _group_normalize(input, groups, eps):
    """``input`` (N, C, *) normalised over each sample's groups of ``C / groups`` channels (biased variance).

    Returns the normalised tensor and the ``(N, groups)`` mean and variance. Group norm, and instance norm
    (a group per channel), differ only in ``groups``.
    """
    n = input.shape[0]
    x = input.reshape(n, groups, math.prod(input.shape[1:]) // groups)
    var, mean = moments(x, 2, 0, True)
    out = ((x - mean) * (var + eps).rsqrt()).reshape(input.shape)
    return out, mean.squeeze(2), var.squeeze(2)


@autocasts("group_norm")
@_saves("input", "weight")
@_in_suggested_format("input")
@_computed_in_float32
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise ``(N, C, *)`` input over each sample's ``num_groups`` groups of consecutive channels (biased
    variance), then scale and shift per channel."""
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    channels = input.shape[1]
    if channels % num_groups:
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    for what, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != channels):
            raise RuntimeError(f"Expected {what} to be a vector of size equal to the number of channels in input, "
                               f"but got {what} of shape {list(t.shape)} and input of shape {list(input.shape)}")
    return _channel_affine(_group_normalize(input, num_groups, eps)[0], weight, bias)


@_saves("input")
@not_differentiable("native_batch_norm", "running_mean", "running_var")
@_in_suggested_format("input", formats=_contiguous_formats)
@_computed_in_float32
def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalise each channel of each sample of ``(N, C, *)`` input over its spatial dims, then scale and shift
    per channel. With ``use_input_stats`` the running statistics (if given) move toward the batch's average
    instance statistics by ``momentum`` (the variance unbiased), in place; otherwise they normalise."""
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None")
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    count = math.prod(input.shape[2:])
    if input.ndim < 2 or count <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {input.shape!r}")
    out, mean, var = _group_normalize(input, input.shape[1], eps)
    if running_mean is not None:
        with jt.no_grad():
            running_mean.mul_(1 - momentum).add_(mean.detach().mean(0) * momentum)
            running_var.mul_(1 - momentum).add_(var.detach().mean(0) * (momentum * count / (count - 1)))
    return _channel_affine(out, weight, bias)


@autocasts("layer_norm", first=_LAYER_NORM_FAST, arity=5)  # (nn.LayerNorm's call)
@_saves("input", "weight", "bias")  # (the op's node saves them; a traced call's composition must say so too)
@_computed_in_float32
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing dims ``normalized_shape`` (biased variance), then scale and shift: the op
    ``layer_norm`` in eager code; composed of ops in a traced step, where they fuse with their neighbours."""
    if not _HOOKS:  # (a trace or a profile takes every call through the registry's dispatch)
        out = _LAYER_NORM_FAST((input, normalized_shape, weight, bias, eps))
        if out is not None:
            return out
    normalized_shape = _tuple(normalized_shape, 1)
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != normalized_shape or input.ndim < k:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}")
    if (not is_compiling() and input.device.type == "cpu"
            and all(t is None or (t.dtype is input.dtype and t.device.type == "cpu") for t in (weight, bias))):
        return _OPS["layer_norm"](input, list(normalized_shape), weight, bias, eps, True)
    dims = list(range(input.ndim - k, input.ndim))
    var, mean = moments(input, dims, 0, True)
    out = (input - mean) * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out



@_computed_in_float32
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps)`` over the trailing dims ``normalized_shape``, times ``weight``; ``eps``
    defaults to the dtype's machine epsilon, as torch. Half types compute in float32 (as torch's kernel:
    their squares overflow) and round once."""
    normalized_shape = _tuple(normalized_shape, 1)
    k = len(normalized_shape)
    if not k:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")
    if weight is not None and tuple(weight.shape) != normalized_shape:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                           f"{list(weight.shape)} and normalized_shape = {list(normalized_shape)}")
    if input.ndim < k or tuple(input.shape[input.ndim - k:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*{', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}")
    eps = jt.finfo(input.dtype).eps if eps is None else eps
    dims = list(range(input.ndim - k, input.ndim))
    out = input * ((input * input).mean(dims, keepdim=True) + eps).rsqrt()
    return out if weight is None else out * weight


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """Each element divided by ``(k + alpha * mean of x^2 over size neighbouring channels)^beta`` (channels
    are dim 1; the window is zero-padded at the ends), as torch computes it."""
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          input (got {input.ndim} "
                         "dimensions)")
    if input.numel() == 0:
        return input
    square = (input * input).unsqueeze(1)
    if input.ndim == 3:
        square = _constant_pad(square, (0, 0, size // 2, (size - 1) // 2), 0)
        div = avg_pool2d(square, (size, 1), stride=1).squeeze(1)
    else:
        n, c = input.shape[:2]
        square = _constant_pad(square.reshape(n, 1, c, input.shape[2], -1), (0, 0, 0, 0, size // 2, (size - 1) // 2), 0)
        div = avg_pool3d(square, (size, 1, 1), stride=1).squeeze(1).reshape(input.shape)
    return input / (div * alpha + k).pow(beta)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` picked by the integer ``input``; the ``padding_idx`` row gets no gradient,
    ``max_norm`` renormalises the picked rows in place, ``scale_grad_by_freq`` divides each row's
    gradient by how often the batch picks it."""
    if input.dtype not in (jt.int64, jt.int32):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got jitorch.{scalar_name(input.dtype)}Tensor instead "
                           "(while checking arguments for embedding)")
    if sparse:
        raise RuntimeError("embedding(sparse=True): jitorch has no sparse tensors; use sparse=False")
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    rows = weight.shape[0]
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx %= rows
    if (not _HOOKS and max_norm is None and not scale_grad_by_freq and input.device.type == "cpu"
            and weight.device.type == "cpu" and weight.ndim == 2 and _has_data(input) and _has_data(weight)
            and not (weight._requires_grad and jt.is_grad_enabled())):
        # no history to record: the picked rows, copied in one NumPy take (the padding row's only difference
        # is in the gradient)
        indices = input._array()
        if indices.size and (indices.min() < 0 or indices.max() >= rows):
            raise IndexError("index out of range in self")
        return jt.Tensor._fresh(weight._array().take(indices.reshape(-1), axis=0).reshape(
            indices.shape + (weight.shape[1],)), weight.dtype)
    flat = input.reshape(-1)
    if _has_data(flat) and flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= rows):
        raise IndexError("index out of range in self")
    if max_norm is not None:
        with jt.no_grad():
            picked = weight.index_select(0, flat)
            norms = picked.norm(norm_type, 1, True)
            # torch's embedding_renorm_: the norm read as a double, the scale computed in double and rounded
            # to the weight's dtype for the product
            wide = norms.double()
            scale = jt.where(wide > max_norm, max_norm / (wide + 1e-7), 1.0).to(weight.dtype)
            weight.index_copy_(0, flat, picked * scale)
    out = weight.index_select(0, flat)
    if scale_grad_by_freq:
        counts = jt.zeros(rows, dtype=weight.dtype, device=weight.device).index_add(
            0, flat, jt.ones(flat.shape, dtype=weight.dtype, device=weight.device))
        kept = out.detach()
        out = kept + (out - kept) / counts.index_select(0, flat).unsqueeze(1)
    if padding_idx is not None:
        out = jt.where((flat == padding_idx).unsqueeze(1), out.detach(), out)
    return out.reshape(*input.shape, weight.shape[1])


def _bag_inputs(input, offsets, per_sample_weights, include_last_offset):
    """Flat indices, per-index weights (or None) and the ``(starts, bags)`` of torch's embedding_bag."""
    if input.ndim == 2:
        if offsets is not None:
            # the type named as its package exports it (torch shows <class 'torch.Tensor'>)
            kind = f"<class '{type(offsets).__module__.split('.')[0]}.{type(offsets).__name__}'>"
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             f"fixed length sequences. However, found offsets of type {kind}")
        if input.shape[1] == 0:  # torch's bag starts are arange(0, numel, length)
            raise RuntimeError("step must be nonzero")
        starts = np.arange(0, input.numel(), input.shape[1])
        flat_weights = None if per_sample_weights is None else per_sample_weights.reshape(-1)
        return input.reshape(-1), flat_weights, jt.tensor(starts, device=input.device), len(starts)
    if input.ndim != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if offsets.ndim != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    if _has_data(offsets) and offsets.numel():
        values = offsets.tolist()
        if values[0] != 0:
            raise RuntimeError("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                               f"position 0. However, got {values[0]}")
        if values[-1] > input.numel():
            raise RuntimeError(f"offsets[-1] can not be greater than input's length {input.numel()} but got "
                               f"offsets[-1] of {values[-1]}")
        if any(b < a for a, b in zip(values, values[1:])):
            raise RuntimeError(f"embedding_bag: offsets must be non-decreasing, but got {values}")
        if include_last_offset and values[-1] != input.numel():
            # torch sums such a last bag up to offsets[-1] but averages (and maxes) it over the rest of the input
            raise RuntimeError(f"embedding_bag: with include_last_offset=True, offsets[-1] must be the input's "
                               f"length {input.numel()}, but got {values[-1]}")
    bags = offsets.numel() - 1 if include_last_offset else offsets.numel()
    return input, per_sample_weights, offsets, bags


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """The sums, means or maxima of bags of ``weight`` rows without building the per-index rows' tensor in the
    caller: bags are the rows of a 2-D ``input``, or the runs of a 1-D ``input`` starting at ``offsets``.
    ``padding_idx`` entries belong to no bag; an empty bag gives zeros; ``per_sample_weights`` scale the rows
    (mode 'sum' only)."""
    if weight.dtype is jt.int64 and input.dtype.is_floating_point:
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage `embedding_bag(weight, "
                      "input, ...)` is deprecated, and should now be `embedding_bag(input, weight, ...)`.",
                      stacklevel=2)
        input, weight = weight, input
    if per_sample_weights is not None and input.shape != per_sample_weights.shape:
        raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is not None, then it "
                         f"must have the same shape as the input ({input.shape})")
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    flat, sample_weights, starts, bags = _bag_inputs(input, offsets, per_sample_weights, include_last_offset)
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    if sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
                                  "GitHub.")
    if padding_idx is not None:
        rows = weight.shape[0]
        if not -rows <= padding_idx < rows:
            raise RuntimeError(f"padding_idx must be within the number of embeddings, -{rows} through {rows - 1}, "
                               f"but got {padding_idx}")
        padding_idx %= rows
    if flat.dtype not in (jt.int64, jt.int32):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got jitorch.{scalar_name(flat.dtype)}Tensor instead (while checking "
                           "arguments for embedding_bag)")
    _check_values("bag_indices", [flat], weight.shape[0])
    rows = embedding(flat, weight, None, max_norm, norm_type, scale_grad_by_freq, sparse)
    return _reduce_bags(rows, flat, sample_weights, starts, bags, mode, padding_idx)


def _reduce_bags(rows, flat, sample_weights, starts, bags, mode, padding_idx):
    """``rows`` (one per index) reduced per bag; an index's bag is the last start at or before it."""
    positions = jt.arange(flat.numel(), device=flat.device)
    bag = (positions.unsqueeze(1) >= starts.unsqueeze(0)).long().sum(1) - 1
    member = bag < bags
    if padding_idx is not None:
        member = member & (flat != padding_idx)
    bag = jt.where(member, bag, 0)
    shape = (bags, rows.shape[1])
    if mode == "max":
        lowest = jt.where(member.unsqueeze(1), rows, _lowest(rows.dtype))
        index = bag.unsqueeze(1).expand(rows.shape)
        out = jt.full(shape, _lowest(rows.dtype), dtype=rows.dtype, device=rows.device).scatter_reduce(
            0, index, lowest, "amax", include_self=False)
        return jt.where(out == _lowest(rows.dtype), 0.0, out).to(rows.dtype)
    scale = member.to(rows.dtype) if sample_weights is None else member.to(rows.dtype) * sample_weights
    total = jt.zeros(shape, dtype=rows.dtype, device=rows.device).index_add(0, bag, rows * scale.unsqueeze(1))
    if mode == "sum":
        return total
    counts = jt.zeros(bags, dtype=rows.dtype, device=rows.device).index_add(0, bag, member.to(rows.dtype))
    return total / counts.clamp_min(1).unsqueeze(1)


# Dropout and activations ----------------------------------------------------------------------------------

def dropout(input, p=0.5, training=True, inplace=False):
    """In training, zero each element with probability ``p`` (jitorch's generator) and scale the rest
    by ``1 / (1 - p)``; otherwise the input unchanged."""
    return _dropout(input, p, training, inplace, input.shape)


def _dropout(input, p, training, inplace, noise_shape):
    """``input`` times a scaled Bernoulli mask of ``noise_shape`` (broadcast over ``input``): one draw per
    element for dropout, one per channel for channel (feature) dropout."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        noise = jt.zeros((), dtype=input.dtype, device=input.device)
    else:
        noise = jt.empty(tuple(noise_shape), dtype=input.dtype, device=input.device).bernoulli_(1 - p).div_(1 - p)
    return input.mul_(noise) if inplace else input * noise


def _feature_dropout(input, p, training, inplace):
    """Zero whole channels (dim 1) of ``(N, C, *)`` input, each with probability ``p``."""
    # torch checks this only when it would draw a mask: it returns first for p 0 or 1, eval and empty input
    if input.ndim < 2 and training and 0.0 < p < 1.0 and input.numel() > 0:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return _dropout(input, p, training, inplace, (*input.shape[:2], *([1] * (input.ndim - 2))))


def dropout1d(input, p=0.5, training=True, inplace=False):
    """In training, zero each channel of ``(N, C, L)`` or ``(C, L)`` input with probability ``p`` and scale
    the rest by ``1 / (1 - p)``."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
                           "dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension, a "
                           "channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
    if input.ndim == 2:
        out = _feature_dropout(input.unsqueeze(0), p, training, inplace)
        # in place, the unsqueezed view already wrote through to ``input``
        return input if inplace else out.squeeze(0)
    return _feature_dropout(input, p, training, inplace)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """In training, zero each channel of ``(N, C, H, W)`` input with probability ``p`` and scale the rest by
    ``1 / (1 - p)``. A 3-D input is read as ``(N, C, L)``, with torch's warning."""
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and will "
                      "result in an error in a future release. To retain the behavior and silence this warning, "
                      "please use dropout instead. Note that dropout2d exists to provide channel-wise dropout on "
                      "inputs with 2 spatial dimensions, a channel dimension, and an optional batch dimension (i.e. "
                      "3D or 4D inputs).", stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout "
                      "behavior is desired - input is interpreted as shape (N, C, L), where C is the channel dim. "
                      "This behavior will change in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please "
                      "switch to using dropout1d instead.", stacklevel=2)
    return _feature_dropout(input, p, training, inplace)



def dropout3d(input, p=0.5, training=True, inplace=False):
    """In training, zero each channel of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input with probability ``p``
    and scale the rest by ``1 / (1 - p)``; other ranks are read as unbatched, with torch's warning."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.ndim not in (4, 5):
        warnings.warn(f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated and will "
                      "result in an error in a future release. To retain the behavior and silence this warning, "
                      "please use dropout instead. Note that dropout3d exists to provide channel-wise dropout on "
                      "inputs with 3 spatial dimensions, a channel dimension, and an optional batch dimension (i.e. "
                      "4D or 5D inputs).", stacklevel=2)
    if input.ndim == 5:
        return _feature_dropout(input, p, training, inplace)
    out = _feature_dropout(input.unsqueeze(0), p, training, inplace)
    # in place, the unsqueezed view already wrote through to ``input``
    return input if inplace else out.squeeze(0)


_SELU_ALPHA_PRIME = 1.7580993408473766  # -scale * alpha of selu: the value selu saturates at


def _alpha_dropout(input, p, training, inplace, noise_shape):
    """torch's alpha dropout: dropped elements are set to selu's saturation value and the result is moved
    and scaled so that a zero-mean unit-variance input keeps its mean and variance."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        return input.mul_(0.0) if inplace else input * 0.0
    keep = jt.empty(tuple(noise_shape), dtype=input.dtype, device=input.device).bernoulli_(1 - p)
    a = 1.0 / math.sqrt((_SELU_ALPHA_PRIME ** 2 * p + 1) * (1 - p))
    shift = (keep - 1) * (_SELU_ALPHA_PRIME * a) + _SELU_ALPHA_PRIME * a * p
    out = input * (keep * a) + shift
    return input.copy_(out) if inplace else out


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout (for selu networks): in training each element is dropped with probability ``p``,
    keeping the input's mean and variance; note torch's default ``training=False``."""
    return _alpha_dropout(input, p, training, inplace, input.shape)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout of whole channels (dim 1) of ``(N, C, *)`` input."""
    if training and 0.0 < p < 1.0 and input.numel() and input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return _alpha_dropout(input, p, training, inplace, (*input.shape[:2], *([1] * (input.ndim - 2))))


def relu(input, inplace=False):
    """``max(x, 0)``."""
    return input.relu_() if inplace else input.relu()


def relu_(input):
    """In-place `relu`."""
    return input.relu_()


# elements one pass of exact GELU works on: its forward's and its backward's operands stay in the L2 cache
_GELU_CHUNK = 32768


def _gelu_shortcut(input, unhooked):
    """Whether `gelu` of ``input`` may skip the composition's dispatches: ``unhooked`` (no dispatch hook that
    takes calls: a trace sees the composition), no autocast, a contiguous CPU float tensor with values (a half
    type takes a kernel or the composition: the NumPy passes are float32's and float64's)."""
    return (isinstance(input, jt.Tensor) and unhooked and _AUTOCAST.key is None and input.device.type == "cpu"
            and input.dtype.is_floating_point and input._storage._data is not None and input.ndim
            and is_contiguous(input._shape, input._stride))


def _gelu_parts(x, keep_cdf):
    """``(x * cdf, cdf)`` of an array, ``cdf = Phi(x)`` (None unless ``keep_cdf``), by the composition's
    kernels (`_gelu_exact`) on cache-sized chunks."""
    flat = x.reshape(-1)
    out, cdf = np.empty_like(flat), np.empty_like(flat)
    for start in range(0, flat.size, _GELU_CHUNK):
        part = slice(start, start + _GELU_CHUNK)
        cdf[part] = _normal_cdf(flat[part])
        np.multiply(flat[part], cdf[part], out=out[part])
    return out.reshape(x.shape), cdf.reshape(x.shape) if keep_cdf else None


class _Gelu(jt.autograd.Function):
    """GELU in grad mode as one backward node: the composition's NumPy kernels in its order (exact GELU), or
    the compiled path's kernels of the composition and of its gradient (`_gelu_kernel`, from
    `GELU_KERNEL_MIN` elements).

    The composition records two nodes (exact; nine with the tanh approximation) whose backward makes a pass
    over the tensor per rule, each a dispatch and a new array; this node's backward computes the same rules
    on the same values, on cache-sized chunks or in one kernel. Like torch's GeluBackward0 it saves the input,
    so a later in-place write into it fails the backward."""

    @staticmethod
    def forward(ctx, x, approximate, kernel):
        ctx.approximate = approximate
        if kernel is not None:
            ctx.save_for_backward(x)
            return jt.Tensor._fresh(kernel(x._array())[0], x.dtype)
        token = fp_errors.enter()
        try:
            out, cdf = _gelu_parts(x._array(), True)
        finally:
            fp_errors.leave(token)
        ctx.save_for_backward(x, jt.Tensor._fresh(cdf, x.dtype))
        return jt.Tensor._fresh(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, *cdf = ctx.saved_tensors
        form = _GELU_FORMS[ctx.approximate]
        if not _backward_records(g):
            if cdf:
                grad = _gelu_backward(np.ascontiguousarray(g._array()), x._array(), cdf[0]._array())
                return jt.Tensor._fresh(grad, x.dtype), None, None
            kernel = _gelu_kernel(form, x.dtype, backward=True)
            if kernel is not None:
                return jt.Tensor._fresh(kernel(x._array(), np.ascontiguousarray(g._array()))[0], x.dtype), None, None
        # a backward that records (create_graph) or is traced: the composition's rules as ops
        create_graph = jt.is_grad_enabled()
        with jt.enable_grad():
            return jt.autograd.grad(form.fn(x), x, g, create_graph=create_graph)[0], None, None


def _gelu_backward(g, x, cdf):
    """The input's gradient of the composition ``y = x * cdf`` (``cdf = Phi(x)``) given ``g``, by its rules'
    kernels in their order on cache-sized chunks: mul's (``g * cdf``, ``g * x``), Phi's (phi(x) times the
    latter) and the sum of the two."""
    shape = x.shape
    g, x, cdf = g.reshape(-1), x.reshape(-1), cdf.reshape(-1)
    grad = np.empty_like(x)
    token = fp_errors.enter()
    try:
        for start in range(0, x.size, _GELU_CHUNK):
            part = slice(start, start + _GELU_CHUNK)
            pdf = _normal_pdf(x[part])
            np.multiply(pdf, np.multiply(g[part], x[part]), out=pdf)
            np.add(pdf, np.multiply(g[part], cdf[part]), out=grad[part])
    finally:
        fp_errors.leave(token)
    return grad.reshape(shape)


def _gelu_exact(x):
    """Exact GELU ``x Phi(x)`` as a composition of ops (Phi accurate relative to itself, so the result is for
    x far below 0 too): what small eager calls compute, what a trace records, and what the eager kernels of
    large calls are made from."""
    return x * _NORMAL_CDF(x)


def _gelu_tanh(x):
    """GELU by torch's tanh approximation as a composition of ops (as `_gelu_exact`)."""
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + inner.tanh())


def _composition_grad(fn, x, g):
    """The gradient of ``fn(x)`` (a pointwise composition) given ``g``, by its ops' rules: what a trace of a
    backward records, and what the eager backward kernels are made from."""
    with jt.enable_grad():
        x = x.detach().requires_grad_()
        return jt.autograd.grad(fn(x), x, g)[0]


def _gelu_exact_grad(x, g):
    """`_composition_grad` of `_gelu_exact`."""
    return _composition_grad(_gelu_exact, x, g)


def _gelu_tanh_grad(x, g):
    """`_composition_grad` of `_gelu_tanh`."""
    return _composition_grad(_gelu_tanh, x, g)


class _Form(NamedTuple):
    """An activation's composition: its kernels' name, its function of x, its gradient's function of x and g."""

    name: str
    fn: object
    grad: object


_GELU_FORMS = {"none": _Form("gelu", _gelu_exact, _gelu_exact_grad),
               "tanh": _Form("gelu_tanh", _gelu_tanh, _gelu_tanh_grad)}
# From this many elements an eager GELU of a contiguous CPU float tensor (forward and backward) runs the
# compiled path's kernel of its composition (`_gelu_kernel`). The NumPy passes took (1 thread, float32, µs,
# exact forward / backward) 35 / 15 at 512 elements against the kernels' 5 / 6, 45 / 21 at 4096 against 8 / 10,
# 1510 / 919 at 393216 (gpt-4x128's MLP) against 279 / 475; but the first call loads the code generator and
# builds the kernel (~0.1 s, then read from the kernel cache), which a program of small tensors need not pay.
GELU_KERNEL_MIN = 1 << 12


def _gelu_kernel(form, dtype, backward=False):
    """The compiled kernel of ``form``'s composition (or, with ``backward``, of its gradient) over ``dtype``
    (`jitorch.codegen.flat.FlatKernel`), or None where it cannot be built (the caller runs the ops). The code
    generator loads here, at the first call that needs it (``import jitorch`` does not load it)."""
    from ..jit import eager_kernels
    fn, name = (form.grad, form.name + "_backward") if backward else (form.fn, form.name)
    return eager_kernels.kernel(fn, name, dtype.np.name, 1 + backward)


@_grad_as_kernel(_grad_first)
def gelu(input, approximate="none"):
    """``x Phi(x)`` with the normal CDF exact (``Phi(x) = erfc(-x / sqrt(2)) / 2``) or by torch's tanh
    approximation."""
    form = _GELU_FORMS.get(approximate) if isinstance(approximate, str) else None
    if form is None:
        raise RuntimeError("approximate argument must be either none or tanh.")
    _check_floating(input, "GeluKernelImpl")
    if _HOOKS and profiling.RECORDER is not None and not hooks_take_calls():
        # profiled (the profiler's hook passes every call on): one op, torch's aten::gelu, computed as unprofiled,
        # not as its composition of ops (whose NumPy float64 Phi took 12 ms at (768, 512) against the kernel's 0.9)
        return profiling.RECORDER.function("aten::gelu", (input, approximate),
                                           lambda: _gelu(input, approximate, form, True))
    return _gelu(input, approximate, form, not _HOOKS)


def _gelu(input, approximate, form, unhooked):
    """`gelu` of a checked call (``unhooked``: `_gelu_shortcut` 's)."""
    if not _gelu_shortcut(input, unhooked):
        return form.fn(input)
    kernel = _gelu_kernel(form, input.dtype) if input.numel() >= GELU_KERNEL_MIN else None
    if kernel is None and (approximate == "tanh" or input.dtype not in (jt.float32, jt.float64)):
        return form.fn(input)
    if input._requires_grad and jt.is_grad_enabled():
        return _Gelu.apply(input, approximate, kernel)
    if kernel is not None:
        return jt.Tensor._fresh(kernel(input._array())[0], input.dtype)
    # no history to record: the composition's NumPy kernels in its order (the same bits), without its
    # dispatches
    token = fp_errors.enter()
    try:
        out = _gelu_parts(input._array(), False)[0]
    finally:
        fp_errors.leave(token)
    return jt.Tensor._fresh(out, input.dtype)


@_grad_as_kernel(_grad_first)
def silu(input, inplace=False):
    """``x * sigmoid(x)``."""
    _check_floating(input, "silu_cpu")
    return input.mul_(input.sigmoid()) if inplace else input * input.sigmoid()


def tanh(input):
    """Elementwise hyperbolic tangent."""
    return input.tanh()


def sigmoid(input):
    """Elementwise ``1 / (1 + exp(-x))``."""
    return input.sigmoid()


@_saves("input")
@_grad_as_kernel(_input_first)
def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` where positive, ``negative_slope * x`` elsewhere (the slope a Python number, as torch's kernel
    reads it: a float64 input's product is float64's)."""
    _check_floating(input, "leaky_relu_cpu")
    if input.dtype in (jt.float32, jt.float64):
        # one product by a factor of 1 or the slope in input's dtype: the same bits and gradient as the select
        # below in two eager ops instead of three, and a backward of one product instead of a select's
        factor = jt.where(input > 0, 1.0, jt.tensor(negative_slope, dtype=input.dtype))
        return input.mul_(factor) if inplace else input * factor
    # (the half types: torch multiplies by the slope in float32, which a factor rounded to the half type is not)
    out = jt.where(input > 0, input, input * negative_slope)
    return input.copy_(out) if inplace else out


def logsigmoid(input):
    """``log(sigmoid(x))`` without overflow: ``min(x, 0) - log1p(exp(-|x|))``, laid out contiguously as torch's
    ``log_sigmoid_forward`` (not in the input's memory order)."""
    _check_floating(input, "log_sigmoid_cpu")
    return _log_sigmoid(input).contiguous()


def _log_sigmoid(input):
    """`logsigmoid` in the input's memory order (the losses and activations built on it are torch's
    pointwise compositions). ``min(x, 0)`` is written ``(x - |x|) / 2`` so that the gradient at 0 is torch's
    1/2, and is 0 at +inf, where that form is inf - inf."""
    magnitude = input.abs()
    low = jt.where(input == math.inf, 0.0, 0.5 * (input - magnitude))
    return low - (-magnitude).exp().log1p()


@autocasts("softplus")
@_saves("input")
@_grad_as_kernel(_grad_first)
@_computed_in_float32
def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta x)) / beta``, and ``x`` itself where ``beta x > threshold``."""
    _check_floating(input, "softplus_cpu")
    scaled = input * beta
    above = scaled > threshold
    # torch's own form (+0 far below 0, where the negated logsigmoid was -0; inf where exp overflows below a
    # threshold past it, as torch's), its argument masked above the threshold, where the unused branch's
    # gradient 0 * exp(inf) would be NaN; the half types computed in float32 as torch's kernel (exp of a
    # float16 overflows past 11)
    return jt.where(above, input, jt.where(above, 0.0, scaled).exp().log1p() / beta)


def _check_floating(input, kernel):
    """torch's refusal of integer and bool input to the activations whose kernels are floating-only."""
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(input.dtype)}'")


def _result(input, out, inplace):
    """``out``, or written into ``input`` and ``input`` returned when ``inplace``."""
    return input.copy_(out) if inplace else out


@_saves("input")
@_grad_as_kernel(_grad_first)
def _elu(input, alpha, scale, input_scale, inplace):
    """torch's elu kernel: ``scale x`` where positive, ``scale alpha (exp(input_scale x) - 1)`` elsewhere."""
    _check_floating(input, "elu_cpu")
    # the exponential reads 0 where x > 0: its masked gradient 0 * exp(x) was NaN at +inf (a NaN input keeps
    # its NaN gradient, as torch's vectorised kernel gives: docs/differences-from-torch.md, Autograd)
    positive = input > 0
    low = jt.where(positive, 0.0, input)
    out = jt.where(positive, input, alpha * (low * input_scale).expm1())
    return _result(input, out * scale if scale != 1 else out, inplace)


def elu(input, alpha=1.0, inplace=False):
    """``x`` where positive, ``alpha (exp(x) - 1)`` elsewhere."""
    return _elu(input, alpha, 1.0, 1.0, inplace)


def elu_(input, alpha=1.0):
    """In-place `elu`."""
    return elu(input, alpha, True)


def celu(input, alpha=1.0, inplace=False):
    """``max(0, x) + min(0, alpha (exp(x / alpha) - 1))``: an elu whose slope at 0 is 1 for every ``alpha``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _elu(input, alpha, 1.0, 1.0 / alpha, inplace)


def celu_(input, alpha=1.0):
    """In-place `celu`."""
    return celu(input, alpha, True)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """``scale (max(0, x) + min(0, alpha (exp(x) - 1)))`` with the self-normalising constants of
    Klambauer et al. (alpha ~ 1.6733, scale ~ 1.0507)."""
    return _elu(input, _SELU_ALPHA, _SELU_SCALE, 1.0, inplace)


def selu_(input):
    """In-place `selu`."""
    return selu(input, True)


@_saves("input")
def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, 0 between (NaN stays NaN)."""
    _check_floating(input, "softshrink_check")
    if lambd < 0:
        bound = jt.finfo(input.dtype).max
        raise RuntimeError(f"lambda must be in range [0, {bound:g}] for input dtype {scalar_name(input.dtype)}, "
                           f"but found {lambd:g}")
    return jt.where(input.abs() <= lambd, 0.0, input - lambd * input.sign()).to(input.dtype)


@_saves("input")
def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, 0 elsewhere."""
    _check_floating(input, "hardshrink_cpu")
    return jt.where(input.abs() <= lambd, 0.0, input).to(input.dtype)


def tanhshrink(input):
    """``x - tanh(x)``."""
    return input - input.tanh()


def _threshold(input, bound, value, inplace):
    if input.dtype is jt.bool:
        _check_floating(input, "threshold_cpu")
    return _result(input, jt.where(input <= bound, value, input).to(input.dtype), inplace)


@_saves("input", in_place=False)
def threshold(input, threshold, value, inplace=False):
    """``x`` where ``x > threshold``, ``value`` elsewhere."""
    return _threshold(input, threshold, value, inplace)


def threshold_(input, threshold, value):
    """In-place `threshold`."""
    return _threshold(input, threshold, value, True)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky relu (Xu et al.): in training each non-positive element is scaled by its own slope
    drawn from ``U(lower, upper)`` (jitorch's generator), otherwise by ``(lower + upper) / 2``."""
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    _check_floating(input, "rrelu_with_noise_cpu")
    if not training:
        out = leaky_relu(input, (lower + upper) / 2, inplace)
    else:
        noise = jt.empty(tuple(input.shape), dtype=input.dtype, device=input.device).uniform_(lower, upper)
        slope = jt.where(input <= 0, noise, 1.0).to(input.dtype)
        out = input.mul_(slope) if inplace else input * slope
    # torch's rrelu_with_noise writes into a new contiguous tensor (a channels-last input's result too)
    return out if inplace else out.contiguous()


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """In-place `rrelu`."""
    return rrelu(input, lower, upper, training, True)


@_saves("input", "weight")
@_grad_as_kernel(_input_first)
def prelu(input, weight):
    """``x`` where positive, ``weight x`` elsewhere; ``weight`` is one slope, or one per channel (dim 1)."""
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.ndim}")
    if input.ndim == 0 and weight.numel() != 1:  # a 0-d input takes one slope alone
        raise RuntimeError("Not allow zero-dim input tensor.")
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.numel() != 1 and weight.numel() != channels:
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                           f"{weight.numel()} and channel size = {channels}.")
    slope = weight.reshape([-1] + [1] * (input.ndim - 2)) if input.ndim >= 2 else weight.reshape(-1 if input.ndim else ())
    return jt.where(input > 0, input, input * slope)


def leaky_relu_(input, negative_slope=0.01):
    """In-place `leaky_relu`."""
    return leaky_relu(input, negative_slope, True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    """In-place `hardtanh`."""
    return hardtanh(input, min_val, max_val, True)


@_saves("input", in_place=False)
@_grad_as_kernel(_grad_first)
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``x`` clamped to ``[min_val, max_val]``; the gradient is 0 outside the open interval, as torch."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    if input.dtype is jt.bool:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    if input.dtype is jt.uint8 and (min_val < 0 or max_val < 0):
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    out = jt.where(input <= min_val, min_val, jt.where(input >= max_val, max_val, input)).to(input.dtype)
    return input.copy_(out) if inplace else out


def relu6(input, inplace=False):
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


@_saves("input", in_place=False)
@_grad_as_kernel(_grad_first)
def hardsigmoid(input, inplace=False):
    """``relu6(x + 3) / 6``."""
    _check_floating(input, "hardsigmoid_cpu")
    out = hardtanh(input + 3.0, 0.0, 6.0) / 6.0
    # torch's backward passes a gradient only where -3 < x < 3: none at NaN, where hardtanh's passes it
    out = jt.where(input.isnan(), input.detach(), out)
    return input.copy_(out) if inplace else out


@_grad_as_kernel(_grad_first)
def hardswish(input, inplace=False):
    """``x * relu6(x + 3) / 6``."""
    _check_floating(input, "hardswish_cpu")
    out = input * hardsigmoid(input)
    return input.copy_(out) if inplace else out


def mish(input, inplace=False):
    """``x * tanh(softplus(x))``."""
    _check_floating(input, "mish_cpu")
    # torch's ``tanh(log1p(exp(x)))`` (+0 far below 0, where the negated logsigmoid was -0: x times it was +0
    # where torch's is -0), with x capped at 20, past which the tanh is 1 in float64 too: exp(x) overflowed
    # there and its gradient was 0 * inf
    x = input.float() if input.dtype in (jt.float16, jt.bfloat16) else input  # (torch's kernel computes in float32)
    out = (x * jt.where(x > 20, 20.0, x).exp().log1p().tanh()).to(input.dtype)
    return input.copy_(out) if inplace else out


def softsign(input):
    """``x / (|x| + 1)``, the 1 an int as in torch's composition (a uint8 input's sum wraps there)."""
    return input / (input.abs() + 1)


def glu(input, dim=-1):
    """The gated linear unit: ``a * sigmoid(b)`` for the two halves ``a, b`` of ``input`` along ``dim``."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    _check_floating(input, "glu_cpu")
    d = dim % input.ndim
    if input.shape[d] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {input.shape[d]}")
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``x / max(||x||_p, eps)`` along ``dim``."""
    result = input / input.norm(p, dim, True).clamp_min(eps)
    return result if out is None else out.copy_(result)


@autocasts("cosine_similarity")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim``, the inputs broadcast."""
    # Broadcast before taking norms: ``dim`` indexes the broadcast shape, not a smaller input's own.
    x1, x2 = jt.broadcast_tensors(x1, x2)
    n1 = x1.norm(2, dim, True).clamp_min(eps)
    n2 = x2.norm(2, dim, True).clamp_min(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dim of the broadcast inputs (``eps`` keeps negative ``p`` finite)."""
    return (x1 - x2 + eps).norm(p, max(x1.ndim, x2.ndim) - 1, keepdim)



@_saves("input")
def pdist(input, p=2.0):
    """The ``p``-norm distances between the rows of ``(N, M)`` input, for each pair ``i < j`` in row-major
    order: ``N (N - 1) / 2`` values."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    rows, cols = np.triu_indices(input.shape[0], 1)
    first = input.index_select(0, jt.tensor(rows, dtype=jt.int64, device=input.device))
    second = input.index_select(0, jt.tensor(cols, dtype=jt.int64, device=input.device))
    if p == 0:
        return _PdistCount.apply(first - second)
    return (first - second).norm(p, 1)


class _PdistCount(jt.autograd.Function):
    """pdist of order 0 (each pair's count of differing elements) with torch's zero gradient: vector_norm of
    order 0 gives none at all, as torch's, but torch's pdist backward gives zeros."""

    @staticmethod
    def forward(ctx, difference):
        ctx.save_for_backward(difference)
        return difference.norm(0, 1)

    @staticmethod
    def backward(ctx, g):
        return jt.zeros_like(ctx.saved_tensors[0])


def _implicit_softmax_dim(name, ndim):
    """torch's dim for a (log-)softmax called without one, with its warning."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  "as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``exp(x) / sum(exp(x))`` along ``dim`` (torch's implicit choice, with its warning, when None)."""
    # (a given dim passed as it is: the implicit choice reads the dims, a property)
    return jt.softmax(input, dim if dim is not None else _implicit_softmax_dim("softmax", input.ndim), dtype=dtype)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-x)`` along ``dim``."""
    return jt.softmax(-input, dim if dim is not None else _implicit_softmax_dim("softmin", input.ndim), dtype=dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``x - logsumexp(x)`` along ``dim``."""
    return jt.log_softmax(input, dim if dim is not None else _implicit_softmax_dim("log_softmax", input.ndim),
                          dtype=dtype)



def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """A sample of the Gumbel-softmax distribution: ``softmax((logits + g) / tau)`` with Gumbel(0, 1) noise
    ``g`` (jitorch's generator). ``hard`` returns the one-hot of its argmax, with the soft sample's gradient
    (straight-through)."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    gumbels = -jt.empty(tuple(logits.shape), dtype=logits.dtype, device=logits.device).exponential_().log()
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.max(dim, keepdim=True)[1]
    y_hard = jt.zeros_like(logits).scatter(dim, index, jt.ones(tuple(index.shape), dtype=logits.dtype,
                                                                device=logits.device))
    return y_hard - y_soft.detach() + y_soft


def one_hot(tensor, num_classes=-1):
    """Int64 one-hot encoding along a new last dim of ``num_classes`` (max + 1 when -1)."""
    if tensor.dtype is not jt.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if tensor.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(tensor.max()) + 1
    _check_values("one_hot_classes", [tensor], num_classes)
    return (tensor.unsqueeze(-1) == jt.arange(num_classes, device=tensor.device)).long()


# Losses ------------------------------------------------------------------------------------------------------

def _reduction(size_average, reduce, reduction):
    """The reduction string, from torch's deprecated ``size_average``/``reduce`` when either is given."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "mean" if size_average and reduce else "sum" if reduce else "none"
        warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{reduction}' "
                      "instead.", stacklevel=3)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _pointwise_loss(input, target, reduction, weight, elementwise, mean_over_weights=True):
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({target.shape!r}) that is different to the input size "
                      f"({input.shape!r}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", stacklevel=3)
    loss = elementwise(input - target)
    if weight is None:
        return _reduce(loss, reduction)
    if weight.shape != input.shape:
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean" and mean_over_weights:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


@autocasts("mse_loss")
@_saves("input", "target", "weight")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Squared error ``(x - y)^2``, reduced (a weighted mean divides by ``weight.sum()``)."""
    return _pointwise_loss(input, target, _reduction(size_average, reduce, reduction), weight, jt.square)


@autocasts("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Absolute error ``|x - y|``, reduced."""
    return _pointwise_loss(input, target, _reduction(size_average, reduce, reduction), weight, jt.abs)


def _huber(delta):
    """Elementwise Huber of a difference: quadratic inside ``|d| < delta``, linear outside."""
    def elementwise(d):
        magnitude = d.abs()
        return jt.where(magnitude < delta, 0.5 * d * d, delta * (magnitude - 0.5 * delta))
    return elementwise


@autocasts("smooth_l1_loss")
@_saves("input", "target")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 d^2 / beta`` where ``|d| < beta``, ``|d| - 0.5 beta`` elsewhere (plain L1 when ``beta`` is 0)."""
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    elementwise = jt.abs if beta == 0 else (lambda d: _huber(beta)(d) / beta)
    return _pointwise_loss(input, target, _reduction(size_average, reduce, reduction), None, elementwise)


@autocasts("huber_loss")
@_saves("input", "target", "weight")
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d^2`` where ``|d| < delta``, ``delta (|d| - 0.5 delta)`` elsewhere; a weighted 'mean' is the
    plain mean of the weighted losses, as torch."""
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    return _pointwise_loss(input, target, _reduction(None, None, reduction), weight, _huber(delta),
                           mean_over_weights=False)


@autocasts("kl_div")
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """``target * (log(target) - input)`` for log-probabilities ``input`` (0 where ``target`` is 0);
    'batchmean' divides the sum by the batch size, 'mean' (with torch's warning) by every element."""
    if reduction == "batchmean":
        if size_average is not None or reduce is not None:
            reduction = _reduction(size_average, reduce, "mean")
    else:
        reduction = _reduction(size_average, reduce, reduction)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      stacklevel=2)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        nonzero = target != 0
        # log of 1 where the target is 0, so that the gradient there stays finite
        loss = jt.where(nonzero, target * (jt.where(nonzero, target, 1.0).log() - input), 0.0)
        if target._requires_grad:  # (torch's ``target * input`` saves the input for the target's gradient)
            saves_also(loss, (input,))
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


def _check_class_weight(weight, classes):
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != classes):
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but got "
                           f"weight tensor of shape: {list(weight.shape)}")


def _check_targets(input, target):
    """torch's nll_loss shape and dtype checks of class-index targets, in torch's order (the batch size
    first, as its ``nll_loss_nd``); returns the target as int64, a (1,) one of a (C,) input read as the
    0-d class index, as torch."""
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    if input.ndim != 1:
        batch = target.shape[0] if target.ndim else 0  # torch counts a 0-d target as batch size 0
        if input.shape[0] != batch:
            raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                             f"({batch}).")
    if input.ndim > 2:
        expected = [input.shape[0]] + list(input.shape[2:])
        if list(target.shape) != expected:
            raise RuntimeError(f"Expected target size {expected}, got {list(target.shape)}")
    elif target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if target.dtype not in (jt.int64, jt.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {scalar_name(target.dtype)}")
    if input.ndim > 2 and target.dtype != jt.int64:  # torch's nll_loss2d takes Long targets only
        raise RuntimeError(f"expected scalar type Long but found {scalar_name(target.dtype)}")
    if input.ndim == 1 and target.ndim:
        if target.shape[0] != 1:
            raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {target.shape[0]}")
        target = target.reshape(())
    # (``to`` of an int64 target is the target itself: its call cost a loss step ~4 us, twice for cross_entropy)
    return target if target.dtype is jt.int64 else target.to(jt.int64)


def _picked_weights(target, weight, ignore_index, classes, dtype):
    """The safe targets (ignored ones replaced by class 0, checked to be in range when they hold data), per
    target its class weight (1 without weights) and 0 where ignored, and where the targets are ignored."""
    ignored = target == ignore_index
    safe = jt.where(ignored, 0, target)
    _check_values("class_targets", [target], classes, ignore_index)
    if weight is None:
        picked = ignored.logical_not().to(dtype)
    else:
        picked = jt.where(ignored, 0, weight.index_select(0, safe.reshape(-1)).reshape(safe.shape))
    return safe, picked, ignored


def _all_picked(target, ignore_index, classes):
    """Whether every one of a CPU ``target``'s class indices is in range and none is ``ignore_index``, read from its
    values (False while tracing, and for an empty target): then each picks its input's entry with weight 1."""
    if not _has_data(target) or target.device.type != "cpu" or not target.numel():
        return False
    t = target.numpy()
    lo, hi = t.min(), t.max()
    return bool(0 <= lo and hi < classes) and not (lo <= ignore_index <= hi and (t == ignore_index).any())


def _class_last(input):
    """``input`` (``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)``) with the class dim last."""
    return input if input.ndim <= 2 else input.movedim(1, -1)


def _picked_loss(input, target, reduction):
    """nll_loss where every target's weight is 1 (`_all_picked`): the general formula's products by ones and their
    sum (exact counts) give these bits, in five ops rather than a dozen (0.4 ms a step around the CNN benchmark's
    compiled model)."""
    loss = -_class_last(input).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / target.numel()


class _PickedLoss(jt.autograd.Function):
    """`_picked_loss` of an eager (N, C) or (C,) input in grad mode as one backward node, as torch's
    NllLossBackward0: the composition records five (gather, squeeze, neg, sum, div), each a dispatch forward and
    a rule of one to three ops backward (a cross-entropy step's loss took ~10x torch's time, session 54). Its
    values are the composition's bits: the forward's pick and negation are exact (one NumPy selection here), its
    sum and mean the same ops; the backward's the rules' in their order (the mean's ``g / n`` by the same op,
    negated, added into zeros at each target's class as gather's rule adds: ``0 + -g``, +0.0 for a -0.0). Like
    torch's node it saves the input and the targets (a later in-place write into either fails the backward), and
    its node has torch's name."""

    _node_name = "NllLossBackward0"

    @staticmethod
    def forward(ctx, input, target, reduction):
        ctx.reduction = reduction
        ctx.save_for_backward(input, target)
        index = target._array()[..., None]
        picked = np.take_along_axis(input._array(), index, -1)[..., 0]
        loss = jt.Tensor._fresh(np.negative(picked, out=np.empty(picked.shape, picked.dtype)), input.dtype)
        if reduction == "none":
            return loss
        return loss.sum() if reduction == "sum" else loss.sum() / target.numel()

    @staticmethod
    def backward(ctx, g):
        input, target = ctx.saved_tensors
        if _backward_records(g):  # (a graph of the backward, or a trace of it: the composition's own rules)
            create_graph = jt.is_grad_enabled()
            with jt.enable_grad():
                return jt.autograd.grad(_picked_loss(input, target, ctx.reduction), input, g,
                                        create_graph=create_graph)[0], None, None
        if ctx.reduction == "mean":
            g = g / target.numel()
        index = target._array()[..., None]
        picked = np.zeros(index.shape, g.dtype.np)
        picked -= np.broadcast_to(g._array(), target.shape)[..., None]
        grad = np.zeros(input.shape, g.dtype.np)
        np.put_along_axis(grad, index, picked, -1)
        return jt.Tensor._fresh(grad, g.dtype), None, None


@autocasts("nll_loss")
@_saves("input", "target", "weight")
@not_differentiable("nll_loss_forward", "weight")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """``-weight[t] * input[t]`` per target class ``t`` (class dim 1); 'mean' divides by the summed
    weights of the targets that are not ``ignore_index``."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _check_targets(input, target)
    classes = input.shape[0] if input.ndim == 1 else input.shape[1]
    _check_class_weight(weight, classes)
    if weight is None and input.dtype in (jt.float32, jt.float64) and _all_picked(target, ignore_index, classes):
        if input.ndim <= 2 and input._requires_grad and jt.is_grad_enabled() and _numpy_shortcut(input):
            return _PickedLoss.apply(input, target, reduction)
        return _picked_loss(input, target, reduction)
    safe, picked, ignored = _picked_weights(target, weight, ignore_index, classes, input.dtype)
    logp = _class_last(input).gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    # an ignored target's loss is a selected 0, not a product by a 0 weight: torch's loss there is +0 and its
    # gradient 0, also when 'mean' divides by a total weight of 0 (every target ignored; a product gave NaN)
    loss = jt.where(ignored, 0.0, -(logp if weight is None else logp * picked))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / picked.sum()


def _class_shape(t, input):
    """A ``(C,)`` tensor shaped to broadcast along ``input``'s class dim."""
    return t if input.ndim == 1 else t.reshape([-1] + [1] * (input.ndim - 2))


@autocasts("cross_entropy_loss")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """``nll_loss(log_softmax(input, class dim))`` for class-index targets, or the cross entropy with
    class probabilities when ``target`` has ``input``'s shape; ``label_smoothing`` mixes the target
    with the uniform distribution, as torch."""
    reduction = _reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 0 if input.ndim == 1 else 1
    classes = input.shape[class_dim] if input.ndim else 0
    logp = log_softmax(input, class_dim)
    if target.shape == input.shape:
        if not target.dtype.is_floating_point:
            raise RuntimeError("Expected floating point type for target with class probabilities, got "
                               f"{scalar_name(target.dtype)}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        _check_class_weight(weight, classes)
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / classes
        terms = logp * target
        if weight is not None:
            terms = terms * _class_shape(weight, input)
        loss = -terms.sum(class_dim)
        if reduction == "mean":
            return loss.sum() / (input.numel() // classes) if input.numel() else loss.sum() * math.nan
        return _reduce(loss, reduction)
    target = _check_targets(input, target)
    nll = nll_loss(logp, target, weight, None, ignore_index, None, reduction)
    if label_smoothing == 0:
        return nll
    _, picked, _ = _picked_weights(target, weight, ignore_index, classes, input.dtype)
    terms = logp if weight is None else logp * _class_shape(weight, input)
    smooth = jt.where(target == ignore_index, 0, -terms.sum(class_dim))
    if reduction == "mean":
        smooth = smooth.sum() / picked.sum()
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / classes)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                         ignore_index=None, label_smoothing=0.0, options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)`` with torch's checks; a
    ``linear_weight`` of shape (C, d_1, ..., d_K, in_features) gives logits (N, C, d_1, ..., d_K) for a
    K-dimensional loss. ``ignore_index`` None means -100 (and is refused with class probabilities). torch's
    ``options`` choose a chunked computation that saves memory; jitorch computes the reference path for any
    ``options`` (the same values up to rounding)."""
    if input.dim() < 1 or input.dim() > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.dim()}")
    if linear_weight.dim() < 2:
        raise RuntimeError(f"expected linear_weight with dimensionality at least 2, got {linear_weight.dim()}")
    batches, in_features = tuple(input.shape[:-1]), input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError("expected equal input and linear_weight last dimensions (in_features), "
                           f"got {input.shape[-1]} and {linear_weight.shape[-1]}, respectively")
    classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (classes, *out_features):
        raise RuntimeError(f"expected linear_bias shape {(classes, *out_features)}, got {tuple(linear_bias.shape)}")
    if out_features and not batches:
        raise RuntimeError(f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} requires "
                           f"batched input, (N, {in_features}), got unbatched input with shape {tuple(input.shape)}")
    logits_shape = (*batches, classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    rows = math.prod(out_features, start=classes)
    logits = linear(input, linear_weight.reshape(rows, in_features),
                    None if linear_bias is None else linear_bias.reshape(rows))
    return cross_entropy(logits.reshape(logits_shape), target, weight=weight, reduction=reduction,
                         ignore_index=-100 if ignore_index is None else ignore_index, label_smoothing=label_smoothing)


def _check_same_size(input, target, message):
    if target.shape != input.shape:
        raise ValueError(message.format(target=repr(target.shape), input=repr(input.shape)))


class _BinaryCrossEntropy(jt.autograd.Function):
    """binary_cross_entropy's elementwise loss (logs clamped at -100) with torch's derivatives: the input's
    ``g (x - y) / max((1 - x) x, 1e-12)``, finite where ``x`` is 0 or 1 (a saturated sigmoid; the clamped logs'
    own derivative gave 0 * inf = NaN there, even where ``y`` equals ``x``), and the target's ``-logit(x) g``."""

    @staticmethod
    def forward(ctx, input, target):
        ctx.save_for_backward(input, target)
        return -(target * input.log().clamp_min(-100) + (1 - target) * (1 - input).log().clamp_min(-100))

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * (x - y) / ((1 - x) * x).clamp_min(1e-12), x.logit().neg() * g


@autocasts("binary_cross_entropy")
@not_differentiable("binary_cross_entropy", "weight")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-w (y log x + (1 - y) log(1 - x))`` for probabilities ``x``, each log clamped at -100 as torch."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "Using a target size ({target}) that is different to the input size ({input}) "
                                    "is deprecated. Please ensure they have the same size.")
    _check_values("probabilities", [input])
    loss = _BinaryCrossEntropy.apply(input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@autocasts("binary_cross_entropy_with_logits")
@_saves("input", "target", "weight", "pos_weight")
@not_differentiable("binary_cross_entropy_with_logits", "weight", "pos_weight")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """``binary_cross_entropy(sigmoid(x), y)`` computed stably from the logits ``x``;
    ``pos_weight`` weighs the positive term per class."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "Target size ({target}) must be the same as input size ({input})")
    log_sig = _log_sigmoid(input)
    if pos_weight is None:
        loss = (1 - target) * input - log_sig
    else:
        loss = (1 - target) * input - ((pos_weight - 1) * target + 1) * log_sig
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# More losses: ranking, margins, embeddings, Poisson and Gaussian likelihoods -----------------------------------

def _reduction_not_valid(size_average, reduce, reduction):
    """The reduction for the losses torch writes in Python (multilabel soft margin, Gaussian NLL), whose
    bad-reduction error reads '... is not valid' rather than the native '... is not a valid value ...'."""
    if size_average is not None or reduce is not None:
        return _reduction(size_average, reduce, "mean")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not valid")
    return reduction


@autocasts("margin_ranking_loss")
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    """``max(0, -y (x1 - x2) + margin)``: ``y = 1`` asks ``x1`` to rank above ``x2``, ``y = -1`` below."""
    reduction = _reduction(size_average, reduce, reduction)
    if input1.ndim != input2.ndim or input1.ndim != target.ndim:
        raise RuntimeError("margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {input1.shape}, input2: {input2.shape}, target: {target.shape} ")
    # (torch's margin is a float: integer inputs give a float loss)
    return _reduce((-target * (input1 - input2) + float(margin)).clamp_min(0), reduction)


@autocasts("hinge_embedding_loss")
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """``x`` where ``y = 1`` and ``max(0, margin - x)`` where ``y = -1``; as torch, a target that is
    neither contributes both terms."""
    reduction = _reduction(size_average, reduce, reduction)
    loss = jt.where(target != 1, (margin - input).clamp_min(0), 0.0) + jt.where(target != -1, input, 0.0)
    return _reduce(loss, reduction)


@autocasts("soft_margin_loss")
@_saves("input", "target")
@not_differentiable("soft_margin_loss", "target")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Two-class logistic loss ``log(1 + exp(-y x))``, computed as ``-logsigmoid(y x)`` so it cannot overflow."""
    reduction = _reduction(size_average, reduce, reduction)
    return _reduce(-_log_sigmoid(target * input), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Per sample, the mean over the classes (last dim) of the logistic losses of ``target`` in {0, 1}."""
    reduction = _reduction_not_valid(size_average, reduce, reduction)
    loss = -(target * _log_sigmoid(input) + (1 - target) * _log_sigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss.sum(input.ndim - 1) / input.shape[-1], reduction)


@autocasts("cosine_embedding_loss")
def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos(x1, x2)`` where ``y = 1`` and ``max(0, cos(x1, x2) - margin)`` where ``y = -1`` (0 for
    other targets); the cosine is over dim 1 of ``(N, D)`` inputs, or dim 0 of ``(D,)`` ones with a 0-d target."""
    reduction = _reduction(size_average, reduce, reduction)
    if target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    dim = target.ndim
    if input1.ndim != dim + 1 or input2.ndim != dim + 1:
        raise RuntimeError(f"{dim}D target tensor expects {dim + 1}D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    # torch adds this epsilon to each squared magnitude, so that zero vectors give cos 0 and not NaN
    eps = 1e-12
    denom = (((input1 * input1).sum(dim) + eps) * ((input2 * input2).sum(dim) + eps)).sqrt()
    cos = (input1 * input2).sum(dim) / denom
    loss = jt.where(target == 1, 1 - cos, 0.0) + jt.where(target == -1, (cos - margin).clamp_min(0), 0.0)
    return _reduce(loss, reduction)


@autocasts("triplet_margin_loss")
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` the ``pairwise_distance`` of order ``p``; ``swap``
    uses ``min(d(a, n), d(p, n))`` for the negative distance (Balntas et al.)."""
    reduction = _reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError("The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")
    dist_pos = pairwise_distance(anchor, positive, p, eps)
    dist_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dist_neg = jt.minimum(dist_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + dist_pos - dist_neg).clamp_min(0), reduction)


@autocasts("poisson_nll_loss")
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """Poisson negative log likelihood: ``exp(x) - y x`` for a log rate ``x`` (``log_input``), else
    ``x - y log(x + eps)``; ``full`` adds Stirling's ``y log y - y + log(2 pi y) / 2`` where ``y > 1``."""
    reduction = _reduction(size_average, reduce, reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        big = target > 1
        # Stirling's term on 2 where it is masked off, so that its gradient there stays finite
        safe = jt.where(big, target, 2.0)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + jt.where(big, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Gaussian negative log likelihood ``(log(max(var, eps)) + (x - y)^2 / max(var, eps)) / 2`` (plus
    ``log(2 pi) / 2`` when ``full``). ``var`` is a float, ``input``'s shape, that shape less its last dim,
    or that shape with exactly one dim of 1; as torch, the clamp at ``eps`` passes gradients through."""
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = var * jt.ones_like(input)
    else:
        _check_values("nonnegative_variance", [var])
    if var.shape != input.shape:
        if input.shape[:-1] == var.shape:
            var = var.unsqueeze(-1)
        elif not (input.ndim == var.ndim and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1):
            raise ValueError("var is of incorrect size")
    reduction = _reduction_not_valid(None, None, reduction)
    # torch clamps a clone under no_grad: the value is clamped, the gradient flows as if it were not
    var = var + (var.clamp_min(eps) - var).detach()
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def _check_multi_margin(input, target, weight):
    """torch's multi_margin_loss shape and dtype checks; returns (samples, classes)."""
    if not ((input.ndim == 2 and input.shape[1]) or (input.ndim == 1 and input.shape[0]) or input.ndim == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    samples = input.shape[0] if input.ndim == 2 else 1
    classes = input.shape[-1] if input.ndim else 1
    if target.ndim > 1 or target.numel() != samples:
        raise RuntimeError("multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                           f"samples (batch size). Expected target size [{samples}], but got {list(target.shape)}. "
                           f"Input has shape {list(input.shape)}.")
    if target.dtype is not jt.int64:
        raise RuntimeError(f"expected scalar type Long but found {scalar_name(target.dtype)}")
    if weight is not None and weight.numel() != classes:
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got {list(weight.shape)}")
    _check_values("margin_targets", [target], classes)
    return samples, classes


@autocasts("multi_margin_loss")
@_saves("input", "target", "weight")
@not_differentiable("multi_margin_loss", "weight")
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """Multi-class hinge loss: per sample with class ``y``, ``sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p``
    divided by the number of classes; ``p`` is 1 or 2."""
    reduction = _reduction(size_average, reduce, reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    samples, classes = _check_multi_margin(input, target, weight)
    x = input.reshape(samples, classes)
    y = target.reshape(samples, 1)
    hinge = (margin - x.gather(1, y) + x).clamp_min(0)
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * weight.index_select(0, y.reshape(-1)).unsqueeze(1)
    hinge = jt.where(jt.arange(classes, device=input.device) == y, 0.0, hinge)
    loss = hinge.sum(1) / classes
    # A (C,) or 0-d input gives one loss, shaped as its target
    return _reduce(loss if input.ndim == 2 else loss.reshape(target.shape), reduction)



def _check_multilabel(input, target):
    """torch's multilabel_margin_loss checks; returns ``input`` and ``target`` as ``(N, C)``."""
    if not (input.ndim <= 1 or (input.ndim == 2 and input.shape[1])):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    classes = input.shape[-1] if input.ndim else 1
    if list(target.shape) != list(input.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    if target.dtype is not jt.int64:
        raise RuntimeError(f"expected scalar type Long but found {scalar_name(target.dtype)}")
    _check_values("multilabel_targets", [target], classes)
    return input.reshape(-1, classes), target.reshape(-1, classes)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Multi-class multi-label hinge loss: per sample, ``sum_j sum_i max(0, 1 - (x[y_j] - x[i])) / C`` over the
    target classes ``y_j`` (``target``'s leading entries up to the first -1) and the classes ``i`` not among
    them."""
    reduction = _reduction(size_average, reduce, reduction)
    x, y = _check_multilabel(input, target)
    # entries after the first -1 are not targets
    listed = (y >= 0).long().cumprod(1) > 0
    safe = jt.where(listed, y, 0)
    hits = jt.zeros(tuple(x.shape), dtype=x.dtype, device=x.device).scatter_add(1, safe, listed.to(x.dtype))
    others = (hits == 0).to(x.dtype)
    hinge = (1 - x.gather(1, safe).unsqueeze(2) + x.unsqueeze(1)).clamp_min(0)
    loss = (hinge * listed.to(x.dtype).unsqueeze(2) * others.unsqueeze(1)).sum((1, 2)) / x.shape[1]
    if input.ndim <= 1:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0,
                                      swap=False, reduction="mean"):
    """`triplet_margin_loss` with any ``distance_function(x1, x2)`` (default `pairwise_distance`)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError("The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")
    distance = pairwise_distance if distance_function is None else distance_function
    dist_pos, dist_neg = distance(anchor, positive), distance(anchor, negative)
    if swap:
        dist_neg = jt.minimum(dist_neg, distance(positive, negative))
    return _reduce((margin + dist_pos - dist_neg).clamp_min(0), reduction)


# Attention ------------------------------------------------------------------------------------------------------

_FUTURES: dict = {}  # (L, S, device[, CUDA backend]) -> the eager causal mask `_causal_future` made


def _causal_future(L, S, device):
    """The bool ``(L, S)`` mask of the keys after each query (``triu(1)`` of ones). Eager calls share one per
    size and device: each generated token's attention layers would otherwise make the same one again, two
    ops per layer. Nothing writes it (the attention only reads it). While a dispatch hook is installed a
    call makes its own: a traced step's ops fuse with the softmax, and a profile sees the ops as before.
    A CUDA mask is in the memory of the backend that made it: another backend's device of that index (each
    `jitorch.cuda.emulated` block's) makes its own."""
    if _HOOKS:
        return jt.ones((L, S), dtype=jt.bool, device=device).triu(1)
    key = (L, S, device) if device.type != "cuda" else (L, S, device, cuda_backend.current())
    mask = _FUTURES.get(key)
    if mask is None:
        if len(_FUTURES) >= 256:  # (a bound: sizes that vary without end make new ones)
            _FUTURES.clear()
        mask = _FUTURES[key] = jt.ones((L, S), dtype=jt.bool, device=device).triu(1)
    return mask


@autocasts("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` over the last two dims, as torch's reference implementation.

    A bool ``attn_mask`` is True where attention is allowed, a float one is added; ``is_causal``
    allows each query only the keys at or before it. Rows with every key masked give zeros
    (torch's safe softmax). With ``is_causal`` every row allows key 0 and the softmax is a plain one: a row
    whose allowed scores are all -inf, which only infinite inputs give, is NaN there where torch's CPU kernel
    gives zeros. ``dropout_p`` always applies, as in torch.

    Recording history on the CPU (float32 or float64, no mask, the causal one or a bool or additive mask that
    broadcasts to the scores, no dropout), it is one op, ``_attention``, run by fused kernels forward and
    backward (jitorch/codegen/attention.py; a mask that requires grad takes NumPy's products backward); its sums
    round in another order than the composition's (within float tolerance of torch, whose CPU kernel is
    fused too), and as torch's fused kernels it has no double backward.
    """
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if not _HOOKS and _AUTOCAST.key is None and attn_mask is None and dropout_p == 0.0 and not enable_gqa:
        out = attention_fast(query, key, value, is_causal, scale)
        if out is not None:
            return out
    if (_AUTOCAST.key is None and isinstance(scale, float)
            and _fused_attention(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)):
        out = _OPS["_attention"](query, key, value, attn_mask, is_causal, scale)[0]
        if _attention_saves_output(query, key, value, attn_mask):
            saves_also(out, (out,))
        return out
    if enable_gqa:
        if query.shape[-3] % key.shape[-3] or query.shape[-3] % value.shape[-3]:
            raise RuntimeError("Number of heads in key and value must divide the number of heads in query")
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], -3)
        value = value.repeat_interleave(query.shape[-3] // value.shape[-3], -3)
    scores = jt.matmul(query, key.transpose(-2, -1)) * scale
    if is_causal:
        # no row is empty: the mask and safe softmax's checks would cost five more ops here and in backward
        future = _causal_future(L, S, query.device)
        weights = jt.softmax(scores.masked_fill(future, -math.inf), -1)
    elif attn_mask is None:
        weights = jt.softmax(scores, -1)
    else:
        if attn_mask.dtype is jt.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), -math.inf)
        else:
            scores = scores + attn_mask
        empty = (scores == -math.inf).all(-1, keepdim=True)
        weights = jt.where(empty, 0.0, jt.softmax(jt.where(empty, 0.0, scores), -1))
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return jt.matmul(weights, value)


# Multi-head attention (nn.MultiheadAttention runs this) ----------------------------------------------------

def _mha_in_projection(query, key, value, w, b, separate):
    """q, k, v by the packed projection ``w`` (one product for self-attention, as torch's
    ``_in_projection_packed``) or by the three ``separate`` weights."""
    if separate is not None:
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        return tuple(linear(x, wx, bx) for x, wx, bx in zip((query, key, value), separate, (bq, bk, bv)))
    E = query.shape[-1]
    if query is key and key is value:
        q, k, v = linear(query, w, b).unflatten(-1, (3, E)).unbind(-2)
        return q, k, v
    bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
    wq, wk, wv = w.chunk(3)
    return linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """Attention of ``query`` (L, N, E) over ``key``/``value`` (S, N, *) (or unbatched (L, E), (S, *)) in
    ``num_heads`` heads, with torch's projections, masks (bool: True is masked out), ``bias_k``/``bias_v``,
    zero-attention slot and static keys/values; returns (output, weights averaged over heads, per head, or
    None without ``need_weights``)."""
    batched = mha.shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = mha.map_shared(lambda x: x.unsqueeze(1), (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    key_padding_mask = mha.canonical_mask(key_padding_mask, "key_padding_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                           "module method `generate_square_subsequent_mask` to create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # scaled_dot_product_attention applies the causal mask itself
    else:
        attn_mask = mha.canonical_mask(attn_mask, "attn_mask", query.dtype)
        if key_padding_mask is not None:
            is_causal = False  # the merged mask is no longer causal
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    heads, head_dim = num_heads, embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(f"key's sequence and batch dims {key.shape[:2]} do not match value's "
                                 f"{value.shape[:2]}")
        for name, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                raise AssertionError(f"use_separate_proj_weight is True but {name}_proj_weight is None")
        separate = (q_proj_weight, k_proj_weight, v_proj_weight)
    else:
        if key.shape != value.shape:
            raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        separate = None
    q, k, v = _mha_in_projection(query, key, value, in_proj_weight, in_proj_bias, separate)
    src_len = k.shape[0]
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                                   f"{(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.dim() == 3:
            if tuple(attn_mask.shape) != (bsz * heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                                   f"{(bsz * heads, tgt_len, src_len)}.")
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = jt.cat([k, bias_k.repeat(1, bsz, 1)])
        v = jt.cat([v, bias_v.repeat(1, bsz, 1)])
        attn_mask, key_padding_mask = mha.extend_masks(attn_mask, key_padding_mask)
    elif bias_k is not None or bias_v is not None:
        raise AssertionError("bias_k is set but bias_v is None" if bias_k is not None
                             else "bias_v is set but bias_k is None")
    q = q.reshape(tgt_len, bsz * heads, head_dim).transpose(0, 1)
    k = mha.static_heads(k, static_k, "static_k", bsz, heads, head_dim)
    v = mha.static_heads(v, static_v, "static_v", bsz, heads, head_dim)
    if add_zero_attn:
        zeros = jt.zeros((bsz * heads, 1, head_dim), dtype=k.dtype, device=k.device)
        k = jt.cat([k, zeros], dim=1)
        v = jt.cat([v, zeros.to(v.dtype)], dim=1)
        attn_mask, key_padding_mask = mha.extend_masks(attn_mask, key_padding_mask)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        if key_padding_mask.shape[0] != bsz:
            raise AssertionError(f"Expected key_padded_mask.shape[0] to be {bsz}, but got "
                                 f"{key_padding_mask.shape[0]}")
        if key_padding_mask.shape[1] != src_len:
            raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                                 f"{key_padding_mask.shape[1]}")
        kpm = key_padding_mask.view(bsz, 1, 1, src_len).expand(-1, heads, -1, -1).reshape(bsz * heads, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    if not training:
        dropout_p = 0.0
    if need_weights:
        out, weights = _mha_weights(q, k, v, attn_mask, dropout_p, is_causal)
        out = out.transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = linear(out, out_proj_weight, out_proj_bias)
        out = out.view(tgt_len, bsz, out.shape[1])
        weights = weights.view(bsz, heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(dim=1)
        return (out, weights) if batched else (out.squeeze(1), weights.squeeze(0))
    if attn_mask is not None:
        if attn_mask.shape[0] == 1 and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.view(bsz, heads, -1, src_len)
    q = q.reshape(bsz, heads, tgt_len, head_dim)
    k = k.reshape(bsz, heads, src_len, head_dim)
    v = v.reshape(bsz, heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias)
    out = out.view(tgt_len, bsz, out.shape[1])
    return (out, None) if batched else (out.squeeze(1), None)


def _mha_weights(q, k, v, attn_mask, dropout_p, is_causal):
    """The attention output (N * heads, L, head_dim) and its softmax weights, as torch's need_weights path."""
    if is_causal and attn_mask is None:
        raise AssertionError("FIXME: is_causal not implemented for need_weights")
    q_scaled = q * math.sqrt(1.0 / float(q.shape[-1]))
    if attn_mask is not None:
        scores = jt.baddbmm(attn_mask, q_scaled, k.transpose(-2, -1))
    else:
        scores = jt.bmm(q_scaled, k.transpose(-2, -1))
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = dropout(weights, p=dropout_p)
    return jt.bmm(weights, v), weights


# Time-batch-channel convolution ----------------------------------------------------------------------------

def conv_tbc(input, weight, bias, pad=0):
    """A 1-D convolution of ``(time, batch, in_channels)`` input by ``(kernel_width, in_channels,
    out_channels)`` weights plus ``bias`` ``(out_channels,)``, ``pad`` steps of zeros at both ends: `conv1d` in
    (batch, channels, time) layout (torch's ``conv_tbc``)."""
    if not isinstance(bias, jt.Tensor):
        raise TypeError(f"conv_tbc(): argument 'bias' (position 3) must be Tensor, not {type(bias).__name__}")
    if input.ndim != 3:
        raise RuntimeError("Input must have 3 dims: time, batch, in_channel")
    if weight.ndim != 3:
        raise RuntimeError("Weight tensor must have 3 dims: kernel_width, in_channels, out_channels.")
    if bias.ndim != 1:
        raise RuntimeError("Bias must be 1-D")
    if input.shape[2] != weight.shape[1]:
        raise RuntimeError("Input dim 2 (input channels) is not == dim 1 in the weight tensor")
    if weight.shape[2] != bias.shape[0]:
        raise RuntimeError("Bias size must equal dim 2 in the weight tensor (output channels).")
    steps = input.shape[0] + 2 * pad - weight.shape[0] + 1
    if steps < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {steps}: "
                           f"[{steps}, {input.shape[1]}, {weight.shape[2]}]")
    out = conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=pad)
    return out.permute(2, 0, 1)
