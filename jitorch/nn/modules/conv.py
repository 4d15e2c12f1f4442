"""Conv1d, Conv2d and Conv3d (stride, padding incl. 'same'/'valid', dilation, groups, padding_mode), and their
transposes ConvTranspose1d, ConvTranspose2d and ConvTranspose3d."""

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
    _transposed = False  # a transposed convolution's weight is (C_in, C_out/groups, *k)

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
        self.transposed = self._transposed
        self.output_padding = ntuple(0)
        self.groups = groups
        self.padding_mode = padding_mode
        self._reversed_padding_repeated_twice = self._reversed_padding()
        outer, inner = (in_channels, out_channels) if self._transposed else (out_channels, in_channels)
        self.weight = Parameter(factory("empty", (outer, inner // groups, *kernel_size), device, dtype))
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


class _ConvTransposeNd(_ConvNd):
    """The transposed convolutions: torch's argument order (output_padding before groups, dilation after
    bias), zero padding only, and ``forward(input, output_size)`` choosing the output padding."""

    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.output_padding = type(self)._ntuple(output_padding)

    def _output_padding(self, input, output_size):
        """The output padding giving ``output_size`` (the trailing spatial sizes are used), checked to lie
        between the smallest output and that plus ``stride - 1``."""
        if output_size is None:
            return self.output_padding
        nd = len(self.kernel_size)
        non_spatial = 2 if input.dim() == nd + 2 else 1
        output_size = list(output_size)
        if len(output_size) == non_spatial + nd:
            output_size = output_size[non_spatial:]
        if len(output_size) != nd:
            raise ValueError(f"ConvTranspose{nd}D: for {input.dim()}D input, output_size must have {nd} or "
                             f"{non_spatial + nd} elements (got {len(output_size)})")
        min_sizes = [(input.shape[d + non_spatial] - 1) * self.stride[d] - 2 * self.padding[d]
                     + self.dilation[d] * (self.kernel_size[d] - 1) + 1 for d in range(nd)]
        max_sizes = [m + s - 1 for m, s in zip(min_sizes, self.stride)]
        if any(not lo <= n <= hi for n, lo, hi in zip(output_size, min_sizes, max_sizes)):
            raise ValueError(f"requested an output size of {output_size}, but valid sizes range from {min_sizes} to "
                             f"{max_sizes} (for an input of {input.shape[2:]})")
        return tuple(n - lo for n, lo in zip(output_size, min_sizes))

    def forward(self, input, output_size=None):
        output_padding = self._output_padding(input, output_size)
        return getattr(F, type(self)._conv)(input, self.weight, self.bias, self.stride, self.padding, output_padding,
                                            self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution over (N, C_in, L) or (C_in, L) inputs; weight (C_in, C_out/groups, k)."""

    _ntuple = staticmethod(_single)
    _conv = "conv_transpose1d"


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution over (N, C_in, H, W) or (C_in, H, W) inputs; weight (C_in, C_out/groups, kh, kw)."""

    _ntuple = staticmethod(_pair)
    _conv = "conv_transpose2d"


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution over (N, C_in, D, H, W) or (C_in, D, H, W) inputs."""

    _ntuple = staticmethod(_triple)
    _conv = "conv_transpose3d"
