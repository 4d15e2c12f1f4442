"""Gather kernels of `_as_strided_add` (col2im) and `as_strided_scatter` (a padded copy) on CPU.

A convolution's input gradient and a transposed convolution's forward sum every kernel position's share of
the overlapping windows of a buffer: `_as_strided_add`, which NumPy ran as a zero fill, a copy and one
strided add per kernel position, each a pass over the whole buffer. A padded input was a zero fill and a
strided copy. Here each output element gathers its own shares: `ops.views.window_plan` reads the buffer as
memory dims (a convolution's ``(C, H, W, N)``), each moved by a few view dims (H by a kernel position and an
output position); for an element's coordinates the kernel loops over all of a memory dim's view dims but
the largest and solves that one (``h = o * stride + k * dilation``: o is whole and in range, or there is no
share). Nothing is written twice, no zeros are filled first, and the threads split the output's rows, so an
element's sum does not depend on the number of threads.

Summation order (stated, as tests check): an element starts from ``self``'s value (zero where the compiled
graph left its zeros unfilled) and adds its shares in the lexicographic order of the looped view dims,
outer memory dims first (a convolution: kernel positions row-major), one rounding per add. torch sums a
col2im in a different order, so results agree with torch to rounding, not bit for bit.

Where the innermost memory dim is moved by one unit-stride view dim (the batch of a convolution's
``_batch_last`` layout), the kernel works on rows of it: the coordinates are solved once per row, and each
share is a vectorised pass over the row, which stays in L1.

A copy ("assign") whose rows read ``src`` far apart along the row (a convolution's input, ``(N, C, H, W)``
read as the padded ``(C, H, W, N)``: a transpose, its reads a batch image apart) works on runs of up to
`TILE` rows whose sources are adjacent (an image row's interior, ``W``'s unit stride): their offsets are
solved first, then the run is copied one row element at a time across its rows, in straight-line code. Each
line read is used whole while in cache, where row by row the reads of one row all fall in one cache set
(the image size, a power of two apart) and evict each other. The same elements are copied: the bits do not
change.

Importing this module registers `window_kernel` in ``ops.views.WINDOW_KERNEL``: the ops layer cannot import
the code generator, and runs NumPy's passes where no kernel is registered or one cannot be built.
"""

from __future__ import annotations

import ctypes
import hashlib
from math import gcd

import numpy as np
from llvmlite import ir

from ..ops import views
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, TILE, TILE_MIN_STRIDE, KernelSource, counted_loop, kernel_body
from .memo import BuiltOnce
from .target import CPU
from . import cpu


class WindowKernel:
    """A compiled gather kernel: call it on the arrays ``(x, src, out)``. ``blocked``: whether it copies
    blocks of rows (`_Emitter.blocked`)."""

    def __init__(self, compiled, blocked):
        self._compiled, self.blocked = compiled, blocked

    def __call__(self, x, src, out):
        args = (ctypes.c_void_p * 3)(*[a.__array_interface__["data"][0] for a in (x, src, out)])
        self._compiled(args)


def window_kernel(dtype, numel, offset, plan, src_strides, mode, init):
    """The gather kernel (a `WindowKernel`) of a flat float ``dtype`` buffer of ``numel`` elements over the view
    that ``plan`` (`ops.views.window_plan`) decomposes from element ``offset`` on, reading ``src`` with
    element strides ``src_strides`` (one per view dim). ``mode``: "add" sums every share into the element
    (`_as_strided_add`), "assign" stores the one share there is (`as_strided_scatter` of a view that does not
    overlap). ``init``: the element starts from "copy" (``x``'s element), "zero", or "none" (``out`` is
    ``x``). None where LLVM refuses it (NumPy's passes run). Built once per key."""
    return _kernels(np.dtype(dtype).name, numel, offset, plan, tuple(src_strides), mode, init)


def _rows(numel, offset, plan):
    """``(row length, the view dim moving along a row or None)``: the innermost memory dim as rows where one
    unit-stride view dim moves it and every other memory dim's step is a whole number of rows (the steps'
    common divisor, at least that view dim's size: a row's shares then start at its first element); else
    rows of one element."""
    if len(plan) > 1:
        (step, dims), length = plan[-1], gcd(*(s for s, _ in plan[:-1]))
        if step == 1 and len(dims) == 1 and dims[0][2] <= length and offset % length == 0 and numel % length == 0:
            return length, dims[0]
    return 1, None


