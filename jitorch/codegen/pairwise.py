"""NumPy's pairwise sums of blocks of `summation.BLOCK` elements, on the thread team (`runtime.summation`'s eager
float sums: ``sum``, ``mean``, ``nansum``, ``var``, ``norm``... of more than a block along memory).

`summation.add_reduce` defines a long float sum as NumPy's sum of each block of 8192 elements, the blocks' sums
then added in order. NumPy computes each block on the calling thread, at ~23 GB/s on this project's machine
(a 16M float32 sum 2.9 ms, torch's on two threads 1.2-1.7). This kernel computes the same block sums, bit for
bit, each block on one thread, split across the team as the compiled kernels are (`cpu.run_split`); the blocks'
sums are then added in order as before, so the result does not depend on the thread count.

NumPy's sum of a contiguous run of ``n`` elements (``pairwise_sum`` in numpy/_core/src/umath/loops_utils.h.src,
1.x and 2.x alike) is ``0.0 + pw(n)``: ``pw`` of at most 128 elements keeps eight accumulators ``r[l]``, the
first eight elements, each adding every eighth element after it in order, then returns
``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``; of more, ``pw`` of the first half (rounded down to a
multiple of eight) plus ``pw`` of the rest. For a block of 8192 that is a balanced tree of 64 leaves of 128:
here a loop over the leaves, each leaf's accumulators one 8-lane vector (lane by lane the scalar additions, so
the bits do not depend on how LLVM maps them to registers), the leaves' sums then added as that tree; no
fast-math flag anywhere. The ``0.0 +`` makes a sum of negative zeros a positive zero, as NumPy's (its reduction
starts from the identity). One leaf at a time, the loads walk memory in order: eight leaves interleaved (eight
independent chains of additions, 512 bytes apart) took 8.9 ms for 16M float32 against 3.05 (the hardware
prefetchers did not follow them; prefetch instructions 4-8 KB ahead: 6.7-7.1 ms), NumPy 3.7 (one thread, thread
CPU time, loaded machine). One at a time: float32 2.44 ms against NumPy's 2.97, float64 5.60 against 5.66.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ..runtime import summation
from . import cpu
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource
from .loops import counted_loop
from .memo import BuiltOnce
from .target import CPU

LANES = 8  # NumPy's accumulators
LEAF = 128  # NumPy's PW_BLOCKSIZE
_ARGS = ctypes.c_void_p * 2
_TYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType()}


def _tree(b, values):
    """``((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))``: adjacent pairs first, as NumPy's pairwise sum."""
    while len(values) > 1:
        values = [b.fadd(values[i], values[i + 1]) for i in range(0, len(values), 2)]
    return values[0]


def _module(dtype, squares, name):
    """The LLVM IR of ``name(args, lo, hi)``: ``args[0]`` points to blocks of `summation.BLOCK` elements of
    ``dtype``, ``args[1]`` to one result per block; blocks [lo, hi) are summed (module docstring), with
    ``squares`` each element's magnitude squared first: ``np.square(np.abs(x))`` is ``|x * x|`` (one rounded
    product; the fabs clears a NaN's sign bit as NumPy's abs does: LLVM drops the fabs of ``|x| * |x|``, and
    ``-nan * -nan`` is ``-nan`` on x86)."""
    t = _TYPES[dtype]
    vec = ir.VectorType(t, LANES)
    block = summation.BLOCK
    leaves = block // LEAF
    module = ir.Module(name=name)
    module.triple = CPU.triple
    p = t.as_pointer()
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, p, p]), name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    lo, hi, x, out = body.args
    for arg in (x, out):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    sums = b.alloca(t, leaves)
    fabs = ir.Function(module, ir.FunctionType(vec, [vec]), f"llvm.fabs.v{LANES}{t.intrinsic_name}") \
        if squares else None
    align = np.dtype(dtype).itemsize  # (a block starts anywhere in its array: element-aligned loads)

    def leaf(b, first, j):
        start = b.add(first, b.mul(j, I64(LEAF)))
        acc = None
        for k in range(0, LEAF, LANES):
            v = b.load(b.bitcast(b.gep(x, [b.add(start, I64(k))]), vec.as_pointer()), align=align)
            if squares:
                v = b.call(fabs, [b.fmul(v, v)])
            acc = v if acc is None else b.fadd(acc, v)
        b.store(_tree(b, [b.extract_element(acc, ir.Constant(ir.IntType(32), lane)) for lane in range(LANES)]),
                b.gep(sums, [j]))

    def one_block(b, i):
        first = b.mul(i, I64(block))
        counted_loop(b, I64(0), I64(leaves), I64(1), lambda b, j: leaf(b, first, j), "leaf")
        total = _tree(b, [b.load(b.gep(sums, [I64(j)])) for j in range(leaves)])
        b.store(b.fadd(ir.Constant(t, 0.0), total), b.gep(out, [i]))

    counted_loop(b, lo, hi, I64(1), one_block, "block")
    b.ret_void()
    CPU.add_entry(module, body, [0, 1], 0, "thread")
    return str(module)


class BlockSums:
    """The compiled block sums of one float dtype: `__call__` sums each row of a C-contiguous (rows,
    `summation.BLOCK`) array of that dtype, on the team, into a new 1-D array."""

    def __init__(self, compiled):
        self._compiled = compiled  # keeps the machine code alive

    def __call__(self, blocks):
        rows = blocks.shape[0]
        out = np.empty(rows, blocks.dtype)
        compiled = self._compiled
        args = _ARGS(cpu.address(blocks), cpu.address(out))
        cpu.run_split(compiled.fn, compiled.address, args, rows, blocks.size)
        return out


def _build(dtype, squares):
    name = f"jitorch_block_sums_{dtype}{'_squares' * squares}"
    source = KernelSource(name, "block_sums", ["sum"], [0], [1], 0, 0)
    source.llvm_ir = _module(dtype, squares, name)
    try:
        return BlockSums(cpu.link_kernel(source, default_cache()))
    except CompileError:
        return None


# (dtype name, squares) -> BlockSums, or None: not buildable
_kernels = BuiltOnce(_build)


def block_sums(blocks, squares=False):
    """The NumPy sum of each row of ``blocks`` (a C-contiguous float32 or float64 array of rows of
    `summation.BLOCK`), bit for bit, computed on the thread team; with ``squares``, of the squares of the
    elements' magnitudes (``np.add.reduce(np.square(np.abs(blocks)), axis=-1)``). None where the kernel cannot
    be built (the caller runs NumPy)."""
    kernel = _kernels(blocks.dtype.name, bool(squares))
    return None if kernel is None else kernel(blocks)
