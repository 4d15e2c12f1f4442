"""Helpers shared by layers: ints broadcast to tuples (torch's ``_pair``), parameter storage."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat

from ... import ops as _ops  # noqa: F401  (defines the registry's functions)
from ...ops.registry import FUNCTIONS as _FUNCTIONS


def factory(name, shape, device=None, dtype=None):
    """``jitorch.<name>(shape, device=, dtype=)`` for creation ops (empty, zeros, ones)."""
    return _FUNCTIONS[name](tuple(shape), device=device, dtype=dtype)


def _ntuple(n):
    def parse(x):
        if isinstance(x, Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(repeat(x, n))
    return parse


_single = _ntuple(1)
_pair = _ntuple(2)
_triple = _ntuple(3)
