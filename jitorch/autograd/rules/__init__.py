"""Derivative rules, one module per family of ops."""

from . import (  # noqa: F401
    attention, ctc, elementwise, linalg, linear, normalization, pointwise_scaled, recurrences, reductions, sampling,
    scans, searching, selection, special, structural)
