"""The NVPTX target: how the shared kernel builder's loops map onto a CUDA grid.

- Maps (pointwise kernels, the write-only passes) flatten their loop nest and
  run it as a grid-stride loop: thread ``t`` of the grid takes flat indices
  ``t, t + gridDim * blockDim, ...`` and recovers the multi-index by division by
  constants, so consecutive threads touch consecutive elements (coalesced).
- Reductions give each block one outer iteration (an output element, a row, a
  part of a full reduction): its threads stride through the reduced indices,
  each folding into a private accumulator, then the block combines them with
  warp shuffles (a butterfly, so every lane ends with its warp's value) and
  shared memory (one slot per warp; every thread folds the slots in the same
  order, so all threads agree on the result bit for bit).

Every kernel is launched with `BLOCK` threads per block.
"""

from __future__ import annotations

from math import prod

from llvmlite import ir

from ..emitter import Scalar
from ..kernel import counted_loop

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
TRIPLE = "nvptx64-nvidia-cuda"
BLOCK = 256
WARP = 32
SHARED = 3  # NVPTX address space of __shared__ memory
_SMEM = "jitorch.smem"


def _sreg(b, name):
    """A PTX special register (``tid.x``, ``ntid.x``, ``ctaid.x``, ``nctaid.x``) as an i64."""
    fname = f"llvm.nvvm.read.ptx.sreg.{name}"
    fn = b.module.globals.get(fname) or ir.Function(b.module, ir.FunctionType(I32, []), fname)
    return b.zext(b.call(fn, []), I64)


def barrier(b):
    """``__syncthreads()``."""
    fn = b.module.globals.get("llvm.nvvm.barrier0") or ir.Function(b.module, ir.FunctionType(ir.VoidType(), []),
                                                                   "llvm.nvvm.barrier0")
    b.call(fn, [])


def strided_loop(b, lo, hi, step, body):
    """``for (i = lo; i < hi; i += step) body(b, i)`` with i64 values (a grid- or block-stride loop)."""
    counted_loop(b, lo, hi, step, body, "sl")


def unflatten(b, flat, sizes):
    """The multi-index of a flat row-major index over ``sizes`` (constant divisors)."""
    indices = []
    for n in reversed(sizes[1:]):
        indices.append(b.urem(flat, I64(n)))
        flat = b.udiv(flat, I64(n))
    indices.append(flat)
    return indices[::-1]


def _to_words(b, v):
    """``v`` (any scalar type up to 64 bits) as a list of i32 words, and how to rebuild it."""
    t = v.type
    bits = t.width if isinstance(t, ir.IntType) else {"half": 16, "float": 32, "double": 64}[str(t)]
    it = ir.IntType(bits)
    raw = v if isinstance(t, ir.IntType) else b.bitcast(v, it)
    if bits <= 32:
        word = raw if bits == 32 else b.zext(raw, I32)

        def rebuild(words):
            w = words[0] if bits == 32 else b.trunc(words[0], it)
            return w if isinstance(t, ir.IntType) else b.bitcast(w, t)
        return [word], rebuild

    def rebuild64(words):
        lo, hi = (b.zext(w, I64) for w in words)
        w = b.or_(lo, b.shl(hi, I64(32)))
        return w if isinstance(t, ir.IntType) else b.bitcast(w, t)
    return [b.trunc(raw, I32), b.trunc(b.lshr(raw, I64(32)), I32)], rebuild64


def shuffle_xor(b, v, lane_mask):
    """The value of ``v`` held by lane ``lane ^ lane_mask`` of this warp (all lanes take part)."""
    fname = "llvm.nvvm.shfl.sync.bfly.i32"
    fn = b.module.globals.get(fname) or ir.Function(b.module, ir.FunctionType(I32, [I32] * 4), fname)
    words, rebuild = _to_words(b, v)
    return rebuild([b.call(fn, [I32(-1), w, I32(lane_mask), I32(WARP - 1)]) for w in words])


