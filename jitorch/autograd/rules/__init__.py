"""Derivative rules, one module per family of ops."""

from . import elementwise, pointwise_scaled, reductions, sampling, scans, structural  # noqa: F401
