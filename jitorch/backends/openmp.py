"""``jitorch.backends.openmp``: jitorch's CPU kernels do not use OpenMP."""

from __future__ import annotations


def is_available():
    """Whether jitorch uses OpenMP: no."""
    return False
