"""Derivative rules, one module per family of ops."""

from . import elementwise, pointwise_scaled, reductions, sampling, scans, searching, selection, structural  # noqa: F401
