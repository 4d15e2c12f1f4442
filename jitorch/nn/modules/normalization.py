"""BatchNorm1d/2d/3d (with running statistics), InstanceNorm1d/2d/3d, GroupNorm, LayerNorm, RMSNorm and
LocalResponseNorm."""

from __future__ import annotations

import numbers
import warnings

import numpy as np

import jitorch as jt

from ...runtime import dtypes as _dt
from .. import init
from ..parameter import Parameter
from ._functional import F
from .module import Module
from .utils import factory


class _BatchNorm(Module):
    """Batch normalisation over dim 1 with optional affine parameters and running statistics."""

    _dims = ()  # the input dims a subclass accepts, and how its error names them
    _expected = ""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(factory("empty", (num_features,), device, dtype))
            if bias:
                self.bias = Parameter(factory("empty", (num_features,), device, dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", factory("zeros", (num_features,), device, dtype))
            self.register_buffer("running_var", factory("ones", (num_features,), device, dtype))
            self.register_buffer("num_batches_tracked", factory("zeros", (), device, _dt.int64))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self.reset_parameters()

    def reset_running_stats(self):
        """Running mean 0, running variance 1, no batches seen."""
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        """Reset the running statistics; weight 1 and bias 0."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input):
        if input.dim() not in self._dims:
            raise ValueError(f"expected {self._expected} input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        # batch statistics in training, and in eval when there are no running ones
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        # running statistics are passed only where they are used or updated
        pass_running = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if pass_running else None,
                            self.running_var if pass_running else None, self.weight, self.bias,
                            use_batch_stats, factor, self.eps)

    def _match_state(self, state_dict, prefix, *rest):
        # torch upgrades checkpoints without the counter (its version 1) by keeping the current one;
        # jitorch's state dicts carry no version, so any dict may be such a checkpoint
        key = prefix + "num_batches_tracked"
        if self.track_running_stats and key not in state_dict:
            state_dict[key] = self.num_batches_tracked
        super()._match_state(state_dict, prefix, *rest)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) inputs."""

    _dims = (2, 3)
    _expected = "2D or 3D"


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) inputs."""

    _dims = (4,)
    _expected = "4D"


class BatchNorm3d(_BatchNorm):
    """Batch norm over (N, C, D, H, W) inputs."""

    _dims = (5,)
    _expected = "5D"


class _InstanceNorm(_BatchNorm):
    """Instance normalisation: each channel of each sample over its spatial dims. torch's defaults: no affine
    parameters and no running statistics; with them, eval mode normalises by the running ones."""

    _no_batch_dim = 0  # the dims of an unbatched input

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, device=None,
                 dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, input):
        self._check_input_dim(input)
        feature_dim = input.dim() - self._no_batch_dim
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                                 f"({self.num_features}), but got: {input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You can silence this "
                          "warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        unbatched = input.dim() == self._no_batch_dim
        x = input.unsqueeze(0) if unbatched else input
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats,
                              0.0 if self.momentum is None else self.momentum, self.eps)
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Instance norm over (N, C, L) or (C, L) inputs."""

    _dims = (2, 3)
    _expected = "2D or 3D"
    _no_batch_dim = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance norm over (N, C, H, W) or (C, H, W) inputs."""

    _dims = (3, 4)
    _expected = "3D or 4D"
    _no_batch_dim = 3


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over (N, C, D, H, W) or (C, D, H, W) inputs."""

    _dims = (4, 5)
    _expected = "4D or 5D"
    _no_batch_dim = 4


def _elementwise_affine(module, enabled, shape, bias, device, dtype):
    """A normalisation's ``weight`` and ``bias`` of ``shape`` (each None where disabled, as torch registers
    them)."""
    module.register_parameter("weight", Parameter(factory("empty", shape, device, dtype)) if enabled else None)
    module.register_parameter("bias", Parameter(factory("empty", shape, device, dtype)) if enabled and bias else None)


def _reset_affine(module):
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class GroupNorm(Module):
    """Normalise each sample over ``num_groups`` groups of consecutive channels, then scale and shift per
    channel."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _elementwise_affine(self, affine, (num_channels,), bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        """Weight 1 and bias 0."""
        _reset_affine(self)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift elementwise."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _elementwise_affine(self, elementwise_affine, self.normalized_shape, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        """Weight 1 and bias 0."""
        _reset_affine(self)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dims, with a learned scale
    (``elementwise_affine``); ``eps`` None is the dtype's machine epsilon."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(factory("empty", self.normalized_shape, device, dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Scale 1."""
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class _ResponseNorm(Module):
    """The parameters of a cross-channel response normalisation: ``size`` channels, ``alpha``, ``beta``, ``k``."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class LocalResponseNorm(_ResponseNorm):
    """Each element divided by ``(k + alpha * mean of x^2 over size neighbouring channels)^beta``."""

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)


def _forward_sums(channels, size):
    """The (C, C) 0/1 matrix whose column c picks the channels torch's legacy CrossMapLRN2d sums for channel c:
    its running sum adds channel ``c + pre - 1`` and drops ``c - pre`` only from ``c > pre`` on, so channel 0
    is never dropped (``pre = (size - 1) // 2 + 1``)."""
    pre = int((size - 1) / 2 + 1)
    picks = np.zeros((channels, channels))
    picks[0] = 1
    for c in range(channels):
        low = c - pre + 1 if c > pre else 1
        picks[max(low, 1):min(c + pre - 1, channels - 1) + 1, c] = 1
    return picks


def _backward_sums(channels, size):
    """The (C, C) 0/1 matrix of the ``size`` channels around each channel that torch's legacy backward sums
    (a symmetric window starting ``size - (size - 1) // 2`` before: not the forward's, as in torch)."""
    before = int(size - (size - 1) / 2)
    picks = np.zeros((channels, channels))
    for c in range(channels):
        picks[max(c - before, 0):max(min(c + size - before, channels), 0), c] = 1
    return picks


def _channel_sums(x, picks):
    """``x`` (N, C, H, W) summed over channels by the columns of ``picks``."""
    weights = jt.tensor(picks, dtype=x.dtype, device=x.device)
    return jt.matmul(x.movedim(1, -1), weights).movedim(-1, 1)


class _CrossMapLRN2d(jt.autograd.Function):
    """torch's legacy ``_cross_map_lrn2d``: its forward and its own backward formula, as registry ops."""

    @staticmethod
    def forward(ctx, input, size, alpha, beta, k):
        if input.dim() != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.dim()}D instead.")
        scale = _channel_sums(input * input, _forward_sums(input.shape[1], size)) * (alpha / size) + k
        output = input * scale.pow(-beta)
        ctx.save_for_backward(input, output, scale)
        ctx.args = (size, alpha, beta)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, output, scale = ctx.saved_tensors
        size, alpha, beta = ctx.args
        ratio = _channel_sums(grad_output * output / scale, _backward_sums(input.shape[1], size))
        grad = scale.pow(-beta) * grad_output - (2 * alpha * beta / size) * input * ratio
        return grad, None, None, None, None


class CrossMapLRN2d(_ResponseNorm):
    """torch's legacy (Lua torch) cross-channel local response normalisation of (N, C, H, W) input, with its
    window quirk and its backward formula (see `_forward_sums`)."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__(size, alpha, beta, k)  # (torch's default k here is the int 1)

    def forward(self, input):
        return _CrossMapLRN2d.apply(input, self.size, self.alpha, self.beta, self.k)
