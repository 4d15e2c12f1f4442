"""Generated merge passes for CUDA: sorted runs along a dim joined pairwise, for lines longer than a block sorts.

A pass takes lines made of sorted runs of ``width`` elements (the last one shorter) and merges each pair of
neighbouring runs into one of ``2 * width``: a thread per element finds its place in the merged run as its
position in its own run plus the number of elements of the other run that come before it, by a binary
search there (a merge path computed for every element; no thread waits for another, so there are no
barriers). "Before" is the sort's total order (`sort.comes_before`: the CPU's order, NaN last ascending and
first descending, ties by original position), so every element gets a distinct place and the merged runs
keep the stable order. An element whose run has no partner keeps its place.
"""

from __future__ import annotations

from llvmlite import ir

from ...runtime.strided import contiguous_strides
from ..emitter import Emitter, llvm_type
from .ptx import ptx_of
from .loop_kernel import LineSpec, LoopKernel, entry, grid_stride, offset, symbol
from .sort import comes_before, compared_dtype
from .target import I64


def merge_kernel(shape, dim, dtype, width, descending, cache=None):
    """The pass merging runs of ``width`` along ``dim`` of compact ``shape`` tensors of sorted values (of
    ``dtype``) and their int64 positions in the line. Pointers: (values in, positions in, values out,
    positions out), all compact."""
    n = shape[dim]
    strides = contiguous_strides(tuple(shape))
    step = strides[dim]
    name = symbol(f"jitorch_merge_d{dim}_{'x'.join(map(str, shape))}_{dtype.name}_w{width}"
                  f"{'_desc' if descending else ''}")
    t = llvm_type(dtype)
    module, fn = entry(name, [t.as_pointer(), I64.as_pointer(), t.as_pointer(), I64.as_pointer()])
    values_in, positions_in, values_out, positions_out = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = Emitter(b)
    compared = compared_dtype(dtype)

    def key(base, i):
        return e.cast(e.load(b.gep(values_in, [b.add(base, b.mul(i, I64(step)))]), dtype), compared)

    def position(base, i):
        return b.load(b.gep(positions_in, [b.add(base, b.mul(i, I64(step)))]))

    def element(b, flat, point):
        base = offset(b, point, strides, skip=dim)
        p = point[dim]
        low = b.mul(b.udiv(p, I64(2 * width)), I64(2 * width))
        middle = b.add(low, I64(width))
        high = b.select(b.icmp_signed("<", b.add(low, I64(2 * width)), I64(n)), b.add(low, I64(2 * width)), I64(n))
        first = b.icmp_signed("<", p, middle)
        other_low = b.select(first, middle, low)
        other_count = b.select(first, b.sub(high, middle), I64(width))
        own = b.sub(p, b.select(first, low, middle))
        mine, my_position = key(base, p), position(base, p)
        other_base = b.add(base, b.mul(other_low, I64(step)))

        # lower bound: how many of the other run come before this element (none when it has no partner)
        searched = b.select(b.icmp_signed("<", middle, I64(n)), other_count, I64(0))
        entry_block = b.block
        head, body, done = (b.append_basic_block(f"search{s}") for s in ("", ".body", ".end"))
        b.branch(head)
        b.position_at_end(head)
        lo, hi = b.phi(I64), b.phi(I64)
        lo.add_incoming(I64(0), entry_block)
        hi.add_incoming(searched, entry_block)
        b.cbranch(b.icmp_signed("<", lo, hi), body, done)
        b.position_at_end(body)
        m = b.lshr(b.add(lo, hi), I64(1))
        ahead = comes_before(e, key(other_base, m), position(other_base, m), mine, my_position, descending)
        lo.add_incoming(b.select(ahead, b.add(m, I64(1)), lo), b.block)
        hi.add_incoming(b.select(ahead, hi, m), b.block)
        b.branch(head)
        b.position_at_end(done)
        place = b.add(base, b.mul(b.add(b.add(low, own), lo), I64(step)))
        b.store(b.load(b.gep(values_in, [b.add(base, b.mul(p, I64(step)))])), b.gep(values_out, [place]))
        b.store(my_position, b.gep(positions_out, [place]))

    grid_stride(b, tuple(shape), element)
    b.ret_void()
    text = str(module)
    return LoopKernel(name, "merge", shape, LineSpec(dim, tuple(shape), (dtype, None), width=width,
                                                     descending=descending), text, ptx_of(text, name, cache))
