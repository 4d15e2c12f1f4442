"""Generated matrix products for the skinny products of small convolutions, where OpenBLAS is slow.

A convolution is one GEMM over its im2col windows (``nn.functional._conv``): ``(O, C*K) @ (C*K, L*N)``
forward and ``(C*K, O) @ (O, L*N)`` for its windows' gradient, with the batch innermost in ``L*N``. On a
small CNN those products have few rows and a short sum (cnn's conv2: 16 x 72 by 72 x 36864) and a very long
row; OpenBLAS, through NumPy, ran them at 12-50 GFLOP/s on one Zen 4 core, whose adds and multiplies
peak near 110. Here ``C = A @ B`` for such shapes: the columns of ``B`` and ``C`` in tiles of `_VECS`
vectors (unit stride along a row of each), each tile's rows in blocks of `_ROWS`, each block's
``_ROWS x _VECS`` vector accumulators in registers over the whole sum, reading ``A`` one element at a time
(broadcast) where it lies (a weight, or its transpose, at any strides). The tiles of a product are the
kernel's outer loop, in chunks on the thread team.

The bits are defined, whatever the thread count and the CPU target: every element of ``C`` is
``(((0 + a0*b0) + a1*b1) + ...)`` over ``k`` in order, each product and each sum rounded once (no FMA
contraction and no reassociation: no fast-math flag; the vectors are ``<16 x float>``, ``<8 x double>``
in the IR, which a narrower target splits, lane for lane the same operations). A column is the same
sequence of operations in a tile, in the tail's single vectors and in its last scalar columns, so where the
tiles split between threads changes nothing. Eager and compiled products both run it (`ops.linalg`), so
they agree bit for bit; against OpenBLAS (which blocks and fuses the sum otherwise) the results agree to
float rounding.

The weight gradient ``(O, L*N) @ (L*N, C*K)`` is skinny the other way: a sum over every window into a few
hundred elements; `long_sum_kernel` (`_Dots`) computes it with the sum along vector lanes, in an order as
fixed (see there).

A convolution's forward product may read its windows where they lie instead of an im2col copy
(`window_kernel`): the same kernel, whose packing of a tile's panel reads each row of the panel at the offset
of its window position; the panel is what the product computes on either way, so the bits are the same.
Importing this module registers `skinny_product`, `window_product` and `long_sum_product` in
``ops.linalg.SKINNY_KERNEL``, ``WINDOW_KERNEL`` and ``LONG_SUM_KERNEL`` (``import jitorch`` registers loaders
that import it at the first such product);
``ops.linalg`` decides which products take them (`ops.linalg.skinny_shape`'s rules, measured: see there).
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ..ops import linalg
from ..runtime import threads
from . import cpu, mathlib
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource, counted_loop, fma_loop, kernel_body, prefetch
from .lanes import VECTOR_BYTES, by_halves
from .machine import selected
from .memo import BuiltOnce
from .target import CPU

_ROWS, _VECS = 6, 4  # the register block: 6 x 4 accumulators, 4 loads and 6 broadcasts per step of the sum
_DOT_ROWS, _DOT_COLS = 4, 4  # the long-sum kernel's register block: 4 x 4 sums, 8 vector loads per step
_CHUNK = 128  # vectors of the sum per pass over a row block's columns (a chunk of cnn's 72-row Bt: 590 KB, in L2)
# products the kernels computed, and how many of them read a convolution's windows in place (tests assert which
# products took one)
counters = {"calls": 0, "windows": 0}


class SkinnyKernel:
    """A compiled product of one shape and layout: `run` computes ``out = a @ b``, its outer loop's
    ``tiles`` (column tiles or row blocks) split between threads."""

    def __init__(self, compiled, tiles, work, windows=False):
        self._compiled = compiled  # keeps the machine code alive
        self.name = compiled.name
        self._fn, self._address = compiled.fn, compiled.address
        self._tiles, self._work, self._windows = tiles, work, windows

    def run(self, a, b, out, parts):
        """``out = a @ b`` (arrays of the shapes and strides the kernel was built for), its tiles in up to
        ``parts`` chunks on the thread team."""
        args = (ctypes.c_void_p * 3)(*(x.__array_interface__["data"][0] for x in (a, b, out)))
        parts = min(parts, self._tiles, self._work // cpu.CHUNK_MIN_WORK)
        if parts <= 1:
            self._fn(args, 0, self._tiles)
        else:
            threads.run_chunks(self._address, args, threads.bounds(self._tiles, parts))
        counters["calls"] += 1
        counters["windows"] += self._windows


def for_products():
    """Whether ``ops.linalg`` should hand its skinny products to these kernels on the selected machine: only
    where it has AVX-512, on which the rules were measured. Split for narrower targets the register blocks
    spill: on the Zen 4 host forced to x86-64-v3 the columns kernel took 1.9-2.2 times and the long sum
    0.87 times the time of OpenBLAS (which kept its AVX-512 kernels), forced to x86-64-v2 2.1-3.0 and 1.7
    times. The kernels build and keep their bits on any target (the tests run them there)."""
    return "avx512f" in selected().required()


def skinny_kernel(dtype, m, k, n, a_strides, b_rows, c_rows):
    """The compiled product of an ``(m, k)`` matrix at element strides ``a_strides`` by a ``(k, n)`` one
    whose rows are ``b_rows`` elements apart into an ``(m, n)`` one whose rows are ``c_rows`` apart (unit
    stride along the rows of both), of float ``dtype`` (a NumPy dtype); a `SkinnyKernel`, or None where it
    cannot be built. Built once per key."""
    return _kernels("columns", np.dtype(dtype).name, m, k, n, tuple(a_strides), b_rows, c_rows)


def window_kernel(dtype, m, k, n, a_strides, rows, cols, c_rows):
    """The compiled product of an ``(m, k)`` matrix at element strides ``a_strides`` by the windows of a
    convolution's input read where they lie (no im2col copy) into an ``(m, n)`` one whose rows are ``c_rows``
    apart: ``B[kk, j]`` is the element at ``offset(kk, rows) + offset(j, cols)`` from ``B``'s pointer, where
    ``rows`` and ``cols`` are ``((size, element stride), ...)`` outermost first, the digits of ``kk`` and ``j``
    in those sizes (a weight's ``(C, *kernel)`` order; the windows' ``(*out, N)``, their innermost dim a run of
    unit stride whose length the tiles divide). Every element is the sum `skinny_kernel` makes of the copied
    windows, the same bits. A `SkinnyKernel`, or None where the layout does not fit or it cannot be built."""
    if not runs_fit(dtype, cols, False) or k != _size(rows) or n != _size(cols):
        return None
    return _kernels("windows", np.dtype(dtype).name, m, k, n, tuple(a_strides), tuple(rows), tuple(cols), c_rows)


def runs_fit(dtype, cols, transposed):
    """Whether the windows' ``cols`` (`window_kernel`'s) end in a run of unit stride that `window_kernel`'s tiles
    divide, or (``transposed``) whole vectors of ``dtype``, as `window_sum_kernel`'s sum reads them."""
    w = VECTOR_BYTES // np.dtype(dtype).itemsize
    return bool(cols) and cols[-1][1] == 1 and cols[-1][0] % (w if transposed else w * _VECS) == 0


