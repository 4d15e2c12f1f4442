"""Derivative rules, one module per family of ops."""

from . import elementwise, reductions, structural  # noqa: F401
