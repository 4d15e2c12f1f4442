"""Loops in machine code for torch.special's Cephes functions (`ops.special_cephes`): a C function of each element,
``out[i] = fn(a[i])`` or ``fn(a[i], b[i])``, and the single-rounding ``fma(a[i], b[i], c[i])``.

Those functions call the C library's ``expf``, ``lgamma``, ``erfc`` ... per element, for their last bits.
Through ctypes that is ~1 µs per element (`np.frompyfunc` of a ctypes function); this loop costs the C
function's own time. The function comes in as an address, one argument among the buffers, so one kernel per
dtype and arity serves every C function, and LLVM, seeing only an indirect call, can neither replace it by its
own version (a vector library, an intrinsic, a constant) nor change its bits. No fast-math flags anywhere.

The fma loop computes ``llvm.fma``: correctly rounded, as the FMA instructions of torch's build are; on a
target without them (x86-64-v2) LLVM calls the C library's ``fma``/``fmaf``, also correctly rounded. NumPy
has no fma; its emulation (`special_cephes.fma`: Dekker's product in float64 passes) was most of a float64
Bessel function's time.

Importing this module registers `loop_kernel` in ``ops.special_cephes.LOOP_KERNEL``: the ops layer cannot
import the code generator, and computes in NumPy and through ctypes where no kernel is registered or built.
"""

from __future__ import annotations

import ctypes

from llvmlite import ir

from ..ops import special_cephes
from . import cpu
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource, counted_loop
from .memo import BuiltOnce
from .target import CPU

_ARGS = ctypes.c_void_p * 5
FMA = "fma"


class LoopKernel:
    """A compiled elementwise loop of one float dtype: `__call__`."""

    def __init__(self, compiled, operands):
        self._compiled = compiled  # keeps the machine code alive
        self.operands = operands
        self.calls = 0  # (how many times it ran: tests check that the fast path did)

    def __call__(self, out, *operands, function=0):
        """``out[i] = op(operands[0][i], ...)``: the C function at address ``function`` (a call loop) or
        the fma; ``out`` and ``operands`` C-contiguous arrays of the kernel's dtype, of one size but for the
        kernel's one-element operands, which every element reads."""
        addresses = [cpu.address(a) for a in (out, *operands)] + [0] * (3 - len(operands))
        self.calls += 1
        cpu.run_split(self._compiled.fn, self._compiled.address, _ARGS(*addresses, function), out.size, out.size)


def loop_kernel(dtype, op, scalars=0):
    """The `LoopKernel` of float ``dtype`` (float32 or float64) for ``op``: 1 or 2 (a call of a C function of
    that many arguments) or ``"fma"``; operand ``k`` one element where bit ``k`` of ``scalars`` is set (a
    Horner step's coefficient: no array of copies to make). None where it cannot be built (the caller uses
    NumPy and ctypes). Built once per process (then read from the kernel cache)."""
    return _kernels(dtype, op, scalars)


def _module(dtype, op, scalars, name):
    """The kernel's LLVM IR: ``body(lo, hi, out, a, b, c, fn)``: ``out[i] = fn(a[i] [, b[i]])`` for a call
    loop, ``fma(a[i], b[i], c[i])`` for the fma one, for ``i`` in ``[lo, hi)`` (index 0 of the scalars)."""
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    module = ir.Module(name=name)
    module.triple = CPU.triple
    p = t.as_pointer()
    arity = 3 if op == FMA else op
    fn_type = ir.FunctionType(t, [t] * arity)
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, p, p, p, p, fn_type.as_pointer()]),
                       name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    lo, hi, out, *operands, fn = body.args
    for arg in (out, *operands):
        arg.add_attribute("noalias")
    if op == FMA:
        fn = module.declare_intrinsic("llvm.fma", [t], fn_type)
    b = ir.IRBuilder(body.append_basic_block("entry"))

    def element(b, i):
        values = [b.load(b.gep(a, [I64(0) if scalars >> k & 1 else i])) for k, a in enumerate(operands[:arity])]
        b.store(b.call(fn, values), b.gep(out, [i]))

    counted_loop(b, lo, hi, I64(1), element, "i")
    b.ret_void()
    CPU.add_entry(module, body, list(range(5)), 0, "thread")
    for function in module.functions:  # (the C functions do not throw: no unwind tables, which kernels lack)
        if not function.name.startswith("llvm."):
            function.attributes.add("nounwind")
    return str(module)


def _build(dtype, op, scalars):
    name = f"jitorch_loop_{dtype}_{op}_{scalars}"
    arity = 3 if op == FMA else op
    source = KernelSource(name, "loop", [str(op)], list(range(arity + 1)), [0], 0, 0)
    source.llvm_ir = _module(dtype, op, scalars, name)
    try:
        return LoopKernel(cpu.link_kernel(source, default_cache()), arity)
    except CompileError:
        return None


# (dtype name, op, scalars) -> LoopKernel, or None: not buildable
_kernels = BuiltOnce(_build)

special_cephes.LOOP_KERNEL = loop_kernel