def _size(dims):
    total = 1
    for size, _ in dims:
        total *= size
    return total


def window_sum_kernel(dtype, m, k, n, a_rows, rows, cols, c_strides):
    """The compiled product of an ``(m, k)`` matrix whose rows are ``a_rows`` elements apart by the transposed
    windows of a convolution's input read where they lie (a weight gradient's ``(O, L*N) @ (L*N, C*K)``, no
    im2col copy) into an ``(m, n)`` one at element strides ``c_strides``: ``Bt[j, kk]`` is the element at
    ``offset(j, rows) + offset(kk, cols)`` from ``Bt``'s pointer (`window_kernel`'s digits: ``rows`` the
    weight's ``(C, *kernel)``, ``cols`` the windows' ``(*out, N)``, their innermost dim a run of unit stride
    that whole vectors divide, so each vector of the sum lies in one run). Every element is the sum
    `long_sum_kernel` makes of the copied windows, the same bits. A `SkinnyKernel`, or None where the layout
    does not fit or it cannot be built."""
    if not runs_fit(dtype, cols, True) or n != _size(rows) or k != _size(cols):
        return None
    return _kernels("window sums", np.dtype(dtype).name, m, k, n, a_rows, tuple(rows), tuple(cols), tuple(c_strides))


def long_sum_kernel(dtype, m, k, n, a_rows, bt_rows, c_strides):
    """The compiled product of an ``(m, k)`` matrix whose rows are ``a_rows`` elements apart by a ``(k, n)``
    one whose columns are ``bt_rows`` apart (unit stride along the sum in both) into an ``(m, n)`` one at
    element strides ``c_strides``, of float ``dtype``; a `SkinnyKernel` (over blocks of rows), or None where
    it cannot be built. Built once per key."""
    return _kernels("dots", np.dtype(dtype).name, m, k, n, a_rows, bt_rows, tuple(c_strides))


