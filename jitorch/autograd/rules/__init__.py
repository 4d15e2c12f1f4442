"""Derivative rules, one module per family of ops."""

from . import elementwise, linalg, reductions, sampling, structural  # noqa: F401
