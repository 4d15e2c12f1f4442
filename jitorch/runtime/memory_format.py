"""torch's memory formats: the dims' order in memory of a new tensor (``clone``, ``contiguous``, ``to``,
``empty``, the ``_like`` factories, ``resize_``) or of an ``is_contiguous`` test. A layout is only strides: a
channels-last tensor is an NCHW-shaped tensor whose memory is NHWC (NDHWC for 5-d)."""

from __future__ import annotations

from .strided import channels_last_strides, is_channels_last_contiguous, is_contiguous, is_strides_like_channels_last


class memory_format:
    """torch.memory_format, printed as ``jitorch.channels_last``."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "jitorch." + self.name


preserve_format = memory_format("preserve_format")
contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")

_CHANNELS_LAST_RANK = {channels_last: 4, channels_last_3d: 5}


def check_memory_format(op_name, fmt, allowed):
    """torch's TypeError for a ``memory_format`` of another type, and op ``op_name``'s RuntimeError for a format
    outside ``allowed``."""
    if fmt is not None and not isinstance(fmt, memory_format):
        raise TypeError(f"{op_name}(): argument 'memory_format' must be jitorch.memory_format, "
                        f"not {type(fmt).__name__}")
    if fmt is not None and fmt not in allowed:
        raise RuntimeError(f"{fmt.name.split('_')[0]} memory format is unsupported by the {op_name} operator")


ALL_FORMATS = (preserve_format, contiguous_format, channels_last, channels_last_3d)


def format_strides(fmt, shape):
    """The strides of a new tensor of ``shape`` in memory format ``fmt`` (contiguous_format or a channels-last
    one), None for contiguous; torch's RuntimeError where a channels-last format does not fit the rank."""
    rank = _CHANNELS_LAST_RANK.get(fmt)
    if rank is None:
        return None
    if len(shape) != rank:
        raise RuntimeError(f"required rank {rank} tensor to use {fmt.name} format")
    return channels_last_strides(tuple(shape))


def suggest_memory_format(shape, strides):
    """torch's ``suggest_memory_format``: channels_last (channels_last_3d) for a 4-d (5-d) tensor whose strides
    step in that order (`runtime.strided.is_strides_like_channels_last`), else contiguous_format."""
    if is_strides_like_channels_last(shape, strides):
        return channels_last if len(shape) == 4 else channels_last_3d
    return contiguous_format


def is_contiguous_as(shape, strides, fmt):
    """torch's ``is_contiguous(memory_format=fmt)``: a channels-last format asks for its rank and order (size-1
    dims not looked at), any other the row-major test."""
    if fmt in _CHANNELS_LAST_RANK:
        return len(shape) == _CHANNELS_LAST_RANK[fmt] and is_channels_last_contiguous(shape, strides)
    return is_contiguous(shape, strides)
