"""The kernel builder: a fused group of graph nodes becomes one LLVM function.

Every buffer a kernel touches is dense from offset 0, and compact (C-contiguous)
unless ``layouts`` gives its strides (an input laid out so, a result eager lays
out so), so index maths is static: each input is read through an affine map from
the iteration index (its strides, broadcast dims at stride 0, folded view ops
composed in), and each output is written through its strides. A pointwise
kernel loops in its first output's memory order. Adjacent dims that every access
steps through contiguously are merged, so the common case is one flat loop.

A pointwise kernel loops over its output's shape. A reduction kernel loops
over the kept dims outside and the reduced dims inside, accumulating the
pointwise prologue, then computes its epilogue at the kept index and its row
epilogue in a second pass over the reduced dims, which also writes the input
side's outputs (`fusion.reduction_sides`), so that each reduction's loop is the
one it has without them (a chunk's loop, below, writes them as it reduces). Several reductions over one space (`reductions_of`)
share the kernel: each row is reduced by each in turn, the loop each has alone,
and where the input's innermost dim is kept one loop folds every element into
each reduction's accumulators. Where the
input's innermost dim is kept, it reduces a chunk of kept elements at a time
with the reduced dims outside, so its inner loop runs along memory. On the CPU a
run of reduced elements is read by `streamed_run` (a long one in several
streams, each with its own accumulator), and a float max or min there folds
with a vector max and checks for NaN apart (`float_extremum`).

The generated function is ``kernel(i64 start, i64 end, T* noalias ...)``
over the outermost loop, so a target can split that loop into chunks; an
``entry(i8** buffers, i64 start, i64 end)`` wrapper unpacks the buffers for
one cheap call from Python.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import re
import time
import weakref
from dataclasses import dataclass, field, replace
from typing import NamedTuple
from math import prod
from pathlib import Path

import numpy as np
from llvmlite import ir

from ..ir import lowerable
from ..ir.fake import fake_args, fake_tensor
from ..ir.graph import TensorType, Value, iter_values
from ..ir.passes.fusion import Group, dependent_reductions, reduction_sides, row_reduction, same_reduction
from ..ops import registry
from ..ops.pointwise_base import reads_unrounded, rounding_dtype
from ..runtime import dtypes as _dt
from ..runtime.casts import convert
from ..runtime.device import device as _device
from ..runtime.strided import contiguous_strides, is_non_overlapping_and_dense, view_strides
from . import lowering
from .errors import CompileError
from .emitter import I64, Emitter, Scalar, llvm_type
from .lanes import lanes, ordered_sum, plain_loop
from .loops import counted_loop, loop_metadata
from .target import CPU, vector_bits
from .machine import selected
from ..runtime.forks import module_lock


def kernel_body(name, t, buffers):
    """(module, body, builder) of a kernel written with the IR builder: a module for the CPU target named
    ``name``, its body ``void (i64 start, i64 end, t* buffer...)`` for ``buffers`` buffers, internal and
    inlined into the entry `CpuTarget.add_entry` makes, the last buffer (the output) ``noalias``, and a
    builder at the body's start."""
    module = ir.Module(name=name)
    module.triple = CPU.triple
    ptr = t.as_pointer()
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] + [ptr] * buffers), name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    body.args[-1].add_attribute("noalias")
    return module, body, ir.IRBuilder(body.append_basic_block("entry"))


def prefetch(b, p, write=False, locality=3):
    """A hint to bring the cache line at ``p`` (any pointer) into the cache, for a write with ``write``;
    ``locality`` 0-3 as LLVM's (3: keep it in every level). It changes no value and never faults."""
    i8p = ir.IntType(8).as_pointer()
    fn = b.module.globals.get("llvm.prefetch.p0") or ir.Function(b.module, ir.FunctionType(
        ir.VoidType(), [i8p, ir.IntType(32), ir.IntType(32), ir.IntType(32)]), "llvm.prefetch.p0")
    b.call(fn, [b.bitcast(p, i8p), ir.IntType(32)(int(write)), ir.IntType(32)(locality), ir.IntType(32)(1)])


def fma_loop(b, lo, hi, zero, rows, vecs, operands, contract=True):
    """The register block of a product: ``acc[r][c] = sum over k in [lo, hi), in order, of s[r] * v[c]``,
    one FMA each where the target has FMA (``contract``; else a product and a sum, each rounded), where
    ``operands(b, k)`` gives k's ``rows`` scalars (broadcast to vectors) and ``vecs`` vectors; the
    accumulators start at ``zero`` and stay in registers (phis). The loop body runs at least once
    (``lo < hi``). Returns (the accumulators' final values, by row, then vector; the loop's latch, for
    loop metadata); the builder is left after the loop."""
    head = b.block
    loop = b.function.append_basic_block("k")
    done = b.function.append_basic_block("k.end")
    b.branch(loop)
    b.position_at_end(loop)
    k = b.phi(I64)
    k.add_incoming(lo, head)
    accs = [[b.phi(zero.type) for _ in range(vecs)] for _ in range(rows)]
    for row in accs:
        for acc in row:
            acc.add_incoming(zero, head)
    scalars, cols = operands(b, k)
    flags = ("contract",) if contract else ()
    new = [[b.fadd(b.fmul(s, col, flags=flags), acc, flags=flags) for col, acc in zip(cols, row)]
           for s, row in zip(scalars, accs)]
    k_next = b.add(k, I64(1))
    for row, values in zip(accs, new):
        for acc, value in zip(row, values):
            acc.add_incoming(value, b.block)
    k.add_incoming(k_next, b.block)
    latch = b.cbranch(b.icmp_signed("<", k_next, hi), loop, done)
    b.position_at_end(done)
    return new, latch


class Split(NamedTuple):
    """A full reduction computed in ``parts`` partial results, which the caller combines (on the CPU,
    `split_combine`'s kernel, in the generated call's next line): ``reduction``'s name, the ``count`` of
    elements reduced (a mean divides by it), the partials' ``dtype``."""

    parts: int
    reduction: str
    count: int
    dtype: object


@dataclass
class KernelSource:
    """What the builder made of a group: its LLVM IR and how to call it."""

    name: str
    kind: str
    ops: list
    inputs: list            # Values read, in buffer order
    outputs: list           # Values written, after the inputs
    outer: int              # trip count of the outermost loop (what a target splits)
    work: int               # elements of work, for the threading decision
    llvm_ir: str = ""
    split: Split = None     # a full reduction in parts; see build_reduction
    mode: str = "thread"    # "thread": outer iterations are independent; "block": each one is a reduction
    layouts: dict = field(default_factory=dict)  # buffer Value -> its strides, where not compact


def _broadcast_strides(strides, shape, space):
    """``strides`` of a tensor of ``shape`` seen over the iteration ``space`` (right-aligned)."""
    out = [0] * len(space)
    off = len(space) - len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        if n != 1:
            out[off + i] = s
    return out


def _collapse(space, accesses):
    """Merge adjacent dims every access steps through contiguously; drop size-1 dims.
    Returns (new space, new stride lists)."""
    dims = [d for d, n in enumerate(space) if n != 1]
    groups = []
    for d in dims:
        if groups:
            last = groups[-1][-1]
            if all(a[last] == a[d] * space[d] for a in accesses):
                groups[-1].append(d)
                continue
        groups.append([d])
    new_space = [prod(space[d] for d in g) for g in groups]
    new_accesses = [[a[g[-1]] for g in groups] for a in accesses]
    return new_space, new_accesses


# Side of the square tiles in which a CPU kernel that transposes (writes along one dim, reads along another)
# walks both dims, so that the lines it reads are used whole while in cache.
TILE = 16
# A read this many elements apart along the written dim is a transpose's (its lines are not reused).
TILE_MIN_STRIDE = 64


