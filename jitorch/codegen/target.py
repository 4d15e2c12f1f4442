"""Code generation targets: what differs between the CPU and a GPU when one kernel builder emits both.

The kernel builder (kernel.py) decides what a kernel computes; a target decides
how its iteration space is split and how the kernel is entered:

- ``triple``: the LLVM target triple of the module;
- ``map_loops(bld, b, sizes, body, start, end)``: a loop nest over ``sizes``
  whose outermost ``[start, end)`` part this call covers, with no cross-iteration
  state (pointwise maps, the passes that only write);
- ``reduce_loops(bld, b, e, sizes, item, slot, dtype, combine, identity, start, end)``:
  ``item(b, indices, slot)`` folded into ``slot`` over every index of ``sizes``;
  on the CPU one thread runs them all (it returns the innermost loop's back-edge branch), on a GPU a block
  shares them and combines;
- ``outer(sizes)``: the trip count of what ``map_loops`` splits;
- ``add_entry(module, body, buffers, outer, mode)``: the function a caller launches,
  where ``mode`` is ``"thread"`` (outer iterations are independent items) or
  ``"block"`` (each outer iteration is a cooperative reduction);
- ``split_parts``: into how many partial results a large full reduction is cut;
- ``module_text(module, entry, maps, work)``: the module's IR text as this target compiles it, where ``maps``
  are the back-edge branches of the innermost loops ``map_loops`` made, each with its trip count where the
  kernel fixes it, and ``work`` the kernel's elements of work (the CPU's own bookkeeping).

`CPU` is the host target: a plain loop nest over a chunk of the outer loop,
entered through ``entry(i8** buffers, i64 start, i64 end)``.
"""

from __future__ import annotations

from llvmlite import ir

from .loops import keep_rolled
from .machine import selected

I64 = ir.IntType(64)
# LLVM's fast-math flags: with one, a float instruction's result may depend on how many lanes a vector holds
_FAST_MATH = frozenset({"fast", "reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn"})
# Kernels of fewer elements of work keep every loop rolled (`loops.keep_rolled`): LLVM unrolled their short
# loops of fixed trip count whole, code that takes LLVM time to optimise and emit for calls of a few hundred
# nanoseconds. Only kernels without fast-math flags: nothing may then reorder their arithmetic, so rolled or
# not they compute the same bits (a float sum, whose adds may reassociate, keeps the order its reduced sizes
# alone decide: `kernel._keep_reduction_rolled`).
ROLLED_MAX_WORK = 1024


