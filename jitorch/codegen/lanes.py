"""Float sums in the order jitorch defines: along the lanes of one 64-byte vector, whatever the CPU target.

A float sum whose additions may reassociate (LLVM's ``reassoc`` flag) is vectorised as LLVM's cost model
chooses: how many lanes, and how many vectors of partial sums, depend on the target and on everything else
the loop computes. Forced to the x86-64-v2 baseline, a softmax kernel's sum of exponentials took 4 lanes
by 2 vectors where an attention's scale and mask were computed in the same loop, and 2 lanes by 2 vectors
where they were not, so the fused and the unfused kernels differed by an ulp (`build_softmax`).

The sums here keep ``w`` partial sums, one per lane of a 64-byte vector (`lanes`: 16 float32, 8 float64),
and carry no fast-math flag: over the terms ``j = lo .. lo + n - 1``, lane ``l`` adds, from 0.0 and in order,
the terms of the whole vectors with ``(j - lo) mod w == l``; the last ``n mod w`` terms go to the last lanes
(term ``lo + n - w + l`` to lane ``l``); then the lanes add by halves (`by_halves`: lane ``l`` with lane
``l + w/2``, then again). Each vector of terms is a loop over the lanes with nothing carried between its
iterations, which LLVM vectorises at any width, or not at all, lane for lane the same additions, so the bits
are the same on every CPU target, at any thread count, whatever else the loop computes. The long-sum
product (`gemm._Dots`) and the attention kernel (`attention`) add their lanes by `by_halves` too.
"""

from __future__ import annotations

from llvmlite import ir

from .loops import I64, counted_loop

VECTOR_BYTES = 64  # one vector: a cache line, an AVX-512 register (LLVM splits it for narrower targets)
# the last partial vector is computed as a whole one, ending at the last term (its lanes already counted
# add 0.0), where it holds at least 1/OVERLAP_MIN of a vector: one vector of work, where a few lanes alone
# are computed one by one (a loop of under 16 iterations is not vectorised)
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


def plain_loop(b, start, end, body):
    """``body(b, [i])`` for i in [start, end): a counted loop, vectorised as LLVM chooses."""
    counted_loop(b, start, end, I64(1), lambda b, i: body(b, [i]), "lanes")


def ordered_sum(b, lo, n, t, term, map_loop):
    """The sum (type ``t``, float or double) of ``term(b, j)`` over the ``n`` (an int) indices ``j`` from
    ``lo`` (an i64 value), in the module docstring's order. Each vector of terms is one run of
    ``map_loop(b, start, end, body)``: a loop of ``body(b, [l])`` over the lanes ``l`` in [start, end), each
    adding its term to its own lane's partial sum (an array of `lanes`), so nothing is carried between its
    iterations; LLVM vectorises it at whatever width it likes (or not at all), and each lane computes what
    the scalar loop would, in the same order. ``term`` may store its value too: the last vector may compute
    a term an earlier one did (see `OVERLAP_MIN`), and stores the same bits again."""
    w = lanes(t)
    zero = ir.Constant(t, 0.0)
    with b.goto_entry_block():
        acc = b.alloca(t, size=w)
    for lane in range(w):
        b.store(zero, b.gep(acc, [I64(lane)]))

    def vector(b, first, start, counted=0):
        """Terms ``first + l`` for the lanes ``l`` in [start, w) added to their lanes, but for the lanes below
        ``counted``, whose terms an earlier vector added: those add 0.0, which leaves any lane as it was (a
        lane never holds -0.0: it starts at 0.0, and only -0.0 + -0.0 is -0.0). A few lanes alone are a plain
        loop (a vector width asked of it cost more than the lanes' work)."""
        def lane(b, ls):
            value = term(b, b.add(first, ls[0]))
            if counted:
                value = b.select(b.icmp_signed("<", ls[0], I64(counted)), zero, value)
            partial = b.gep(acc, [ls[0]])
            b.store(b.fadd(b.load(partial), value), partial)
        (plain_loop if start else map_loop)(b, I64(start), I64(w), lane)
    rem = n % w
    if n >= w:
        counted_loop(b, lo, b.add(lo, I64(n - rem)), I64(w), lambda b, first: vector(b, first, 0), "vectors")
    if rem:  # the last terms into the last lanes: the vector that ends at the last term
        overlap = n >= w and rem * OVERLAP_MIN >= w
        vector(b, b.add(lo, I64(n - w)), 0 if overlap else w - rem, w - rem if overlap else 0)
    # the lanes by halves, as `by_halves` (here on the array, whose lanes LLVM keeps in the registers it
    # vectorised the loops with: one vector of them split in halves each step cost a shuffle each iteration)
    parts = [b.load(b.gep(acc, [I64(lane)])) for lane in range(w)]
    while len(parts) > 1:
        half = len(parts) // 2
        parts = [b.fadd(parts[i], parts[i + half]) for i in range(half)]
    return parts[0]
