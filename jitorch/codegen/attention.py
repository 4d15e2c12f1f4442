"""Fused attention kernels (jitorch/ops/attention.py's ``_attention`` and ``_attention_backward``): scaled
dot-product attention over one (batch, head) tile per iteration of the kernel's outer loop, forward and
backward, with no mask, a causal one or an additive one (forward).

The composition (``matmul``, ``mul``, ``masked_fill``, ``softmax``, ``matmul`` and their derivatives) runs
a batched BLAS product per step over all tiles and passes the (L, S) scores through memory between them; a
training step of a small GPT has 48 tiles of 64 x 64 x 32, where each product is a few microseconds of
arithmetic and the step's products ran 2-2.7 times slower than alone. Here a tile's keys (and in the
backward its values) are transposed once into a stack buffer (by square blocks of a vector's lanes in
registers where the sizes allow), a few tens of KB that stay in L1; the other
operands are read where they lie (a GPT's heads are strided views of one product), copied into padded rows
only where the head dim is no whole number of register blocks. Each product is a register-blocked loop
(``_product``: `block_rows()` rows, 8 on AVX-512 and 4 elsewhere, by 2 vectors of accumulators, one
broadcast operand per row and one vector load per column of FMAs);
an additive mask (a bool one made -inf/0 by the op) is added to the scaled scores where they are stored, and
in masked kernels a row with every key masked gives zero weights; the causal mask skips the key blocks after a row
block's last query (to the vector that holds it), about half the work. The softmax (max, exp of the
differences, sum, then the exponentials times the sum's reciprocal) runs on the row in registers and L1.
The tiles run in chunks on the thread team. L, S, the batch's sizes and strides (but the D-wide buffers' row
strides) and the scale are run-time arguments: one kernel serves every sequence length.

Rounding differs from the composition's (sums in another order): results agree with torch within float
tolerances, not bit for bit. Importing this module registers `attention_kernel` in
``ops.attention.ATTENTION_KERNEL``: the ops layer cannot import the code generator, and composes NumPy
products where no kernel is registered or one cannot be built (shapes whose buffers exceed ``STACK_LIMIT``).
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ..ops import attention
from ..runtime.array_address import data_address
from . import cpu, mathlib
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource, cached_ir, counted_loop, fma_loop, generator_fingerprint, prefetch
from .lanes import VECTOR_BYTES, by_halves
from .machine import selected
from .memo import BuiltOnce
from .target import CPU

# A tile's stack buffers may take this many bytes (8 MiB thread stacks; the GPT shapes take 16-80 KB).
STACK_LIMIT = 256 * 1024
# A product's register block: rows by `_VECS` vectors of accumulators. 8 rows (16 accumulators) where the
# target has 32 vector registers (AVX-512); elsewhere each 64-byte vector takes 2 or 4 registers, and 4 rows
# already fill them.
_ROWS_WIDE, _ROWS, _VECS = 8, 4, 2


class AttentionKernel:
    """A compiled tile kernel bound to one call's sizes and strides: `run_tiles` runs it over a call's
    buffers."""

    def __init__(self, compiled, params, work):
        self._compiled = compiled  # keeps the machine code alive
        self._fn = compiled.fn
        self._params = params  # the kernel's run-time sizes and strides (`_params`), its last argument
        self._address = data_address(params)
        self._work = work  # multiply-adds of one tile

    def run_tiles(self, arrays, tiles):
        """The kernel over ``tiles`` tiles of ``arrays`` (laid out as the kernel was bound for, in its buffer
        order): on the calling thread, or in chunks of tiles on the thread team when there are threads and
        work enough for each (as a generated kernel splits its outer loop). Each tile runs on one thread,
        so the results do not depend on the number of threads."""
        # (`data_address`: a compiled GPT step calls this 2 times per layer, where ``__array_interface__`` built a
        # dict per array)
        args = (ctypes.c_void_p * (len(arrays) + 1))(*map(data_address, arrays), self._address)
        cpu.run_split(self._fn, self._compiled.address, args, tiles, tiles * self._work)


def attention_kernel(direction, dtype, L, S, D, causal, scale, batch=(), layouts=None, masked=False):
    """The ``direction`` ("forward" or "backward") kernel for float ``dtype`` (a NumPy dtype) tiles of ``L``
    queries, ``S`` keys and ``D`` dims (an `AttentionKernel`); None where it cannot be built (the caller
    composes). Forward buffers: q, k, v, (with ``masked``) an additive (L, S) mask, then out and the softmax
    weights p; backward: q, k, v, p, grad_out, then grad_q, grad_k, grad_v. Each holds the tiles of the
    ``batch`` shape; ``layouts`` gives, per buffer, its element strides (one per batch dim, then the rows'; the
    columns' are 1), default C-contiguous.

    L, S, the batch's sizes, the strides and the scale are the machine code's run-time arguments: one kernel
    is compiled per direction, dtype, D, causal, mask, number of batch dims past 2 and row strides of the
    D-wide buffers (D where they are contiguous), and serves every length (eager
    attention built one per shape and layout, 0.5-0.8 s of LLVM each: a user's first call of each new sequence
    length paid it)."""
    if layouts is None:
        shapes, sizes = _shapes(direction, masked), {"L": L, "S": S, "D": D}
        layouts = tuple(_contiguous(batch, sizes[rows], sizes[cols]) for rows, cols in shapes)
    t = np.dtype(dtype)
    width = VECTOR_BYTES // t.itemsize
    if stack_bytes(direction, L, S, D, width, t.itemsize, block_rows()) > STACK_LIMIT:
        return None
    name = _DTYPE_NAMES.get(dtype) or t.name  # (``dtype.name`` runs Python code in NumPy 2)
    # (fewer than `_BATCH_DIMS` batch dims are padded with dims of one, so that (B, L, D) and (B, H, L, D) calls
    # share a kernel)
    pad = max(0, _BATCH_DIMS - len(batch))
    batch, layouts = (1,) * pad + tuple(batch), tuple((0,) * pad + tuple(layout) for layout in layouts)
    # (the row strides of the D-wide buffers are the kernel's constants: `_Tile`)
    rows = tuple(layout[-1] if cols == "D" else None for layout, (_, cols) in zip(layouts, _shapes(direction, masked)))
    compiled = _kernels(direction, name, D, bool(causal), len(batch), bool(masked), rows)
    if compiled is None:
        return None
    return AttentionKernel(compiled, _params(L, S, scale, batch, layouts), L * S * D)


def _params(L, S, scale, batch, layouts):
    """The kernel's run-time arguments as one int64 array: L, S, the scale's float64 bits, the batch's sizes,
    then each buffer's strides (`_Tile.bind` reads them in this order)."""
    flat = [L, S, 0, *batch, *(n for layout in layouts for n in layout)]
    params = np.array(flat, np.int64)
    params[2:3] = np.array([scale], np.float64).view(np.int64)
    return params


def stack_bytes(direction, L, S, D, width, item, rows):
    """The bytes of a tile's stack buffers: forward, the keys transposed, the values padded (where D is no
    whole number of register blocks) and a row block's scores; backward, the keys padded, the values
    transposed, the queries and grad_out padded and the scores' gradient."""
    block = width * _VECS
    Sp, Dp = _ceil(S, block), _ceil(D, block)
    padded = 0 if D % block == 0 else Dp
    if direction == "forward":
        floats = D * Sp + S * padded + rows * Sp
    else:
        floats = S * padded + D * Sp + 2 * L * padded + L * Sp
    return floats * item


_BATCH_DIMS = 2  # (batch, heads)
_DTYPE_NAMES = {np.dtype(t): np.dtype(t).name for t in (np.float32, np.float64)}


def _shapes(direction, masked):
    """Each buffer's tile shape, (rows, columns) as letters of L, S and D, in the ``direction`` kernel's buffer
    order."""
    letters = {"forward": "LDSDSD" + ("LS" if masked else "") + "LDLS", "backward": "LDSDSDLSLDLDSDSD"}[direction]
    return list(zip(letters[::2], letters[1::2]))


def _contiguous(batch, rows, cols):
    """The strides of a C-contiguous (*batch, rows, cols) buffer but the columns'."""
    strides = [cols]
    for n in reversed((*batch, rows)[1:]):
        strides.insert(0, strides[0] * n)
    return tuple(strides)


def _build(direction, dtype, D, causal, ndim, masked=False, row_strides=None):
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    width = VECTOR_BYTES // np.dtype(dtype).itemsize
    tile = _Tile(t, width, D, causal, ndim, masked, block_rows(), row_strides)
    name = (f"jitorch_attention_{direction}_{dtype}_d{D}_b{ndim}{'_causal' if causal else ''}"
            f"{'_masked' if masked else ''}")
    n_in, n_out = (3 + masked, 2) if direction == "forward" else (5, 3)
    source = KernelSource(name, "attention", [f"attention_{direction}"], list(range(n_in)),
                          list(range(n_in, n_in + n_out)), 0, 0)
    cache = default_cache()
    # (what decides the IR: the tile's parameters, the generator's sources, the target and its register
    # block's rows, and the constants' spelling, which the LLVM that llvmlite carries decides)
    text = repr(("attention", cpu.target_id(), mathlib._reads_splat(), tile.rows, direction, dtype, D, causal, ndim,
                 masked, row_strides))
    source.llvm_ir = cached_ir("attention kernel", text, lambda: _module(tile, direction, name, n_in, n_out), cache,
                               generator_fingerprint())
    try:
        return cpu.link_kernel(source, cache)
    except CompileError:
        return None


def block_rows():
    """The rows of a product's register block on the selected machine: `_ROWS_WIDE` where it has AVX-512's
    32 vector registers (on gpt-4x128's and gpt-6x384's warm tiles 1-8% less time than 4 rows: fewer
    operand loads per FMA, more FMAs in flight), else `_ROWS` (8 rows by 2 vectors would spill)."""
    return _ROWS_WIDE if "avx512f" in selected().required() else _ROWS


def _module(tile, direction, name, n_in, n_out):
    """The LLVM IR text of ``tile``'s ``direction`` kernel named ``name``. `_build` takes it from the kernel
    cache where an earlier process made it for the same parameters: the IR's text keys the object code, and
    building it here was 15-25 ms of Python in every process's first call."""
    module = ir.Module(name=name)
    module.triple = CPU.triple
    ptr = tile.t.as_pointer()
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] + [ptr] * (n_in + n_out) + [I64.as_pointer()]),
                       name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    for arg in body.args[2 + n_in:-1]:  # (the inputs may be one tensor: self-attention of x with itself)
        arg.add_attribute("noalias")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    tile.bind(b, body.args[-1], n_in + n_out)
    (tile.forward if direction == "forward" else tile.backward)(b, body.args[0], body.args[1], body.args[2:-1])
    b.ret_void()
    CPU.add_entry(module, body, list(range(n_in + n_out + 1)), 0, "thread")
    return str(module)


