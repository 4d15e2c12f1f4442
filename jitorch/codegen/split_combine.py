"""The combining step of a CPU full reduction split in parts (`kernel.Split`): machine code that folds the
partial results into the result, in its dtype and shape, in one ctypes call.

A 16M float32 sum's kernel streams 64 MB, which evicts the caches: the NumPy reduction over its 16 partials
that combined them took 46 µs there (2 µs warm), and the cast, reshape and wrapping after it as much again,
out of a call 5-10% slower than torch's sum whose kernel was 5-10% faster. This kernel folds the partials
(a sum's in NumPy's pairwise order, as before: the same bits; the others left to right) with the reduction's
own lowering (`lowering.Reduction`: its ``enter``, ``combine``, ``leave`` and ``finish``, so NaN, integer
wrap-around and a mean's division are the kernel's own), casts the total by the cast table and stores it: a defined order that depends neither on the thread count (the parts are fixed)
nor on NumPy's version (NumPy 2.4's pairwise sum of 16 float32 or float64 values is this one).
"""

from __future__ import annotations

import functools

from llvmlite import ir

from ..ops import registry
from . import lowering as _lowering  # noqa: F401  (attaches the ops' lowerings that the combine uses)
from .cpu import ENTRY, _kernel_key, _link_text, target_id
from .emitter import I64, Emitter, llvm_type
from .target import CPU


# The sums whose partials fold in NumPy's pairwise order (`combine_ir`), in lanes of this many; the other
# reductions fold left to right (a product as np.multiply.reduce did; max, min and integer sums in any order).
PAIRWISE = ("sum", "mean")
LANES = 8
PAIRWISE_MAX = 128


def combine_ir(parts, reduction, count, compute, out_dtype, name):
    """The LLVM module text of ``name(args, lo, hi)``: ``args[0]`` points to ``parts`` partial results of
    ``reduction`` (an op's name) in ``compute``, ``args[1]`` to the result, of ``out_dtype``, over ``count``
    elements."""
    if parts > PAIRWISE_MAX:
        raise ValueError(f"{parts} partial results: the combine folds at most {PAIRWISE_MAX}")
    lowering = registry.OPS[reduction].pieces["lowering"]
    acc_dtype = lowering.accumulator(compute, out_dtype)
    module = ir.Module(name=name)
    module.triple = CPU.triple
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, llvm_type(compute).as_pointer(),
                                                                llvm_type(out_dtype).as_pointer()]), name + "_body")
    body.linkage = "internal"
    b = ir.IRBuilder(body.append_basic_block("entry"))
    e = Emitter(b)
    partials, out = body.args[2:]

    def item(i):
        return lowering.enter(e, e.load(b.gep(partials, [I64(i)]), compute), compute, acc_dtype)

    fold = lambda a, b: lowering.combine(e, a, b)  # noqa: E731
    if reduction in PAIRWISE and parts >= LANES:
        # NumPy's pairwise order for a run of at most 128 (what np.add.reduce gave these partials before):
        # eight lanes over the whole blocks of eight, a tree over the lanes, then the rest one by one
        whole = parts - parts % LANES
        lanes = [item(j) for j in range(LANES)]
        for i in range(LANES, whole, LANES):
            lanes = [fold(lane, item(i + j)) for j, lane in enumerate(lanes)]
        while len(lanes) > 1:
            lanes = [fold(lanes[j], lanes[j + 1]) for j in range(0, len(lanes), 2)]
        acc, rest = lanes[0], range(whole, parts)
    else:
        acc, rest = item(0), range(1, parts)
    for i in rest:
        acc = fold(acc, item(i))
    total = lowering.leave(e, acc, compute)
    if lowering.finish is not None:
        total = lowering.finish(e, total, count)
    e.store(e.cast(total, out_dtype), out)
    b.ret_void()
    CPU.add_entry(module, body, None, 1, "thread")
    return CPU.module_text(module, name)


@functools.cache
def combine_entry(parts, reduction, count, compute, out_dtype):
    """(the machine code's ``(args, lo, hi)`` entry as a ctypes function, what keeps that code alive) of
    `combine_ir`'s kernel, linked once per process and argument set (its object code from the kernel cache
    where it is there)."""
    from .cache import default_cache
    name = f"jitorch_combine_{reduction}_{parts}_{count}_{compute.name}_{out_dtype.name}"
    text = combine_ir(parts, reduction, count, compute, out_dtype, name)
    code = _link_text(_kernel_key(text, target_id()), name, text, f"combine {reduction}", default_cache())
    return ENTRY(code.address), code
