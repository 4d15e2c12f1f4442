"""Loops in machine code for torch.special's Cephes functions (`ops.special_cephes`): a C function of each element,
``out[i] = fn(a[i])`` or ``fn(a[i], b[i])``, the single-rounding ``fma(a[i], b[i], c[i])``, and Cephes' series
(Horner's and Clenshaw's recurrences) with the fma's roundings.

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
HORNER = "horner"
CLENSHAW = "clenshaw"
# Elements a recurrence's loop (Horner's, Clenshaw's) takes through all its steps at once: its values stay in
# the L1 cache between steps, and each step's loop over them vectorises.
RECURRENCE_BLOCK = 512


class LoopKernel:
    """A compiled elementwise loop of one float dtype: `__call__`."""

    def __init__(self, compiled):
        self._compiled = compiled  # keeps the machine code alive
        self.calls = 0  # (how many times it ran: tests check that the fast path did)

    def __call__(self, out, *operands, word=0):
        """``out[i] = op(operands[0][i], ...)``: the C function at address ``word`` (a call loop), the fma,
        or a recurrence's steps (operands ``z``, the ``word`` coefficients, the start value); ``out`` and
        ``operands`` C-contiguous arrays of the kernel's dtype, of one size but for the kernel's one-element
        operands (and a recurrence's coefficients), which every element reads."""
        addresses = [cpu.address(a) for a in (out, *operands)] + [0] * (3 - len(operands))
        self.calls += 1
        cpu.run_split(self._compiled.fn, self._compiled.address, _ARGS(*addresses, word), out.size, out.size)


def loop_kernel(dtype, op, scalars=0):
    """The `LoopKernel` of float ``dtype`` (float32 or float64) for ``op``: 1 or 2 (a call of a C function of
    that many arguments), ``"fma"``, or a recurrence over coefficients ``c[k]`` in order from a start value,
    each step's roundings those of the NumPy steps: ``"horner"`` (Cephes' polevl: ``acc = fma(acc, z[i],
    c[k])``) or ``"clenshaw"`` (its chbevl, `_clenshaw`); operand ``k`` one element where bit ``k`` of
    ``scalars`` is set (a constant: no array of copies to make). None where it cannot be built (the caller
    uses NumPy and ctypes). Built once per process (then read from the kernel cache)."""
    return _kernels(dtype, op, scalars)


def _module(dtype, op, scalars, name):
    """The kernel's LLVM IR: ``body(lo, hi, out, a, b, c, word)``: ``out[i] = word(a[i] [, b[i]])`` for a
    call loop, ``fma(a[i], b[i], c[i])`` for the fma one (index 0 of the scalars), for ``i`` in ``[lo, hi)``;
    `_recurrence` for Horner's and Clenshaw's."""
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    module = ir.Module(name=name)
    module.triple = CPU.triple
    p = t.as_pointer()
    arity = op if isinstance(op, int) else 3
    fn_type = ir.FunctionType(t, [t] * arity)
    word = ir.IntType(8).as_pointer() if op in RECURRENCES else fn_type.as_pointer()
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, p, p, p, p, word]), name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    lo, hi, out, *operands, fn = body.args
    for arg in (out, *operands):
        arg.add_attribute("noalias")
    fma = module.declare_intrinsic("llvm.fma", [t], ir.FunctionType(t, [t] * 3)) if isinstance(op, str) else None
    b = ir.IRBuilder(body.append_basic_block("entry"))
    if op in RECURRENCES:
        _recurrence(b, t, RECURRENCES[op](t, fma), lo, hi, out, *operands, b.ptrtoint(fn, I64))
    else:
        def element(b, i):
            values = [b.load(b.gep(a, [I64(0) if scalars >> k & 1 else i])) for k, a in enumerate(operands[:arity])]
            b.store(b.call(fma or fn, values), b.gep(out, [i]))

        counted_loop(b, lo, hi, I64(1), element, "i")
    b.ret_void()
    CPU.add_entry(module, body, list(range(5)), 0, "thread")
    for function in module.functions:  # (the C functions do not throw: no unwind tables, which kernels lack)
        if not function.name.startswith("llvm."):
            function.attributes.add("nounwind")
    return str(module)


def _horner(t, fma):
    """Horner's steps as `_recurrence` runs them: ``acc = start``, then ``acc = fma(acc, z, c)``."""
    return 1, lambda b, first: [first], lambda b, acc, z, c: [b.call(fma, [acc[0], z, c])], lambda b, acc: acc[0]


def _clenshaw(t, fma):
    """Cephes' chbevl as `_recurrence` runs it: ``a = start, p = q = 0``, then ``p, q = q, a`` and
    ``a = fma(z, q, -p) + c`` (the sum rounded apart: torch's build does not contract it), then
    ``0.5 * (a - p)``."""
    def step(b, state, z, c):
        a, p, q = state
        return [b.fadd(b.call(fma, [z, a, b.fneg(q)]), c), q, a]
    return (3, lambda b, first: [first, t(0), t(0)], step,
            lambda b, state: b.fmul(t(0.5), b.fsub(state[0], state[1])))


RECURRENCES = {HORNER: _horner, CLENSHAW: _clenshaw}


def _recurrence(b, t, form, lo, hi, out, z, coefficients, start, count):
    """``form``'s recurrence over ``coefficients[:count]`` from ``start[0]`` at each ``z[i]``, into ``out[i]``
    for ``i`` in ``[lo, hi)``: a block of `RECURRENCE_BLOCK` elements through every step at once, its state in
    ``out`` and stack arrays (in the L1 cache), each step's loop over the block vectorised."""
    width, init, step, finish = form
    first = b.load(start)
    states = [out] + [b.gep(b.alloca(ir.ArrayType(t, RECURRENCE_BLOCK)), [I64(0), I64(0)]) for _ in range(width - 1)]

    def block(b, begin):
        stop = b.add(begin, I64(RECURRENCE_BLOCK))
        end = b.select(b.icmp_signed("<", stop, hi), stop, hi)

        def at(b, i):
            return [b.gep(out, [i])] + [b.gep(s, [b.sub(i, begin)]) for s in states[1:]]

        def store(b, places, values):
            for place, value in zip(places, values):
                b.store(value, place)

        counted_loop(b, begin, end, I64(1), lambda b, i: store(b, at(b, i), init(b, first)), "init")

        def each_coefficient(b, k):
            c = b.load(b.gep(coefficients, [k]))

            def element(b, i):
                places = at(b, i)
                store(b, places, step(b, [b.load(p) for p in places], b.load(b.gep(z, [i])), c))
            counted_loop(b, begin, end, I64(1), element, "i")
        counted_loop(b, I64(0), count, I64(1), each_coefficient, "k")
        if width > 1:
            counted_loop(b, begin, end, I64(1),
                         lambda b, i: b.store(finish(b, [b.load(p) for p in at(b, i)]), b.gep(out, [i])), "finish")

    counted_loop(b, lo, hi, I64(RECURRENCE_BLOCK), block, "block")


def _build(dtype, op, scalars):
    name = f"jitorch_loop_{dtype}_{op}_{scalars}"
    arity = op if isinstance(op, int) else 3
    source = KernelSource(name, "loop", [str(op)], list(range(arity + 1)), [0], 0, 0)
    source.llvm_ir = _module(dtype, op, scalars, name)
    try:
        return LoopKernel(cpu.link_kernel(source, default_cache()))
    except CompileError:
        return None


# (dtype name, op, scalars) -> LoopKernel, or None: not buildable
_kernels = BuiltOnce(_build)

special_cephes.LOOP_KERNEL = loop_kernel