class CpuTarget:
    """The host CPU: the outer loop is cut in chunks that threads run (see cpu.py)."""

    name = "cpu"
    split_parts = 16
    # a reduction keeping the inner dim accumulates this many bytes of kept elements at a time: small
    # enough to stay in the L1 cache beside the rows streaming through it
    kept_chunk_bytes = 8192
    # ... except where the one kept dim is the input's innermost (a bias gradient's sum over rows): each reduced
    # row's chunk is then one run along memory, and a chunk of up to this many bytes (the whole row of a
    # 10,000-wide one) keeps the rows' reads one stream: 8 KB runs 40 KB apart ran the (700, 10000) sum 25-35%
    # slower (CPU time, this AMD host). Each kept element is summed in the same order either way.
    kept_run_bytes = 65536

    @property
    def triple(self):
        return selected().triple

    def outer(self, sizes):
        return sizes[0] if sizes else 1

    def map_loops(self, bld, b, sizes, body, start=None, end=None):
        latch = bld.loops(b, sizes, body, start, end)
        if latch is not None:
            # (with the innermost loop's trip count where the kernel fixes it: not a chunk's bounds)
            bld.maps.append((latch, sizes[-1] if len(sizes) > 1 or start is None else None))

    def reduce_loops(self, bld, b, e, sizes, item, slot, dtype, combine, identity, start=None, end=None):
        return bld.loops(b, sizes, lambda b, idx: item(b, idx, slot), start, end)

    def add_entry(self, module, body, buffers, outer, mode):
        """``entry(i8** buffers, i64 start, i64 end)``: unpacks the buffers for one cheap ctypes call."""
        ptrs = [a.type for a in body.args[2:]]
        entry = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer().as_pointer(), I64,
                                                                     I64]), module.name)
        b = ir.IRBuilder(entry.append_basic_block("entry"))
        args = [b.bitcast(b.load(b.gep(entry.args[0], [I64(i)])), p) for i, p in enumerate(ptrs)]
        b.call(body, [entry.args[1], entry.args[2]] + args)
        b.ret_void()

    def module_text(self, module, entry, maps=(), work=None):
        """The module's text; a kernel evaluating `mathlib` functions (erf, tanh, exp, pow...) gets the target's
        full vector width, where that pays and cannot change a bit; a kernel of fewer than `ROLLED_MAX_WORK`
        elements of ``work`` and no fast-math flag keeps its loops rolled (`ROLLED_MAX_WORK` says why).

        Such kernels are bound by arithmetic, not memory. LLVM tunes recent Intel server cores (Skylake-X to
        Emerald Rapids) to vectorise with 256 bits although they have AVX-512, against the clock slowdown wide
        instructions cost older ones; with 512-bit vectors, per 1M floats on one Emerald Rapids core, erf 1.35
        -> 0.80 ms, exp 0.73 -> 0.44, tanh 1.15 -> 0.67, pow 4.6 -> 3.2, log 1.30 -> 1.21: the entry asks for
        them (``prefer-vector-width``; machines without AVX-512 ignore it). And LLVM's cost model picks the
        lanes from its price of each operation, which for a long function depends on the target: on the
        x86-64-v2 baseline (SSE4.2, no FMA instruction: ``llvm.fma`` is a call of ``fmaf`` per lane) it
        vectorised float exp at 2 lanes and left float erf and double exp, sin and cos scalar. So the
        innermost loops of ``maps`` (independent iterations: nothing to reorder) are given the target's
        register width in lanes of the widest mathlib type (`vector_lanes`) as ``llvm.loop.vectorize.width``:
        4 floats with SSE, 8 with AVX, 16 with AVX-512. (A width alone is a hint, not a demand: where LLVM
        cannot vectorise such a loop it leaves it as it was, silently.)
        Every lane of a map loop computes what a scalar would (its iterations carry nothing, so no flag lets
        LLVM reorder anything across its lanes), so the width changes no result: a kernel with fast-math flags
        outside them (the softmax's max, an `llvm.maxnum` under ``nnan nsz``) gets the widths too (its float64
        exponentials took 0.88x the time on this host's AVX-512, CPU time interleaved), but not the 512-bit
        attribute, which would change how LLVM vectorises the flagged loops.
        """
        # (decided on the module's objects: llvmlite keeps each instruction's text once made, so metadata must
        # be set before the module is first written out)
        math = [f for f in module.functions if f.name.startswith("jitorch.math.")]
        lanes = vector_lanes(math) if math else None
        if lanes and maps:
            width = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"), ir.IntType(32)(lanes)])
            loop = module.add_metadata([width])
            loop.operands = (loop, width)  # a loop's ID names itself first
            folded = None
            for latch, trips in maps:
                if trips is not None and trips % lanes and "avx512f" in selected().required():
                    if folded is None:
                        folded = _tail_folded(module, width)
                    latch.set_metadata("llvm.loop", folded)
                else:
                    latch.set_metadata("llvm.loop", loop)
        reorders = _fast_math(module)
        if work is not None and work < ROLLED_MAX_WORK and not reorders:
            keep_rolled(module)
        text = str(module)
        if not math or reorders:
            return text
        head = f'define void @"{entry}"('
        start = text.index(head)
        end = text.index(")\n", start) + 1
        return text[:end] + ' "prefer-vector-width"="512"' + text[end:]


def _tail_folded(module, width):
    """Loop metadata asking for ``width`` and for the iterations past the last whole vector as one vector
    iteration under a lane mask (``llvm.loop.vectorize.predicate.enable``), for a map loop of a fixed trip count
    that is no multiple of the lanes: without it they run as a scalar loop of the mathlib functions, which at
    200 iterations of 16 lanes (a language model's LSTM cell, hidden 200, per batch row: 8 scalar iterations)
    took a quarter of the cell kernel's time (35 steps of a 20-row batch: 0.71 -> 0.54 ms thread CPU; the same
    bits but for a NaN's sign, which LLVM keeps in neither form). Only with AVX-512, whose masked loads and
    stores are instructions (narrower targets emulate them)."""
    predicate = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.predicate.enable"),
                                     ir.IntType(1)(1)])
    loop = module.add_metadata([width, predicate])
    loop.operands = (loop, width, predicate)
    return loop


def vector_bits(machine):
    """The width in bits of the vector registers a math kernel uses on ``machine`` (None: not known here)."""
    arch = machine.triple.split("-")[0]
    if arch == "x86_64":
        features = machine.required()
        return 512 if "avx512f" in features else 256 if "avx" in features else 128
    if arch == "aarch64":  # NEON (SVE's scalable vectors are not asked for)
        return 128
    return None


def vector_lanes(math):
    """Lanes of the selected machine's vector registers (`vector_bits`) for the widest float type of the
    `mathlib` functions ``math`` (None where the registers' width is not known)."""
    bits = vector_bits(selected())
    widest = max(64 if isinstance(f.function_type.return_type, ir.DoubleType) else 32 for f in math)
    return bits // widest if bits else None


def _fast_math(module):
    """Whether an instruction of ``module`` carries a fast-math flag (its result may then depend on how many
    lanes a vector holds)."""
    return any(_FAST_MATH.intersection(getattr(i, "flags", ())) or getattr(i, "fastmath", None)
               for f in module.functions for block in f.blocks for i in block.instructions)


CPU = CpuTarget()
