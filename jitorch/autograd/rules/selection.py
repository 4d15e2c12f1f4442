"""Derivative rule of ``masked_scatter`` (jitorch/ops/selection.py), as torch's masked_scatter_backward."""

from __future__ import annotations

from jitorch.ops import functions

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
