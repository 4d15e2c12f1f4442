"""jitorch's version (the one place; pyproject.toml states it too), for every layer: cache keys, exports."""

__version__ = "0.1.0"
