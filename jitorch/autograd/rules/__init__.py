"""Derivative rules, one module per family of ops."""

from . import elementwise, reductions, sampling, structural  # noqa: F401