# (direction, dtype name, D, causal, batch dims, masked, row strides) -> the linked kernel, or None
_kernels = BuiltOnce(_build)


# (float, double): the softmax takes the exponential of a difference below this as 0 (float: e**-86 < 2**-124,
# a weight no sum of weights >= 1 can hold within float's precision, nor a product of one with a value)
_EXP_FLOOR = (-86.0, -700.0)
_ROUNDING_SHIFTS = (1.5 * 2.0 ** 23, 1.5 * 2.0 ** 52)  # adding one rounds a smaller number to an integer


def _exp_nonpositive(m, d):
    """e**d for ``d`` in [`_EXP_FLOOR`, 0] (a softmax's differences from the row's maximum): mathlib's exp
    (SLEEF's reduction and polynomial, the same bits in this range) without its clamps and its two-step
    scaling for results that underflow or overflow: 2**q (q = rint(d / ln2), in [-124, 0]) is added to the
    exponent field, and q << mantissa is the bits of ``fma(d, 1/ln2, shift)`` shifted (the shift's own bits
    leave the word). 17 vector operations a vector where mathlib's exp with the floor's selects took 27: a
    third less of a causal GPT tile's softmax. A NaN whose payload has any of the low bits that the shift
    moves into the exponent set comes out a number: the caller keeps NaN lanes (as below the floor, one
    select)."""
    shift = m.pick(*_ROUNDING_SHIFTS)
    z = m.fma(d, mathlib._R_LN2, shift)
    q = m.sub(z, shift)
    s = m.fma(q, -m.pick(*mathlib._L2U), d)
    s = m.fma(q, -m.pick(*mathlib._L2L), s)
    if m.double:
        u = m.fma(m.poly(s, mathlib._EXP[1]), s, 1.0)
    else:
        u = m.add(1.0, m.fma(m.mul(s, s), m.poly(s, mathlib._EXP[0]), s))
    return m.from_bits(m.iadd(m.bits(u), m.ishl(m.bits(z), m.mant)))


