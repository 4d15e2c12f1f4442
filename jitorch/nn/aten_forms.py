"""The nn ops torch also has in its own namespace (``torch.conv2d``, ``torch.batch_norm``, ``torch.kl_div``).

These are ATen's signatures, which differ from ``torch.nn.functional``'s: norms take ``weight`` and ``bias``
before the running statistics and a ``cudnn_enabled`` flag, losses take ``reduction`` as an int (0 none,
1 mean, 2 sum; torch's Python binding leaves it 0 when omitted, as measured on torch 2.13), dropouts
``train`` rather than ``training``, and ``embedding`` takes the weight first. Each runs the functional
form, so autograd, autocast and tracing see the same ops. Where the functional form is the same
function (the convolutions, ``bilinear``, the activations), jitorch exports it as it is.
"""

from __future__ import annotations

import jitorch as jt

from ..tensor import Tensor
from . import functional as F

_REDUCTIONS = ("none", "mean", "sum")

# same signature in both namespaces: one function
conv1d, conv2d, conv3d = F.conv1d, F.conv2d, F.conv3d
conv_transpose1d, conv_transpose2d, conv_transpose3d = F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d
bilinear, pixel_shuffle, pixel_unshuffle, channel_shuffle = F.bilinear, F.pixel_shuffle, F.pixel_unshuffle, \
    F.channel_shuffle
conv_tbc = F.conv_tbc
prelu, rrelu, selu, celu, threshold, hardshrink = F.prelu, F.rrelu, F.selu, F.celu, F.threshold, F.hardshrink
rrelu_, selu_, celu_, threshold_ = F.rrelu_, F.selu_, F.celu_, F.threshold_
max_pool1d, max_pool2d, max_pool3d, avg_pool1d = F.max_pool1d, F.max_pool2d, F.max_pool3d, F.avg_pool1d
adaptive_avg_pool1d = F.adaptive_avg_pool1d
cosine_similarity, pairwise_distance, pdist, rms_norm = F.cosine_similarity, F.pairwise_distance, F.pdist, \
    F.rms_norm


def _reduction(reduction):
    if type(reduction) is not int:
        raise TypeError(f"argument 'reduction' must be int, not {type(reduction).__name__}")
    if reduction not in (0, 1, 2):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return _REDUCTIONS[reduction]


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    """``torch.batch_norm``: `nn.functional.batch_norm` with ATen's argument order (``cudnn_enabled`` has
    no effect: jitorch has no cuDNN)."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled):
    """``torch.instance_norm``: `nn.functional.instance_norm` with ATen's argument order."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    """``torch.layer_norm``: `nn.functional.layer_norm` (``cudnn_enable`` has no effect)."""
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True):
    """``torch.group_norm``: `nn.functional.group_norm` (``cudnn_enabled`` has no effect)."""
    return F.group_norm(input, num_groups, weight, bias, eps)


def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """``torch.native_layer_norm``: the layer norm, with the mean and reciprocal standard deviation over the
    normalised dims, kept as size-1 dims. As torch's, the mean and rstd are not differentiable (its
    derivatives.yaml: ``output_differentiability: [True, False, False]``): they never require grad. A half
    type's are computed in float32 and rounded once, as torch's kernel's."""
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    with jt.no_grad():
        x = input.float() if input.dtype in (jt.float16, jt.bfloat16) else input
        mean = x.mean(dims, keepdim=True).to(input.dtype)
        rstd = (x.var(dims, unbiased=False, keepdim=True) + eps).rsqrt().to(input.dtype)
    return F.layer_norm(input, normalized_shape, weight, bias, eps), mean, rstd


def dropout(input, p, train):
    """``torch.dropout``: `nn.functional.dropout` taking ``train``."""
    return F.dropout(input, p, train)


def dropout_(input, p, train):
    """``torch.dropout_``: `dropout` written into ``input``."""
    return F.dropout(input, p, train, inplace=True)


def alpha_dropout(input, p, train):
    """``torch.alpha_dropout``: `nn.functional.alpha_dropout` taking ``train``."""
    return F.alpha_dropout(input, p, train)


def alpha_dropout_(input, p, train):
    """``torch.alpha_dropout_``: `alpha_dropout` written into ``input``."""
    return F.alpha_dropout(input, p, train, inplace=True)


def feature_alpha_dropout(input, p, train):
    """``torch.feature_alpha_dropout``: alpha dropout of whole channels (dim 1)."""
    return F.feature_alpha_dropout(input, p, train)


def feature_alpha_dropout_(input, p, train):
    """``torch.feature_alpha_dropout_``: `feature_alpha_dropout` written into ``input``."""
    return F.feature_alpha_dropout(input, p, train, inplace=True)


def feature_dropout(input, p, train):
    """``torch.feature_dropout``: dropout of whole channels (dim 1) of ``(N, C, *)`` input."""
    return F._feature_dropout(input, p, train, False)


