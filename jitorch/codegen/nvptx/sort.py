"""A generated sort for CUDA: a bitonic network per line, in shared memory.

Each block sorts one line along ``dim`` at a time (a grid-stride loop over lines). The line is loaded into
shared memory with each element's position, padded to a power of two, and sorted by a bitonic network
whose stages are unrolled at generation time, with a barrier after each. Elements compare by the CPU's
order exactly (`comes_before`): NaN after every number (before, descending), and equal elements by their
position, which makes the network stable, as ``sort`` is on the CPU. Lines of up to `MAX_LINE` elements fit
in shared memory; a longer line is sorted in runs of `MAX_LINE` (``run``: a block per run), which the merge
passes of merge.py then join.
"""

from __future__ import annotations

from llvmlite import ir

from ...runtime import dtypes as _dt
from ...runtime.strided import contiguous_strides
from ..emitter import Emitter, llvm_type
from .ptx import ptx_of
from .loop_kernel import LineSpec, LoopKernel, entry, lines_of, offset, symbol
from .target import I32, I64, SHARED, _sreg, barrier, strided_loop, unflatten

MAX_LINE = 2048


def comes_before(e, a, ia, c, ic, descending):
    """Whether element ``a`` at position ``ia`` comes before ``c`` at ``ic`` (i64 positions) in the CPU's
    stable order: ascending with NaN last, or descending with NaN first; equal values (and NaNs) by
    position."""
    b = e.b
    earlier = b.icmp_signed("<", ia, ic)
    nan_a, nan_c = e.isnan(a).value, e.isnan(c).value
    equal = b.or_(e.compare("==", a, c).value, b.and_(nan_a, nan_c))
    if descending:
        ahead = b.or_(e.compare(">", a, c).value, b.and_(nan_a, b.not_(nan_c)))
    else:
        ahead = b.or_(e.compare("<", a, c).value, b.and_(nan_c, b.not_(nan_a)))
    return b.or_(ahead, b.and_(equal, earlier))


def compared_dtype(dtype):
    """The dtype sort keys compare in (the halves widen to float32, exactly)."""
    return _dt.float32 if dtype in (_dt.float16, _dt.bfloat16) else dtype


def sort_kernel(shape, dim, src, descending, run=None, cache=None):
    """The kernel sorting ``shape`` along ``dim``; ``src`` is (dtype, element strides). With ``run``, each line
    is sorted in runs of that many elements (the last one shorter), each run on its own. Pointers: (src,
    values, indices), both outputs compact, the indices positions in the whole line."""
    dtype = src[0]
    n = shape[dim]
    run = min(run or n, n)
    runs = -(-n // run)
    width = 2
    while width < run:
        width *= 2
    out_strides = contiguous_strides(tuple(shape))
    lines, line_src, line_out = lines_of(shape, dim, src[1], out_strides)
    name = symbol(f"jitorch_sort_d{dim}_{'x'.join(map(str, shape))}_{'x'.join(map(str, src[1]))}_{dtype.name}"
                  f"{'_desc' if descending else ''}{f'_r{run}' if runs > 1 else ''}")
    t = llvm_type(dtype)
    module, fn = entry(name, [t.as_pointer(), t.as_pointer(), I64.as_pointer()])
    src_ptr, values_ptr, indices_ptr = fn.args
    keys, positions = _shared(module, "jitorch.sort.keys", t, width), _shared(module, "jitorch.sort.at", I64, width)
    e = Emitter(ir.IRBuilder(fn.append_basic_block("entry")))
    b = e.b
    compared = compared_dtype(dtype)
    tid, threads = _sreg(b, "tid.x"), _sreg(b, "ntid.x")

    def key(b, i):
        return e.cast(e.load(b.gep(keys, [I32(0), i]), dtype), compared)

    def at(b, i):
        return b.load(b.gep(positions, [I32(0), i]))

    def one_line(b, item):
        point = unflatten(b, b.udiv(item, I64(runs)), list(lines))
        start = b.mul(b.urem(item, I64(runs)), I64(run))
        length = b.select(b.icmp_signed("<", b.sub(I64(n), start), I64(run)), b.sub(I64(n), start), I64(run))
        src_base = b.add(offset(b, point, line_src), b.mul(start, I64(src[1][dim])))
        out_base = b.add(offset(b, point, line_out), b.mul(start, I64(out_strides[dim])))

        def before(a, ia, c, ic):
            """Whether element (a, ia) comes before (c, ic): real elements before padding, then the CPU's
            order."""
            pad_a, pad_c = b.icmp_signed(">=", ia, length), b.icmp_signed(">=", ic, length)
            real = comes_before(e, a, ia, c, ic, descending)
            return b.select(b.icmp_unsigned("!=", pad_a, pad_c), pad_c, b.select(pad_a, b.icmp_signed("<", ia, ic),
                                                                                 real))

        def load(b, i):
            b.store(i, b.gep(positions, [I32(0), i]))
            with b.if_then(b.icmp_signed("<", i, length)):
                value = b.load(b.gep(src_ptr, [b.add(src_base, b.mul(i, I64(src[1][dim])))]))
                b.store(value, b.gep(keys, [I32(0), i]))
        strided_loop(b, tid, I64(width), threads, load)
        barrier(b)
        k = 2
        while k <= width:
            j = k // 2
            while j:
                def exchange(b, i, k=k, j=j):
                    partner = b.xor(i, I64(j))
                    with b.if_then(b.icmp_unsigned(">", partner, i)):
                        a, c = key(b, i), key(b, partner)
                        ia, ic = at(b, i), at(b, partner)
                        rising = b.icmp_unsigned("==", b.and_(i, I64(k)), I64(0))
                        swap = b.select(rising, before(c, ic, a, ia), before(a, ia, c, ic))
                        with b.if_then(swap):
                            for table in (keys, positions):
                                here, there = b.gep(table, [I32(0), i]), b.gep(table, [I32(0), partner])
                                first, second = b.load(here), b.load(there)
                                b.store(second, here)
                                b.store(first, there)
                strided_loop(b, tid, I64(width), threads, exchange)
                barrier(b)
                j //= 2
            k *= 2

        def store(b, i):
            place = b.add(out_base, b.mul(i, I64(out_strides[dim])))
            b.store(b.load(b.gep(keys, [I32(0), i])), b.gep(values_ptr, [place]))
            b.store(b.add(start, at(b, i)), b.gep(indices_ptr, [place]))
        strided_loop(b, tid, length, threads, store)
        barrier(b)  # the next line reuses shared memory

    count = runs
    for s in lines:
        count *= s
    strided_loop(b, _sreg(b, "ctaid.x"), I64(count), _sreg(b, "nctaid.x"), one_line)
    b.ret_void()
    text = str(module)
    return LoopKernel(name, "sort", (count,), LineSpec(dim, tuple(shape), src, descending=descending, run=run),
                      text, ptx_of(text, name, cache), mode="block")


def _shared(module, name, element, count):
    g = ir.GlobalVariable(module, ir.ArrayType(element, count), name, addrspace=SHARED)
    g.linkage = "internal"
    g.align = 8
    g.initializer = ir.Constant(g.value_type, ir.Undefined)
    return g

