"""Code generation targets: what differs between the CPU and a GPU when one kernel builder emits both.

The kernel builder (kernel.py) decides what a kernel computes; a target decides
how its iteration space is split and how the kernel is entered:

- ``triple``: the LLVM target triple of the module;
- ``map_loops(bld, b, sizes, body, start, end)``: a loop nest over ``sizes``
  whose outermost ``[start, end)`` part this call covers, with no cross-iteration
  state (pointwise maps, the passes that only write);
- ``reduce_loops(bld, b, e, sizes, item, slot, dtype, combine, identity, start, end)``:
  ``item(b, indices, slot)`` folded into ``slot`` over every index of ``sizes``;
  on the CPU one thread runs them all, on a GPU a block shares them and combines;
- ``outer(sizes)``: the trip count of what ``map_loops`` splits;
- ``add_entry(module, body, buffers, outer, mode)``: the function a caller launches,
  where ``mode`` is ``"thread"`` (outer iterations are independent items) or
  ``"block"`` (each outer iteration is a cooperative reduction);
- ``split_parts``: into how many partial results a large full reduction is cut;
- ``module_text(module, entry)``: the module's IR text as this target compiles it.

`CPU` is the host target: a plain loop nest over a chunk of the outer loop,
entered through ``entry(i8** buffers, i64 start, i64 end)``.
"""

from __future__ import annotations

import re

from llvmlite import ir

from .machine import selected

I64 = ir.IntType(64)
# a float instruction with a fast-math flag: its result may depend on how many lanes a vector holds
_FAST_MATH = re.compile(r"\b(?:fadd|fsub|fmul|fdiv|frem|fneg|fcmp|call|select|phi)\s+(?:fast|reassoc|nnan|ninf|nsz|arcp|"
                        r"contract|afn)\b")


class CpuTarget:
    """The host CPU: the outer loop is cut in chunks that threads run (see cpu.py)."""

    name = "cpu"
    split_parts = 16
    # a reduction keeping the inner dim accumulates this many bytes of kept elements at a time: small
    # enough to stay in the L1 cache beside the rows streaming through it
    kept_chunk_bytes = 8192

    @property
    def triple(self):
        return selected().triple

    def outer(self, sizes):
        return sizes[0] if sizes else 1

    def map_loops(self, bld, b, sizes, body, start=None, end=None):
        bld.loops(b, sizes, body, start, end)

    def reduce_loops(self, bld, b, e, sizes, item, slot, dtype, combine, identity, start=None, end=None):
        bld.loops(b, sizes, lambda b, idx: item(b, idx, slot), start, end)

    def add_entry(self, module, body, buffers, outer, mode):
        """``entry(i8** buffers, i64 start, i64 end)``: unpacks the buffers for one cheap ctypes call."""
        ptrs = [a.type for a in body.args[2:]]
        entry = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer().as_pointer(), I64,
                                                                     I64]), module.name)
        b = ir.IRBuilder(entry.append_basic_block("entry"))
        args = [b.bitcast(b.load(b.gep(entry.args[0], [I64(i)])), p) for i, p in enumerate(ptrs)]
        b.call(body, [entry.args[1], entry.args[2]] + args)
        b.ret_void()

    def module_text(self, module, entry):
        """The module's text, its entry asking for 512-bit vectors where that pays and cannot change a bit.

        LLVM tunes recent Intel server cores (Skylake-X to Emerald Rapids) to vectorise with 256 bits although
        they have AVX-512, against the clock slowdown wide instructions cost older ones. Kernels evaluating
        `mathlib` functions (erf, tanh, exp, pow...) are bound by arithmetic, not memory, and run faster with
        512-bit vectors on this class of machine: per 1M floats on one Emerald Rapids core, erf 1.35 -> 0.80 ms,
        exp 0.73 -> 0.44, tanh 1.15 -> 0.67, pow 4.6 -> 3.2, log 1.30 -> 1.21.
        Every lane computes what a scalar would (no flag lets LLVM reorder a sum or a min/max across
        lanes), so the width changes no result; kernels with such flags keep LLVM's choice. Machines without
        AVX-512 ignore the attribute.
        """
        text = str(module)
        if "@\"jitorch.math." not in text or _FAST_MATH.search(text):
            return text
        head = f'define void @"{entry}"('
        start = text.index(head)
        end = text.index(")\n", start) + 1
        return text[:end] + ' "prefer-vector-width"="512"' + text[end:]


CPU = CpuTarget()