def feature_dropout_(input, p, train):
    """``torch.feature_dropout_``: `feature_dropout` written into ``input``."""
    return F._feature_dropout(input, p, train, True)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``torch.embedding``: the rows of ``weight`` at ``indices`` (weight first; ``padding_idx`` -1: none)."""
    return F.embedding(indices, weight, None if padding_idx == -1 else padding_idx,
                       scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """``torch.embedding_bag``: ``(output, offset2bag, bag_size, max_indices)``, the output as
    `nn.functional.embedding_bag` with ``mode`` 0 sum, 1 mean, 2 max (a negative ``padding_idx`` counts from the end),
    and ATen's bookkeeping: each index's bag (empty for a sum without ``padding_idx``), each bag's count of indices
    (zeros for a sum) and, for max, each bag's argmax row per column (else the bag sizes, or zeros)."""
    if not isinstance(offsets, Tensor):
        raise TypeError(f"embedding_bag(): argument 'offsets' (position 3) must be Tensor, not "
                        f"{type(offsets).__name__}")
    name = ("sum", "mean", "max")[mode]
    pad = None if padding_idx is None else padding_idx % weight.shape[0] if weight.ndim == 2 else padding_idx
    output = F.embedding_bag(indices, weight, offsets, None, 2, scale_grad_by_freq, name, sparse, per_sample_weights,
                             include_last_offset, pad)
    flat, _, starts, bags = F._bag_inputs(indices, offsets, per_sample_weights, include_last_offset)
    kind, grad_on = flat.dtype, jt.is_grad_enabled()
    with jt.no_grad():
        bag = (jt.arange(flat.numel(), device=flat.device).unsqueeze(1) >= starts.unsqueeze(0)).long().sum(1) - 1
        member = bag < bags if pad is None else (bag < bags) & (flat != pad)
        if mode == 0:
            # torch's forward-only kernel sizes these by the offsets, its differentiable one by the bags
            graded = weight.requires_grad and grad_on
            zeros = jt.zeros(bags if graded else offsets.numel(), dtype=kind, device=flat.device)
            offset2bag = bag.to(kind) if padding_idx is not None else jt.zeros(0, dtype=kind, device=flat.device)
            return output, offset2bag, zeros, zeros.clone()
        safe = jt.where(member, bag, 0)
        sizes = jt.zeros(bags, dtype=jt.int64, device=flat.device).index_add(0, safe, member.long()).to(kind)
        if mode == 1:
            return output, bag.to(kind), sizes, sizes.clone()
        rows = weight.detach().index_select(0, flat)
        best = output.detach().index_select(0, safe)
        last = flat.numel()
        first = jt.where(member.unsqueeze(1) & (rows == best), jt.arange(last, device=flat.device).unsqueeze(1), last)
        first = jt.full(tuple(output.shape), last, dtype=jt.int64, device=flat.device).scatter_reduce(
            0, safe.unsqueeze(1).expand(first.shape), first, "amin")
        found = first < last
        argmax = jt.where(found, flat.index_select(0, jt.where(found, first, 0).reshape(-1)).reshape(first.shape), 0)
        return output, bag.to(kind), sizes, argmax.to(kind)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0, zero_infinity=False):
    """``torch.ctc_loss``: `nn.functional.ctc_loss` with ``reduction`` as an int."""
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, _reduction(reduction), zero_infinity)


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=0):
    """``torch.binary_cross_entropy_with_logits``: the functional loss with ``reduction`` as an int."""
    return F.binary_cross_entropy_with_logits(input, target, weight, reduction=_reduction(reduction),
                                              pos_weight=pos_weight)


def kl_div(input, target, reduction=0, *, log_target=False):
    """``torch.kl_div``: the functional loss with ``reduction`` as an int (1, mean, averages over every
    element, without the functional form's warning about it)."""
    mode = _reduction(reduction)
    loss = F.kl_div(input, target, reduction="none" if mode == "mean" else mode, log_target=log_target)
    return loss.mean() if mode == "mean" else loss


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=0):
    """``torch.margin_ranking_loss``: the functional loss with ``reduction`` as an int."""
    return F.margin_ranking_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=0):
    """``torch.cosine_embedding_loss``: the functional loss with ``reduction`` as an int."""
    return F.cosine_embedding_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def hinge_embedding_loss(input, target, margin=1.0, reduction=0):
    """``torch.hinge_embedding_loss``: the functional loss with ``reduction`` as an int."""
    return F.hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    """``torch.poisson_nll_loss``: the functional loss with every argument given, ``reduction`` an int."""
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=_reduction(reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-06, swap=False, reduction=0):
    """``torch.triplet_margin_loss``: the functional loss with ``reduction`` as an int."""
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction=_reduction(reduction))


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``torch.max_pool1d_with_indices``: the pooled values and their indices (``stride`` () or None: the
    kernel size)."""
    return F.max_pool1d(input, kernel_size, stride or None, padding, dilation, ceil_mode, return_indices=True)


def adaptive_max_pool1d(input, output_size):
    """``torch.adaptive_max_pool1d``: the pooled values and their indices."""
    return F.adaptive_max_pool1d(input, output_size, return_indices=True)


def _prelu_method(self, weight):
    """``x.prelu(weight)``: `nn.functional.prelu`."""
    return F.prelu(self, weight)


def _hardshrink_method(self, lambd=0.5):
    """``x.hardshrink(lambd)``: `nn.functional.hardshrink`."""
    return F.hardshrink(self, lambd)


# the Tensor methods torch has for nn ops (Tensor sits below nn, which installs them)
Tensor.prelu = _prelu_method
Tensor.hardshrink = _hardshrink_method

__all__ = [name for name in dir() if not name.startswith("_") and name not in ("F", "Tensor", "annotations", "jt")]
