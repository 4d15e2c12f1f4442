"""Positions in a C-ordered array that an index array names: the index maths gathers, scatters and the
reductions' value picks share. Declares no op, so any op module may import it without changing the order
in which the registry's ops are declared (the fuzzer's op table follows that order)."""

from __future__ import annotations

from math import prod

import numpy as np


def unbroadcast(a):
    """``a`` without its broadcast copies: a view of size 1 along each dim of stride 0 (an expanded index)."""
    if 0 not in a.strides:
        return a
    return a[tuple(slice(0, 1) if step == 0 else slice(None) for step in a.strides)]


def flat_positions(shape, d, idx):
    """The C-order positions in an array of ``shape`` that ``idx`` (checked, of ``shape``'s ndim, no larger
    along any other dim) names along dim ``d``: ``idx``'s own coordinates elsewhere, as take_along_axis and
    scatter read them. Built from `unbroadcast` ``idx`` and each other dim's offsets: two passes over the
    result, where take_along_axis indexes with one full array per dim."""
    steps = [prod(shape[i + 1:]) for i in range(len(shape))]
    base = 0
    for i, n in enumerate(idx.shape):
        if i != d and n > 1:
            along = [n if j == i else 1 for j in range(idx.ndim)]
            base = base + (np.arange(n, dtype=np.intp) * steps[i]).reshape(along)
    lin = unbroadcast(idx).astype(np.intp, copy=False)
    lin = (lin * steps[d] if steps[d] != 1 else lin) + base  # (a new array: idx itself is never written)
    return np.broadcast_to(lin, idx.shape)
