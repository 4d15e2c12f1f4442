"""``jitorch.backends.mps``: Apple's Metal devices, which jitorch has no backend for."""

from __future__ import annotations


def is_available():
    """Whether an MPS device can be used: never in jitorch."""
    return False


def is_built():
    """Whether jitorch was built with MPS support: no."""
    return False
