"""Products of float16 and bfloat16 elements rounded after every multiplication, in torch's CPU order.

torch's CPU ``prod`` of a half type multiplies two half values in float32 and rounds the product back
to the half type at every step (its reduction kernels run on ``Vectorized<Half>``), so the result
depends on the order of the products. That order, as torch's reduction loops make it at one thread
(checked against torch on rows of 1 to 1,000 elements, both half types):

- the reduced dims are walked in memory order (smallest stride innermost), whatever their logical order;
- where the innermost reduced dims form a contiguous run of ``L >= 64`` elements, its first
  ``64 * (L // 64)`` elements go to 64 lanes (lane ``l`` multiplies elements ``l, l + 64, l + 128, ...``
  in turn); the four blocks of 16 lanes are then multiplied pairwise ((0 * 1) * (2 * 3)), the 16 lanes
  left of that are multiplied in order, and the remaining elements of the run follow one by one;
- every other run (shorter, or not contiguous) is multiplied element by element in order.

Runs follow each other into the same product. With several threads torch splits a full reduction of more
than 32,768 elements into per-thread products, which depends on the thread count; jitorch keeps the
one-thread order, so its result does not.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime.casts import convert

_LANES, _BLOCK = 64, 16  # torch's 4 accumulators of Vectorized<Half>/<BFloat16> (16 lanes of 2 bytes)


def rounded_prod(x: np.ndarray, axis, keepdims: bool, dtype) -> np.ndarray:
    """The product of half-type array ``x`` (any layout) over ``axis`` (a tuple of dims, or None: every
    dim), rounded to NumPy half dtype ``dtype`` after every multiplication in torch's order (above). An
    ``x`` of another dtype is converted to ``dtype`` first (``prod(x, dtype=)``)."""
    x = x if x.dtype == dtype else convert(x, dtype)
    axis = tuple(range(x.ndim)) if axis is None else tuple(axis)
    kept = [d for d in range(x.ndim) if d not in axis]
    walked = sorted((d for d in axis if x.shape[d] > 1), key=lambda d: abs(x.strides[d]), reverse=True)
    run = _contiguous_run(x, walked)
    order = kept + [d for d in axis if d not in walked] + walked
    a = convert(x, np.float32).transpose(order) if x.ndim else convert(x, np.float32)
    outputs = math.prod(x.shape[d] for d in kept)
    rows = a.reshape(outputs, math.prod(x.shape[d] for d in axis) // run, run)

    def rounded(v):
        return convert(convert(v, dtype), np.float32)

    product = np.ones(outputs, np.float32)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for r in range(rows.shape[1]):
            row = rows[:, r, :]
            head = _LANES * (run // _LANES)
            if head:
                product = rounded(product * _lanes(row[:, :head], rounded))
            for k in range(head, run):
                product = rounded(product * row[:, k])
    shape = tuple(1 if d in axis else n for d, n in enumerate(x.shape)) if keepdims else \
        tuple(x.shape[d] for d in kept)
    return convert(product, dtype).reshape(shape)


def _contiguous_run(x, walked):
    """How many elements the innermost walked dims hold together contiguously (1 if the innermost is not
    contiguous: then every element is a run of its own)."""
    run = 1
    for d in reversed(walked):
        if x.strides[d] != x.itemsize * run:
            break
        run *= x.shape[d]
    return run


def _lanes(head, rounded):
    """torch's vectorised product of a contiguous run (``head``: (outputs, 64 * k), float32 half values)."""
    blocks = head.reshape(head.shape[0], -1, _LANES)
    acc = blocks[:, 0, :]
    for i in range(1, blocks.shape[1]):
        acc = rounded(acc * blocks[:, i, :])
    q = [acc[:, j * _BLOCK:(j + 1) * _BLOCK] for j in range(_LANES // _BLOCK)]
    acc = rounded(rounded(q[0] * q[1]) * rounded(q[2] * q[3]))
    total = acc[:, 0]
    for j in range(1, _BLOCK):
        total = rounded(total * acc[:, j])
    return total
