"""Padding modules: constant (and zero), reflection, replication and circular, in 1, 2 and 3 dims."""

from __future__ import annotations

from ._functional import F
from .module import Module
from .utils import _ntuple


class _PadNd(Module):
    """``F.pad(input, self.padding, _mode)``; ``padding`` is kept as a ``2 * _dims``-tuple, as torch, and
    printed bare."""

    _mode = None
    _dims = None

    def __init__(self, padding):
        super().__init__()
        self.padding = _ntuple(2 * self._dims)(padding)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    """Pads with ``value``."""

    _mode = "constant"

    def __init__(self, padding, value):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dim with ``value``."""

    _dims = 1


class ConstantPad2d(_ConstantPadNd):
    """Pads the last two dims with ``value``."""

    _dims = 2


class ConstantPad3d(_ConstantPadNd):
    """Pads the last three dims with ``value``."""

    _dims = 3


class _ZeroPadNd(_ConstantPadNd):
    """Pads with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    """Pads the last dim with zeros."""

    _dims = 1


class ZeroPad2d(_ZeroPadNd):
    """Pads the last two dims with zeros."""

    _dims = 2


class ZeroPad3d(_ZeroPadNd):
    """Pads the last three dims with zeros."""

    _dims = 3


class ReflectionPad1d(_PadNd):
    """Pads the last dim with its reflection about the edge elements."""

    _mode, _dims = "reflect", 1


class ReflectionPad2d(_PadNd):
    """Pads the last two dims with their reflection about the edge elements."""

    _mode, _dims = "reflect", 2


class ReflectionPad3d(_PadNd):
    """Pads the last three dims with their reflection about the edge elements."""

    _mode, _dims = "reflect", 3


class ReplicationPad1d(_PadNd):
    """Pads the last dim by repeating its edge elements."""

    _mode, _dims = "replicate", 1


class ReplicationPad2d(_PadNd):
    """Pads the last two dims by repeating their edge elements."""

    _mode, _dims = "replicate", 2


class ReplicationPad3d(_PadNd):
    """Pads the last three dims by repeating their edge elements."""

    _mode, _dims = "replicate", 3


class _CircularPadNd(_PadNd):
    """Pads by wrapping around; torch checks the input's dims in the module, with a ValueError."""

    _mode = "circular"

    def forward(self, input):
        if input.ndim not in (self._dims + 1, self._dims + 2):
            raise ValueError(f"expected {self._dims + 1}D or {self._dims + 2}D input (got {input.ndim}D input)")
        return super().forward(input)


class CircularPad1d(_CircularPadNd):
    """Pads the last dim circularly."""

    _dims = 1


class CircularPad2d(_CircularPadNd):
    """Pads the last two dims circularly."""

    _dims = 2


class CircularPad3d(_CircularPadNd):
    """Pads the last three dims circularly."""

    _dims = 3