def _build(dtype, numel, offset, plan, src_strides, mode, init):
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    length, row = _rows(numel, offset, plan)
    solved = plan[:-1] if row is not None else plan
    shares = 1  # (an element's looped candidates: the threads' split weighs them)
    for _, dims in solved:
        for _, _, n in dims[:-1]:
            shares *= n
    # (entry points are named apart by their parameters: one process links many)
    key = hashlib.sha256(repr((dtype, numel, offset, plan, src_strides)).encode()).hexdigest()[:16]
    name = f"jitorch_window_{mode}_{init}_{dtype}_{key}"
    module, body, b = kernel_body(name, t, 3)  # (out noalias: ``x`` is read only where it is another buffer)
    emitter = _Emitter(t, length, row, solved, src_strides, mode, init, offset)
    emitter.rows(b, *body.args)
    b.ret_void()
    CPU.add_entry(module, body, [0, 1, 2], 0, "thread")
    rows = numel // length
    source = KernelSource(name, "window", ["_as_strided_add" if mode == "add" else "as_strided_scatter"], [0, 1],
                          [2], rows, numel * (1 + shares), str(module))
    try:
        return WindowKernel(cpu.link_kernel(source, default_cache()), emitter.blocked)
    except CompileError:
        return None


# (dtype name, numel, offset, plan, src strides, mode, init) -> WindowKernel, or None
_kernels = BuiltOnce(_build)


