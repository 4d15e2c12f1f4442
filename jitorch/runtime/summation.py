"""Float sums in an order of jitorch's, the same under every NumPy version.

NumPy sums the elements of a run whose stride is the array's smallest pairwise (blocks of 128, eight
accumulators), but how long a run its reduction loop is handed is its iterator's business: NumPy 1.x hands
over at most 8192 elements (its buffer size) and adds those runs' sums one after the other, NumPy 2.4 longer
runs. A float32 sum of more than 8192 elements along its innermost dim differed between NumPy 1.26 and 2.4 in
the last bits (8193 to 10**6 normal values: most sizes). Runs of at most 8192 elements, and reductions along
dims that are not the innermost (element by element, one slice after the other), come out the same under
both.

`add_reduce` is ``np.add.reduce`` but for a float reduction whose reduced elements include the innermost
dim's and number more than `BLOCK`: there the reduced dims are moved last (a copy where they are not
contiguous), each output's elements are summed in blocks of `BLOCK` in C order (NumPy's pairwise sum within
a block) and the blocks' sums are added in order: NumPy 1.x's own order for a contiguous run. Where the whole blocks lie
contiguous in memory and number at least `BLOCK_SUMS_MIN` elements, `BLOCK_SUMS` (the code generator's
``codegen.pairwise.block_sums``, registered by ``jitorch``) computes their sums, the same bits, on the thread team.
"""

from __future__ import annotations

import numpy as np

# Elements NumPy 1.x's reduction loop takes at once (its buffer size): a pairwise sum of at most this many is
# the same under every NumPy version
BLOCK = 8192
# (rows of BLOCK, a C-contiguous float32/float64 array; squares) -> each row's NumPy sum (of `_squares` of the
# rows where ``squares``), bit for bit, or None (NumPy sums them): registered from above (the runtime cannot import the code generator)
BLOCK_SUMS = None
# Elements from which `BLOCK_SUMS` computes the whole blocks' sums (not tuned finely): from here a call saves tens
# of us (NumPy ~1.7 us a block of float32 from the caches, the kernel ~0.9, then a second thread), far more than a
# hand-over to the team (~6 us); below, a program of small sums would load the code generator (~0.3 s, once) for
# little
BLOCK_SUMS_MIN = 1 << 18


def _innermost(a):
    """The dim of ``a`` with the smallest stride among those of more than one element (None: no such)."""
    dims = [d for d in range(a.ndim) if a.shape[d] > 1]
    return min(dims, key=lambda d: abs(a.strides[d])) if dims else None


def _squares(a):
    """``np.square(np.abs(a))``, in one new array (a scalar for a 0-d ``a``)."""
    m = np.abs(a)
    return np.square(m, out=m if m.__class__ is np.ndarray else None)


def _block_sums(blocks, squares):
    """The sum of each run of ``blocks`` (shape ``(..., BLOCK)``) along its last dim, in NumPy's order; of the
    squares of their magnitudes (`_squares`) where ``squares``."""
    if BLOCK_SUMS is not None and blocks.size >= BLOCK_SUMS_MIN and blocks.dtype.kind == "f" \
            and blocks.dtype.itemsize in (4, 8) and blocks.flags.c_contiguous and blocks.flags.aligned \
            and blocks.dtype.isnative:
        sums = BLOCK_SUMS(blocks.reshape(-1, BLOCK), squares)
        if sums is not None:
            return sums.reshape(blocks.shape[:-1])
    return np.add.reduce(_squares(blocks) if squares else blocks, axis=-1)


def add_reduce(a, axis=None, keepdims=False, out=None, squares=False):
    """``np.add.reduce(a, axis=axis, keepdims=keepdims)`` in an order that does not depend on NumPy's version
    (see the module docstring); ``axis`` an int, a tuple of ints or None (every dim). ``out``: an array of the
    result's shape and dtype it is written into (then returned), C-contiguous as NumPy's own result of a
    C-contiguous ``a`` (NumPy's reduction loop follows the output's layout). ``squares``: the sum of the squares
    of ``a``'s magnitudes, ``np.square(np.abs(a))`` (a 2-norm's), the same bits, without their array where
    `BLOCK_SUMS` computes the blocks."""
    if a.size <= BLOCK or a.dtype.kind not in "fc":  # (the commonest: no more than a block in all)
        return np.add.reduce(_squares(a) if squares else a, axis, None, out, keepdims)  # (positional: NumPy parses no keywords)
    axes = tuple(range(a.ndim)) if axis is None else \
        tuple(d % a.ndim for d in ((axis,) if isinstance(axis, int) else axis))
    count = 1
    for d in axes:
        count *= a.shape[d]
    if count <= BLOCK or _innermost(a) not in axes:
        return np.add.reduce(_squares(a) if squares else a, axis=axis, keepdims=keepdims, out=out)
    kept = [d for d in range(a.ndim) if d not in axes]
    runs = np.transpose(a, kept + list(axes)).reshape([a.shape[d] for d in kept] + [count])
    whole = count - count % BLOCK
    partial = _block_sums(runs[..., :whole].reshape(runs.shape[:-1] + (whole // BLOCK, BLOCK)), squares)
    total = np.add.accumulate(partial, axis=-1)[..., -1]  # (an accumulation adds in order under every NumPy)
    if whole < count:
        tail = runs[..., whole:]
        total = total + np.add.reduce(_squares(tail) if squares else tail, axis=-1)
    if keepdims:
        total = total.reshape([1 if d in axes else n for d, n in enumerate(a.shape)])
    if out is not None:
        out[...] = total
        return out
    return total if total.ndim else total[()]
