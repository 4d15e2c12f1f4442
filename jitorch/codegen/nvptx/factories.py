"""Generated CUDA kernels for the factories whose values follow a formula: ``arange``, ``eye``, ``linspace`` and
``logspace``, computed on the device with the CPU's arithmetic, so the values are the CPU's bit for bit
(``logspace``'s power excepted: see below).

One kernel per (op, dtype) serves every call: the sizes and bounds are not baked in but read from a small
parameter block (`PARAMETERS` int64 words, floats as the bits of a float64 holding them exactly) that the
host uploads with the launch, so ``arange(n)`` for ever new ``n`` compiles nothing new. The grid-stride
loop runs to the count held there; `FactoryKernel.sized` gives the launch its grid.

The formulas are those of ``jitorch/ops/creation.py``:

- ``arange``: ``start + step * i`` in int64 (wrapping) for integer dtypes, in float64 for floating ones,
  then converted to the dtype by the cast table (`jitorch/runtime/casts.py`), as on the CPU;
- ``eye``: one where the row equals the column;
- ``linspace`` from both ends: ``first + step * i`` for the first ``steps // 2`` points, ``last - step *
  (steps - 1 - i)`` for the rest, in float32/float64 (float64 for integer dtypes) one fused multiply-add
  as torch's kernels; for the half types the products in the "step" type (the dtype) and the sums in the "sum" type (the same, except float32 for a half type's ``logspace``
  exponents); ``first``, ``last`` and ``step`` come from the host, computed there exactly as the CPU does;
- ``logspace``: ``base ** exponent`` of those exponents, in float64 for float64 and integer dtypes, float32
  otherwise, through the kernels' own ``pow`` (SLEEF's 1-ulp algorithm, as ``x.pow`` on CUDA), where the
  CPU calls libm: the exponents are the CPU's exactly, the powers within an ulp of its.
"""

from __future__ import annotations

import copy

from llvmlite import ir

from ...runtime import dtypes as _dt
from ..emitter import Emitter, Scalar, llvm_type
from ..errors import CompileError
from .ptx import ptx_of
from .loop_kernel import LoopKernel, entry, symbol
from .target import I64, _sreg, strided_loop

OPS = ("arange", "eye", "linspace", "logspace")
# int64 words: the count, an integer (eye's columns, how many points linspace takes from ``first``), then four
# values (int64, or the bits of a float64)
PARAMETERS = 6


class FactoryKernel(LoopKernel):
    """A factory kernel; its spec is the dtype it makes, its loop space the launch's, set by `sized`."""

    def sized(self, count):
        """This kernel with a grid for ``count`` output elements."""
        k = copy.copy(self)
        k.space = (count,)
        return k


def factory_kernel(op, dtype, cache=None):
    """The kernel of ``op`` (one of `OPS`) making ``dtype`` values. Pointers: (parameters, out), the output
    compact. The `PARAMETERS` words: arange (count, -, start, step), int64 for integer dtypes, float64
    otherwise; eye (count, columns); linspace (count, points taken from ``first``, first, last, step) and
    logspace (the same, then the base), as float64."""
    if op not in OPS:
        raise CompileError(f"no factory kernel for {op}")
    name = symbol(f"jitorch_{op}_{dtype.name}")
    module, fn = entry(name, [I64.as_pointer(), llvm_type(dtype).as_pointer()])
    params, out = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = Emitter(b)
    words = [b.load(b.gep(params, [I64(i)])) for i in range(PARAMETERS)]
    count = words[0]

    def real(word, dtype_):
        """A parameter word holding float64 bits, as a ``dtype_`` value (exact: the host made it one)."""
        return e.cast(Scalar(b.bitcast(word, ir.DoubleType()), _dt.float64), dtype_)

    def rounded(operation, a, c):
        """``a operation c`` in their dtype; bfloat16 has no arithmetic of its own: float32, rounded back
        (as ml_dtypes computes it on the CPU)."""
        if a.dtype is not _dt.bfloat16:
            return operation(a, c)
        return e.cast(operation(e.cast(a, _dt.float32), e.cast(c, _dt.float32)), _dt.bfloat16)

    def value(i):
        if op == "eye":
            row = b.udiv(i, words[1])
            return e.cast(Scalar(b.icmp_unsigned("==", row, b.sub(i, b.mul(row, words[1]))), _dt.bool), dtype)
        if op == "arange":
            if not dtype.is_floating_point:
                return e.cast(Scalar(b.add(words[2], b.mul(words[3], i)), _dt.int64), dtype)
            position = Scalar(b.sitofp(i, ir.DoubleType()), _dt.float64)
            return e.cast(e.add(real(words[2], _dt.float64), e.mul(real(words[3], _dt.float64), position)),
                          dtype)
        step_t, sum_t = step_types(op, dtype)
        step = real(words[4], step_t)
        first_half = b.icmp_signed("<", i, words[1])
        times = b.select(first_half, i, b.sub(b.sub(count, I64(1)), i))
        count_t = e.cast(Scalar(times, _dt.int64), step_t)
        if op == "linspace" and step_t in (_dt.float32, _dt.float64):  # one fma, as the CPU (creation.fma)
            half = Scalar(first_half, _dt.bool)
            factor = e.select(half, step, e.neg(step))
            base = e.select(half, real(words[2], step_t), real(words[3], step_t))
            result = e.intrinsic("llvm.fma", factor, count_t, base)
        else:
            offset = e.cast(rounded(e.mul, step, count_t), sum_t)
            up, down = rounded(e.add, real(words[2], sum_t), offset), rounded(e.sub, real(words[3], sum_t), offset)
            result = Scalar(b.select(first_half, up.value, down.value), sum_t)
        if op == "logspace":
            power_t = _dt.float64 if sum_t is _dt.float64 else _dt.float32
            result = e.math("pow", real(words[5], power_t), e.cast(result, power_t))
        return e.cast(result, dtype)

    first = b.add(b.mul(_sreg(b, "ctaid.x"), _sreg(b, "ntid.x")), _sreg(b, "tid.x"))
    stride = b.mul(_sreg(b, "nctaid.x"), _sreg(b, "ntid.x"))
    strided_loop(b, first, count, stride, lambda b, i: e.store(value(i), b.gep(out, [i])))
    b.ret_void()
    text = str(module)
    return FactoryKernel(name, op, (0,), dtype, text, ptx_of(text, name, cache))


def step_types(op, dtype):
    """(type of linspace's ``step * i``, type of the sums) for ``op`` making ``dtype``, as the CPU."""
    if not dtype.is_floating_point:
        return _dt.float64, _dt.float64
    if op == "logspace" and dtype in (_dt.float16, _dt.bfloat16):
        return dtype, _dt.float32
    return dtype, dtype