def _build(kind, dtype, m, k, n, *layout):
    if kind == "windows":
        a_strides, rows, cols, c_rows = layout
        shape = _Columns(dtype, m, k, n, a_strides, None, c_rows, (rows, cols))
    elif kind == "window sums":
        a_rows, rows, cols, c_strides = layout
        shape = _Dots(dtype, m, k, n, a_rows, None, c_strides, (rows, cols))
    else:
        shape = (_Columns if kind == "columns" else _Dots)(dtype, m, k, n, *layout)
    source = KernelSource(shape.name, "product", ["matmul"], [0, 1], [2], 0, 0)
    source.llvm_ir = shape.module()
    try:
        compiled = cpu.link_kernel(source, default_cache())
    except CompileError:
        return None
    return SkinnyKernel(compiled, shape.tiles, m * n * k, kind in ("windows", "window sums"))


_kernels = BuiltOnce(_build)


class _Emitter:
    """What both kernels' emitters share: the element and vector types, loads, stores, broadcasts."""

    def __init__(self, dtype):
        self.t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
        self.item = np.dtype(dtype).itemsize
        self.w = VECTOR_BYTES // self.item
        self.vt = ir.VectorType(self.t, self.w)

    def entry(self, emit):
        """The module's IR text: ``emit(b, lo, hi, a, b, c)`` writes the body of its outer loop's chunk."""
        module, body, b = kernel_body(self.name, self.t, 3)
        emit(b, *body.args)
        b.ret_void()
        CPU.add_entry(module, body, [0, 1, 2], 0, "thread")
        return str(module)

    @staticmethod
    def prefetch(b, p):
        """A hint to read the cache line at ``p`` (the next tile's panel, while this tile computes: the
        panel's rows are far apart, so no hardware prefetcher follows them, and their misses, one at a time,
        took longer than the tile's arithmetic). Past the end of ``B`` it reads nothing."""
        prefetch(b, p)

    def load(self, b, p, vt):
        """A value of ``vt`` at ``p`` (vectors aligned as their elements only)."""
        return b.load(p) if vt is self.t else b.load(b.bitcast(p, vt.as_pointer()), align=self.item)

    def store(self, b, v, p, vt):
        if vt is self.t:
            b.store(v, p)
        else:
            b.store(v, b.bitcast(p, vt.as_pointer()), align=self.item)

    def broadcast(self, b, x, vt):
        """``x`` in every lane of ``vt`` (``x`` itself for a scalar type)."""
        if vt is self.t:
            return x
        v = b.insert_element(mathlib.splat(vt, 0.0), x, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), vt.count), [0] * vt.count)
        return b.shuffle_vector(v, mathlib.splat(vt, 0.0), zeros)

    def zero(self, vt):
        return mathlib.splat(vt, 0.0) if vt is not self.t else ir.Constant(self.t, 0.0)


