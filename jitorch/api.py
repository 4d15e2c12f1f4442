"""Public functions that are not single registry ops (compositions, queries)."""

from .ops.views import contiguous_format, memory_format, preserve_format
from .runtime import strided as _strided
from .tensor import Size

__all__: list = ["memory_format", "preserve_format", "contiguous_format", "broadcast_shapes", "detach", "detach_",
                 "get_device"]


def broadcast_shapes(*shapes):
    """The shape tensors of ``shapes`` broadcast to (ints count as 1-D shapes), without making tensors."""
    return Size(_strided.broadcast_shapes(*((s,) if isinstance(s, int) else tuple(s) for s in shapes)))


def detach(input):
    """``input.detach()``: the same data, cut from the autograd graph."""
    return input.detach()


def detach_(input):
    """``input.detach_()``: cut ``input`` itself from the autograd graph."""
    return input.detach_()


def get_device(input):
    """The index of the CUDA device ``input`` is on, or -1 on the CPU."""
    return input.get_device()
