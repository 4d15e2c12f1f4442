"""Public functions that are not single registry ops (compositions, queries)."""

__all__: list = []
