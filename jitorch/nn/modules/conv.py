"""Conv1d, Conv2d and Conv3d (stride, padding incl. 'same'/'valid', dilation, groups, padding_mode)."""

from __future__ import annotations

import math

from .. import init
from ..parameter import Parameter
from ._functional import F
from .module import Module
from .utils import _pair, _single, _triple, factory

_PADDING_STRINGS = {"same", "valid"}
_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


class _ConvNd(Module):
    """Shared construction, initialisation and repr of the convolutions over ``n`` spatial dims."""

    _ntuple = None
    _conv = None

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        ntuple = type(self)._ntuple
        kernel_size, stride, dilation = ntuple(kernel_size), ntuple(stride), ntuple(dilation)
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {_PADDING_STRINGS}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = ntuple(padding)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, but got padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = False
        self.output_padding = ntuple(0)
        self.groups = groups
        self.padding_mode = padding_mode
        self._reversed_padding_repeated_twice = self._reversed_padding()
        self.weight = Parameter(factory("empty", (out_channels, in_channels // groups, *kernel_size), device, dtype))
        if bias:
            self.bias = Parameter(factory("empty", (out_channels,), device, dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _reversed_padding(self):
        """F.pad's argument for a non-zero padding_mode: (left, right) per dim, last dim first."""
        pads = []
        for p in reversed(self._explicit_padding()):
            pads.extend(p if isinstance(p, tuple) else (p, p))
        return tuple(pads)

    def _explicit_padding(self):
        if self.padding == "valid":
            return [0] * len(self.kernel_size)
        if self.padding == "same":
            totals = [d * (k - 1) for k, d in zip(self.kernel_size, self.dilation)]
            return [(t // 2, t - t // 2) for t in totals]
        return list(self.padding)

    def reset_parameters(self):
        """torch's default: kaiming_uniform_(a=sqrt(5)) weight, U(+-1/sqrt(fan_in)) bias."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        conv = getattr(F, type(self)._conv)
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(padded, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        n = len(self.kernel_size)
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution over (N, C_in, L) or (C_in, L) inputs; weight (C_out, C_in/groups, k)."""

    _ntuple = staticmethod(_single)
    _conv = "conv1d"


class Conv2d(_ConvNd):
    """2-D convolution over (N, C_in, H, W) or (C_in, H, W) inputs; weight (C_out, C_in/groups, kh, kw)."""

    _ntuple = staticmethod(_pair)
    _conv = "conv2d"


class Conv3d(_ConvNd):
    """3-D convolution over (N, C_in, D, H, W) or (C_in, D, H, W) inputs; weight (C_out, C_in/groups, kd, kh, kw)."""

    _ntuple = staticmethod(_triple)
    _conv = "conv3d"
