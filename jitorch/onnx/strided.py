"""Strided geometries as per-dim index maps, the form ONNX's Gather and ScatterND can express.

``as_strided(base, size, stride, offset)`` on a compact base reads, at view index ``i``, the base element
at flat position ``offset + sum(i[k] * stride[k])``. Where every view dim steps along one base dim only
(a stride that is a multiple of that dim's contiguous stride) and no index runs past its base dim, that
position is the base multi-index ``off[b] + sum(c[k] * i[k] for the view dims k of base dim b)``: the
windows of a convolution or a pool, a slice, a transpose, a broadcast. A base dim read whole by one view
dim (step 1, offset 0) is an identity and needs no index at all, so its size may be symbolic.
"""

from __future__ import annotations

import numpy as np

from ..runtime.strided import contiguous_strides


class Geometry:
    """The per-dim map of a strided view of a compact tensor of ``base_shape`` (see module docstring).

    ``groups[b]``: the (view dim, coefficient) pairs of base dim b; ``offsets[b]``: its start;
    ``identity[b]``: the view dim that reads base dim b whole, or None; ``broadcast``: view dims of stride 0
    (or size 1) that read no base dim.
    """

    def __init__(self, base_shape, size, stride, offset):
        self.base_shape, self.size = tuple(base_shape), tuple(size)
        strides = contiguous_strides(self.base_shape)
        self.offsets, rest = [], offset
        for n, s in zip(self.base_shape, strides):
            q, rest = divmod(rest, s) if n > 1 else (0, rest)
            self.offsets.append(q)
        self.valid = rest == 0
        self.groups = [[] for _ in self.base_shape]
        self.broadcast = []
        for k, (n, st) in enumerate(zip(self.size, stride)):
            if n == 1 or st == 0:
                self.broadcast.append(k)
                continue
            b = next((b for b, (m, s) in enumerate(zip(self.base_shape, strides)) if m > 1 and st % s == 0), None)
            if b is None:
                self.valid = False
                break
            self.groups[b].append((k, st // strides[b]))
        self.valid = self.valid and all(
            off + sum(c * (self.size[k] - 1) for k, c in group) < max(n, 1)
            for off, group, n in zip(self.offsets, self.groups, self.base_shape))
        self.identity = [group[0][0] if self.valid and len(group) == 1 and group[0][1] == 1 and off == 0
                         and self.size[group[0][0]] == n else None
                         for off, group, n in zip(self.offsets, self.groups, self.base_shape)]

    def key(self):
        """What must not change when symbolic sizes do: the maps, with identities' sizes left out."""
        return (self.valid, tuple(self.broadcast), tuple(
            ("identity", ident) if ident is not None else
            (off, tuple(group), tuple(self.size[k] for k, _ in group))
            for off, group, ident in zip(self.offsets, self.groups, self.identity)))

    def index(self, b):
        """The base indices of base dim b over its group's view dims (an int64 array of their sizes)."""
        idx = np.full([self.size[k] for k, _ in self.groups[b]], self.offsets[b], np.int64)
        for j, (k, c) in enumerate(self.groups[b]):
            shape = [1] * idx.ndim
            shape[j] = self.size[k]
            idx = idx + c * np.arange(self.size[k], dtype=np.int64).reshape(shape)
        return idx

    def trailing_identities(self):
        """How many trailing base dims are identities read by the view's trailing dims, in order."""
        t = 0
        while t < len(self.base_shape) and self.identity[-1 - t] == len(self.size) - 1 - t:
            t += 1
        return t

    def lead_indices(self, t):
        """Base multi-indices ``[*view sizes without the last t, rank - t]`` of the leading base dims, for
        GatherND and ScatterND over the first ``rank - t`` dims."""
        rank = len(self.base_shape) - t
        lead = self.size[:len(self.size) - t]
        out = np.zeros(lead + (rank,), np.int64)
        grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in lead], indexing="ij") if lead else []
        for b in range(rank):
            col = np.full(lead, self.offsets[b], np.int64)
            for k, c in self.groups[b]:
                col = col + c * grids[k]
            out[..., b] = col
        return out


def flat_indices(size, stride, offset):
    """The flat base positions of a strided view (an int64 array of the view's shape)."""
    idx = np.full(tuple(size), offset, np.int64)
    for k, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[k] = n
        idx = idx + st * np.arange(n, dtype=np.int64).reshape(shape)
    return idx



def split_trailing(numel, size, stride, offset):
    """``(numel / n, n)``, the compact base seen as rows of the view's last dim (``n`` elements of stride 1),
    where every other stride and the offset are whole rows (a transposed convolution's windows over a flat
    buffer, batch innermost); None otherwise. Over it the view's last dim is an identity."""
    if not size or stride[-1] != 1 or size[-1] <= 1:
        return None
    n = size[-1]
    if numel % n or offset % n or any(st % n for m, st in zip(size[:-1], stride[:-1]) if m > 1):
        return None
    return (numel // n, n)