def _tiled(sizes, accesses, written):
    """(sizes, accesses) of a loop nest whose innermost dim is contiguous in ``accesses[written]`` but far
    apart in a read that is contiguous along an outer dim: both dims cut in `TILE`-sized tiles, the tile
    loops outside and the two in-tile loops innermost. The same index maths, another order; unchanged where
    no read transposes or the dims do not divide into tiles."""
    last = len(sizes) - 1
    if last < 1 or accesses[written][last] != 1 or sizes[last] % TILE:
        return sizes, accesses
    for a, access in enumerate(accesses):
        if a == written or abs(access[last]) < TILE_MIN_STRIDE:
            continue
        across = next((d for d in range(last) if access[d] == 1 and sizes[d] % TILE == 0), None)
        if across is None:
            continue
        outer = list(range(last + 1))

        def cut(seq, step):
            return [seq[d] * (step if d in (across, last) else 1) for d in outer] + [seq[across], seq[last]]
        new_sizes = [sizes[d] // TILE if d in (across, last) else sizes[d] for d in outer] + [TILE, TILE]
        return new_sizes, [cut(acc, TILE) for acc in accesses]
    return sizes, accesses


def _transposed_rows(b, rows):
    """The ``n x n`` block whose rows are the ``n``-lane vectors ``rows`` (``n`` a power of two), transposed:
    its columns as vectors. Each of log2(n) rounds pairs row ``i`` with row ``i + n/2`` and interleaves their
    lower halves into row ``2i``, their upper halves into row ``2i + 1``, which rotates an element's (row,
    column) bits left by one: log2(n) rounds swap them. Shuffles only: every element keeps its bits."""
    n = len(rows)
    i32 = ir.IntType(32)
    low = ir.Constant(ir.VectorType(i32, n), [j // 2 + (n if j % 2 else 0) for j in range(n)])
    high = ir.Constant(ir.VectorType(i32, n), [n // 2 + j // 2 + (n if j % 2 else 0) for j in range(n)])
    for _ in range(n.bit_length() - 1):
        rows = [b.shuffle_vector(rows[i // 2], rows[i // 2 + n // 2], high if i % 2 else low) for i in range(n)]
    return rows


def staged_tiles(bld, b, e, sizes, writes, compute, start=None, end=None):
    """The loop nest of a kernel that `_tiled` cut (``sizes``: the outer loops, then the two `TILE` loops, the
    transposing read's unit-stride dim and the written one), each tile computed into stack buffers and then
    stored transposed in registers. ``compute(b, indices)`` gives the Scalars to write at ``indices`` (one per
    ``writes``: (pointer, strides over ``sizes``), unit stride along the last dim).

    With the written dim innermost LLVM vectorised the tile's loop across the other one, contiguous in the
    transposing read, and stored each vector with scatters: an NCHW copy of cnn's (16, 24, 24, 64)
    convolution output (the batch innermost) took 2.1 ms, 14 cycles an element, on the Zen 4 host. Here the
    tile's elements are computed in the read's order into a buffer per output (contiguous loads and stores,
    which vectorise), whose rows are then transposed by shuffles and stored as whole rows of the output.
    Each element is the same expression at the same indices as before: no result changes."""
    tile = sizes[-1]
    # The loop across the written dim is neither vectorised nor unrolled (vectorised, its stores were
    # scatters), nor is the loop along the read unrolled (fully unrolled first, its elements stayed scalar:
    # 0.5 ms for that copy; kept, LLVM vectorises it: 0.24 ms).
    kept = loop_metadata(b.module, ("llvm.loop.unroll.disable",), ("llvm.loop.vectorize.width", 1))
    along = loop_metadata(b.module, ("llvm.loop.unroll.disable",))
    with b.goto_entry_block():
        bufs = [b.alloca(ir.ArrayType(ptr.type.pointee, tile * tile)) for ptr, _ in writes]

    def one_tile(b, outer):
        def column(b, j):
            def element(b, i):
                at = b.add(b.mul(j, I64(tile)), i)
                for buf, s in zip(bufs, compute(b, outer + [i, j])):
                    e.store(s, b.gep(buf, [I64(0), at]))
            counted_loop(b, I64(0), I64(tile), I64(1), element, "ti").set_metadata("llvm.loop", along)
        counted_loop(b, I64(0), I64(tile), I64(1), column, "tj").set_metadata("llvm.loop", kept)
        for (ptr, strides), buf in zip(writes, bufs):
            vt = ir.VectorType(ptr.type.pointee, tile)
            rows = [b.load(b.bitcast(b.gep(buf, [I64(0), I64(j * tile)]), vt.as_pointer()), align=1)
                    for j in range(tile)]
            for i, row in enumerate(_transposed_rows(b, rows)):
                at = b.gep(ptr, [bld.offset(b, outer + [I64(i), I64(0)], strides, 0)])
                b.store(row, b.bitcast(at, vt.as_pointer()), align=1)
    bld.loops(b, sizes[:-2], one_tile, start, end)


def _stages(bld, sizes, tiled, strides, in_place=()):
    """Whether a CPU kernel whose loop nest `_tiled` cut (``tiled``, from ``sizes``) runs as `staged_tiles`:
    every output written with unit stride along the last dim, and each output written in place of an input
    (``bld.aliases``) read only where it is written: ``in_place`` holds (the strides and offset of each read
    of such an input, the output's strides), and a tile's reads all come before its writes, which is safe
    only where no element of the tile is read after another one is written over."""
    return (bld.target is CPU and len(tiled) != len(sizes) and all(s[-1] == 1 for s in strides)
            and all(read == (out, 0) for read, out in in_place))


# Views whose result, where they cannot be a view, is their input's elements copied in row-major order.
RESHAPES = frozenset({"view", "unflatten"})


def composes(node, shape, strides, offset):
    """Whether view ``node`` may compose with its input's geometry (``shape``, ``strides``, ``offset`` over a
    root buffer): ``as_strided`` of a graph value addresses the value's elements in row-major order (the IR's
    compact layout), which are its root's only when the geometry is compact."""
    return node.op.name != "as_strided" or (tuple(strides) == contiguous_strides(tuple(shape)) and offset == 0)


def strided_as_strided(shape, strides, offset, size, stride, storage_offset=None):
    """The geometry (sizes, strides, offset over the root) of ``as_strided(size, stride, storage_offset)``
    of a value of ``shape`` laid out with ``strides`` and ``offset`` (a permuted one: a convolution's
    windows of a channels-last value), or None where it is not affine. as_strided addresses the value's
    elements in row-major order; where each of its strides is a whole number of steps along one of the
    value's dims and no window reaches past the end of a dim (no carry into the next), each of its dims
    steps along that one dim, which the root's strides give."""
    if storage_offset is None:
        storage_offset = 0
    compact = contiguous_strides(tuple(shape))
    dims = [k for k, n in enumerate(shape) if n > 1]
    start, rest = [], storage_offset
    for c in compact:
        start.append(rest // c)
        rest %= c
    if rest or any(st < 0 for st in stride):
        return None
    reach = list(start)
    steps = []
    for n, st in zip(size, stride):
        if n == 1 or st == 0:
            steps.append(0)
            continue
        k = next((k for k in dims if st % compact[k] == 0), None)
        if k is None:
            return None
        q = st // compact[k]
        reach[k] += (n - 1) * q
        steps.append(q * strides[k])
    if any(r >= n for r, n in zip(reach, shape) if n) or 0 in size:
        return None
    return tuple(size), tuple(steps), offset + sum(b * st for b, st in zip(start, strides))


class _Builder:
    """Shared machinery: buffers, geometry of leaves, evaluation of node expressions."""

    def __init__(self, group, name, target=None, aliases=None, layouts=None):
        self.group = group
        self.name = name
        self.target = target or CPU
        # output -> input whose buffer it is written into (an in-place update): one pointer for both,
        # so LLVM sees a load and a store at the same address, not two arrays that may overlap
        self.aliases = aliases or {}
        self.layouts = layouts or {}  # Value -> strides of a buffer that is not compact (dense, offset 0)
        self.geometry = {}     # Value -> (root Value, shape, strides, offset): readable leaves
        for v in group.inputs:
            self.geometry[v] = (v, v.type.shape, self.strides(v), 0)
        # a gather's result is a leaf read at its source's geometry along every dim but the gathered one, plus
        # the index there times the source's stride along it: result -> (its index's leaf, that stride); the
        # index's leaf is read over the result's shape (index_select's vector along the gathered dim only)
        self.gathers = {}
        self.index_of = {}     # index leaf -> the gather result it serves
        self.ranges = {}       # an index expression's result (a root without a buffer) -> (first, increment)
        self.computed = []     # nodes evaluated by expression
        for node in group.nodes:
            lowered = node.op.pieces.get("lowering")
            if node.op.view is not None:
                self._fold_view(node)
            elif isinstance(lowered, lowering.Gather):
                self._fold_gather(node)
            elif isinstance(lowered, lowering.Index):
                out = node.outputs[0]
                self.geometry[out] = (out, out.type.shape, contiguous_strides(out.type.shape), 0)
                self.ranges[out] = lowered.terms(node)
            else:
                self.computed.append(node)
        self.roots = list(dict.fromkeys(g[0] for g in self.geometry.values() if g[0] not in self.ranges))
        # (back-edge branch, fixed trip count or None) of the innermost loops the CPU target's map_loops made
        # (independent iterations): the target may ask LLVM for a vector width there (`CpuTarget.module_text`)
        self.maps = []

    def strides(self, value):
        """The strides of ``value``'s buffer."""
        return self.layouts.get(value) or contiguous_strides(value.type.shape)

    def _fold_view(self, node):
        src = node.args[0]
        if node.op.attrs.get("reinterprets"):  # view(dtype): its elements are another dtype's bits
            raise CompileError(f"{node.op.name}: a view that reads memory as another dtype does not fold into a "
                               "kernel")
        if src not in self.geometry:
            raise CompileError(f"{node.op.name}: a view of a value computed in the same kernel")
        gathered = self.gathers.get(src)
        if gathered is not None and node.op.name == "as_strided":
            # its strides address the gather's result in row-major order, which no geometry over the source
            # and the index gives (avg_pool2d of a replicate pad read wrong elements)
            raise CompileError("as_strided of a gather's result: a gather folds only views that compose")
        geos = self._viewed(node, src, self.geometry[src])
        # a view of a gather's result: its source's geometry and its index's, both viewed alike
        keys = None if gathered is None else self._viewed(node, src, self.geometry[gathered[0]])
        for j, (out, geo) in enumerate(zip(node.outputs, geos)):
            self.geometry[out] = geo
            if keys is not None:
                self._gathered(out, keys[j], gathered[0].type.dtype, gathered[1])

    @staticmethod
    def _viewed(node, src, geometry):
        """The (root, shape, strides, offset) of each output of view ``node`` of ``src``, which lies at
        ``geometry``."""
        root, shape, strides, offset = geometry
        if not composes(node, shape, strides, offset):
            geo = strided_as_strided(shape, strides, offset, *node.args[1:])
            if geo is not None:
                return [(root, *geo)]
            raise CompileError(f"as_strided of a {list(shape)} value with strides {list(strides)}: it addresses "
                               "the value's elements in order, which are not its root's")
        fake = fake_tensor(shape, src.type.dtype, src.type.device, strides, offset, max(1, prod(root.type.shape)))
        try:
            # a tensor argument (view_as, expand_as) gives its static type only
            geo = node.op.view(fake, *fake_args(node.args[1:]))
        except RuntimeError as e:  # a reshape of a strided value: its elements need a copy first
            raise CompileError(f"{node.op.name} of a {list(shape)} value with strides {list(strides)}: {e}") from None
        return [(root, tuple(s), tuple(st), o) for s, st, o in (geo if isinstance(geo, list) else [geo])]

    def _gathered(self, out, index_geometry, index_dtype, stride):
        """Make leaf ``out`` a gather's result, whose index is read at ``index_geometry``."""
        key = Value(f"{out.name}.index", TensorType(index_geometry[1], index_dtype, out.type.device))
        self.geometry[key] = index_geometry
        self.gathers[out] = (key, stride)
        self.index_of[key] = out

    def _fold_gather(self, node):
        src, dim, index = node.args[:3]
        out = node.outputs[0]
        if src not in self.geometry or index not in self.geometry or src in self.gathers or index in self.gathers:
            raise CompileError(f"{node.op.name}: an operand computed in the same kernel")
        root, shape, strides, offset = self.geometry[src]
        d = dim % len(shape)
        out_shape = tuple(out.type.shape)
        # (gather's result dims but the gathered one are at most the source's: its strides address them)
        reads = tuple(0 if k == d else s for k, s in enumerate(strides))
        index_root, index_shape, index_strides, index_offset = self.geometry[index]
        if index_root in self.ranges:  # an arange's values, known now
            first, step = self.ranges[index_root]
            ends = [first + step * (index_offset + sum((n - 1) * s for n, s in zip(index_shape, index_strides)
                                                       if (s > 0) == high)) for high in (False, True)]
            if min(ends) < 0 or max(ends) >= shape[d]:
                raise CompileError(f"{node.op.name}: an arange index outside the source's dim (eager raises)")
        else:
            # the executor checks the indices of the root's tensor, which must be the ones the kernel reads: all
            # of its elements, each once along the dims that do not broadcast (an expand's read it again)
            spread = [(n, st) for n, st in zip(index_shape, index_strides) if st]
            if index_offset or prod(n for n, _ in spread) != prod(index_root.type.shape) \
                    or not is_non_overlapping_and_dense([n for n, _ in spread], [st for _, st in spread]):
                raise CompileError(f"{node.op.name}: an index that is a part of another tensor")
        if node.op.name == "index_select":
            index_strides = tuple(index_strides[0] if k == d else 0 for k in range(len(out_shape)))
        self.geometry[out] = (root, out_shape, reads, offset)
        self._gathered(out, (index_root, out_shape, tuple(index_strides), 0), index.type.dtype, strides[d])

    def read(self, e, b, ptr, v, off, load):
        """Leaf ``v``'s element at offset ``off`` of its root's buffer, or, for a gather's result, beyond it by
        the index (``load(its index's leaf)``) times the source's stride along the gathered dim (the executor
        checked the indices against the source's size there: `gather_checks`)."""
        gathered = self.gathers.get(v)
        if gathered is not None:
            key, stride = gathered
            i = load(key)
            at = i.value if i.dtype is _dt.int64 else b.sext(i.value, I64)
            off = b.add(off, b.mul(at, I64(stride)))
        root = self.geometry[v][0]
        if root in self.ranges:  # an index expression's element at that position
            first, step = self.ranges[root]
            return Scalar(b.add(I64(first), b.mul(off, I64(step))), _dt.int64)
        return e.load(b.gep(ptr[root], [off]), v.type.dtype)

    def with_indices(self, leaves):
        """``leaves`` and, after them, the index leaves of the gathers among them."""
        return leaves + [self.gathers[v][0] for v in leaves if v in self.gathers]

    # Emission ---------------------------------------------------------------------------

    def begin(self, buffers):
        """(module, kernel function, buffer -> pointer argument, builder, emitter) of a new kernel."""
        module, kernel = self.start_module(buffers)
        b = ir.IRBuilder(kernel.append_basic_block("entry"))
        ptr = dict(zip(buffers, kernel.args[2:]))
        for out, source in self.aliases.items():
            ptr[out] = ptr[source]
        return module, kernel, ptr, b, Emitter(b)

    def start_module(self, buffers):
        module = ir.Module(name=self.name)
        module.triple = self.target.triple
        ptrs = [llvm_type(v.type.dtype).as_pointer() for v in buffers]
        kty = ir.FunctionType(ir.VoidType(), [I64, I64] + ptrs)
        kernel = ir.Function(module, kty, self.name + "_body")
        kernel.linkage = "internal"
        kernel.attributes.add("alwaysinline")
        for arg in kernel.args[2:]:
            arg.add_attribute("noalias")
        return module, kernel

    def finish(self, b, kernel, source, mode="thread"):
        """Close the kernel body, add the target's entry, and fill ``source``'s IR."""
        b.ret_void()
        module = kernel.module
        self.target.add_entry(module, kernel, source.inputs + source.outputs, source.outer, mode)
        # (the text only: llvmlite's objects of the module weigh several times more, and a source lives as long
        # as its kernel)
        source.llvm_ir = self.target.module_text(module, module.name, self.maps, source.work)
        source.mode = mode
        source.layouts = {v: tuple(s) for v, s in self.layouts.items() if v in source.inputs or v in source.outputs}
        return source

    def map_loop(self, b, start, end, body):
        """The target's map loop of ``body(b, [i])`` over i in [start, end) (i64 values): the loops over a
        vector's lanes that `lanes.ordered_sum` runs."""
        self.target.map_loops(self, b, [0], body, start, end)

    def loops(self, b, sizes, body, start=None, end=None):
        """Nested counted loops over ``sizes`` (the first from start to end); ``body(b, indices)``. Returns the
        innermost loop's back-edge branch (None without sizes: no loop)."""
        innermost = []

        def nest(level, indices):
            lo = start if level == 0 and start is not None else I64(0)
            hi = end if level == 0 and end is not None else I64(sizes[level])

            def inner(b, i):
                if level + 1 < len(sizes):
                    nest(level + 1, indices + [i])
                else:
                    body(b, indices + [i])
            latch = counted_loop(b, lo, hi, I64(1), inner, f"l{level}")
            if level + 1 == len(sizes):
                innermost.append(latch)
        if not sizes:
            body(b, [])
            return None
        nest(0, [])
        return innermost[0]

    @staticmethod
    def offset(b, indices, strides, base):
        off = I64(base)
        for i, s in zip(indices, strides):
            if s:
                off = b.add(off, b.mul(i, I64(s)))
        return off

    def evaluate(self, e, value, memo, load):
        """The Scalar of ``value`` at the current index: a load for leaves, a lowering for nodes."""
        # Post-order with an explicit stack: a chain of n ops is n deep, and must not reach Python's
        # recursion limit. Each node is lowered once its operands are in ``memo``.
        stack = [value]
        while stack:
            v = stack[-1]
            if v in memo:
                stack.pop()
            elif v in self.geometry:
                memo[v] = load(v)
                stack.pop()
            else:
                pending = [a for a in v.node.args if isinstance(a, Value) and a not in memo]
                if pending:
                    stack.extend(pending)
                else:
                    memo[v] = self.lower_node(e, v.node, memo, load)[v.index]
                    stack.pop()
        return memo[value]

    def _operand(self, e, a, memo, load, via, compute):
        """A pointwise operand (a Value or a Python number) in ``compute``, rounded to ``via`` first if given."""
        if isinstance(a, Value):
            v = self.evaluate(e, a, memo, load)
            return e.cast(e.cast(v, via) if via is not None else v, compute)
        literal = convert(np.array(float(a) if via is not None else a), (via or compute).np)
        return e.const(convert(literal, compute.np).item(), compute)

    def lower_node(self, e, node, memo, load):
        op = node.op
        out_dtype = node.outputs[0].type.dtype
        lowered = op.pieces["lowering"]
        if isinstance(lowered, lowering.Cast):
            return [e.cast(self.evaluate(e, node.args[0], memo, load), out_dtype)]
        spec = _meta_of(node)
        compute = spec.compute or out_dtype
        if compute is _dt.bfloat16:  # kernels carry bfloat16 as its bits: comparisons and tests read float32
            compute = _dt.float32
        positions = [i for i, _ in op.tensor_args]
        common = rounding_dtype(spec)
        operands, rest = [], []
        for i, a in enumerate(node.args):
            if i not in positions:
                rest.append(a)
            elif a is None:
                operands.append(None)
            else:
                number = not isinstance(a, Value)
                via = None if reads_unrounded(op, positions.index(i), number, None if number else a.type.ndim) \
                    else common  # eager's rounding of operands of another dtype (`defpointwise`)
                operands.append(self._operand(e, a, memo, load, via, compute))
        result = lowered.emit(e, *operands, *rest)
        return [e.cast(result, out_dtype)]


def index_maths_folds(nodes):
    """Whether `_Builder` folds ``nodes`` (views, gathers and index expressions, in dataflow order, each reading
    values from outside them or the results of those before it) into one kernel's index maths, those outside
    laid out compactly: the rule fusion asks (through `ir.lowerable.folds`) before it joins a view of a
    gather's result to the gather's group, where an ``as_strided`` of it or a reshape across its gathered dim
    would make the builder refuse the whole group (then split one kernel per node)."""
    made = {v for n in nodes for v in n.outputs}
    inputs = list(dict.fromkeys(v for n in nodes for v in n.input_values() if v not in made))
    try:
        _Builder(Group("pointwise", list(nodes), inputs, [], ()), "fold")
    except CompileError:
        return False
    return True


lowerable.register_folds(index_maths_folds)


def build_pointwise(group, name, target=None, aliases=None, layouts=None):
    """A pointwise group's kernel: one loop nest over its output shape, in its first output's memory order."""
    bld = _Builder(group, name, target, aliases, layouts)
    outputs = list(group.outputs)
    space = tuple(outputs[0].type.shape)
    for out in outputs:
        if tuple(out.type.shape) != space:
            raise CompileError(f"pointwise group with outputs of shapes {space} and {out.type.shape}")
    leaves = [v for v in bld.geometry if _used(v, bld)]
    reads = [_broadcast_strides(bld.geometry[v][2], bld.geometry[v][1], space) for v in leaves]
    writes = [list(bld.strides(out)) for out in outputs]
    order = sorted(range(len(space)), key=lambda d: -writes[0][d])  # outermost first: row-major if compact
    flat, collapsed = _collapse([space[d] for d in order], [[a[d] for d in order] for a in reads + writes])
    sizes = flat
    if bld.target is CPU:  # (a GPU's threads take consecutive elements of the flat loop: no tiles there)
        sizes, collapsed = _tiled(flat, collapsed, len(reads))
    leaf_strides = dict(zip(leaves, collapsed[:len(leaves)]))
    out_strides = dict(zip(outputs, collapsed[len(leaves):]))
    module, kernel, ptr, b, e = bld.begin(bld.roots + outputs)

    def values(b, idx):
        def load(v):
            return bld.read(e, b, ptr, v, bld.offset(b, idx, leaf_strides[v], bld.geometry[v][3]), load)
        memo = {}
        return [bld.evaluate(e, out, memo, load) for out in outputs]

    def body(b, idx):
        for out, s in zip(outputs, values(b, idx)):
            e.store(s, b.gep(ptr[out], [bld.offset(b, idx, out_strides[out], 0)]))

    # (an output written in place of an input: each read of that input's buffer, with the output's strides)
    in_place = [((leaf_strides[v], bld.geometry[v][3]), out_strides[out]) for out, src in bld.aliases.items()
                for v in leaves if bld.geometry[v][0] is src]
    if _stages(bld, flat, sizes, collapsed[len(leaves):], in_place):
        staged_tiles(bld, b, e, sizes, [(ptr[out], out_strides[out]) for out in outputs], values,
                     kernel.args[0], kernel.args[1])
    else:
        bld.target.map_loops(bld, b, sizes, body, kernel.args[0], kernel.args[1])
        _keep_rolled(bld, b, sizes)
    return bld.finish(b, kernel, KernelSource(name, "pointwise", [n.op.name for n in group.nodes], bld.roots,
                                              outputs, bld.target.outer(sizes), prod(space)))


# The innermost loop of a nest (a pointwise or copy kernel over a fixed shape) of this many elements or more,
# inside another loop of a fixed count, is vectorised but not unrolled: LLVM unrolled the MNIST net's window copy
# (loops of 3, 3, 24 and 1,536 floats below the chunk's loop) whole below its two outer loops, into one block of
# 2,304 vector loads and stores (9,249 instructions), which x86's code generator took 3.5-5.7 s to emit, most of
# the net's cold first call; rolled, 0.03 s. Emitting grew faster than the block: inner loops of 384, 768 and
# 1,536 floats took 0.58, 1.6 and 4.3 s unrolled. (A nest of two loops, the chunk's and one inside, unrolls the
# inner one alone, which is quick to emit: left to LLVM.)
ROLLED_MIN = 256
# A copy's innermost loop is kept rolled from this many elements (inside another loop of a fixed count): any. LLVM
# unrolled the copy of GPT's attention output, (T, 4, 32) from (4, T, 32), whole below the chunk's loop into 128
# scalar loads and stores, in 0.15 s of O3 per context length T (a sampling loop's 63 lengths: 10.7 s, 64% of LLVM's
# time in its cold first call); rolled, LLVM vectorised the row of 32 in 0.012 s. A copy moves bits: the loop's
# shape changes no result.
COPY_ROLLED_MIN = 1


def _keep_rolled(bld, b, sizes, minimum=ROLLED_MIN):
    """Mark the innermost loop that `map_loops` just made not to be unrolled where it runs over ``minimum``
    elements or more inside another loop of a fixed count (the first loop's bounds are the chunk's); a kernel
    evaluating `mathlib` functions gets the width's metadata in its place (`CpuTarget.module_text`)."""
    if bld.target is CPU and len(sizes) > 2 and sizes[-1] >= minimum and bld.maps:
        bld.maps[-1][0].set_metadata("llvm.loop", loop_metadata(b.module, ("llvm.loop.unroll.disable",)))


def _keep_reduction_rolled(b, sizes, latch):
    """Mark the innermost loop of a reduction's nest over its reduced dims ``sizes`` (``latch``: its back-edge
    branch, as the CPU's `reduce_loops` returns it; None on a GPU) not to be unrolled where it runs over
    `ROLLED_MIN` elements or more inside another reduced loop: DCGAN's batch-norm backward sums over (8, 512) and
    (16, 1024) were unrolled into 5-11k instructions each (59k in all for the step, 19k rolled), most of its 7 s cold
    first call. A float sum's adds carry ``reassoc`` (LLVM vectorises them), so the rolled loop's order is LLVM's
    vector loop's, not the unrolled one's: the same sum to rounding, and the same bits wherever the reduction is
    built, the loop depending on the reduced sizes alone."""
    if latch is not None and len(sizes) > 1 and sizes[-1] >= ROLLED_MIN:
        latch.set_metadata("llvm.loop", loop_metadata(b.module, ("llvm.loop.unroll.disable",)))


def build_copy(group, name, target=None, aliases=None, layouts=None):
    """A view group in which one view needs its elements copied (a reshape of a strided value: a
    convolution's windows, merged): one loop nest over the copied value's shape, reading through
    the views folded before it, writing compactly, which is the reshape's result in row-major order.
    Views after it must leave that memory as it is (reshapes of it). A group of views that all fold
    needs no kernel (CompileError: its steps are tensor headers)."""
    last = group.nodes[-1]
    if group.outputs != last.outputs[:1] or any(n.op.view is None or len(n.outputs) != 1 for n in group.nodes):
        raise CompileError("a view group with outputs other than its last view's")
    if any(isinstance(a, Value) for n in group.nodes for a in iter_values(n.args[1:])):
        raise CompileError("a view whose geometry depends on another tensor")
    bld = _Builder(replace(group, nodes=[]), name, target, aliases, layouts)
    copying = None
    for node in group.nodes:
        if node.args[0] not in bld.geometry:
            raise CompileError(f"{node.op.name} of a value the group does not read")
        if copying is not None:
            bld._fold_view(node)
            continue
        try:
            bld._fold_view(node)
        except CompileError:
            if node.op.name not in RESHAPES:  # only a reshape's result is the row-major copy of its input
                raise
            copying = node
            copied = node.outputs[0]
            bld.geometry[copied] = (copied, copied.type.shape, contiguous_strides(copied.type.shape), 0)
    if copying is None:
        raise CompileError("a view group whose views all fold: nothing to copy")
    out = last.outputs[0]
    if bld.geometry[out][0] is not copied or bld.geometry[out][2:] != (contiguous_strides(out.type.shape), 0):
        raise CompileError(f"{last.op.name} after a copy: the result is not the copy's memory")
    src = copying.args[0]
    root, space, strides, offset = bld.geometry[src]
    flat, (read, write) = _collapse(list(space), [list(strides), list(contiguous_strides(space))])
    sizes = flat
    if bld.target is CPU:
        sizes, (read, write) = _tiled(flat, [read, write], 1)
    module, kernel, ptr, b, e = bld.begin([root, out])

    def value(b, idx):
        return e.load(b.gep(ptr[root], [bld.offset(b, idx, read, offset)]), src.type.dtype)

    def body(b, idx):
        e.store(value(b, idx), b.gep(ptr[out], [bld.offset(b, idx, write, 0)]))

    if not bld.aliases and _stages(bld, flat, sizes, [write]):
        staged_tiles(bld, b, e, sizes, [(ptr[out], write)], lambda b, idx: [value(b, idx)],
                     kernel.args[0], kernel.args[1])
    else:
        bld.target.map_loops(bld, b, sizes, body, kernel.args[0], kernel.args[1])
        _keep_rolled(bld, b, sizes, COPY_ROLLED_MIN)
    return bld.finish(b, kernel, KernelSource(name, "pointwise", [n.op.name for n in group.nodes], [root], [out],
                                              bld.target.outer(sizes), prod(space)))


def gather_checks(nodes):
    """Per gather among a kernel's ``nodes``: (the tensor whose values it reads as indices: its index, or the
    root its views in the kernel fold onto, all of whose elements it reads (`_Builder._fold_gather`), the
    source's size along the gathered dim, the op's name, that dim, the source's number of dims). The executor
    checks these indices before the kernel runs (`ops.indexing.check_gather_index`); an arange's in the kernel
    were checked when it was built."""
    inside = {v for n in nodes for v in n.outputs}
    checks = []
    for node in nodes:
        if isinstance(node.op.pieces.get("lowering"), lowering.Gather):
            src, dim, index = node.args[:3]
            while index in inside and index.node.op.view is not None:
                index = index.node.args[0]
            if index in inside:  # an arange's values, checked when the kernel was built
                continue
            shape = src.type.shape
            d = dim % len(shape)
            checks.append((index, shape[d], node.op.name, d, len(shape)))
    return checks


def _used(value, bld):
    """Whether a leaf is read by a computed node or is itself an output (an index leaf: its gather's result)."""
    value = bld.index_of.get(value, value)
    return any(value in list(iter_values(n.args)) for n in bld.computed) or value in bld.group.outputs


@dataclass(eq=False)
class _Accumulator:
    """One reduction of a reduction kernel: its node, its input ``x`` and result ``out``, its lowering
    (`lowering.Reduction`), the dtypes it computes and accumulates in, its identity as the accumulator holds it,
    and its slot (an alloca in the entry block, which mem2reg promotes)."""

    node: object
    x: object
    out: object
    lowering: object
    compute: object
    dtype: object
    identity: object
    slot: object = None


def reductions_of(group):
    """The reduction nodes of a reduction group, in dataflow order: one, or several over one input space reducing
    the same dims (`fusion.same_reduction`), which one kernel computes side by side. Raises `CompileError` for
    others."""
    reds = [n for n in group.nodes if n.op.view is None and lowering.kind_of(n) == "reduction"]
    if len(reds) > 1:
        bad = [r for r in reds[1:] if not same_reduction(reds[0], r)]
        if bad:
            raise CompileError(f"{bad[0].op.name} over {list(bad[0].args[0].type.shape)} cannot share a loop with "
                               f"{reds[0].op.name} over {list(reds[0].args[0].type.shape)}")
        if dependent_reductions(reds, group.nodes) and not row_reduction(tuple(reds[0].args[0].type.shape),
                                                                          tuple(reds[0].outputs[0].type.shape)):
            raise CompileError("a reduction group whose reductions depend on each other, not row reductions")
    return reds


def build_reduction(group, name, target=None, aliases=None, layouts=None):
    """A reduction group's kernel: kept dims outside, reduced dims inside, then the epilogue (or, when
    the innermost input dim is kept, a chunk of kept elements reduced with the reduced dims outside).

    A group of several reductions over one space (`reductions_of`) computes them in one kernel: where the
    innermost input dim is kept, in one loop, each kept element's accumulators side by side (each adds its
    terms in the order it does alone: the vectorised loop runs across kept elements); where the reduced dims
    are inside, in one loop each over the row, one after the other (the first reads the row from memory, the
    others from cache), each the loop the reduction has alone, which LLVM vectorises alike, so each sum keeps
    its bits (a float sum may reassociate, and LLVM's choice of lanes for one loop of two sums need not be its
    choice for one); then the epilogue and the row epilogue, which read all the results. Where a later one reads
    an earlier one's result (a layer norm's variance its mean: row reductions only, `reductions_of`), its loop
    reads that result from a register, as its kernel alone would have read it from memory (a value that kernels
    apart passed through memory and this one need not write leaves the loop that wrote it a streamed run)."""
    reds = reductions_of(group)
    red = reds[0]
    x = red.args[0]
    in_shape = tuple(x.type.shape)
    dims = red.args[1] if len(red.args) > 1 else None
    if red.op.name in ("max", "min"):
        dims = None
    if isinstance(dims, int):
        dims = (dims,)
    reduced = sorted({d % len(in_shape) for d in dims}) if dims and in_shape else list(range(len(in_shape)))
    # the input side (the prologue and its siblings, `fusion.reduction_sides`) runs inside the reduction loop, the
    # row epilogue in a second pass over each row once its result is known
    _, _, row_nodes = reduction_sides(reds, group.nodes)
    merge = None if row_nodes or len(reds) > 1 else _merged_reduced_dims(group, red, reduced)
    bld = _Builder(group if merge is None else replace(group, nodes=[n for n in group.nodes if n is not merge]),
                   name, target, aliases, layouts)
    if merge is not None and merge.args[0] in bld.geometry:
        # reduce the merged dims where they lie: x's last index is their row-major index
        src = merge.args[0]
        bld.geometry[x] = bld.geometry[src]
        in_shape = tuple(src.type.shape)
        reduced = list(range(len(x.type.shape) - 1, len(in_shape)))
    elif merge is not None:
        bld = _Builder(group, name, target, aliases, layouts)
    prologue = reduction_sides(reds, bld.group.nodes)[0] & set(bld.computed)
    # (an input-side output may read a value the epilogue reads too, which the loop evaluates again from its leaves:
    # ``x1 + exp(x0)`` beside ``x1.sum(0) + exp(x0)``, fuzz seed 5710675 of ``--edges 0.4``)
    inside = prologue | row_nodes | set(reds) | _upstream([o.node for o in group.outputs if o.node in prologue], bld)
    inner_leaves = bld.with_indices([v for v in bld.geometry if any(v in list(_args(n)) for n in inside)])
    if not red.op.pieces["lowering"].indexed:  # (an indexed reduction's index is row-major over them)
        reduced = _memory_order([bld.geometry[v] for v in inner_leaves], in_shape, reduced)
    kept = [d for d in range(len(in_shape)) if d not in reduced]
    keepdim = bool(red.args[2]) if red.op.name not in ("max", "min") and len(red.args) > 2 else False
    out_value = red.outputs[0]
    out_shape = tuple(out_value.type.shape)
    epilogue = [n for n in bld.computed if n not in reds and n not in prologue]

    outer_leaves = bld.with_indices([v for v in bld.geometry if any(v in list(_args(n)) for n in epilogue
                                                                    if n not in row_nodes) or v in group.outputs])
    order = kept + reduced

    def over_input(v):
        g = bld.geometry[v]
        s = _broadcast_strides(g[2], g[1], in_shape)
        return [s[d] for d in order]

    def over_output(v):
        g = bld.geometry[v]
        s = _broadcast_strides(g[2], g[1], out_shape)
        return [s[i] for i, d in enumerate(kept)] if not keepdim else [s[d] for d in kept]

    kept_sizes = [in_shape[d] for d in kept]
    red_sizes = [in_shape[d] for d in reduced]
    outputs = list(group.outputs)
    # prologue values needed outside (softmax's exp(x - max)) are written inside the reduction loop
    pro_outs = [o for o in outputs if o.node in prologue]
    row_reads = list(dict.fromkeys(v for n in row_nodes for v in _args(n) if v.node in epilogue and
                                   v.node not in row_nodes))
    row_outs = [o for o in outputs if o.node in row_nodes]
    for out in outputs:
        space = in_shape if out in pro_outs or out in row_outs else out_shape
        if tuple(out.type.shape) != space:
            raise CompileError(f"reduction group output {out.type} is not over {list(space)}")
    out_write = contiguous_strides(tuple(kept_sizes))  # where the accumulators of a chunk lie
    pro_writes = [[bld.strides(o)[d] for d in order] for o in pro_outs + row_outs]
    epi_outs = [o for o in outputs if o not in pro_outs and o not in row_outs]
    epi_writes = [[s[i] for i in range(len(kept))] if not keepdim else [s[d] for d in kept]
                  for s in (bld.strides(o) for o in epi_outs)]
    # merge dims separately inside the kept part and the reduced part
    inner_acc = [over_input(v) for v in inner_leaves] + pro_writes
    k_sizes, k_strides = _collapse(kept_sizes, [a[:len(kept)] for a in inner_acc] +
                                   [over_output(v) for v in outer_leaves] + epi_writes + [list(out_write)])
    r_sizes, r_strides = _collapse(red_sizes, [a[len(kept):] for a in inner_acc])
    n_inner = len(inner_leaves)
    inner_kept = dict(zip(inner_leaves, k_strides[:n_inner]))
    inner_red = dict(zip(inner_leaves, r_strides))
    n_acc = len(inner_acc)
    pro_kept = dict(zip(pro_outs + row_outs, k_strides[n_inner:n_acc]))
    pro_red = dict(zip(pro_outs + row_outs, r_strides[n_inner:]))
    n_outer = n_acc + len(outer_leaves)
    outer_strides = dict(zip(outer_leaves, k_strides[n_acc:n_outer]))
    epi_strides = dict(zip(epi_outs, k_strides[n_outer:n_outer + len(epi_outs)]))
    write = k_strides[-1]

    indexed = red.op.pieces["lowering"].indexed
    if indexed and bld.target is not CPU:
        raise CompileError(f"{red.op.name}: a reduction that keeps an index lowers for the CPU only")
    module, kernel, ptr, b, e = bld.begin(bld.roots + outputs)
    accs = []
    for r in reds:
        spec = _meta_of(r)
        spec = spec[0] if isinstance(spec, tuple) else spec  # max.dim's: (values, indices)
        r_compute = spec.compute or r.outputs[0].type.dtype
        r_lowering = r.op.pieces["lowering"]
        r_dtype = r_lowering.accumulator(r_compute, r.outputs[0].type.dtype)
        accs.append(_Accumulator(r, r.args[0], r.outputs[0], r_lowering, r_compute, r_dtype,
                                 r_lowering.start(e, r_compute, r_dtype), b.alloca(llvm_type(r_dtype))))
    # (the first reduction's pieces: a split full reduction or an indexed one is a group's only reduction)
    reduction, compute, acc_dtype, identity, acc = red.op.pieces["lowering"], accs[0].compute, accs[0].dtype, \
        accs[0].identity, accs[0].slot
    count = prod(red_sizes)
    # an indexed reduction's chosen index (row-major over the reduced dims, which merging dims keeps),
    # in the slot at the same place of a parallel array
    index_of = {acc: b.alloca(I64)} if indexed else None

    def loader(b, kidx, ridx):
        """``load(leaf)``: a leaf of the input side or the row epilogue at input index (kidx, ridx)."""
        def load(v):
            off = bld.offset(b, kidx + ridx, list(inner_kept[v]) + list(inner_red[v]), bld.geometry[v][3])
            return bld.read(e, b, ptr, v, off, load)
        return load

    def store_at(b, kidx, ridx, outs, memo, load):
        for out in outs:
            off = bld.offset(b, kidx + ridx, list(pro_kept[out]) + list(pro_red[out]), 0)
            e.store(bld.evaluate(e, out, memo, load), b.gep(ptr[out], [off]))

    def reduce_item(b, kidx, ridx, slots, outs, which=None, known=None):
        """Fold the prologue's values at (kidx, ridx) into the ``slots`` of the reductions ``which`` (all by
        default); write the input side's outputs ``outs`` there. ``known``: earlier reductions' results at
        ``kidx`` (value -> Scalar) that the prologue reads."""
        load = loader(b, kidx, ridx)
        memo = dict(known or {})
        for a, slot in zip(which or accs, slots):
            item = a.lowering.enter(e, element_of(a, bld.evaluate(e, a.x, memo, load)), a.compute, a.dtype)
            if index_of is None:
                e.store(a.lowering.combine(e, e.load(slot, a.dtype), item), slot)
            else:
                current = e.load(slot, a.dtype)
                takes = a.lowering.combine(e, current, item)
                e.store(e.select(takes, item, current), slot)
                where = index_of[slot]
                b.store(b.select(takes.value, bld.offset(b, ridx, contiguous_strides(tuple(r_sizes)), 0),
                                 b.load(where)), where)
        store_at(b, kidx, ridx, outs, memo, load)

    def results(b, kidx, slots, totals=None, second=()):
        """The reductions' results at kept index ``kidx``, from their accumulators in ``slots`` (or ``totals``,
        the results themselves), and every value computed from them there (the epilogue), stored; then the row
        epilogue's values and ``second``, input-side outputs, in a second pass over the row (the values the first
        computed held for it)."""
        memo = {}
        for i, a in enumerate(accs):
            total = a.lowering.leave(e, e.load(slots[i], a.dtype), a.compute) if totals is None else totals[i]
            if index_of is None:
                memo[a.out] = result(a, total)
            else:  # the index is the last output (argmax's only one), the values the first (max.dim's)
                memo[red.outputs[-1]] = Scalar(b.load(index_of[slots[i]]), _dt.int64)
                if len(red.outputs) > 1:
                    memo[a.out] = result(a, total)

        def load_outer(v):
            return bld.read(e, b, ptr, v, bld.offset(b, kidx, outer_strides[v], bld.geometry[v][3]), load_outer)
        for out in epi_outs:
            s = bld.evaluate(e, out, memo, load_outer)
            e.store(s, b.gep(ptr[out], [bld.offset(b, kidx, epi_strides[out], 0)]))
        if row_outs or second:
            for v in row_reads:  # (the epilogue's values the row epilogue reads, at the kept index)
                bld.evaluate(e, v, memo, load_outer)
            bld.target.map_loops(bld, b, r_sizes, lambda b, ridx: store_at(
                b, kidx, ridx, list(second) + row_outs, dict(memo), loader(b, kidx, ridx)))

    def result(a, total):
        """Reduction ``a``'s result from its ``total`` (in its compute dtype), in its output's dtype."""
        if a.lowering.finish is not None:
            total = a.lowering.finish(e, total, count)
        return e.cast(total, a.out.type.dtype)

    def start(b, a, slot):
        e.store(a.identity, slot)
        if index_of is not None:
            b.store(I64(0), index_of[slot])

    def element(b, a, kidx, j, known=None):
        """Reduction ``a``'s prologue value at kept index ``kidx`` and flat reduced index ``j``, in its compute
        dtype; ``known`` as `reduce_item`'s."""
        return element_of(a, bld.evaluate(e, a.x, dict(known or {}), loader(b, kidx, [j])))

    def element_of(a, value):
        """Reduction ``a``'s input ``value`` as it reads it (`lowering.reduced_input`)."""
        return lowering.reduced_input(e, a.lowering, value, a.compute, a.out.type.dtype)

    # Where the reduced dims are inside (each kept index's row reduced in turn), the input side's outputs are
    # written in the row's second pass, with the row epilogue's, computed again there: each reduction's loop is
    # then the one it has without them, which LLVM vectorises alike, so the sum has its bits whether its summand
    # is read, computed, or computed and written (LLVM 15 vectorised a row sum storing a sibling at another width,
    # and its bits changed; a prologue output that the sum reads, written in its loop, left it a plain loop, not a
    # streamed run: a layer norm of ``a + b`` that also wrote ``a + b`` had other bits than one reading it).
    # the reductions' results that later reductions' prologues read (none but in a group of dependent ones)
    read_later = {v for a in accs for n in (a.node, *_upstream((a.node,), bld)) for v in _args(n) if v.node in reds}
    half = _carries_float16(bld)

    def streamed(a):
        """(whether reduction ``a`` reduces a run as `streamed_run` reads it, and the float max or min it folds
        with there, if any). On the CPU, a run of reduced elements (the reduced dims collapse to one; no
        index) is read so, in several streams where it is long (`streams_for`); a float
        max or min there as `float_extremum` does."""
        run = bld.target is CPU and len(r_sizes) == 1 and index_of is None
        extremum = EXTREMA.get(a.lowering) if run and a.compute in EXTREMUM_DTYPES and not half else None
        return run, extremum

    # (the buffers the kernel reads: beyond the caches, its float accumulators' runs take narrower vectors)
    streaming = sum(prod(v.type.shape) * v.type.dtype.itemsize for v in bld.roots) > STREAMING_BYTES

    def reduce_run(b, a, kidx, lo, hi, count, extremum, known=None):
        """Reduction ``a`` (in its compute dtype) of the run's elements [lo, hi) (``count`` of them, or at most
        so many) at kept index ``kidx``: one accumulator per stream, combined at the end; ``known`` as
        `reduce_item`'s."""
        value = lambda b, j: element(b, a, kidx, j, known)  # noqa: E731
        floating = a.dtype.is_floating_point
        if extremum is not None:
            return float_extremum(b, extremum, a.compute, lo, hi, value, count)
        streams = streams_for(count)
        with b.goto_entry_block():
            slots = [b.alloca(llvm_type(a.dtype)) for _ in range(streams)]
        for slot in slots:
            e.store(a.identity, slot)

        def visit(b, js):
            for slot, j in zip(slots, js):
                e.store(a.lowering.combine(e, e.load(slot, a.dtype),
                                           a.lowering.enter(e, value(b, j), a.compute, a.dtype)), slot)
        streamed_run(b, lo, hi, count, visit, a.dtype.itemsize * 8 if streaming and floating else None)
        total = e.load(slots[0], a.dtype)
        for slot in slots[1:]:
            total = a.lowering.combine(e, total, e.load(slot, a.dtype))
        return a.lowering.leave(e, total, a.compute)

    def kept_body(b, kidx):
        totals, known = [], {}
        for a in accs:  # (one loop over the row each, in dataflow order: see the docstring)
            use, extremum = streamed(a)
            if use:
                totals.append(reduce_run(b, a, kidx, I64(0), I64(r_sizes[0]), r_sizes[0], extremum, known))
            else:
                start(b, a, a.slot)
                _keep_reduction_rolled(b, r_sizes, bld.target.reduce_loops(
                    bld, b, e, r_sizes, lambda b, ridx, slot, a=a: reduce_item(b, kidx, ridx, [slot], [], [a],
                                                                               dict(known)),
                    a.slot, a.dtype, a.lowering.combine, a.identity))
                totals.append(a.lowering.leave(e, e.load(a.slot, a.dtype), a.compute))
            if index_of is None and a.out in read_later:
                known[a.out] = result(a, totals[-1])
        results(b, kidx, [a.slot for a in accs], totals, second=pro_outs)

    n = prod(in_shape)
    ops = [nd.op.name for nd in group.nodes]
    # kept elements in one unit of the target's outer loop (the CPU's: a row of the first kept dim)
    per_unit = max(1, prod(k_sizes) // max(1, bld.target.outer(k_sizes)))
    # (one kept dim that every operand lays along memory: a chunk is one run of each reduced row)
    one_run = len(k_sizes) == 1 and all(inner_kept[v][0] in (0, 1) for v in inner_leaves)
    chunk_bytes = bld.target.kept_run_bytes if one_run else bld.target.kept_chunk_bytes
    # (the accumulators of all the reductions share the chunk's bytes)
    slots = max(1, chunk_bytes // sum(a.dtype.itemsize for a in accs))
    # (not for dependent reductions, whose later ones read the earlier results (`known`) in `kept_body`'s row
    # loops: fusion takes a reduction over dims of one element for a row reduction of a trailing row of none, as
    # ``x - x.mean(0, keepdim=True)`` over a (1, n) input is, where the innermost dim is kept)
    if kept and reduced and kept[-1] == len(in_shape) - 1 and in_shape[-1] > 1 and not read_later \
            and per_unit * sum(a.dtype.itemsize for a in accs) <= KEPT_CHUNK_MAX_BYTES:
        if row_outs:  # (fusion gives a row epilogue only to a reduction of trailing dims)
            raise CompileError("a row epilogue of a reduction that keeps the input's innermost dim")
        # The input's innermost dim is kept (a sum over rows, as a bias gradient is): the accumulators
        # of a chunk of kept elements (whole units of the outer loop) lie in a stack array, and the
        # reduced dims loop outside the kept ones, so the innermost loop runs along memory and
        # vectorises; then the epilogue, one pass over the chunk's accumulators. Several reductions keep
        # an array each, and the loop folds each element into each of them.
        units = max(1, slots // per_unit)
        bufs = [a.slot if units * per_unit == 1 else b.alloca(llvm_type(a.dtype), size=units * per_unit)
                for a in accs]
        indices = None if index_of is None or bufs[0] is acc else b.alloca(I64, size=units * per_unit)

        def chunk(b, lo):
            hi = b.select(b.icmp_signed("<", b.add(lo, I64(units)), kernel.args[1]), b.add(lo, I64(units)),
                          kernel.args[1])
            first = b.mul(lo, I64(per_unit))

            def at(b, kidx):
                """The accumulators of kept index ``kidx``, one per reduction."""
                if units * per_unit == 1:
                    return bufs
                place = b.sub(bld.offset(b, kidx, write, 0), first)
                found = [b.gep(buf, [place]) for buf in bufs]
                if indices is not None:
                    index_of[found[0]] = b.gep(indices, [place])
                return found

            def start_all(b, kidx):
                for a, slot in zip(accs, at(b, kidx)):
                    start(b, a, slot)
            bld.target.map_loops(bld, b, k_sizes, start_all, lo, hi)
            bld.loops(b, r_sizes, lambda b, ridx: bld.target.map_loops(
                bld, b, k_sizes, lambda b, kidx: reduce_item(b, kidx, ridx, at(b, kidx), pro_outs), lo, hi))
            bld.target.map_loops(bld, b, k_sizes, lambda b, kidx: results(b, kidx, at(b, kidx)), lo, hi)

        counted_loop(b, kernel.args[0], kernel.args[1], I64(units), chunk, "chunk")
        return bld.finish(b, kernel, KernelSource(name, "reduction", ops, bld.roots, outputs,
                                                  bld.target.outer(k_sizes), n))
    parts = bld.target.split_parts
    # (only into fewer partial results than elements: the caller's combining reduction over the parts would
    # otherwise be split again, and so on without end, when SPLIT_MIN_WORK is below the target's split_parts)
    if not k_sizes and len(r_sizes) == 1 and n >= SPLIT_MIN_WORK and n > parts and not epilogue and not pro_outs \
            and outputs == [out_value] and red.op.name in SPLITTABLE:
        # A full reduction of a large contiguous input: partial results, each over a slice, that
        # threads compute apart and the caller combines. Their count is fixed, so the result does
        # not depend on the number of threads.
        step = -(-n // parts)
        combine = reduction.combine

        def part_body(b, pidx):
            lo = b.mul(pidx[0], I64(step))
            hi = b.select(b.icmp_signed("<", b.add(lo, I64(step)), I64(n)), b.add(lo, I64(step)), I64(n))
            use, extremum = streamed(accs[0])
            if use:
                partial = reduce_run(b, accs[0], [], lo, hi, step, extremum)
            else:
                e.store(identity, acc)

                def item_body(b, ridx, slot):
                    item = reduction.enter(e, element(b, accs[0], [], ridx[0]), compute, acc_dtype)
                    e.store(combine(e, e.load(slot, acc_dtype), item), slot)

                bld.target.reduce_loops(bld, b, e, [n], item_body, acc, acc_dtype, combine, identity, lo, hi)
                partial = reduction.leave(e, e.load(acc, acc_dtype), compute)
            e.store(partial, b.gep(b.bitcast(ptr[out_value], llvm_type(compute).as_pointer()), [pidx[0]]))

        bld.loops(b, [parts], part_body, kernel.args[0], kernel.args[1])
        return bld.finish(b, kernel, KernelSource(name, "reduction", ops, bld.roots, outputs, parts, n,
                                                  split=Split(parts, red.op.name, n, compute)), "block")
    bld.loops(b, k_sizes, kept_body, kernel.args[0] if k_sizes else None, kernel.args[1] if k_sizes else None)
    return bld.finish(b, kernel, KernelSource(name, "reduction", ops, bld.roots, outputs,
                                              k_sizes[0] if k_sizes else 1, n), "block")


def _memory_order(leaves, in_shape, reduced):
    """The ``reduced`` dims in the order their loops nest, outermost first: by decreasing stride in the widest
    of ``leaves`` (the geometries, root, shape, strides and offset, that the prologue reads over ``in_shape``),
    so the innermost loop walks memory (a batch norm's channel statistics over a batch-last buffer: strides
    (1, 4096, 512, 64), reduced dims 0, 2, 3, read 64 elements apart in row-major order). Row-major where the
    strides say nothing (ties keep it)."""
    if not leaves:
        return reduced
    widest = max(leaves, key=lambda g: prod(g[1]))
    strides = _broadcast_strides(widest[2], widest[1], in_shape)
    return sorted(reduced, key=lambda d: -abs(strides[d]))


# Runs of at least this many reduced elements are read in `STREAMS` streams, shorter ones in one. Streams help
# only where each is long: a row max of 4096x4096 float32 read each row in four streams of 4 KB (one page
# each) and took 1.7 times one stream's time (3.7 against 2.1 ms, one thread, thread CPU time; torch 2.2);
# rows of 1024 in two or four streams took 2.5 times as long; from rows of 16384 streams and one stream were
# even, and a 16M full sum's parts of 1M elements ran 3-7% faster in four. One stream walks a matrix's rows
# as one run through memory, which the hardware prefetchers follow across rows and pages.
STREAMED_MIN = 1 << 18
STREAMS = 4
# The loop along a run of `RUN_LOOP_MIN` elements or more: four vectors of accumulators a turn, not unrolled
# further. Where a row's length is a constant, LLVM unrolled its loop whole and then vectorised the loop over
# the rows, gathering each element from 8 rows at once: 16M float32 in rows of 9 to 64 took 16-21 ms to sum
# or max (torch 2.6-17), 2.3-5.3 along the rows; and a row of 1024 was unrolled into 64 vectors that spilled
# registers (a 16384x1024 row max 2.5 -> 1.9 ms; torch 2.0). One thread, thread CPU time. Runs of up to 8 are
# LLVM's to unroll (rows of 4 to 7 ran 1.15-1.7 times slower kept as loops).
RUN_INTERLEAVE = 4
RUN_LOOP = (("llvm.loop.unroll.disable",), ("llvm.loop.interleave.count", RUN_INTERLEAVE))
RUN_LOOP_MIN = 9
# The widest vectors a run loop of float accumulators (a sum's, a mean's, a product's) takes where its kernel reads
# more than `STREAMING_BYTES` (from memory, not from the caches). On an AVX-512 host LLVM chose 512-bit ones, which
# stream from memory slower than 256-bit ones on an AMD EPYC (znver4, 32 MB L3): a 16M float32 sum's kernel alone took
# 2.20 ms in zmm, 2.01 in ymm, torch's sum 2.11 (the same loop written in C: 2.21 and 2.06 ms). Compiled calls, zmm ->
# ymm (torch): the sum 2.59 -> 2.32 ms (2.25) and 2.59 -> 2.37 (2.31), row sums of 4096x4096 2.66 -> 2.28 (2.36) and
# 16384x1024 2.63 -> 2.27 (2.28); one thread, thread CPU, medians of 21-40 interleaved, load 11-20. In ymm, 1, 2 or 8
# streams and 2 or 8 vectors a turn changed nothing measurable. From the caches zmm was the faster: sums of 2M
# elements (8 MB) 0.109 against 0.113 ms, 1024x4096 row sums 0.297 against 0.321 (medians of 80, load 15). A float max
# (`float_extremum`) keeps LLVM's width: from memory zmm and ymm were even (4096x4096 2.41 and 2.47 ms, 16384x1024
# 2.42 and 2.42; torch 2.43, 2.41), from the caches zmm was the faster (2048x1024: 0.113 against 0.136 ms). Narrower
# targets keep LLVM's choice (x86-64-v2: 128 bits), as do Intel's AVX-512 server cores, for which LLVM prefers 256-bit
# vectors already (`target.CpuTarget.module_text`).
RUN_VECTOR_BITS = 256
STREAMING_BYTES = 32 << 20
# Runs of fewer than `RUN_NARROW_TURNS` turns of `RUN_INTERLEAVE` such vectors keep LLVM's width: rows of 16
# float32, under one turn, were added one by one (a 1048576x16 row sum 2.74 -> 5.53 ms; torch 4.95); rows of 32
# (one turn) were even in ymm (2.30 / 2.26 ms), rows of 64 (two) faster (2.38 -> 2.32).
RUN_NARROW_TURNS = 2


def streams_for(count):
    """How many streams a run of ``count`` reduced elements is read in."""
    return STREAMS if count >= STREAMED_MIN else 1


def run_loop(module, count, bits=None):
    """The ``llvm.loop`` metadata of the loop of a run of ``count`` elements (`RUN_LOOP`); with ``bits`` (its
    accumulators' bits, in a kernel that streams from memory: see `RUN_VECTOR_BITS`), vectors of at most
    `RUN_VECTOR_BITS` where the selected machine's are wider and the run fills at least `RUN_NARROW_TURNS`
    turns of them."""
    widest = vector_bits(selected()) if bits is not None else None
    lanes = RUN_VECTOR_BITS // bits if widest is not None and widest > RUN_VECTOR_BITS >= bits else None
    width = (("llvm.loop.vectorize.width", lanes),) \
        if lanes and count >= RUN_NARROW_TURNS * RUN_INTERLEAVE * lanes else ()
    return loop_metadata(module, *RUN_LOOP, *width)


def streamed_run(b, lo, hi, count, visit, bits=None):
    """Visit every index of [lo, hi) (``count`` indices, or at most so many) once: ``visit(b, js)`` with one
    index per stream, the i-th stream walking the i-th of `streams_for` ``count`` equal contiguous parts, then
    each index left over alone (``js`` of one). Each stream folds into an accumulator of its own: along a long
    run a core keeps more loads in flight along several streams than along one (a 16M sum's parts ran 3-7%
    faster in four; short runs are one stream: see `STREAMED_MIN`); the loop is vectorised with four vectors
    of accumulators per stream (`run_loop`: with ``bits``, of at most `RUN_VECTOR_BITS`)."""
    streams = streams_for(count)
    part = b.sdiv(b.sub(hi, lo), I64(streams))
    loop = counted_loop(b, lo, b.add(lo, part), I64(1),
                        lambda b, j: visit(b, [j] + [b.add(j, b.mul(part, I64(i))) for i in range(1, streams)]),
                        "run")
    if count >= RUN_LOOP_MIN:
        loop.set_metadata("llvm.loop", run_loop(b.module, count, bits))
    rest = counted_loop(b, b.add(lo, b.mul(part, I64(streams))), hi, I64(1), lambda b, j: visit(b, [j]), "rest")
    if streams > 1:  # (fewer than `STREAMS` indices: LLVM vectorised it in vectors that never ran)
        rest.set_metadata("llvm.loop", loop_metadata(b.module, ("llvm.loop.unroll.disable",),
                                                      ("llvm.loop.vectorize.width", 1)))


# Float max and min on the CPU: "maxnum" and "minnum" by reduction, in the dtypes they vectorise in.
EXTREMA = {lowering.AMAX: "maxnum", lowering.AMIN: "minnum"}
EXTREMUM_DTYPES = (_dt.float32, _dt.float64)


def float_extremum(b, which, dtype, lo, hi, value, count):
    """The max (``which`` "maxnum") or min ("minnum") of ``value(b, j)`` (a float Scalar of ``dtype``) over
    j in [lo, hi) (``count`` of them, or at most so many), NaN if any of them is NaN, as torch's max is. The
    range is read in one stream or an even number of them (`streamed_run`), each folded into its own
    accumulator by a max that assumes no NaN, while one unordered compare per pair of streams (per element in
    one stream, which pairs each with itself) tells whether either holds a NaN. So the loop vectorises (the
    vector max is one instruction); a NaN makes the no-NaN max poison, which only the final select, taking NaN
    instead, ever reads. A tie between -0.0 and 0.0 gives either, as torch's vectorised max does. The empty
    range gives the identity (-inf for max, inf for min). Its loop keeps LLVM's vector width (see
    `RUN_VECTOR_BITS`)."""
    t = llvm_type(dtype)
    streams = streams_for(count)
    fn = b.module.declare_intrinsic(f"llvm.{which}", [t], ir.FunctionType(t, [t, t]))
    with b.goto_entry_block():  # static slots, which mem2reg turns into the loop's registers
        slots, nan = [b.alloca(t) for _ in range(streams)], b.alloca(ir.IntType(1))
    fold = lambda p, q: b.call(fn, [p, q], fastmath=("nnan", "nsz"))  # noqa: E731

    def visit(b, js):
        values = [value(b, j).value for j in js]
        for slot, v in zip(slots, values):
            b.store(fold(b.load(slot), v), slot)
        # the stream pairs' compares; an index left over pairs with itself
        pairs = zip(values[::2], values[1::2]) if len(values) > 1 else [(values[0], values[0])]
        found = b.load(nan)
        for p, q in pairs:
            found = b.or_(found, b.fcmp_unordered("uno", p, q))
        b.store(found, nan)
    for slot in slots:
        b.store(ir.Constant(t, float("-inf") if which == "maxnum" else float("inf")), slot)
    b.store(ir.Constant(ir.IntType(1), 0), nan)
    streamed_run(b, lo, hi, count, visit)
    total = b.load(slots[0])
    for slot in slots[1:]:
        total = fold(total, b.load(slot))
    return Scalar(b.select(b.load(nan), ir.Constant(t, float("nan")), total), dtype)


def _carries_float16(bld):
    """Whether any value of ``bld``'s kernel is float16. Then `float_extremum` is not used: LLVM narrows its
    max of two float16 values widened to float32 to a max of halves, and LLVM 15's x86 back end aborts the
    process on that vector max ("Cannot select: v16f16 = X86ISD::FMAX nnan nsz") on an AVX-512 host without
    AVX512-FP16 (measured on an AMD EPYC, which LLVM 15 takes for a znver3). Keys (`lowering.Reduction`)
    give the same max, NaN included."""
    values = list(bld.geometry) + [v for n in bld.group.nodes for v in n.outputs]
    return any(v.type.dtype is _dt.float16 for v in values)


def _merged_reduced_dims(group, red, reduced):
    """The reshape in ``group`` that makes ``red``'s input by merging trailing dims into the one dim
    ``red`` reduces (a pool's windows, ``(..., kH, kW)`` seen as ``(..., kH * kW)``), read by ``red`` alone;
    else None. Where the reshape of a strided value cannot be a view, the kernel reduces the merged dims
    in place instead of copying them."""
    x = red.args[0]
    node = x.node
    shape = tuple(x.type.shape)
    if node is None or node not in group.nodes or node.op.name not in RESHAPES or not shape \
            or reduced != [len(shape) - 1] or x in group.outputs:
        return None
    if any(x in list(_args(n)) for n in group.nodes if n is not red):
        return None
    src = tuple(node.args[0].type.shape)
    lead = len(shape) - 1
    return node if len(src) > lead and src[:lead] == shape[:lead] else None


# Full reductions at least this large are computed in the target's split_parts slices (in parallel),
# then combined.
SPLIT_MIN_WORK = 1 << 18
SPLITTABLE = ("sum", "mean", "prod", "amax", "amin", "max", "min")
# Bytes of accumulators a thread keeps for a reduction whose innermost input dim is kept, by target:
# A chunk holds at least one unit of the outer loop (the inner kept dims), on the stack up to this size;
# beyond it the kept dims loop outside the reduced ones.
KEPT_CHUNK_MAX_BYTES = 1 << 17


def _meta_of(node):
    """The node's meta spec on compact fake inputs (its compute dtype is what the kernel uses)."""
    return registry.quiet_meta(node.op, [fake_tensor(a.type.shape, a.type.dtype, a.type.device)
                                         if isinstance(a, Value) else a for a in node.args])


def _args(node):
    return iter_values(node.args)


def _upstream(nodes, bld):
    """The computed nodes some nodes depend on, inside the group."""
    seen, stack = set(), list(nodes)
    computed = set(bld.computed)
    while stack:
        n = stack.pop()
        for v in _args(n):
            p = v.node
            if p is not None and p in computed and p not in seen and v not in bld.geometry:
                seen.add(p)
                stack.append(p)
    return seen


# (``_log_softmax_stats``: log_softmax's row kernel writing each row's max and log-sum, not the row)
SOFTMAX_OPS = ("softmax", "log_softmax", "_log_softmax_stats")


def is_row_softmax(node):
    """softmax/log_softmax (or its statistics) over the last dim of a float32/float64 tensor, in its own dtype."""
    if node.op.name not in SOFTMAX_OPS or not lowering.math_available():
        return False
    x, dim, dtype = (tuple(node.args) + (None,))[:3]
    t = x.type
    return t.ndim >= 1 and dim % t.ndim == t.ndim - 1 and dtype in (None, t.dtype) and \
        t.dtype in (_dt.float32, _dt.float64) and t.shape[-1] > 0


def row_softmax_of(group):
    """The row softmax that ``group``'s softmax kernel computes: its last node, after the pointwise (and view)
    nodes that compute its input where it has such a prologue (the executor's `softmax_prologues`); None
    where the group is no such softmax."""
    node = group.nodes[-1]
    if not is_row_softmax(node):
        return None
    if any(lowering.kind_of(n) not in ("pointwise", "view") for n in group.nodes[:-1]):
        return None
    return node


def _reshaped_prologue(group, x):
    """(the reshapes (`RESHAPES`: views that keep their operand's elements in row-major order, so that the
    prologue's value seen through them is the same expression over its leaves' strides viewed likewise) of
    ``group`` from the value its prologue computes to softmax input ``x``, in order, that value); ([], x)
    where ``x`` is computed or read without one (views of the kernel's inputs fold as in any kernel)."""
    nodes, chain, v = set(group.nodes), [], x
    while v.node in nodes and v.node.op.view is not None:
        chain.insert(0, v.node)
        v = v.node.args[0]
    if v.node not in nodes:
        return [], x
    if any(n.op.name not in RESHAPES or n.op.attrs.get("reinterprets") for n in chain):
        raise CompileError(f"softmax of a {chain[-1].op.name} of its prologue's value: only reshapes fold there")
    return chain, v


def _row_reader(bld, b, e, ptr, x, ridx, source):
    """``read(b, j)``: the Scalar of softmax input ``x`` at row ``ridx`` (flat over the leading dims), column
    ``j``: a load where ``x`` is the kernel's input, else its prologue's expression (of ``source``, which
    ``x`` reshapes, or is) over the leaves, each read at its row's base (computed once per row) plus ``j``
    times its column stride."""
    shape = tuple(x.type.shape)
    if x in bld.group.inputs:
        base = b.mul(ridx, I64(shape[-1]))
        return lambda b, j: e.load(b.gep(ptr[x], [b.add(base, j)]), x.type.dtype)
    leaves = [v for v in bld.geometry if _used(v, bld)]
    reads = []
    for v in leaves:
        strides = _broadcast_strides(bld.geometry[v][2], bld.geometry[v][1], source.type.shape)
        strides = view_strides(tuple(source.type.shape), tuple(strides), shape) if source is not x else strides
        if strides is None:
            raise CompileError(f"a leaf of a softmax's prologue is not linear over the reshaped {list(shape)}")
        reads.append(list(strides))
    sizes, lead = _collapse(list(shape[:-1]), [r[:-1] for r in reads])
    index, rest = [], ridx
    for k in range(len(sizes) - 1, -1, -1):  # the row's index along each collapsed leading dim
        index.insert(0, rest if k == 0 else b.urem(rest, I64(sizes[k])))
        rest = b.udiv(rest, I64(sizes[k])) if k else rest
    bases = {v: bld.offset(b, index, strides, bld.geometry[v][3]) for v, strides in zip(leaves, lead)}
    columns = {v: r[-1] for v, r in zip(leaves, reads)}

    def read(b, j):
        def load(v):
            at = bases[v] if not columns[v] else b.add(bases[v], b.mul(j, I64(columns[v])) if columns[v] != 1 else j)
            return e.load(b.gep(ptr[bld.geometry[v][0]], [at]), v.type.dtype)
        return bld.evaluate(e, source, {}, load)
    return read


# rows of at least this many vectors of the sum's lanes compute their exponentials at the target's full width
WIDE_ROW_VECTORS = 4


def build_softmax(group, name, target=None, aliases=None, layouts=None):
    """Row softmax in one kernel: per row, a max pass, a pass writing exp(x - max) and summing
    it, and a pass normalising in place (the row stays in cache between passes). A pointwise prologue
    that computes the softmax's input (a bias add, an attention's scale and mask), maybe through reshapes,
    is evaluated in each pass that reads the input, so that the input is never written to memory.
    ``_log_softmax_stats`` runs log_softmax's first two passes and writes the row's max and ``log(sum)`` in
    place of the third: ``(x - max) - log(sum)`` computed elsewhere is log_softmax's result bit for bit."""
    node = row_softmax_of(group)
    x = node.args[0]
    chain, source = _reshaped_prologue(group, x)
    if layouts and x in layouts:
        raise CompileError("softmax of a value that is not compact: its rows are not contiguous")
    dtype = x.type.dtype
    cols = x.type.shape[-1]
    rows = prod(x.type.shape[:-1])
    stats = node.op.name == "_log_softmax_stats"
    outs = list(node.outputs) if stats else node.outputs[:1]
    bld = _Builder(replace(group, nodes=[n for n in group.nodes if n not in chain]) if chain else group, name,
                   target, aliases)
    module, kernel, ptr, b, e = bld.begin(bld.roots + outs)
    dst = ptr[outs[0]]
    t = llvm_type(dtype)
    log = node.op.name != "softmax"

    target = bld.target
    add = lambda e, p, q: e.add(p, q, reassociate=True)  # noqa: E731

    def row(b, ridx):
        read = _row_reader(bld, b, e, ptr, x, ridx[0], source)
        base = b.mul(ridx[0], I64(cols))
        at = lambda p, j: b.gep(p, [b.add(base, j[0])])  # noqa: E731

        if target is CPU and not _carries_float16(bld):
            m = float_extremum(b, "maxnum", dtype, I64(0), I64(cols), read, cols)
        else:  # a GPU block combines keys (see lowering.Reduction): one integer max carries NaN
            amax = lowering.AMAX
            key = amax.accumulator(dtype, dtype)
            lowest = amax.start(e, dtype, key)
            with b.goto_entry_block():
                m_slot = b.alloca(llvm_type(key))

            def max_item(b, j, slot):
                item = amax.enter(e, read(b, j[0]), dtype, key)
                e.store(amax.combine(e, e.load(slot, key), item), slot)
            e.store(lowest, m_slot)
            target.reduce_loops(bld, b, e, [cols], max_item, m_slot, key, amax.combine, lowest)
            m = amax.leave(e, e.load(m_slot, key), dtype)
        if target is CPU:  # the sum in the order `lanes` defines: the same bits whatever the prologue and target
            def term(b, j):
                ex = e.math("exp", e.sub(read(b, j), m))
                if not log:  # (the sum's last vector may compute a term again: it stores the same bits)
                    e.store(ex, at(dst, [j]))
                return ex.value
            # (the lane loops ask for the target's full width, `CpuTarget.module_text`, on rows of 4 vectors or
            # more: a 33-wide float32 row's two vectors of exponentials took 1.3x the time at 512 bits)
            lane_loop = bld.map_loop if cols >= WIDE_ROW_VECTORS * lanes(t) else plain_loop
            total = Scalar(ordered_sum(b, I64(0), cols, t, term, lane_loop), dtype)
        else:  # a GPU block's threads add their partial sums as `reduce_loops` does
            with b.goto_entry_block():
                s_slot = b.alloca(t)
            b.store(ir.Constant(t, 0.0), s_slot)

            def exp_pass(b, j, slot):
                ex = e.math("exp", e.sub(read(b, j[0]), m))
                if not log:
                    e.store(ex, at(dst, j))
                b.store(add(e, Scalar(b.load(slot), dtype), ex).value, slot)
            target.reduce_loops(bld, b, e, [cols], exp_pass, s_slot, dtype, add, 0.0)
            total = Scalar(b.load(s_slot), dtype)
        if stats:  # (the max and the log apart, for the same reason as below)
            e.store(m, b.gep(dst, [ridx[0]]))
            e.store(e.math("log", total), b.gep(ptr[outs[1]], [ridx[0]]))
        elif log:
            # (x - max) - log(sum), as torch: x - (max + log(sum)) would round the shift at the max's scale
            # and lose the result where the max is large against it (equal logits of 1e30 gave 0, not -log(n))
            norm = e.math("log", total)
            target.map_loops(bld, b, [cols], lambda b, j: e.store(e.sub(e.sub(read(b, j[0]), m), norm), at(dst, j)))
        else:
            target.map_loops(bld, b, [cols], lambda b, j: e.store(e.div(e.load(at(dst, j), dtype), total),
                                                                   at(dst, j)))

    bld.loops(b, [rows], row, kernel.args[0], kernel.args[1])
    return bld.finish(b, kernel, KernelSource(name, "softmax", [n.op.name for n in group.nodes], bld.roots, outs,
                                              rows, rows * cols), "block")


def build(group, name, target=None, aliases=None, layouts=None):
    """The kernel source of a fusion group for ``target`` (default the CPU; CompileError if it has
    no kernel form). ``aliases``: output -> input it is computed into, in place; ``layouts``: value ->
    strides of the buffers that are not compact (dense from offset 0 in another order)."""
    if group.kind == "pointwise":
        return build_pointwise(group, name, target, aliases, layouts)
    if group.kind == "reduction":
        return build_reduction(group, name, target, aliases, layouts)
    if group.kind == "view":
        return build_copy(group, name, target, aliases, layouts)
    if row_softmax_of(group) is not None:
        return build_softmax(group, name, target, aliases, layouts)
    raise CompileError(f"a {group.kind} group has no kernel")


class _Unsignable(Exception):
    """A group holds an argument whose repr might not tell it apart from another value."""


# What a node argument may be for a group to have a signature: types whose repr is the value.
_EXACT = (type(None), bool, int, float, complex, str)

# signature -> (KernelSource with buffer positions for Values, a name), the most recently used last
_built: collections.OrderedDict = collections.OrderedDict()
_built_lock = module_lock(globals(), "_built_lock")
BUILT_LIMIT = 1024


def _signature(group, aliases, layouts, flat=True):
    """(a hashable description of everything `build` reads of the group but the target, the group's values
    in the order the description numbers them, the loop length of a flat kernel or None): two groups with
    equal signatures make kernels (for one target) equal but for their name, the Values they name and, for
    a flat kernel, its loop's length; its repr is the same in every process. None where an argument's repr
    is not exact. Where ``flat`` (a target whose kernels take the outer loop's bounds from the caller: the
    CPU's), a pointwise group over compact values of its space's shape, or of one element, is one loop
    whatever its shape (see `_flat_length`): its description says which values are 0-d, of one element or
    of the space's shape, not their sizes."""
    described = _described.get(group)
    if described is None:
        described = _described[group] = _nodes_described(group)
    values, labels, nodes = described
    if nodes is None:  # a value from outside the group, or an argument without an exact repr
        return None, values, None
    length = _flat_length(group, values, layouts) if flat else None

    def shape(v):
        if length is None:
            return tuple(v.type.shape)
        # (type promotion tells 0-d tensors from others, and the loop a broadcast element from the rest)
        return ("flat", "0-d" if not v.type.shape else "one" if prod(v.type.shape) == 1 else "all")
    try:
        description = (
            group.kind, tuple(group.shape) if length is None else "flat",
            tuple((str(v.type.dtype), shape(v), str(v.type.device)) for v in values),
            nodes,
            tuple(labels[v] for v in group.outputs),
            tuple(sorted((labels[o], labels[i]) for o, i in (aliases or {}).items())),
            tuple(sorted((labels[v], tuple(st)) for v, st in (layouts or {}).items())))
    except KeyError:  # an alias or layout of a value from outside the group
        return None, values, None
    return description, values, length


# group -> `_nodes_described` of it: a group's kernel is asked for again with the outputs it computes in
# place (`build_many`), and describing its nodes is most of a signature's time. Groups are not changed
# once fusion has made them.
_described = weakref.WeakKeyDictionary()


def _nodes_described(group):
    """(the group's values in `_signature`'s order, value -> its number, the description of its nodes, or
    None where one reads a value from outside the group or an argument without an exact repr)."""
    values = list(group.inputs) + [v for node in group.nodes for v in node.outputs]
    labels = {v: i for i, v in enumerate(values)}
    try:
        nodes = tuple((node.op.name, tuple(_arg_described(a, labels) for a in node.args), len(node.outputs))
                      for node in group.nodes)
    except (KeyError, _Unsignable):
        nodes = None
    return values, labels, nodes


def _arg_described(a, labels):
    """`_nodes_described`'s description of an argument (a module function: a nested one calling itself is a
    reference cycle, left to the cyclic collector)."""
    if isinstance(a, Value):
        return ("v", labels[a])
    if type(a) in _EXACT:
        return (type(a).__name__, repr(a))
    if type(a) in (tuple, list):
        return (type(a).__name__, tuple(_arg_described(x, labels) for x in a))
    if isinstance(a, _dt.dtype):
        return ("dtype", a.name)
    if isinstance(a, _device):
        return ("device", a.type, a.index)
    raise _Unsignable(type(a).__name__)


def _flat_length(group, values, layouts):
    """The element count of a pointwise group whose kernel is one loop over it, the same text for every
    shape: no views or gathers (their index maths is the shape's), every buffer compact, and every value of the
    space's shape or of one element (read at stride 0), over at least two elements (one loop, not
    none). None for any other group."""
    space = tuple(group.shape)
    n = prod(space)
    if group.kind != "pointwise" or layouts or n < 2 or any(
            node.op.view is not None or isinstance(node.op.pieces.get("lowering"), (lowering.Gather, lowering.Index))
            for node in group.nodes):
        return None
    if all(tuple(v.type.shape) == space or prod(v.type.shape) == 1 for v in values):
        return n
    return None


def _memo_key(target, description):
    """`_built`'s key of a group's signature for ``target``: with the CPU's, the selected machine (`selected`,
    which ``JITORCH_CPU`` may change within a process), whose vector widths a kernel's IR asks for
    (`CpuTarget.module_text`): the memo gave sources built for one machine to a process compiling for another."""
    return (id(target), selected().id() if target in (None, CPU) else None, description)


def build_shared(group, name, target=None, aliases=None, layouts=None):
    """`build`, or the source it made for an equal group earlier in this process (another layer's, the
    last trace's), renamed: building a kernel's LLVM IR costs milliseconds of Python, and a model's
    graph repeats its kernels layer after layer."""
    description, values, length = _signature(group, aliases, layouts, flat=target in (None, CPU))
    if description is None:
        return build(group, name, target, aliases, layouts)
    key = _memo_key(target, description)
    with _built_lock:
        hit = _built.get(key)
        if hit is not None:
            _built.move_to_end(key)
    if hit is not None:
        return _instance(*hit, name, values, length)
    source = build(group, name, target, aliases, layouts)
    template = _template(source, values)
    if template is not None:
        _remember(key, template, name)
    return source


def _remember(key, template, name):
    with _built_lock:
        _built[key] = (template, name)
        while len(_built) > BUILT_LIMIT:
            _built.popitem(last=False)


def _template(source, values):
    """``source`` with positions in ``values`` for its Values (None if it names another value)."""
    labels = {v: i for i, v in enumerate(values)}
    try:
        return replace(source, inputs=[labels[v] for v in source.inputs],
                       outputs=[labels[v] for v in source.outputs],
                       layouts={labels[v]: st for v, st in source.layouts.items()})
    except KeyError:
        return None


def _instance(template, old_name, name, values, length=None):
    """The source of a `_template` for a group of ``values``, named ``name``; a flat kernel's loop
    ``length`` long (see `_signature`)."""
    sized = {} if length is None else {"outer": length, "work": length}
    return replace(template, name=name, llvm_ir=template.llvm_ir.replace(old_name, name),
                   inputs=[values[i] for i in template.inputs], outputs=[values[i] for i in template.outputs],
                   layouts={values[i]: st for i, st in template.layouts.items()}, **sized)


# The package's sources that decide what IR a fused group becomes, relative to the package: the layers at and
# below the code generator that a lowering reads (tests/codegen/test_generator_fingerprint.py checks that
# every module codegen/ imports, directly or not, is here). Not autograd (it decides which graph is traced,
# and a group's signature holds the graph; never how a group is lowered), nor the layers above.
GENERATOR_SOURCES = ("runtime", "ops", "tensor.py", "_tensor_str.py", "ir", "codegen")


def sources_digest(root, parts=GENERATOR_SOURCES, store=None):
    """SHA-256 (hex) of the ``*.py`` files of ``parts`` (folders, searched recursively, or files) under
    ``root``, each with its path.

    With ``store`` (a `KernelCache`), the digest an earlier process computed from the same files is taken from it
    instead of reading and hashing them (2 MB: 4-5 ms of each process's first compile), found by the files'
    status: each one's path, size, inode, device and modification and change times in nanoseconds (see
    `_listing`). Any write to a file changes its change time (which no tool sets back), and a file replaced by
    another (an editor's save, a checkout) is another inode, so an edited tree finds no entry and is hashed again.
    As git does for its index ("racily clean" files), an entry is written only when every file's change time lies
    `RACY_SECONDS` before the listing was taken: a file written again within its file system's clock tick of the
    listing might otherwise keep its status over an edit. The entry is 64 hex digits, checked as such."""
    paths = source_paths(root, parts)
    if store is not None:
        from .cache import cache_key
        listed_ns = time.time_ns()
        listing, newest_ns = _listing(root, paths)
        key = cache_key("generator sources digest", listing)
        stored = store.get(key, listing, limit=64)
        if stored is not None and _HEX_DIGEST.fullmatch(stored):
            return stored.decode("ascii")
    h = hashlib.sha256()
    for path in paths:
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest = h.hexdigest()
    if store is not None and newest_ns < listed_ns - RACY_SECONDS * 10**9:
        store.put(key, digest.encode("ascii"), listing)
    return digest


def source_paths(root, parts=GENERATOR_SOURCES):
    """The files `sources_digest` hashes, in its order: the ``*.py`` files of ``parts`` under ``root``."""
    paths = []
    for part in parts:
        path = root / part
        paths += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return paths


# A file changed this recently when `sources_digest` listed it keeps its digest from the cache (see there).
RACY_SECONDS = 3
_HEX_DIGEST = re.compile(rb"[0-9a-f]{64}")


def _listing(root, paths):
    """(the status lines of ``paths`` that key their digest, the newest change or modification time in ns)."""
    lines, newest = [f"jitorch generator sources {len(paths)}"], 0
    for path in paths:
        st = path.stat()
        lines.append(f"{path.relative_to(root).as_posix()} {st.st_size} {st.st_ino} {st.st_dev} {st.st_mtime_ns} "
                     f"{st.st_ctime_ns}")
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    return "\n".join(lines), newest


@functools.cache
def generator_fingerprint():
    """SHA-256 (hex) of the sources that decide what IR a fused group becomes (`GENERATOR_SOURCES`): the code
    generator's, the ops' (their dtype and rounding rules), the IR's (types, nodes) and the runtime's (dtypes,
    casts, the thread team's IR). A kernel-sources entry is named by its groups, not by the IR built for them,
    and jitorch's version does not change with an edit: without this, an entry written by another build of the
    same version (before a merge that changed a lowering, or erf's formula) handed this one its old kernels.
    Computed once per process, when an entry is first looked up; the digest of files whose status the cache
    folder knows is read from there (`sources_digest`: 2 MB read and hashed took 4-5 ms)."""
    from .cache import KernelCache
    # (a cache of its own, so that `default_cache`'s counts stay the kernels')
    return sources_digest(Path(__file__).resolve().parents[1], store=KernelCache())


# A cached kernel IR entry (`cached_ir`) of more bytes is refused unread (GPT's attention tiles: 78-80 KB).
IR_LIMIT = 1 << 20


def cached_ir(what, text, build, cache, fingerprint):
    """The LLVM IR text of a hand-built kernel (an attention tile, the rows' scatter-add) that ``text`` describes:
    everything that decides its IR but the code generator's sources, which key it too (``fingerprint``: the
    caller's `generator_fingerprint()`, looked up in the caller's module, so that benchmarks/attention_kernels.py's
    baseline module keys its IR apart from this version's).
    From ``cache`` (a `KernelCache`), where an earlier process built it, else ``build()``'s, stored there. The IR
    keys the kernel's object code in turn, and building it was 10-25 ms of Python in each process's first call. A
    damaged entry fails the cache's checks, or is no UTF-8, and is built again; an entry over `IR_LIMIT` bytes is
    refused unread."""
    from .cache import cache_key
    key = cache_key(f"{what} IR", fingerprint, text)
    stored = cache.get(key, text, limit=IR_LIMIT)
    if stored is not None:
        try:
            return stored.decode("utf-8")
        except UnicodeDecodeError:  # (a damaged entry: built again)
            pass
    llvm_ir = build()
    cache.put(key, llvm_ir.encode("utf-8"), text)
    return llvm_ir


def build_many(requests, cache=None):
    """CPU kernel sources of ``requests`` ((group, name, aliases, layouts)), None where the builder refuses
    a group: `build_shared`'s, or, where this process has built none of them, the sources an earlier
    process built for the same groups, read from ``cache`` (a `KernelCache`) as one entry, which a
    build of all of them writes (for two requests or more). That spares a new process the Python work of building a graph's IR."""
    from .cache import KernelCache, cache_key
    from .target import CPU
    if not isinstance(cache, KernelCache):  # (an export's artifacts count every get as a kernel of theirs)
        cache = None
    signed = [_signature(group, aliases, layouts) for group, _, aliases, layouts in requests]
    # (a process that has built no kernel's IR yet, as one compiling over a warm cache, asks nothing: each question
    # hashes a group's whole description, 4,763 of them in generate's first build)
    known = bool(_built) and any(_memo_key(None, d) in _built for d, _, _ in signed if d is not None)
    # (one group's IR is quick to build: a graph of one kernel keeps the single entry of its object code)
    if cache is None or known or len(signed) < 2 or any(d is None for d, _, _ in signed):
        return [built_or_refused(request) for request in requests]
    # (the machine's triple, CPU and features: the IR asks for its vector widths)
    text = repr([selected().id()] + [d for d, _, _ in signed])
    key = cache_key("kernel sources", generator_fingerprint(), text)
    stored = cache.get(key, text)
    if stored is not None:
        try:
            return [None if t is None else _instance(*t, name, values, length)
                    for t, (_, name, _, _), (_, values, length) in zip(_decode(stored), requests, signed,
                                                                       strict=True)]
        except (ValueError, KeyError, TypeError, IndexError):  # a damaged entry: build again
            pass
    sources = [built_or_refused(request) for request in requests]
    templates = [None if s is None else _template(s, values) for s, (_, values, _) in zip(sources, signed)]
    if all(t is not None or s is None for t, s in zip(templates, sources)):
        cache.put(key, _encode([None if t is None else (t, s.name) for t, s in zip(templates, sources)]), text)
    return sources


def built_or_refused(request, target=None):
    """The kernel source of a (group, name, aliases, layouts) request for ``target`` (None: the CPU's), or
    None where the kernel builder refuses the group."""
    group, name, aliases, layouts = request
    try:
        return build_shared(group, name, target, aliases, layouts)
    except CompileError:
        return None


def _encode(entries):
    """JSON bytes of [(template, its name) or None]: each distinct LLVM IR text once, with the kernel's name
    in it as NUL (which LLVM's text never holds), the entries naming theirs by position. A model's layers
    repeat their kernels but for the names: a GPT step's entry held 3 MB of text, to read and parse in
    every new process, for 45 distinct kernels."""
    import json
    texts = {}
    fields = [None if e is None else _fields(*e, texts) for e in entries]
    return json.dumps({"texts": list(texts), "kernels": fields}).encode()


def _fields(src, name, texts):
    split = None if src.split is None else [src.split.parts, src.split.reduction, src.split.count,
                                            src.split.dtype.name]
    return {"name": name, "kind": src.kind, "ops": src.ops, "inputs": src.inputs, "outputs": src.outputs,
            "outer": src.outer, "work": src.work, "llvm_ir": texts.setdefault(src.llvm_ir.replace(name, "\0"),
                                                                               len(texts)),
            "mode": src.mode, "split": split, "layouts": [[i, list(st)] for i, st in src.layouts.items()]}


def _decode(data):
    """The [(template, its name) or None] of `_encode`'s bytes (ValueError, KeyError, TypeError or IndexError
    for bytes it did not make)."""
    import json
    entry = json.loads(data)
    texts = entry["texts"]
    if not all(type(t) is str for t in texts):
        raise TypeError("kernel sources: an LLVM IR text that is no string")
    out = []
    for d in entry["kernels"]:
        if d is None:
            out.append(None)
            continue
        if type(d["llvm_ir"]) is not int or d["llvm_ir"] < 0:
            raise IndexError("kernel sources: no text at that position")
        split = None if d["split"] is None else Split(*d["split"][:3], _dt._by_name(d["split"][3]))
        out.append((KernelSource(d["name"], d["kind"], list(d["ops"]), list(d["inputs"]), list(d["outputs"]),
                                 int(d["outer"]), int(d["work"]), texts[d["llvm_ir"]].replace("\0", d["name"]),
                                 split=split, mode=d["mode"],
                                 layouts={int(i): tuple(st) for i, st in d["layouts"]}), d["name"]))
    return out


__all__ = ["CompileError", "KernelSource", "build", "build_copy", "build_many", "build_pointwise",
           "build_reduction", "build_shared", "reductions_of"]
