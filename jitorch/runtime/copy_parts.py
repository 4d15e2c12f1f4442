"""Large strided copies between NumPy arrays, split across the thread team (`threads.run_parts`).

An eager ``clone``, ``contiguous`` or ``as_strided_scatter``, a convolution's im2col copy and its copies into and out
of the batch-last layout, and the operands an eager pointwise op lays out alike before it splits
(`ops.pointwise_base.split_ufunc`) all copy through `copy`. At two threads on the 2-core machine these copies ran on
the calling thread alone while products and kernels split: in an eager DCGAN step, 65 of 630 ms of the calling
thread's CPU; in the cnn's, 6 of 38. Every element is copied (or cast) alone, so a split copy's bits are the whole
copy's.
"""

from __future__ import annotations

import numpy as np

from . import threads
from .casts import copy_into
from .strided import may_overlap

# From this many elements, a copy and a convolution's strided passes (col2im's sums, the copy of its input into a
# padded buffer, the zeros under both: `ops.views`) split across the thread team: megabytes per call, run on one
# thread where products and kernels split. Python parts (`threads.run_parts`: each NumPy call lets the GIL go); a
# part's hand-over costs 10 to 60 µs, a pass over 2**18 float32 elements 0.1 to 0.3 ms.
SPLIT_MIN = 1 << 18

# A copy that writes along a dim the source strides far across (a transpose: NCHW to the batch-last layout
# of a convolution's windows) reads a new source cache line for each element written, and with
# power-of-two strides those lines share cache sets; copying that dim BLOCK elements at a time reuses each
# line for BLOCK elements. Measured with NumPy on float32: (64, 64, 16, 16) to batch-last 2.3 ms -> 0.5 ms,
# a (4096, 1024) transpose 30 ms -> 4.3 ms; a source stride under FAR_BYTES gains nothing, and a copy under
# SMALL_BYTES stays in cache anyway.
_TRANSPOSE_BLOCK = 8
_FAR_BYTES = 4096
_SMALL_BYTES = 1 << 16


def copy(dst, src):
    """``dst[...] = src`` (cast to ``dst``'s dtype): a large copy in parts on the team (`pieces`), each part as
    `copy_whole` copies."""
    parts = pieces(dst, src)
    if parts is None:
        copy_whole(dst, src)
    else:
        threads.run_parts(copy_whole, parts)


def copy_whole(dst, src):
    """``dst[...] = src`` (cast to ``dst``'s dtype) on this thread, blocked along ``dst``'s unit-stride dim where
    ``src`` strides far across it."""
    if src.dtype == dst.dtype and src.shape == dst.shape and dst.ndim > 1 and dst.nbytes >= _SMALL_BYTES:
        d = min(range(dst.ndim), key=lambda i: abs(dst.strides[i]))
        n = dst.shape[d]
        if dst.strides[d] == dst.itemsize and abs(src.strides[d]) >= _FAR_BYTES and n > _TRANSPOSE_BLOCK:
            lead = (slice(None),) * d
            for i in range(0, n, _TRANSPOSE_BLOCK):
                part = lead + (slice(i, i + _TRANSPOSE_BLOCK),)
                dst[part] = src[part]
            return
    copy_into(dst, src)


def pieces(dst, src):
    """``[(dst part, src part), ...]``: how a copy of ``src`` into ``dst`` (arrays of one shape, in memory they do not
    share) splits across the team, or None where it runs whole: under `SPLIT_MIN` elements, one thread, a ``dst``
    whose elements are not distinct (which write wins is the whole copy's), or arrays that may share memory (NumPy's
    copy buffers them). Two C-contiguous arrays split as one run of elements; others along the outermost dim of
    ``dst`` of ``4 * parts`` elements or more (else of ``parts``), so that each part writes whole rows of memory."""
    n = dst.size
    if n < SPLIT_MIN or src.__class__ is not np.ndarray or src.shape != dst.shape:
        return None
    parts = min(threads.get_num_threads(), n // (SPLIT_MIN // 2))
    if parts < 2 or np.may_share_memory(dst, src):
        return None
    if dst.flags.c_contiguous and src.flags.c_contiguous:
        dst, src = dst.reshape(-1), src.reshape(-1)
    item = dst.itemsize
    strides = [s // item for s in dst.strides]
    if may_overlap(dst.shape, strides):
        return None
    order = sorted(range(dst.ndim), key=lambda i: -abs(strides[i]))
    d = next((i for i in order if dst.shape[i] >= 4 * parts), None)
    if d is None:
        d = next((i for i in order if dst.shape[i] >= parts), None)
        if d is None:
            return None
    lead = (slice(None),) * d
    return [(dst[lead + (slice(lo, hi),)], src[lead + (slice(lo, hi),)])
            for lo, hi in threads.bounds(dst.shape[d], parts)]


def fill(out, value):
    """``out.fill(value)``, in ranges on the team where ``out`` is a large C-contiguous array (a compiled
    graph's zeros written into their arena buffer, an eager factory's or gradient's zeros)."""
    n = out.size
    parts = min(threads.get_num_threads(), n // (SPLIT_MIN // 2))
    if n < SPLIT_MIN or parts < 2 or not out.flags.c_contiguous:
        out.fill(value)
        return
    flat = out.reshape(-1)
    threads.run_parts(np.ndarray.fill, [(flat[lo:hi], value) for lo, hi in threads.bounds(n, parts)])
