"""Pooling modules: max, average, power-average (LP), adaptive and max-unpooling, in 1, 2 and 3 dims."""

from __future__ import annotations

from ._functional import F
from .module import Module
from .utils import _pair, _single, _triple


class _MaxPoolNd(Module):
    """Max over ``kernel_size`` windows (stride defaults to the kernel size); ``F.<_function>``."""

    _function = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return getattr(F, self._function)(input, self.kernel_size, self.stride, self.padding, self.dilation,
                                          ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over windows of the last dim of ``(N, C, L)`` or ``(C, L)`` input."""

    _function = "max_pool1d"


class MaxPool2d(_MaxPoolNd):
    """Max over windows of the last two dims of ``(N, C, H, W)`` or ``(C, H, W)`` input."""

    _function = "max_pool2d"


class MaxPool3d(_MaxPoolNd):
    """Max over windows of the last three dims of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input."""

    _function = "max_pool3d"


class _AvgPoolNd(Module):
    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """Mean over windows of the last dim; torch keeps the sizes as 1-tuples."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding = _single(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class _AvgPoolWithDivisor(_AvgPoolNd):
    """Mean over ``kernel_size`` windows (stride defaults to the kernel size); ``F.<_function>``."""

    _function = None

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return getattr(F, self._function)(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                          self.count_include_pad, self.divisor_override)


class AvgPool2d(_AvgPoolWithDivisor):
    """Mean over windows of the last two dims."""

    _function = "avg_pool2d"


class AvgPool3d(_AvgPoolWithDivisor):
    """Mean over windows of the last three dims."""

    _function = "avg_pool3d"


class _LPPoolNd(Module):
    """``(sum x^p)^(1/p)`` over ``kernel_size`` windows; ``F.<_function>``."""

    _function = None

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return getattr(F, self._function)(input, float(self.norm_type), self.kernel_size, self.stride,
                                          self.ceil_mode)

    def extra_repr(self):
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """Power-average pooling of the last dim."""

    _function = "lp_pool1d"


class LPPool2d(_LPPoolNd):
    """Power-average pooling of the last two dims."""

    _function = "lp_pool2d"


class LPPool3d(_LPPoolNd):
    """Power-average pooling of the last three dims."""

    _function = "lp_pool3d"


class _MaxUnpoolNd(Module):
    """``F.<_function>``: values placed at their max-pool indices in zeros; sizes kept as n-tuples, as torch."""

    _function = None
    _ntuple = None

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = type(self)._ntuple(kernel_size)
        self.stride = type(self)._ntuple(stride if stride is not None else kernel_size)
        self.padding = type(self)._ntuple(padding)

    def forward(self, input, indices, output_size=None):
        return getattr(F, self._function)(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The partial inverse of ``MaxPool1d``."""

    _function = "max_unpool1d"
    _ntuple = staticmethod(_single)


class MaxUnpool2d(_MaxUnpoolNd):
    """The partial inverse of ``MaxPool2d``."""

    _function = "max_unpool2d"
    _ntuple = staticmethod(_pair)


class MaxUnpool3d(_MaxUnpoolNd):
    """The partial inverse of ``MaxPool3d``."""

    _function = "max_unpool3d"
    _ntuple = staticmethod(_triple)


class _AdaptiveAvgPoolNd(Module):
    """Mean pooling to a fixed ``output_size`` whatever the input size; ``F.<_function>``."""

    _function = None

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return getattr(F, self._function)(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """Adaptive mean pooling of the last dim."""

    _function = "adaptive_avg_pool1d"


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Adaptive mean pooling of the last two dims."""

    _function = "adaptive_avg_pool2d"


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """Adaptive mean pooling of the last three dims."""

    _function = "adaptive_avg_pool3d"


class _AdaptiveMaxPoolNd(Module):
    """Max pooling to a fixed ``output_size`` whatever the input size; ``F.<_function>``."""

    _function = None

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, input):
        return getattr(F, self._function)(input, self.output_size, self.return_indices)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Adaptive max pooling of the last dim."""

    _function = "adaptive_max_pool1d"


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Adaptive max pooling of the last two dims."""

    _function = "adaptive_max_pool2d"


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Adaptive max pooling of the last three dims."""

    _function = "adaptive_max_pool3d"


class _FractionalMaxPoolNd(Module):
    """Max over windows at pseudo-random steps (``F.fractional_max_pool{2,3}d``); ``_random_samples``, a buffer
    when given, fixes the steps."""

    _nd = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False, _random_samples=None):
        super().__init__()
        ntuple = _pair if self._nd == 2 else _triple
        name = type(self).__name__
        if self._nd == 3 and (isinstance(kernel_size, int) and kernel_size <= 0 or not isinstance(kernel_size, int)
                              and not all(k > 0 for k in kernel_size)):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = ntuple(kernel_size)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = ntuple(output_size) if output_size is not None else None
        self.output_ratio = ntuple(output_ratio) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        pool = F.fractional_max_pool2d if self._nd == 2 else F.fractional_max_pool3d
        return pool(input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
                    _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Fractional max pooling of (N, C, H, W) or (C, H, W) input."""

    _nd = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """Fractional max pooling of (N, C, T, H, W) or (C, T, H, W) input."""

    _nd = 3
