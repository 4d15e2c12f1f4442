"""Public functions that are not single registry ops (compositions, queries)."""

from .ops.views import contiguous_format, memory_format, preserve_format

__all__: list = ["memory_format", "preserve_format", "contiguous_format"]