class _Columns(_Emitter):
    """Emits the product's loops; sizes and strides are the kernel's constants."""

    def __init__(self, dtype, m, k, n, a_strides, b_rows, c_rows, windows=None):
        super().__init__(dtype)
        self.m, self.k, self.n = m, k, n
        self.a_strides, self.b_rows, self.c_rows = a_strides, b_rows, c_rows
        self.windows = windows  # (rows, cols) of `window_kernel`'s B, else None: rows b_rows apart
        self.span = self.w * _VECS  # columns of one tile
        # the full tiles, then (where the columns do not divide) one more index for the rest
        self.tiles = n // self.span + (n % self.span > 0)
        layout = f"b{b_rows}" if windows is None else "w" + "_".join(f"{d}s{st}" for dims in windows for d, st in dims)
        self.name = f"jitorch_skinny_{dtype}_{m}x{k}x{n}_a{a_strides[0]}_{a_strides[1]}_{layout}_c{c_rows}"

    def module(self):
        """The kernel's LLVM IR text."""
        return self.entry(self.tiles_loop)

    def tiles_loop(self, b, lo, hi, a, bm, c):
        full = self.n // self.span
        with b.goto_entry_block():
            panel = b.bitcast(b.alloca(ir.ArrayType(self.t, self.k * self.span)), self.t.as_pointer())
            if self.windows is not None:
                self.row_offsets = b.bitcast(b.alloca(ir.ArrayType(I64, self.k)), I64.as_pointer())
        if self.windows is not None:  # (each row's offset once per call, not once per tile)
            counted_loop(b, I64(0), I64(self.k), I64(1), lambda b, kk: b.store(
                _digits_offset(b, kk, self.windows[0]), b.gep(self.row_offsets, [kk])), "ro")

        def tile(b, t):
            if full == self.tiles:
                self.packed(b, a, bm, c, b.mul(t, I64(self.span)), panel)
                return
            last = b.icmp_signed("==", t, I64(full))
            with b.if_else(last) as (rest, whole):
                with whole:
                    self.packed(b, a, bm, c, b.mul(t, I64(self.span)), panel)
                with rest:
                    self.rest(b, a, bm, c, full * self.span)
        counted_loop(b, lo, hi, I64(1), tile, "tile")

    def rest(self, b, a, bm, c, j0):
        """The columns after the last full tile: whole vectors one at a time, then single columns."""
        left = self.n - j0
        vectors = left // self.w
        if vectors:
            counted_loop(b, I64(j0), I64(j0 + vectors * self.w), I64(self.w),
                         lambda b, j: self.columns(b, a, bm, c, j, 1, self.vt), "rv")
        if left % self.w:
            counted_loop(b, I64(j0 + vectors * self.w), I64(self.n), I64(1),
                         lambda b, j: self.columns(b, a, bm, c, j, 1, self.t), "rs")

    def columns(self, b, a, bm, c, j, vecs, vt, ld=None):
        """Every row of ``C``'s ``vecs`` values of type ``vt`` (vectors or scalars) from column ``j``, where
        ``bm`` points at ``B``'s column ``j`` with rows ``ld`` apart (default ``B``'s own): blocks of `_ROWS`
        rows, then the last rows as one smaller block."""
        ld = self.b_rows if ld is None else ld
        full = self.m // _ROWS * _ROWS
        if full:
            counted_loop(b, I64(0), I64(full), I64(_ROWS),
                         lambda b, i: self.block(b, a, bm, ld, c, i, _ROWS, j, vecs, vt), "rb")
        if full < self.m:
            self.block(b, a, bm, ld, c, I64(full), self.m - full, j, vecs, vt)

    def packed(self, b, a, bm, c, j, panel):
        """A full tile from column ``j``, its ``(k, span)`` panel of ``B`` copied first into ``panel`` (a
        stack buffer), which every row block then reads: ``B``'s rows lie a long row apart (cnn's 144 KB,
        a multiple of 4 KB), so a tile's rows fell on the same few L1 sets and each row block read them
        again from L2."""
        def copy(b, kk):
            src = b.gep(bm, [self.b_offset(b, kk, j)])
            dst = b.gep(panel, [b.mul(kk, I64(self.span))])
            for v in range(_VECS):
                self.store(b, self.load(b, b.gep(src, [I64(v * self.w)]), self.vt),
                           b.gep(dst, [I64(v * self.w)]), self.vt)
                self.prefetch(b, b.gep(src, [I64(self.span + v * self.w)]))
        counted_loop(b, I64(0), I64(self.k), I64(1), copy, "pk")
        self.columns(b, a, b.gep(panel, [b.sub(I64(0), j)]), c, j, _VECS, self.vt, ld=self.span)

    def b_offset(self, b, kk, j):
        """The element offset of ``B[kk, j]`` from ``B``'s pointer: ``kk`` rows of ``b_rows``, or (windows) the
        digits of ``kk`` and ``j`` in their dims' sizes times the dims' strides (a tile's columns lie in one run
        of the innermost dim, which the tiles divide, so from its first column on they are contiguous)."""
        if self.windows is None:
            return b.add(b.mul(kk, I64(self.b_rows)), j)
        return b.add(b.load(b.gep(self.row_offsets, [kk])), _digits_offset(b, j, self.windows[1]))

    def block(self, b, a, bm, ld, c, i, rows, j, vecs, vt):
        """``C[i + r, j + v*w + lane] = sum over k, in order, of A[i + r, k] * B[k, j + v*w + lane]``."""
        sm, sk = self.a_strides
        a0 = b.gep(a, [b.mul(i, I64(sm))])
        step = vt.count if isinstance(vt, ir.VectorType) else 1

        def operands(b, kk):
            row = b.gep(bm, [b.add(b.mul(kk, I64(ld)), j)])
            ak = b.gep(a0, [b.mul(kk, I64(sk))])
            scalars = [b.load(b.gep(ak, [I64(r * sm)])) for r in range(rows)]
            return ([self.broadcast(b, s, vt) for s in scalars],
                    [self.load(b, b.gep(row, [I64(v * step)]), vt) for v in range(vecs)])
        accs, _ = fma_loop(b, I64(0), I64(self.k), self.zero(vt), rows, vecs, operands, contract=False)
        for r in range(rows):
            out = b.gep(c, [b.add(b.mul(b.add(i, I64(r)), I64(self.c_rows)), j)])
            for v in range(vecs):
                self.store(b, accs[r][v], b.gep(out, [I64(v * step)]), vt)


