"""Float sums in the order jitorch defines: along the lanes of one 64-byte vector, whatever the CPU target.

A float sum whose additions may reassociate (LLVM's ``reassoc`` flag) is vectorised as LLVM's cost model
chooses: how many lanes, and how many vectors of partial sums, depend on the target and on everything else
the loop computes. Forced to the x86-64-v2 baseline, a softmax kernel's sum of exponentials took 4 lanes
by 2 vectors where an attention's scale and mask were computed in the same loop, and 2 lanes by 2 vectors
where they were not, so the fused and the unfused kernels differed by an ulp (`build_softmax`).

The sums here are written as IR vectors of `lanes` elements (64 bytes: 16 float32, 8 float64), which a
narrower target splits lane for lane, and carry no fast-math flag: over the terms ``j = lo .. hi - 1``,
lane ``l`` adds, from 0 and in order, the terms with ``(j - lo) mod w == l`` (the last vector may fill only its
first lanes); the lanes are then added by halves (`by_halves`: ``(l, l + w/2)``, then again). The long-sum
product's lanes (`gemm._Dots`) and the attention kernel's softmax rows are combined by `by_halves` too. The
bits are the same on every CPU target, at any thread count, whatever else the loop computes.
"""

from __future__ import annotations

from llvmlite import ir

from .loops import I64, counted_loop

VECTOR_BYTES = 64  # one vector: a cache line, an AVX-512 register (LLVM splits it for narrower targets)
OVERLAP_MIN = 4


def lanes(t):
    """The lanes of a `VECTOR_BYTES` vector of float type ``t``."""
    return VECTOR_BYTES // (4 if isinstance(t, ir.FloatType) else 8)


def by_halves(b, v, op):
    """The lanes of vector ``v`` combined by ``op(b, x, y)`` pairwise, halves first: lane ``l`` with lane
    ``l + n/2``, then again on the ``n/2`` results, ... (log2(n) dependent steps)."""
    n = v.type.count
    while n > 1:
        n //= 2
        low, high = (b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(lo, lo + n))))
                     for lo in (0, n))
        v = op(b, low, high)
    return b.extract_element(v, ir.Constant(ir.IntType(32), 0))


def ordered_sum(b, lo, n, t, term, map_loop, out=None):
    """The sum (type ``t``, float or double) of ``term(b, j)`` over the ``n`` (an int) indices ``j`` from
    ``lo`` (an i64 value), in the module docstring's order, each term also stored at ``out[j]`` where ``out``
    (a pointer) is given (a softmax's exponentials, which it normalises next). Each vector of terms is one
    run of ``map_loop(b, start, end, body)``: a loop of ``body(b, [l])`` over the lanes ``l`` in [start, end),
    each adding its term to its own lane's partial sum (an array of `lanes`), so nothing is carried between
    its iterations; LLVM vectorises it at whatever width it likes (or not at all), and each lane computes
    what the scalar loop would, in the same order."""
    w = lanes(t)
    rem, zero = n % w, ir.Constant(t, 0.0)
    with b.goto_entry_block():
        acc = b.alloca(t, size=w)
    for lane in range(w):
        b.store(zero, b.gep(acc, [I64(lane)]))

    def vector(b, first, start, counted=0):
        """Terms ``first + l`` for the lanes ``l`` in [start, w) added to their lanes, but for the first
        ``counted`` lanes' terms, which an earlier vector added (each adds 0: a lane never holds -0.0, so
        that leaves it as it was)."""
        def lane(b, ls):
            j = b.add(first, ls[0])
            value = term(b, j)
            if out is not None:  # (an overlapping vector stores its counted lanes' terms again: the same bits)
                b.store(value, b.gep(out, [j]))
            if counted:
                value = b.select(b.icmp_signed("<", ls[0], I64(counted)), zero, value)
            partial = b.gep(acc, [ls[0]])
            b.store(b.fadd(b.load(partial), value), partial)
        map_loop(b, I64(start), I64(w), lane)
    if n >= w:
        counted_loop(b, lo, b.add(lo, I64(n - rem)), I64(w), lambda b, first: vector(b, first, 0), "vectors")
    if rem:  # the last terms into the last lanes: a whole vector ending at the last term where there are more
        overlap = n >= w and rem * OVERLAP_MIN >= w
        vector(b, b.add(lo, I64(n - w)), 0 if overlap else w - rem, w - rem if overlap else 0)
    # the lanes by halves, as `by_halves` (here on the array, whose lanes LLVM keeps in the registers it
    # vectorised the loops with: one vector of them split in halves each step costs a shuffle each iteration)
    parts = [b.load(b.gep(acc, [I64(lane)])) for lane in range(w)]
    while len(parts) > 1:
        half = len(parts) // 2
        parts = [b.fadd(parts[i], parts[i + half]) for i in range(half)]
    return parts[0]