# The lengths of the runs of rows a blocked copy copies in straight-line code, longest first (`TILE` at most).
RUNS = (TILE, TILE // 2, TILE // 4)


class _Emitter:
    """Emits the loops of one kernel; sizes and strides are its constants."""

    def __init__(self, t, length, row, solved, src_strides, mode, init, offset):
        self.t, self.length, self.row, self.solved = t, length, row, solved
        self.src_strides, self.mode, self.init, self.offset = src_strides, mode, init, offset
        self.share = self._add  # (what a share found does: a blocked copy's solving records its offset)

    @property
    def blocked(self):
        """Whether rows are copied in blocks: a copy whose rows read ``src`` a transpose's distance apart, the
        whole row (a view dim moving along all of it)."""
        return self.mode == "assign" and self.row is not None and self.row[2] == self.length and \
            abs(self.src_strides[self.row[0]]) >= TILE_MIN_STRIDE

    def rows(self, b, start, end, x, src, out):
        """Rows ``start`` to ``end`` of the output: each initialised, then its shares gathered."""
        self.src, self.out, self.x = src, out, x
        if self.blocked:
            self._blocks(b, start, end)
        else:
            counted_loop(b, start, end, I64(1), self._row, "row")

    def _row(self, b, r):
        """Row ``r``: initialised, then its shares gathered."""
        self.share = self._add
        base = b.mul(r, I64(self.length))
        if self.init != "none":
            def first(b, i):
                at = b.gep(self.out, [b.add(base, i)])
                b.store(self.t(0) if self.init == "zero" else b.load(b.gep(self.x, [b.add(base, i)])), at)
            counted_loop(b, I64(0), I64(self.length), I64(1), first, "init")
        q = b.sub(base, I64(self.offset))
        if self.offset:
            with b.if_then(b.icmp_signed(">=", q, I64(0))):
                self._gather(b, base, q)
        else:
            self._gather(b, base, q)

    def _blocks(self, b, start, end):
        """A copy's rows ``start`` to ``end`` in blocks of up to `TILE` rows: each row's share's source offset
        (-1: none) solved into ``at``, then per row element, the block's rows. A block starting a run of rows
        whose shares are adjacent in ``src`` (a padded image row's interior) copies the run's first `RUNS` rows
        in straight-line code, one vector read per element; other rows (a padded image's borders, a run's
        last few rows) are done one by one (`_row`)."""
        at = b.alloca(I64, TILE)
        for j in range(TILE):  # (a short block's run test reads every slot: each holds a defined value)
            b.store(I64(-1), b.gep(at, [I64(j)]))
        step = I64(self.src_strides[self.row[0]])

        def block(b, r0):
            m = b.select(b.icmp_signed("<", b.sub(end, r0), I64(TILE)), b.sub(end, r0), I64(TILE))

            def solve(b, j):
                slot = b.gep(at, [j])
                b.store(I64(-1), slot)
                base = b.mul(b.add(r0, j), I64(self.length))
                self.share = lambda b, _, offset: b.store(offset, slot)
                q = b.sub(base, I64(self.offset))
                with b.if_then(b.icmp_signed(">=", q, I64(0))):
                    self._gather(b, base, q)
            counted_loop(b, I64(0), m, I64(1), solve, "solve")
            first = b.load(b.gep(at, [I64(0)]))
            # the run's length: rows from the first whose shares follow its own, before the block ends
            adjacent, length = b.icmp_signed(">=", first, I64(0)), I64(1)
            for j in range(1, TILE):
                adjacent = b.and_(adjacent, b.and_(b.icmp_signed("<", I64(j), m), b.icmp_signed(
                    "==", b.load(b.gep(at, [I64(j)])), b.add(first, I64(j)))))
                length = b.add(length, b.zext(adjacent, I64))
            advance = b.select(b.icmp_signed(">=", first, I64(0)), length, I64(1))
            for w in reversed(RUNS):
                advance = b.select(b.icmp_signed(">=", length, I64(w)), I64(w), advance)
            self._copy_block(b, r0, advance, first, RUNS, step)
            return advance

        counted_loop(b, start, end, None, block, "blocks")

    def _copy_block(self, b, r0, rows, first, runs, step):
        """The ``rows`` rows from ``r0``: a run's straight-line copy where ``rows`` is one of ``runs``, else
        row by row (`_row`)."""
        if not runs:
            counted_loop(b, r0, b.add(r0, rows), I64(1), self._row, "row")
            return
        w, *rest = runs
        with b.if_else(b.icmp_signed("==", rows, I64(w))) as (whole, other):
            with whole:
                def element(b, i):
                    row = b.add(b.mul(r0, I64(self.length)), i)
                    read = b.add(first, b.mul(i, step))
                    values = [b.load(b.gep(self.src, [b.add(read, I64(j))])) for j in range(w)]
                    for j, value in enumerate(values):
                        b.store(value, b.gep(self.out, [b.add(row, I64(j * self.length))]))
                counted_loop(b, I64(0), I64(self.length), I64(1), element, f"run{w}")
            with other:
                self._copy_block(b, r0, rows, first, rest, step)

    def _gather(self, b, base, q):
        coords = []
        for step, _ in self.solved:  # the coordinates, outermost first (each step exceeds what is inside it)
            p = b.sdiv(q, I64(step))
            q = b.sub(q, b.mul(p, I64(step)))
            coords.append(p)
        if not self.solved or self.solved[-1][0] > self.length:  # (a remainder: between its elements, no share)
            with b.if_then(b.icmp_signed("==", q, I64(0))):
                self._memory_dim(b, base, coords, 0, I64(0))
        else:
            self._memory_dim(b, base, coords, 0, I64(0))

    def _memory_dim(self, b, base, coords, j, at):
        """Memory dim ``j``'s shares: its view dims but the last looped, the last solved; ``at`` is the offset
        into ``src`` of the view dims fixed so far."""
        if j == len(self.solved):
            self.share(b, base, at)
            return
        dims = self.solved[j][1]
        *looped, (d, factor, n) = dims

        def loop(b, rest, left, at):
            if rest:
                (e, f, m), *more = rest
                counted_loop(b, I64(0), I64(m), I64(1),
                             lambda b, i: loop(b, more, b.sub(left, b.mul(i, I64(f))),
                                               b.add(at, b.mul(i, I64(self.src_strides[e])))), f"k{e}")
                return
            index = b.sdiv(left, I64(factor)) if factor > 1 else left
            ok = b.and_(b.icmp_signed(">=", left, I64(0)), b.icmp_signed("<", index, I64(n)))
            if factor > 1:
                ok = b.and_(ok, b.icmp_signed("==", b.srem(left, I64(factor)), I64(0)))
            with b.if_then(ok):
                self._memory_dim(b, base, coords, j + 1, b.add(at, b.mul(index, I64(self.src_strides[d]))))

        loop(b, looped, coords[j], at)

    def _add(self, b, base, at):
        """The share at ``src`` offset ``at`` into the row at ``base`` (or the element there)."""
        step = I64(self.src_strides[self.row[0]]) if self.row is not None else I64(0)
        n = self.row[2] if self.row is not None else 1

        def one(b, i):
            dst = b.gep(self.out, [b.add(base, i)])
            value = b.load(b.gep(self.src, [b.add(at, b.mul(i, step))]))
            b.store(b.fadd(b.load(dst), value) if self.mode == "add" else value, dst)

        counted_loop(b, I64(0), I64(n), I64(1), one, "share")


views.WINDOW_KERNEL = window_kernel