def _shared_slots(module):
    """One 8-byte shared-memory slot per warp of a block, shared by every reduction of the kernel."""
    g = module.globals.get(_SMEM)
    if g is None:
        g = ir.GlobalVariable(module, ir.ArrayType(I64, BLOCK // WARP), _SMEM, addrspace=SHARED)
        g.linkage = "internal"
        g.align = 8
        g.initializer = ir.Constant(g.value_type, ir.Undefined)
    return g


def block_combine(b, e, slot, dtype, combine):
    """Combine every thread's ``slot`` across the block; each thread's slot ends with the result."""
    tid = _sreg(b, "tid.x")
    v = Scalar(b.load(slot), dtype)
    for m in (16, 8, 4, 2, 1):
        v = combine(e, v, Scalar(shuffle_xor(b, v.value, m), dtype))
    smem = _shared_slots(b.module)
    t = slot.type.pointee
    at = lambda w: b.bitcast(b.gep(smem, [I32(0), w]), t.as_pointer(SHARED))  # noqa: E731
    lane0 = b.icmp_unsigned("==", b.and_(tid, I64(WARP - 1)), I64(0))
    with b.if_then(lane0):
        b.store(v.value, at(b.lshr(tid, I64(5))))
    barrier(b)
    total = Scalar(b.load(at(I64(0))), dtype)
    for w in range(1, BLOCK // WARP):
        total = combine(e, total, Scalar(b.load(at(I64(w))), dtype))
    b.store(total.value, slot)
    barrier(b)  # the slots are free again for the kernel's next reduction


class NvptxTarget:
    """CUDA GPUs of compute capability ``sm`` and newer, through LLVM's NVPTX backend."""

    name = "cuda"
    triple = TRIPLE
    split_parts = 512  # blocks of a large full reduction: enough to fill any current GPU
    kept_chunk_bytes = kept_run_bytes = 0  # a thread's chunk of kept elements is one, its accumulator a register

    def outer(self, sizes):
        return prod(sizes)

    def map_loops(self, bld, b, sizes, body, start=None, end=None):
        """The flat range ``[start, end)`` of ``sizes`` (the whole of it by default), spread over the
        block's threads when called inside a block-mode kernel, else one thread's own range."""
        if start is None:
            tid, step = _sreg(b, "tid.x"), _sreg(b, "ntid.x")
            strided_loop(b, tid, I64(prod(sizes)), step, lambda b, i: body(b, unflatten(b, i, sizes)))
            return
        strided_loop(b, start, end, I64(1), lambda b, i: body(b, unflatten(b, i, sizes)))

    def reduce_loops(self, bld, b, e, sizes, item, slot, dtype, combine, identity, start=None, end=None):
        tid, step = _sreg(b, "tid.x"), _sreg(b, "ntid.x")
        lo = tid if start is None else b.add(start, tid)
        hi = I64(prod(sizes)) if end is None else end
        strided_loop(b, lo, hi, step, lambda b, i: item(b, unflatten(b, i, sizes), slot))
        block_combine(b, e, slot, dtype, combine)

    def add_entry(self, module, body, buffers, outer, mode):
        """``kernel(T* buffers...)``: a grid-stride loop over threads (``mode="thread"``) or over
        blocks (``mode="block"``) calling the body on one outer iteration at a time."""
        ptrs = [a.type for a in body.args[2:]]
        entry = ir.Function(module, ir.FunctionType(ir.VoidType(), ptrs), module.name)
        entry.calling_convention = "ptx_kernel"
        for arg in entry.args:
            arg.add_attribute("noalias")
        b = ir.IRBuilder(entry.append_basic_block("entry"))
        if mode == "thread":
            first = b.add(b.mul(_sreg(b, "ctaid.x"), _sreg(b, "ntid.x")), _sreg(b, "tid.x"))
            step = b.mul(_sreg(b, "nctaid.x"), _sreg(b, "ntid.x"))
        else:
            first, step = _sreg(b, "ctaid.x"), _sreg(b, "nctaid.x")
        strided_loop(b, first, I64(outer), step, lambda b, i: b.call(body, [i, b.add(i, I64(1))] + list(entry.args)))
        b.ret_void()

    def module_text(self, module, entry, maps=(), work=None):
        """The module's text as it is (a GPU thread computes scalars; ptxas decides what to unroll)."""
        return str(module)


NVPTX = NvptxTarget()
