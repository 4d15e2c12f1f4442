"""A concatenation whose inputs are copies, written in one pass: each copy's source goes straight into its
slice of the result.

An attention's backward in a GPT gives the gradients of q, k and v laid out ``[B, H, T, D]``; the model's
``split`` then ``view`` then ``transpose(1, 2)`` have, as their backward, a ``transpose(1, 2)`` then ``view``
of each (a copy kernel: `kernel.build_copy`) and a ``cat`` of the three: every element is copied twice. Where
a copy's only reader is the ``cat``, the ``cat`` reads the copy's source through its strides and writes it
into its slice of the result, viewed as the copied value's shape (a dense slice, so that view needs no copy):
the copy kernel, its buffer and its pass over memory are gone, and the result holds the same elements, moved
bit for bit.
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..ops.views import SPLIT_MIN
from ..runtime import threads
from ..runtime.strided import contiguous_strides, view_strides


def cat_slices(node, pieces):
    """Per input of a ``cat`` node over a compact result: (shape, strides, offset) in elements of where it goes
    in the result; for the inputs in ``pieces`` (value -> the shape of the copied value it is the row-major
    copy of), that slice viewed as the copied value's shape. None where a slice cannot be so viewed."""
    tensors, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    out = node.outputs[0].type
    dim %= len(out.shape)
    strides = contiguous_strides(out.shape)
    slices, start = [], 0
    for t in tensors:
        shape = tuple(t.type.shape)
        if t in pieces:
            viewed = view_strides(shape, strides, pieces[t])
            if viewed is None:
                return None
            slices.append((tuple(pieces[t]), tuple(viewed), start * strides[dim]))
        else:
            slices.append((shape, tuple(strides), start * strides[dim]))
        start += shape[dim]
    return slices


def strided_read(t, geometry):
    """The array of a copy's source tensor ``t`` (compact, from offset 0) at ``geometry`` (shape, strides,
    offset): the copied value, where it lies."""
    shape, strides, offset = geometry
    arr = t._array()
    item = arr.itemsize
    if prod(shape) == 0:
        return np.empty(shape, arr.dtype)
    return np.ndarray(shape, arr.dtype, arr, offset * item, tuple(s * item for s in strides))


def cat_pieces_into(arrays, out, slices):
    """Each array into its slice of ``out`` (compact): `cat_slices`' places. A large result is written in parts
    on the thread team (`views.SPLIT_MIN`, as a large copy is): each part the same range of each input's first
    dim, disjoint places in ``out``."""
    item = out.itemsize
    pairs = [(np.ndarray(shape, out.dtype, out, offset * item, tuple(s * item for s in strides)), arr)
             for arr, (shape, strides, offset) in zip(arrays, slices) if prod(shape)]
    parts = min(threads.get_num_threads(), out.size // (SPLIT_MIN // 2))
    if out.size < SPLIT_MIN or parts < 2:
        _copy(pairs)
        return
    shares = [[] for _ in range(parts)]
    for target, arr in pairs:
        for share, (lo, hi) in zip(shares, threads.bounds(target.shape[0], parts)):
            share.append((target[lo:hi], arr[lo:hi]))
    threads.run_parts(_copy, [(share,) for share in shares if share])


def _copy(pairs):
    for target, arr in pairs:
        np.copyto(target, arr)