def _digits_offset(b, index, dims):
    """``sum(digit * stride)`` over ``dims`` (``(size, stride)``, outermost first) of ``index``'s digits in those
    sizes (the outermost digit unbounded), as IR."""
    offset, rest = I64(0), index
    for depth, (size, stride) in enumerate(reversed(dims)):
        if depth == len(dims) - 1:
            digit = rest
        else:
            digit = b.urem(rest, I64(size))
            rest = b.udiv(rest, I64(size))
        offset = b.add(offset, b.mul(digit, I64(stride)))
    return offset


class _Dots(_Emitter):
    """Emits the long-sum product's loops: ``C[i, j] = A[i, :] . Bt[j, :]`` over a sum far longer than the
    rows and columns (a convolution's weight gradient: cnn's 16 x 36864 by 36864 x 72, the windows read
    transposed, unit stride along the sum in both operands). Each element's sum is kept in one vector
    of ``w`` lanes (lane ``l`` sums the terms ``k = l mod w``); the sum runs in chunks of `_CHUNK` vectors, each
    chunk's part of a lane summed in order from 0 and added to the lane's running sum (a stack buffer); a
    chunk of ``Bt`` (all its rows) stays in L2 while every row block of this thread's rows reads it, so ``Bt``
    comes from memory once per thread. At the end the lanes are added by halves (``(l, l + w/2)``, then
    again), then the last ``k mod w`` terms in order. The chunks lie at fixed positions of the sum and the
    outer loop is over blocks of rows, so neither the thread count nor the target changes a bit. With
    ``windows`` (`window_sum_kernel`) the rows of ``Bt`` are a convolution's windows where they lie: only the
    addresses of the loads change."""

    def __init__(self, dtype, m, k, n, a_rows, bt_rows, c_strides, windows=None):
        super().__init__(dtype)
        self.m, self.k, self.n = m, k, n
        self.a_rows, self.bt_rows, self.c_strides = a_rows, bt_rows, c_strides
        self.windows = windows  # (rows, cols) of `window_sum_kernel`'s Bt, else None: rows bt_rows apart
        self.kv = k // self.w  # whole vectors of the sum
        self.tiles = -(-m // _DOT_ROWS)  # blocks of rows: the outer loop
        layout = f"b{bt_rows}" if windows is None else "w" + "_".join(f"{d}s{st}" for dims in windows for d, st in dims)
        self.name = f"jitorch_dots_{dtype}_{m}x{k}x{n}_a{a_rows}_{layout}_c{c_strides[0]}_{c_strides[1]}"

    def module(self):
        """The kernel's LLVM IR text."""
        return self.entry(self.blocks_loop)

    def blocks_loop(self, b, lo, hi, a, bt, c):
        with b.goto_entry_block():
            sums = b.bitcast(b.alloca(ir.ArrayType(self.vt, self.m * self.n)), self.vt.as_pointer())
            if self.windows is not None:
                self.row_offsets = b.bitcast(b.alloca(ir.ArrayType(I64, self.n)), I64.as_pointer())
        if self.windows is not None:  # (each row's offset once per call)
            counted_loop(b, I64(0), I64(self.n), I64(1), lambda b, j: b.store(
                _digits_offset(b, j, self.windows[0]), b.gep(self.row_offsets, [j])), "ro")
        first = b.mul(lo, I64(_DOT_ROWS))
        last = b.mul(hi, I64(_DOT_ROWS))
        last = b.select(b.icmp_signed("<", last, I64(self.m)), last, I64(self.m))
        counted_loop(b, b.mul(first, I64(self.n)), b.mul(last, I64(self.n)), I64(1),
                     lambda b, e: b.store(self.zero(self.vt), b.gep(sums, [e])), "zs")

        def chunk(b, k0):
            end = b.add(k0, I64(_CHUNK))
            end = b.select(b.icmp_signed("<", end, I64(self.kv)), end, I64(self.kv))
            counted_loop(b, lo, hi, I64(1), lambda b, t: self.row_block(b, a, bt, sums, t, k0, end), "rb")
        counted_loop(b, I64(0), I64(self.kv), I64(_CHUNK), chunk, "ck")
        counted_loop(b, first, last, I64(1), lambda b, i: counted_loop(
            b, I64(0), I64(self.n), I64(1), lambda b, j: self.finish(b, a, bt, c, sums, i, j), "fj"), "fi")

    def row_block(self, b, a, bt, sums, t, k0, end):
        """Row block ``t``'s sums over vectors ``k0 .. end`` of the sum, for every column."""
        i0 = b.mul(t, I64(_DOT_ROWS))
        whole = self.m // _DOT_ROWS

        def columns(b, rows):
            full = self.n // _DOT_COLS * _DOT_COLS
            if full:
                counted_loop(b, I64(0), I64(full), I64(_DOT_COLS), lambda b, j: self.block(
                    b, a, bt, sums, i0, rows, j, _DOT_COLS, k0, end), "cb")
            if full < self.n:
                self.block(b, a, bt, sums, i0, rows, I64(full), self.n - full, k0, end)
        if whole == self.tiles:
            columns(b, _DOT_ROWS)
            return
        with b.if_else(b.icmp_signed("==", t, I64(whole))) as (rest, full_block):
            with full_block:
                columns(b, _DOT_ROWS)
            with rest:
                columns(b, self.m - whole * _DOT_ROWS)

    def block(self, b, a, bt, sums, i0, rows, j0, cols, k0, end):
        """``sums[i0 + r, j0 + c] += the lanes' sums over vectors k0 .. end``, each from 0 in order."""
        def operands(b, kk):
            off = b.mul(kk, I64(self.w))
            boff = off if self.windows is None else _digits_offset(b, off, self.windows[1])
            return ([self.load(b, b.gep(a, [b.add(b.mul(b.add(i0, I64(r)), I64(self.a_rows)), off)]), self.vt)
                     for r in range(rows)],
                    [self.load(b, b.gep(bt, [b.add(self.bt_row(b, b.add(j0, I64(col))), boff)]), self.vt)
                     for col in range(cols)])
        accs, _ = fma_loop(b, k0, end, self.zero(self.vt), rows, cols, operands, contract=False)
        for r in range(rows):
            for col in range(cols):
                p = b.gep(sums, [b.add(b.mul(b.add(i0, I64(r)), I64(self.n)), b.add(j0, I64(col)))])
                b.store(b.fadd(b.load(p), accs[r][col]), p)

    def bt_row(self, b, j):
        """The element offset of row ``j`` of ``Bt`` from its pointer."""
        return b.mul(j, I64(self.bt_rows)) if self.windows is None else b.load(b.gep(self.row_offsets, [j]))

    def finish(self, b, a, bt, c, sums, i, j):
        """``C[i, j]``: the lanes of its sum added by halves, then the terms after the last whole vector."""
        total = by_halves(b, b.load(b.gep(sums, [b.add(b.mul(i, I64(self.n)), j)])), lambda b, x, y: b.fadd(x, y))
        arow, brow = b.mul(i, I64(self.a_rows)), self.bt_row(b, j)
        for kk in range(self.kv * self.w, self.k):
            koff = I64(kk) if self.windows is None else _digits_offset(b, I64(kk), self.windows[1])
            total = b.fadd(total, b.fmul(b.load(b.gep(a, [b.add(arow, I64(kk))])),
                                         b.load(b.gep(bt, [b.add(brow, koff)]))))
        ci, cj = self.c_strides
        b.store(total, b.gep(c, [b.add(b.mul(i, I64(ci)), b.mul(j, I64(cj)))]))


def skinny_product(dtype, m, k, n, a_strides, b_rows, c_rows):
    """``ops.linalg.SKINNY_KERNEL``: `skinny_kernel` where `for_products`, else None (NumPy's product)."""
    return skinny_kernel(dtype, m, k, n, a_strides, b_rows, c_rows) if for_products() else None


def window_product(dtype, m, k, n, a_strides, rows, cols, c_rows):
    """``ops.linalg.WINDOW_KERNEL``: `window_kernel` where `for_products`, else None (the windows copied)."""
    return window_kernel(dtype, m, k, n, a_strides, rows, cols, c_rows) if for_products() else None


def window_sum_product(dtype, m, k, n, a_rows, rows, cols, c_strides):
    """``ops.linalg.WINDOW_SUM_KERNEL``: `window_sum_kernel` where `for_products`, else None (the windows
    copied)."""
    return window_sum_kernel(dtype, m, k, n, a_rows, rows, cols, c_strides) if for_products() else None


def long_sum_product(dtype, m, k, n, a_rows, bt_rows, c_strides):
    """``ops.linalg.LONG_SUM_KERNEL``: `long_sum_kernel` where `for_products`, else None."""
    return long_sum_kernel(dtype, m, k, n, a_rows, bt_rows, c_strides) if for_products() else None


linalg.SKINNY_KERNEL = skinny_product
linalg.WINDOW_KERNEL = window_product
linalg.LONG_SUM_KERNEL = long_sum_product
linalg.WINDOW_SUM_KERNEL = window_sum_product
