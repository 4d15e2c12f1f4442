"""Derivative rules, one module per family of ops."""

from . import elementwise, pointwise_scaled, reductions, sampling, scans, searching, structural  # noqa: F401
