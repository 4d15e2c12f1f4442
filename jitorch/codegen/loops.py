"""Counted loops as basic blocks, which every hand-written kernel and the kernel builder emit."""

from __future__ import annotations

from llvmlite import ir

I64 = ir.IntType(64)


def counted_loop(b, lo, hi, step, body, name="l"):
    """``for (i = lo; i < hi; i += step) body(b, i)`` over i64 values, as basic blocks; ``step`` None: the
    step is what ``body`` returns (an iteration that decides how far it went). Returns the loop's back-edge
    branch, which carries the loop's ``llvm.loop`` metadata where it is given some."""
    func = b.function
    head, loop, done = (func.append_basic_block(name + suffix) for suffix in ("", ".body", ".end"))
    pre = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(lo, pre)
    b.cbranch(b.icmp_signed("<", i, hi), loop, done)
    b.position_at_end(loop)
    advance = body(b, i)
    i.add_incoming(b.add(i, step if step is not None else advance), b.block)
    latch = b.branch(head)
    b.position_at_end(done)
    return latch