def _ceil(n, m):
    return -(-n // m) * m


def _value(n):
    """``n`` as an i64 value (an int made a constant)."""
    return I64(n) if isinstance(n, int) else n


class _Tile:
    """Emits one tile's loops. D, the register blocks and the number of batch dims are the kernel's constants;
    L, S (and Sp, S rounded up to whole register blocks), the batch's sizes, the buffers' strides and the scale
    are i64 (the scale a float) values that `bind` loads from the kernel's last argument. A size or stride is
    an int or such a value wherever this class takes one."""

    def __init__(self, t, width, D, causal, ndim, masked=False, rows=_ROWS, row_strides=None):
        self.rows = rows  # a product's register block: rows by `_VECS` vectors
        self.t, self.w, self.D, self.causal, self.ndim = t, width, D, causal, ndim
        self.additive = masked  # the forward adds a mask buffer to the scaled scores
        self.vt = ir.VectorType(t, width)
        self.block = width * _VECS
        self.Dp = _ceil(D, self.block)
        # rows of whole register blocks are read where they lie; others are copied into padded rows
        self.direct = D % self.block == 0
        self.item = VECTOR_BYTES // width
        self._accs = None  # the stack slot of `_product`'s accumulators
        self._keep = None  # the loop metadata of `kept_loop`
        self.row_strides = row_strides  # per buffer, its rows' stride where the kernel has it as a constant
        # (`bind`'s values)
        self.L = self.S = self.last_row = self.Sp = self.scale = self.scales = self.batch = self.layouts = None

    def bind(self, b, params, buffers):
        """Loads the run-time sizes, strides and scale (`_params`' order) from ``params`` (an i64 pointer) for
        ``buffers`` buffers, in the entry block before anything else (the stack buffers' sizes derive from
        them there)."""
        values = [b.load(b.gep(params, [I64(n)])) for n in range(3 + self.ndim + buffers * (self.ndim + 1))]
        self.L, self.S = values[:2]
        self.last_row = (b.sub(self.L, I64(1)), b.sub(self.S, I64(1)))  # (`block_of`'s clamps, L's and S's)
        scale = b.bitcast(values[2], ir.DoubleType())
        self.scale = scale if self.item == 8 else b.fptrunc(scale, self.t)
        self.scales = self.broadcast(b, self.scale)
        self.batch = values[3:3 + self.ndim]
        rest = values[3 + self.ndim:]
        self.layouts = [rest[n:n + self.ndim + 1] for n in range(0, len(rest), self.ndim + 1)]
        for layout, stride in zip(self.layouts, self.row_strides or ()):
            if stride is not None:
                layout[-1] = stride
        self.Sp = b.mul(b.udiv(b.add(self.S, I64(self.block - 1)), I64(self.block)), I64(self.block))

    # small helpers ------------------------------------------------------------------------------------

    def const(self, x):
        return ir.Constant(self.t, x)

    def splat(self, x):
        """A vector constant of ``x`` in every lane."""
        return mathlib.splat(self.vt, float(x))

    def buffer(self, b, n):
        """A stack buffer of ``n`` (an i64 value, at least 1) elements, allocated in the entry block (once per
        call: the kernel's entry calls its body once), zeroed once per call: the copies write only the head
        dim's columns of padded rows, and stack garbage in the rest (NaN, subnormals) made the products over
        those lanes, which stores mask off, ten times slower."""
        with b.goto_entry_block():
            first = b.alloca(self.t, size=n)
            first.align = VECTOR_BYTES
            self.memcall(b, "memset", first, ir.IntType(8)(0), n)
        return first

    def memcall(self, b, which, dst, src, n):
        """LLVM's ``memcpy`` (``src`` a pointer) or ``memset`` (``src`` an i8) of ``n`` (an int or an i64
        value) elements at ``dst``."""
        i8p = ir.IntType(8).as_pointer()
        if which == "memcpy":
            src = b.bitcast(src, i8p)
        name = f"llvm.{which}.p0.{'p0.' if which == 'memcpy' else ''}i64"
        fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(
            ir.VoidType(), [i8p, src.type, I64, ir.IntType(1)]), name)
        b.call(fn, [b.bitcast(dst, i8p), src, self.times(b, n, self.item), ir.IntType(1)(0)])

    def slot(self, b, t):
        """A stack slot of type ``t``, allocated in the entry block (a loop must not grow the stack)."""
        with b.goto_entry_block():
            return b.alloca(t)

    def tile(self, b, t, args, k):
        """(buffer ``k``'s tile ``t``, its row stride): the tile's offset from its batch index."""
        strides = self.layouts[k]
        off, rest = I64(0), t
        for n, stride in zip(reversed(self.batch), reversed(strides[:-1])):
            off = b.add(off, self.times(b, b.urem(rest, n), stride))
            rest = b.udiv(rest, n)
        return b.gep(args[k], [off]), strides[-1]

    def at(self, b, base, *index):
        """``base[sum of index]`` (terms are i64 values or ints; the ints are summed here, not in the IR)."""
        off, const = None, 0
        for term in index:
            if isinstance(term, ir.Value):
                off = term if off is None else b.add(off, term)
            else:
                const += term
        if const:
            off = I64(const) if off is None else b.add(off, I64(const))
        return base if off is None else b.gep(base, [off])

    @staticmethod
    def times(b, v, n):
        """``v * n`` as an i64 value (each an int or an i64 value; the other factor itself where one is 1)."""
        if isinstance(v, int) and isinstance(n, int):
            return I64(v * n)
        if isinstance(n, int) and n == 1 or isinstance(v, int) and v == 1:
            return v if n == 1 else n
        return b.mul(_value(v), _value(n))

    def vload(self, b, p):
        return b.load(b.bitcast(p, self.vt.as_pointer()), align=self.item)

    def vstore(self, b, v, p):
        b.store(v, b.bitcast(p, self.vt.as_pointer()), align=self.item)

    def broadcast(self, b, x):
        """A vector of ``x`` in every lane (an element value or an i64)."""
        vt = self.vt if x.type == self.t else ir.VectorType(x.type, self.w)
        v = b.insert_element(mathlib.splat(vt, 0), x, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), self.w), [0] * self.w)  # (llvmlite checks a mask's lanes)
        return b.shuffle_vector(v, mathlib.splat(vt, 0), zeros)

    def copy(self, b, dst, ld_dst, src, ld_src, rows, cols, transpose=False):
        """``dst[r, c] = src[r, c]`` (``dst[c, r]`` with ``transpose``) for ``rows`` by ``cols``; rows are
        ``ld_dst`` and ``ld_src`` apart. Untransposed rows are one ``memcpy`` each (LLVM lowers one of a
        constant size to a few vector moves). Transposed, where ``cols`` (an int) is whole vectors, the rows'
        whole vectors go by square blocks in registers and the rest (a ragged S's last rows) element by
        element."""
        if not transpose:
            counted_loop(b, I64(0), _value(rows), I64(1), lambda b, r: self.memcall(
                b, "memcpy", self.at(b, dst, self.times(b, r, ld_dst)), self.at(b, src, self.times(b, r, ld_src)),
                cols), "cr")
            return

        first = I64(0)
        if cols % self.w == 0:
            first = b.mul(b.udiv(rows, I64(self.w)), I64(self.w))
            counted_loop(b, I64(0), first, I64(self.w), lambda b, r0: counted_loop(
                b, I64(0), I64(cols), I64(self.w), lambda b, c0: self.transpose_block(
                    b, self.at(b, dst, self.times(b, c0, ld_dst), r0), ld_dst,
                    self.at(b, src, self.times(b, r0, ld_src), c0), ld_src), "tc"), "tr")

        def row(b, r):
            def col(b, c):
                v = b.load(b.gep(src, [b.add(self.times(b, r, ld_src), c)]))
                b.store(v, b.gep(dst, [b.add(self.times(b, c, ld_dst), r)]))
            self.kept_loop(b, cols, col, "cc")
        self.kept_loop(b, rows, row, "cr", first)

    def transpose_block(self, b, dst, ld_dst, src, ld_src):
        """``dst[c, r] = src[r, c]`` for a square block of one vector's lanes (rows ``ld_src`` and ``ld_dst``
        apart): its rows loaded as vectors, transposed in registers, stored as vectors. Each of log2(w)
        rounds pairs row ``i`` with row ``i + w/2`` and interleaves their lower halves into row ``2i``, their
        upper halves into row ``2i + 1``: that rotates an element's (row, column) bits left by one, so
        log2(w) rounds swap them. The rounds are a loop over a stack array of the rows (LLVM unrolls it and
        keeps the rows in registers), so their shuffles are emitted once. A GPT tile's element-by-element
        transposing copy (64 x 32 float32: 2048 scalar loads and stores) was 11-17% of the warm forward's
        time and 8-13% of the backward's; the blocks took 4-9% off the whole kernels."""
        w = self.w
        rows = self.slot(b, ir.ArrayType(self.vt, w))
        row = [b.gep(rows, [I64(0), I64(i)]) for i in range(w)]
        for i in range(w):
            b.store(self.vload(b, self.at(b, src, self.times(b, i, ld_src))), row[i])
        i32 = ir.IntType(32)
        low = ir.Constant(ir.VectorType(i32, w), [j // 2 + (w if j % 2 else 0) for j in range(w)])
        high = ir.Constant(ir.VectorType(i32, w), [w // 2 + j // 2 + (w if j % 2 else 0) for j in range(w)])

        def round_(b, _):
            vecs = [b.load(p) for p in row]
            for i in range(w):
                b.store(b.shuffle_vector(vecs[i // 2], vecs[i // 2 + w // 2], high if i % 2 else low), row[i])
        counted_loop(b, I64(0), I64(w.bit_length() - 1), I64(1), round_, "tround")
        for i in range(w):
            self.vstore(b, b.load(row[i]), self.at(b, dst, self.times(b, i, ld_dst)))

    def kept_loop(self, b, n, body, name, lo=I64(0)):
        """``counted_loop`` from ``lo`` to ``n`` (an int or an i64 value), marked for LLVM to neither unroll nor
        vectorise: a transposing copy of a short tile was unrolled over its rows, each a copy of the vectorised
        loop over the row (with scatters), which made half the optimised code and compile time of a ragged
        shape's kernel. So too the softmax's passes and its gradient's over a row's vectors, of a run-time
        count since L and S are run-time values: LLVM unrolled each with a remainder loop, and GPT's kernels'
        optimisation took 0.22 s each, the two kernels' build 0.84 s against main's 0.5 (with the mark 0.12-0.15
        s, 0.53-0.59 s; warm tiles' time unchanged within the machine's noise)."""
        func = b.function
        first = len(func.basic_blocks)  # (the loop's header is the first block counted_loop appends)
        counted_loop(b, lo, _value(n), I64(1), body, name)
        latch = func.basic_blocks[first].instructions[0].incomings[-1][1]
        latch.terminator.set_metadata("llvm.loop", self.kept(b.module))

    def kept(self, module):
        """The loop metadata of a loop LLVM may neither unroll nor vectorise (made once per kernel)."""
        if self._keep is None:
            self._keep = module.add_metadata([])
            self._keep.operands = (self._keep,
                                   module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]),
                                   module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"),
                                                        ir.IntType(32)(1)]))
        return self._keep

    def next_tile(self, b, t, hi, args, shapes):
        """The next tile's inputs (their tile shapes ``shapes``, as `_shapes`) as (first row, row stride, rows,
        columns), for `prefetch_rows`; at the chunk's last tile (``hi`` its end) its own, already there."""
        nxt = b.add(t, I64(1))
        nxt = b.select(b.icmp_signed("<", nxt, hi), nxt, t)
        sizes = {"L": self.L, "S": self.S, "D": self.D}
        return [(*self.tile(b, nxt, args, k), sizes[rows], sizes[cols]) for k, (rows, cols) in enumerate(shapes)]

    def prefetch_rows(self, b, tiles, i, count):
        """Hints to bring rows ``i .. i + count`` (``count`` an int or an i64 value) of each of ``tiles``
        (`next_tile`'s; a tile's last row where it has fewer) into the cache while this tile computes. A GPT's
        heads lie a row of q, k and v apart, where no hardware prefetcher ran ahead of the tiles: in a training
        step, on data not in the cache, the kernels took 1.4-2x their warm time. The hints go out a row block
        at a time, from the first pass's row-block loop: all of them at the start of a tile (768 lines of a GPT
        tile's backward, from L2 or L3) held the core waiting for fill buffers, 19% of the warm backward's time.
        (Hints for the next tile's outputs as well gained nothing; the forward hints its own row block's,
        `prefetch_written`.)"""
        for base, ld, rows, cols in tiles:
            def row(b, r, base=base, ld=ld, rows=rows, cols=cols):
                r = b.add(i, r)
                r = b.select(b.icmp_signed("<", r, rows), r, b.sub(rows, I64(1)))
                self.each_line(b, cols, lambda b, off: prefetch(
                    b, self.at(b, base, self.times(b, r, ld), off), locality=2))
            self.kept_loop(b, count, row, "pf")

    def each_line(self, b, cols, body):
        """``body(b, off)`` for the offset of each vector of a row of ``cols`` elements (an int: one call each;
        an i64 value: a loop)."""
        if isinstance(cols, int):
            for off in range(0, cols, self.w):
                body(b, off)
        else:
            counted_loop(b, I64(0), cols, I64(self.w), body, "ln")

    def prefetch_written(self, b, base, ld, i, count, cols):
        """Hints to bring rows ``i .. i + count`` (``count`` an int) of an output tile (``cols`` wide, rows ``ld``
        apart) into L1 for writing, at the start of the row block whose epilogues write them. In a compiled GPT
        step the forward's weights and output are memory no kernel has touched since the step before, whose
        stores each waited on their lines: the step's forward calls took 1.4x their time made again at once on
        the same arrays (`benchmarks/attention_kernels.py --in-step`), and with these hints 0.90-0.93 of their
        time without them on gpt-4x128, 0.97-1.03 on gpt-6x384 (``--in-step --baseline``, interleaved, load 13);
        the warm kernels' time is unchanged. The backward's gradients gained nothing from the same hints."""
        def row(b, r):
            self.each_line(b, cols, lambda b, off: prefetch(
                b, self.at(b, base, self.times(b, b.add(i, r), ld), off), write=True))
        self.kept_loop(b, count, row, "pw")

    def prefetch_rest(self, b, tiles):
        """`prefetch_rows` for the rows of S-row tiles after the L that the row-block loop covered."""
        for base, ld, rows, cols in tiles:
            if rows is self.S:  # (none where S <= L: the loop runs no iteration)
                self.prefetch_rows(b, [(base, ld, rows, cols)], self.L, b.sub(self.S, self.L))

    def last_key(self, b, i_last):
        """The number of keys a row block whose last query is ``i_last`` reads (causal: the keys up to it)."""
        if not self.causal:
            return self.S
        n = b.add(i_last, I64(1))
        return b.select(b.icmp_signed("<", n, self.S), n, self.S)

    def _product(self, b, rows, a_row, a_ks, bm, b_ks, k0, k1, c0, epilogue, vecs=_VECS):
        """``acc[r][c] = sum over k in [k0, k1) of a_row(r)[k * a_ks] * bm[k * b_ks + c0 + c * w]`` for
        ``rows`` rows (``a_row(b, r)``: the address of row ``r``'s first element, ``r`` an int) and ``vecs``
        vectors from column ``c0``, then ``epilogue(b, r, col, acc)`` for each (``r``, ``col``: i64 values of
        its row and first column). The k loop carries the accumulators in registers; the epilogue is emitted
        once, in a loop over them through a stack slot (LLVM unrolls it and keeps them in registers), not once
        per accumulator."""
        starts = [a_row(b, r) for r in range(rows)]  # (before the loop: its rows' addresses are invariant)

        def operands(b, k):
            row = self.at(b, bm, self.times(b, k, b_ks), c0)
            cols = [self.vload(b, self.at(b, row, c * self.w)) for c in range(vecs)]
            step = self.times(b, k, a_ks)
            return [self.broadcast(b, b.load(self.at(b, start, step))) for start in starts], cols
        # (k0 < k1 always: a row block reads at least its first key, and every tile has a query)
        new, latch = fma_loop(b, k0, k1, self.splat(0.0), rows, vecs, operands)
        # kept as a loop: LLVM 15 tuning for an AMD Zen host unrolled a ragged tile's k loops whole (1 MB of
        # optimised IR for a 17 x 17 x 70 float64 backward, against 150 KB); its FMAs stay in the same order
        latch.set_metadata("llvm.loop", self.kept(b.module))
        if self._accs is None:  # (one slot per kernel: a _Tile emits one kernel)
            self._accs = self.slot(b, ir.ArrayType(self.vt, self.rows * _VECS))
        for r in range(rows):
            for c in range(vecs):
                b.store(new[r][c], b.gep(self._accs, [I64(0), I64(r * vecs + c)]))

        def each(b, n):
            col = b.add(c0, self.times(b, b.urem(n, I64(vecs)), self.w))
            epilogue(b, b.udiv(n, I64(vecs)), col, b.load(b.gep(self._accs, [I64(0), n])))
        counted_loop(b, I64(0), I64(rows * vecs), I64(1), each, "acc")

    def row_blocks(self, b, n, body):
        """``body(b, i)`` over blocks of `rows` rows from row ``i`` that cover ``n`` (an i64 value) rows. The
        last block's rows past ``n`` are its last row again (`clamped`): they compute that row's values again and
        store them where it does, so that one block serves every length; a second loop of one-row blocks for the
        rows after the last whole block made the kernels' IR a quarter longer and their compile a third
        slower."""
        counted_loop(b, I64(0), n, I64(self.rows), body, "rb")

    def block_of(self, b, i, n):
        """The rows of the row block from row ``i`` of ``n`` (L or S): ``row(b, r)`` is row ``i + r`` where it is
        below ``n``, else row ``n - 1`` (``r`` an int or an i64 value). The int rows' are computed here, once
        per block, not once per product that reads them."""
        last = self.last_row[n is self.S]

        def clamped(b, r):
            row = b.add(i, _value(r))
            return b.select(b.icmp_signed("<", row, n), row, last)
        rows = [clamped(b, r) for r in range(self.rows)]
        return lambda b, r: rows[r] if isinstance(r, int) else clamped(b, r)

    def column_blocks(self, b, ncols, body):
        """``body(b, c0, vecs)`` over blocks of ``vecs`` vectors from column ``c0`` that cover ``ncols`` (an
        i64 value) columns: of `_VECS` vectors, the last of one where the columns end in its first vector.
        A causal row block's scores end at its last query: blocks of 2 vectors computed 48 of a GPT tile's 64
        columns on average for 8-row blocks, where 40 cover them (16% of that product's FMAs)."""
        vecs = b.sdiv(b.add(ncols, I64(self.w - 1)), I64(self.w))
        step = self.w * _VECS
        end = self.times(b, b.sdiv(vecs, I64(_VECS)), step)
        counted_loop(b, I64(0), end, I64(step), lambda b, c0: body(b, c0, _VECS), "cb")
        with b.if_then(b.icmp_signed("<", end, self.times(b, vecs, self.w))):
            body(b, end, 1)

    def output_rows(self, b, a_row, a_ks, bm, b_ks, k0, k1, dst, ld_dst, dst_row):
        """A row block of ``dst`` (D wide, ``ld_dst`` apart; ``dst_row(b, r)``: the row that block row ``r``, an
        i64 value, writes) = the `_product` over all of D's column blocks."""
        def cols(b, c0):
            def store(b, r, col, acc):
                self.store_row_part(b, acc, self.at(b, dst, self.times(b, dst_row(b, r), ld_dst)), col)
            self._product(b, self.rows, a_row, a_ks, bm, b_ks, k0, k1, c0, store)
        counted_loop(b, I64(0), I64(self.Dp), I64(self.w * _VECS), cols, "ob")

    def store_row_part(self, b, acc, dst, col):
        """``dst[col + lane] = acc[lane]`` for the lanes before column D (one masked store, where a loop over
        the lanes was one more loop per accumulator for LLVM to optimise)."""
        p = b.bitcast(b.gep(dst, [col]), self.vt.as_pointer())
        if self.direct:  # (every block lies inside the row)
            b.store(acc, p, align=self.item)
            return
        mask = b.icmp_signed("<", self.lanes, self.broadcast(b, b.sub(I64(self.D), col)))
        name = f"llvm.masked.store.v{self.w}{'f32' if self.item == 4 else 'f64'}.p0"
        store = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(
            ir.VoidType(), [self.vt, self.vt.as_pointer(), ir.IntType(32), mask.type]), name)
        b.call(store, [acc, p, ir.IntType(32)(self.item), mask])

    def load_row_part(self, b, src, col):
        """``src[col + lane]`` for the lanes before column S, zeros after it (a masked load: the last column
        block of a ragged S reaches past the row)."""
        return self.load_part(b, b.gep(src, [col]), b.sub(self.S, col))

    def load_part(self, b, src, count):
        """``src[lane]`` for the lanes before ``count`` (an i64 value), zeros from it (a masked load)."""
        p = b.bitcast(src, self.vt.as_pointer())
        mask = b.icmp_signed("<", self.lanes, self.broadcast(b, count))
        name = f"llvm.masked.load.v{self.w}{'f32' if self.item == 4 else 'f64'}.p0"
        load = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(
            self.vt, [self.vt.as_pointer(), ir.IntType(32), mask.type, self.vt]), name)
        return b.call(load, [p, ir.IntType(32)(self.item), mask, self.splat(0.0)])

    def masked(self, b, v, i, c0):
        """Lanes of columns ``c0 .. c0 + w`` of row ``i`` after its last key (or past S) set to -inf."""
        j = b.add(self.broadcast(b, c0), self.lanes)
        limit = self.broadcast(b, self.last_key(b, i))
        return b.select(b.icmp_signed("<", j, limit), v, self.splat(float("-inf")))

    @property
    def lanes(self):
        """The vector of lane numbers 0 .. w - 1 (i64)."""
        return ir.Constant(ir.VectorType(ir.IntType(64), self.w), list(range(self.w)))

    @staticmethod
    def maxnum(b, x, y):
        return b.select(b.fcmp_ordered(">", y, x), y, x)

    def softmax_rows(self, b, rows):
        """Each ``(row, i)`` of ``rows`` (row ``i``'s scores, masked to -inf past its keys; the rows of one row
        block, in order) to its softmax weights, zeros after its keys up to the next whole register block (what
        the row block's product reads). Each pass is one loop over the vectors up to the last row's keys, whose
        body runs every row: a row's passes are a chain of dependent steps (its maximum, then its exponentials'
        sum, each ended by a tree over the lanes), and one row after another kept the core waiting on each; a
        loop per row and pass (of 1 to 4 vectors on a causal GPT tile) ended in a mispredicted branch each. An
        earlier row's vectors past its keys hold -inf (the scores' store masks them), whose weights are 0: the
        rows' arithmetic is that of one row at a time."""
        nvec = b.sdiv(b.add(self.last_key(b, rows[-1][1]), I64(self.w - 1)), I64(self.w))
        slots_m = [self.slot(b, self.vt) for _ in rows]
        for slot_m in slots_m:
            b.store(self.splat(float("-inf")), slot_m)

        def max_pass(b, c):
            for (row, _), slot_m in zip(rows, slots_m):
                b.store(self.maxnum(b, b.load(slot_m), self.vload(b, self.vector(b, row, c))), slot_m)
        self.kept_loop(b, nvec, max_pass, "mx")
        mvs, slots_s = [], [self.slot(b, self.vt) for _ in rows]
        for slot_m, slot_s in zip(slots_m, slots_s):
            m = by_halves(b, b.load(slot_m), self.maxnum)
            if self.additive:  # (a row whose every key is masked: exp(-inf - 0) = 0 each, then 0 / 1 below)
                m = b.select(b.fcmp_ordered("==", m, self.const(float("-inf"))), self.const(0.0), m)
            mvs.append(self.broadcast(b, m))
            b.store(self.splat(0.0), slot_s)

        floor = self.splat(_EXP_FLOOR[self.item == 8])

        def exp_pass(b, c):
            for (row, _), mv, slot_s in zip(rows, mvs, slots_s):
                p = self.vector(b, row, c)
                d = b.fsub(self.vload(b, p), mv)
                # lanes below the floor (a causal row's -inf past its keys, in most last vectors) are made 0 and
                # their exp of 0 dropped: `_exp_nonpositive` holds only above it; NaN lanes keep their NaN (its
                # exponent-field add turns a NaN whose payload has low bits set into a number)
                x = b.select(b.fcmp_ordered("<", d, floor), self.splat(0.0), d)
                e = b.call(self.exp_function(b.module), [x])
                e = b.select(b.fcmp_ordered(">=", d, floor), e, x)
                self.vstore(b, e, p)
                b.store(b.fadd(b.load(slot_s), e), slot_s)
        self.kept_loop(b, nvec, exp_pass, "ex")
        tvs = []
        for slot_s in slots_s:
            total = by_halves(b, b.load(slot_s), lambda b, x, y: b.fadd(x, y))
            if self.additive:  # (rows with every key masked give zeros, as the composition's safe softmax)
                total = b.select(b.fcmp_ordered("==", total, self.const(0.0)), self.const(1.0), total)
            # (one division a row and a product per weight, where a vector division per vector was 3% of a
            # GPT tile's forward; the weights lie within an ulp or two of the quotients)
            tvs.append(self.broadcast(b, b.fdiv(self.const(1.0), total)))

        def divide(b, c):  # (masked lanes inside the last vector are exp(-inf) = 0)
            for (row, _), tv in zip(rows, tvs):
                self.vstore(b, b.fmul(self.kept_vector(b, row, c, nvec), tv), self.vector(b, row, c))
        self.kept_loop(b, b.udiv(self.Sp, I64(self.w)), divide, "dv")

    # the kernels ---------------------------------------------------------------------------------------

    def forward(self, b, lo, hi, args):
        L, S, D, Sp, R = self.L, self.S, self.D, self.Sp, self.rows
        kt = self.buffer(b, self.times(b, D, Sp))
        # a row block's scores, then weights: in P's rows where those hold whole register blocks (no copy), else
        # in a buffer of whole blocks, copied to P's rows after the softmax; so too in a block with rows past L
        # (the softmax works in place, and those rows are the last row again)
        ragged = b.icmp_unsigned("!=", S, Sp)
        srow = self.buffer(b, self.times(b, R, Sp))
        vp = None if self.direct else self.buffer(b, self.times(b, S, self.Dp))

        def tile(b, t):
            nxt = self.next_tile(b, t, hi, args, _shapes("forward", self.additive)[:len(args) - 2])
            bufs = [self.tile(b, t, args, n) for n in range(len(args))]
            (qt, q_ld), (kk, k_ld), (vv, v_ld), (ot, o_ld), (pt, p_ld) = bufs[:3] + bufs[-2:]
            mt, m_ld = bufs[3] if self.additive else (None, 0)
            self.copy(b, kt, Sp, kk, k_ld, S, D, transpose=True)
            if vp is not None:
                self.copy(b, vp, self.Dp, vv, v_ld, S, D)
            v_rows, v_rs = (vv, v_ld) if vp is None else (vp, self.Dp)

            def block(b, i):
                query = self.block_of(b, i, L)
                local = b.or_(ragged, b.icmp_signed(">", b.add(i, I64(R)), L))
                # (a row's scores: the buffer's row r, or P's row i + r, which no clamp moves in a block without
                # rows past L)
                first = b.select(local, srow, self.at(b, pt, self.times(b, i, p_ld)))
                s_ld = b.select(local, Sp, _value(p_ld))
                s_row = lambda b, r: self.at(b, first, self.times(b, r, s_ld))  # noqa: E731
                self.prefetch_rows(b, nxt, i, R)
                self.prefetch_written(b, pt, p_ld, i, R, S)
                self.prefetch_written(b, ot, o_ld, i, R, D)
                n = self.last_key(b, query(b, R - 1))

                def scores(b, c0, vecs):
                    def store(b, r, col, acc):
                        s = b.fmul(acc, self.scales)
                        if mt is not None:  # (the composition's order: scaled, then the mask added)
                            s = b.fadd(s, self.load_row_part(b, self.at(b, mt, self.times(b, query(b, r), m_ld)), col))
                        s = self.masked(b, s, query(b, r), col)
                        self.vstore(b, s, self.at(b, s_row(b, r), col))
                    self._product(b, R, lambda b, r: self.at(b, qt, self.times(b, query(b, r), q_ld)), 1, kt, Sp,
                                  I64(0), I64(D), c0, store, vecs)
                self.column_blocks(b, n, scores)
                # (the passes interleaved over `_ROWS` rows at a time, in a loop: over 8 they doubled the IR)
                group = min(R, _ROWS)
                counted_loop(b, I64(0), I64(R), I64(group), lambda b, r0: self.softmax_rows(b, [
                    (s_row(b, b.add(r0, I64(r))), query(b, b.add(r0, I64(r)))) for r in range(group)]), "sm")
                with b.if_then(local):
                    counted_loop(b, I64(0), I64(R), I64(1), lambda b, r: self.memcall(
                        b, "memcpy", self.at(b, pt, self.times(b, query(b, r), p_ld)),
                        self.at(b, srow, self.times(b, r, Sp)), S), "cp")
                self.output_rows(b, s_row, 1, v_rows, v_rs, I64(0), n, ot, o_ld, query)
            self.row_blocks(b, L, block)
            self.prefetch_rest(b, nxt)
        counted_loop(b, lo, hi, I64(1), tile, "tile")

    def backward(self, b, lo, hi, args):
        L, S, D, Sp, R = self.L, self.S, self.D, self.Sp, self.rows
        vt, ds = self.buffer(b, self.times(b, D, Sp)), self.buffer(b, self.times(b, L, Sp))
        pads = None if self.direct else [self.buffer(b, self.times(b, n, self.Dp)) for n in (S, L, L)]

        def tile(b, t):
            nxt = self.next_tile(b, t, hi, args, _shapes("backward", False)[:5])
            (qt, q_ld), (kk, k_ld), (vv, v_ld), (pt, p_ld), (gt, g_ld), (gqt, gq_ld), (gkt, gk_ld), (gvt, gv_ld) = (
                self.tile(b, t, args, n) for n in range(8))
            self.copy(b, vt, Sp, vv, v_ld, S, D, transpose=True)
            if pads is None:
                (kp, kp_ld), (qp, qp_ld), (gop, gop_ld) = (kk, k_ld), (qt, q_ld), (gt, g_ld)
            else:
                for buf, src, ld, n in zip(pads, (kk, qt, gt), (k_ld, q_ld, g_ld), (S, L, L)):
                    self.copy(b, buf, self.Dp, src, ld, n, D)
                (kp, kp_ld), (qp, qp_ld), (gop, gop_ld) = ((buf, self.Dp) for buf in pads)

            # dP = grad_out V^T into ds, then ds = P (dP - sum(P dP)) * scale, row by row
            def block(b, i):
                query = self.block_of(b, i, L)
                self.prefetch_rows(b, nxt, i, R)
                n = self.last_key(b, query(b, R - 1))

                def dp(b, c0, vecs):
                    def store(b, r, col, acc):
                        self.vstore(b, acc, self.at(b, ds, self.times(b, query(b, r), Sp), col))
                    self._product(b, R, lambda b, r: self.at(b, gt, self.times(b, query(b, r), g_ld)), 1, vt, Sp,
                                  I64(0), I64(D), c0, store, vecs)
                self.column_blocks(b, n, dp)

                def grads(b, r):
                    row = b.add(i, r)
                    self.softmax_grad_row(b, self.at(b, ds, self.times(b, row, Sp)),
                                          self.at(b, pt, self.times(b, row, p_ld)), row)
                # (each row once: the transform is in place, and a block's rows past L repeat its last row)
                last = b.sub(L, i)
                counted_loop(b, I64(0), b.select(b.icmp_signed("<", last, I64(R)), last, I64(R)), I64(1), grads, "sg")
            self.row_blocks(b, L, block)
            self.prefetch_rest(b, nxt)

            # grad_q = ds K, over each row block's keys
            def q_block(b, i):
                query = self.block_of(b, i, L)
                self.output_rows(b, lambda b, r: self.at(b, ds, self.times(b, query(b, r), Sp)), 1, kp, kp_ld, I64(0),
                                 self.last_key(b, query(b, R - 1)), gqt, gq_ld, query)
            self.row_blocks(b, L, q_block)

            # grad_k = ds^T Q and grad_v = P^T grad_out, over the queries at or after each key
            def kv_block(b, j):
                key = self.block_of(b, j, S)
                first = j if self.causal else I64(0)
                first = b.select(b.icmp_signed("<", first, L), first, self.last_row[0])
                ds_col, p_col = (lambda b, r, base=base: self.at(b, base, key(b, r)) for base in (ds, pt))
                self.output_rows(b, ds_col, Sp, qp, qp_ld, first, L, gkt, gk_ld, key)
                self.output_rows(b, p_col, p_ld, gop, gop_ld, first, L, gvt, gv_ld, key)
            self.row_blocks(b, S, kv_block)
        counted_loop(b, lo, hi, I64(1), tile, "tile")

    def softmax_grad_row(self, b, row, prow, i):
        """``row`` (dP, Sp long) to ``P (dP - sum(P dP)) * scale`` over the row's keys, zeros after them
        (``prow``: the row of P, zeros after its keys). The lanes after the row's keys hold P = 0 and dP of the
        row block's product. Where S is no whole number of vectors, P's row is read with masked loads up to its
        keys (a whole vector would read past the row); where it is, with plain loads (a branch per row, which
        the row's loops do not pay)."""
        n = self.last_key(b, i)
        nvec = b.sdiv(b.add(n, I64(self.w - 1)), I64(self.w))
        with b.if_else(b.icmp_unsigned("==", b.urem(self.S, I64(self.w)), I64(0))) as (whole, ragged):
            with whole:
                self.softmax_grad_vectors(b, row, prow, nvec, lambda b, c: self.kept_vector(b, prow, c, nvec))
            with ragged:
                self.softmax_grad_vectors(b, row, prow, nvec, lambda b, c: self.load_part(
                    b, self.vector(b, prow, b.select(b.icmp_signed("<", c, nvec), c, I64(0))),
                    b.sub(n, self.times(b, c, self.w))))

    def softmax_grad_vectors(self, b, row, prow, nvec, p_vector):
        """`softmax_grad_row`'s loops, ``p_vector(b, c)`` vector ``c`` of P's row (zeros from vector ``nvec``)."""
        slot = self.slot(b, self.vt)
        b.store(self.splat(0.0), slot)
        self.kept_loop(b, nvec, lambda b, c: b.store(b.fadd(b.load(slot), b.fmul(
            p_vector(b, c), self.vload(b, self.vector(b, row, c)))), slot), "dl")
        delta = self.broadcast(b, by_halves(b, b.load(slot), lambda b, x, y: b.fadd(x, y)))

        def each(b, c):  # (P's row is S long: its vectors past the keys are not read)
            g = b.fmul(p_vector(b, c), b.fsub(self.kept_vector(b, row, c, nvec), delta))
            g = b.fmul(g, self.scales)
            self.vstore(b, b.select(b.icmp_signed("<", c, nvec), g, self.splat(0.0)), self.vector(b, row, c))
        self.kept_loop(b, b.udiv(self.Sp, I64(self.w)), each, "sg")

    def exp_function(self, module):
        """`_exp_nonpositive` of a vector as an internal always-inline function of ``module``, defined once: the
        softmax's passes call it for each of a group's rows, and its body inline at each call made the IR a
        third longer."""
        name = f"jitorch.attention.exp.v{self.w}{'f64' if self.item == 8 else 'f32'}"
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(self.vt, [self.vt]), name)
            fn.linkage = "internal"
            fn.attributes.add("alwaysinline")
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            b.ret(mathlib.run(b, _exp_nonpositive, fn.args[0]))
        return fn

    def kept_vector(self, b, base, c, nvec):
        """Vector ``c`` of the row at ``base`` where ``c`` is below ``nvec``, zeros after (read from the row's
        first vector, so that no read passes the row's end). A row's vectors after its keys are made zero in
        the loop that computes the others: a loop of their own (of a varying count) became a ``memset`` call,
        one per row, which saved and restored every vector register around it."""
        keep = b.icmp_signed("<", c, nvec)
        return b.select(keep, self.vload(b, self.vector(b, base, b.select(keep, c, I64(0)))), self.splat(0.0))

    def vector(self, b, base, c):
        """The address of vector ``c`` of the row at ``base``."""
        return self.at(b, base, self.times(b, c, self.w))


attention.ATTENTION_KERNEL = attention_kernel
