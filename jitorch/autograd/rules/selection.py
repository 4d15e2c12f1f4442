"""Derivative rules of ``masked_scatter`` (jitorch/ops/selection.py, as torch's masked_scatter_backward) and of
``fill_diagonal_`` (jitorch/ops/diagonals.py)."""

from __future__ import annotations

from jitorch.ops import functions
from jitorch.ops.diagonals import fill_diagonal

from ..rule import defgrad, reads
from .common import per_input


def _source(g, a, out):
    """The gradient at the masked places, in order, padded with zeros to ``source``'s size."""
    mask = a.mask.broadcast_to(g.shape)
    taken = g.masked_select(mask)
    size = a.source.numel()
    if taken.numel() < size:
        taken = functions.cat([taken, g.new_zeros((size - taken.numel(),))])
    return taken.view(a.source.shape)


defgrad("masked_scatter", per_input(self=reads("mask", lambda g, a, out: g.masked_fill(a.mask, 0)),
                                    source=reads("mask", _source)))


# ``fill_diagonal_`` is an in-place composite: its write records one node of the op, whose gradient is the
# incoming one with the overwritten diagonal zeroed.
defgrad("fill_diagonal", per_input(self=reads("", lambda g, a, out: fill_diagonal(g, 0, a.wrap))))
