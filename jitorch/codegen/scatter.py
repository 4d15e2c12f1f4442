"""The rows' scatter-add of ``index_add`` (an embedding's backward) on CPU: a generated kernel.

``out[idx[i]] += values[i]`` for each row ``i`` of ``values`` in order, as ``np.add.at`` adds them: a row that
``idx`` names several times gets its values in ``idx``'s order, each added to the running sum, one rounding per
add (no reassociation, no contraction), so the bits are NumPy's. NumPy adds element by element (np.add.at), or
by rounds of distinct rows after sorting the indices (`ops.indexing.add_rows_at`): for an embedding's backward
(768 token rows of 128 floats into a 65-row table) that is ~130 us of sorting and bookkeeping for ~100k adds,
which this kernel does in one pass, the columns of a row in vector lanes.

The threads split the columns: each element's adds still come in ``idx``'s order, so the values do not depend
on the number of threads. One kernel per dtype serves every shape: the sizes and row strides are arguments.

Importing this module registers `scatter_rows_kernel` in ``ops.indexing.SCATTER_ROWS_KERNEL``: the ops layer
cannot import the code generator, and runs NumPy where no kernel is registered or one cannot be built.
"""

from __future__ import annotations

import ctypes

from llvmlite import ir

from ..ops import indexing
from . import cpu
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource, cached_ir, counted_loop, generator_fingerprint
from .memo import BuiltOnce
from .target import CPU

_ARGS = ctypes.c_void_p * 6


class ScatterRowsKernel:
    """A compiled scatter-add of rows of one float dtype: `__call__` adds, in order, each row ``i`` of a 2-D
    ``values`` (unit column stride) into row ``idx[i]`` of a 2-D ``out`` (unit column stride)."""

    def __init__(self, compiled):
        self._compiled = compiled  # keeps the machine code alive

    def __call__(self, out, idx, values):
        rows, cols = values.shape
        item = out.itemsize
        args = _ARGS(cpu.address(out), cpu.address(values), cpu.address(idx), rows, out.strides[0] // item,
                     values.strides[0] // item)
        cpu.run_split(self._compiled.fn, self._compiled.address, args, cols, rows * cols)


def scatter_rows_kernel(dtype):
    """The `ScatterRowsKernel` of float ``dtype`` (a NumPy dtype name: float32 or float64), or None where it
    cannot be built (the caller runs NumPy). Built once per process (then read from the kernel cache)."""
    return _kernels(dtype)


def _module(dtype, name):
    """The kernel's LLVM IR: ``body(lo, hi, out, values, idx, rows, out_row, values_row)``, for columns
    ``lo`` to ``hi``: per row ``i`` in order, ``out[idx[i] * out_row + j] += values[i * values_row + j]``."""
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    module = ir.Module(name=name)
    module.triple = CPU.triple
    p, raw = t.as_pointer(), ir.IntType(8).as_pointer()
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, p, p, I64.as_pointer(), raw, raw, raw]),
                       name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    lo, hi, out, values, idx, rows_arg, out_row_arg, values_row_arg = body.args
    for arg in (out, values, idx):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    rows, out_row, values_row = (b.ptrtoint(a, I64) for a in (rows_arg, out_row_arg, values_row_arg))

    def row(b, i):
        dst = b.gep(out, [b.mul(b.load(b.gep(idx, [i])), out_row)])
        src = b.gep(values, [b.mul(i, values_row)])

        def add(b, j):
            at = b.gep(dst, [j])
            b.store(b.fadd(b.load(at), b.load(b.gep(src, [j]))), at)
        counted_loop(b, lo, hi, I64(1), add, "col")

    counted_loop(b, I64(0), rows, I64(1), row, "row")
    b.ret_void()
    CPU.add_entry(module, body, list(range(6)), 0, "thread")
    return str(module)


def _build(dtype):
    name = f"jitorch_scatter_rows_{dtype}"
    source = KernelSource(name, "scatter", ["index_add"], list(range(3)), [0], 0, 0)
    cache = default_cache()
    # (the IR an earlier process built, where there is one: building it was 10-13 ms of the GPT step's warm first
    # call, most of it the process's first use of llvmlite's IR builder)
    source.llvm_ir = cached_ir("scatter rows kernel", repr(("scatter rows", cpu.target_id(), dtype, name)),
                               lambda: _module(dtype, name), cache, generator_fingerprint())
    try:
        return ScatterRowsKernel(cpu.link_kernel(source, cache))
    except CompileError:
        return None


# dtype name -> ScatterRowsKernel, or None: not buildable
_kernels = BuiltOnce(_build)

indexing.SCATTER_ROWS_KERNEL = scatter_rows_kernel
