"""Public functions that are not single registry ops (compositions, queries)."""

from .ops.views import contiguous_format, memory_format, preserve_format
from .runtime import strided as _strided
from .tensor import Size

__all__: list = ["memory_format", "preserve_format", "contiguous_format", "broadcast_shapes"]


def broadcast_shapes(*shapes):
    """The shape tensors of ``shapes`` broadcast to (ints count as 1-D shapes), without making tensors."""
    return Size(_strided.broadcast_shapes(*((s,) if isinstance(s, int) else tuple(s) for s in shapes)))
