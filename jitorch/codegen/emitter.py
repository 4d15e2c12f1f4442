"""The scalar emitter: typed LLVM values and the operations scalar lowerings use.

A `Scalar` is an LLVM value with the jitorch dtype it holds. The emitter wraps
an llvmlite IRBuilder with dtype-aware arithmetic, casts and comparisons, so a
lowering reads like the NumPy formula it mirrors: ``e.mul(a, b)``,
``e.math("exp", a)``, ``e.select(c, a, b)``. Float arithmetic is plain IEEE
(no fast-math flags): a fused kernel gives the eager result bit for bit
wherever NumPy's result is correctly rounded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..runtime import dtypes as _dt
from ..runtime.casts import convert, float_to_integer_route

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()

I16 = ir.IntType(16)
I32 = ir.IntType(32)


# bfloat16 is stored and carried as its 16 bits; conversions are integer maths (exact, and no
# runtime library calls, which the JIT does not link). float16 uses LLVM's half type (F16C).
_LLVM = {
    "bool": I8, "uint8": I8, "int8": I8, "int16": I16, "int32": I32, "int64": I64,
    "uint16": I16, "uint32": I32, "uint64": I64,
    "float16": ir.HalfType(), "bfloat16": I16, "float32": F32, "float64": F64,
}


_HALVES = (_dt.float16, _dt.bfloat16)


def _half_constant(value, dtype):
    """A Python float as a half-precision LLVM constant, rounded as eager converts it (through float32; too
    large: infinity, where llvmlite cannot print it); bfloat16 as its bits, the integer type it is carried in."""
    rounded = convert(np.array(value), dtype.np)
    if dtype is _dt.bfloat16:
        return ir.Constant(I16, int(rounded.view(np.uint16)))
    return ir.Constant(ir.HalfType(), float(rounded))


def llvm_type(dtype):
    """The LLVM type a dtype is stored as (bool as i8)."""
    return _LLVM[dtype.name]


@dataclass
class Scalar:
    """An LLVM value holding one element of ``dtype`` (bools as i1 while computing)."""

    value: object
    dtype: object


class Emitter:
    """Dtype-aware scalar operations on an IRBuilder."""

    def __init__(self, builder):
        self.b = builder

    # Constants and casts -----------------------------------------------------------

    def const(self, value, dtype):
        if dtype is _dt.bool:
            return Scalar(ir.Constant(I1, int(bool(value))), dtype)
        if dtype in _HALVES:
            return Scalar(_half_constant(float(value), dtype), dtype)
        if dtype.is_floating_point:
            return Scalar(ir.Constant(llvm_type(dtype), float(value)), dtype)
        return Scalar(ir.Constant(llvm_type(dtype), int(value)), dtype)

    def load(self, ptr, dtype):
        v = self.b.load(ptr)
        if dtype is _dt.bool:
            v = self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return Scalar(v, dtype)

    def store(self, s, ptr):
        v = s.value
        if s.dtype is _dt.bool:
            v = self.b.zext(v, I8)
        self.b.store(v, ptr)

    def cast(self, s, dtype):
        """Convert by the cast table (`runtime.casts`): torch's results on x86, on every target."""
        src, b = s.dtype, self.b
        if src is dtype:
            return s
        if src is _dt.bfloat16:
            s, src = self._from_bfloat16(s), _dt.float32
            if dtype is _dt.float32:
                return s
        if dtype in _HALVES:  # built from a float32, as c10::Half and c10::BFloat16 are: rounded twice
            s = self.cast(s, _dt.float32)
            if dtype is _dt.bfloat16:
                return self._to_bfloat16(s)
            return Scalar(b.fptrunc(s.value, llvm_type(dtype)), dtype)
        v = s.value
        if dtype is _dt.bool:
            if src.is_floating_point:
                return Scalar(b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0)), dtype)
            return Scalar(b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)), dtype)
        t = llvm_type(dtype)
        if src is _dt.bool:
            return Scalar(b.uitofp(v, t) if dtype.is_floating_point else b.zext(v, t), dtype)
        if src.is_floating_point and dtype.is_floating_point:
            return Scalar(b.fpext(v, t) if dtype.itemsize > src.itemsize else b.fptrunc(v, t), dtype)
        if src.is_floating_point:
            return self._float_to_integer(s, dtype)
        if dtype.is_floating_point:
            return Scalar(b.sitofp(v, t) if src.is_signed else b.uitofp(v, t), dtype)
        if dtype.itemsize == src.itemsize:
            return Scalar(v, dtype)
        if dtype.itemsize < src.itemsize:
            return Scalar(b.trunc(v, t), dtype)
        return Scalar(b.sext(v, t) if src.is_signed else b.zext(v, t), dtype)

    def _float_to_integer(self, s, dtype):
        """A float into an integer dtype by the cast table (`runtime.casts.float_to_integer_route`):
        never LLVM's undefined result, and the same on every target, so every kernel, vectorised or
        not, CPU or GPU, agrees with eager."""
        b = self.b
        bits, unsigned = float_to_integer_route(s.dtype.np, dtype.np)
        if s.dtype.itemsize < 4:  # halves widen exactly
            s = self.cast(s, _dt.float32)
        v, f = s.value, s.value.type
        wide = ir.IntType(bits)
        if unsigned:
            half = ir.Constant(f, 2.0 ** (bits - 1))
            high = b.fcmp_ordered(">=", v, half)
            low_part = self._truncated(b.select(high, b.fsub(v, half), v), wide)
            result = b.select(high, b.xor(low_part, ir.Constant(wide, -2 ** (bits - 1))), low_part)
        else:
            result = self._truncated(v, wide)
        t = llvm_type(dtype)
        return Scalar(result if t == wide else b.trunc(result, t), dtype)

    def _truncated(self, v, wide):
        """Float ``v`` truncated toward zero into signed ``wide``; NaN and out-of-range values give its
        smallest value (x86's conversion)."""
        b, f, bits = self.b, v.type, wide.width
        low, high = ir.Constant(f, -2.0 ** (bits - 1)), ir.Constant(f, 2.0 ** (bits - 1))
        inside = b.and_(b.fcmp_ordered(">=", v, low), b.fcmp_ordered("<", v, high))
        converted = b.fptosi(b.select(inside, v, ir.Constant(f, 0.0)), wide)
        return b.select(inside, converted, ir.Constant(wide, -2 ** (bits - 1)))

    def _from_bfloat16(self, s):
        """bfloat16 bits to float32: the bits are the float's top half."""
        b = self.b
        return Scalar(b.bitcast(b.shl(b.zext(s.value, I32), ir.Constant(I32, 16)), F32), _dt.float32)

    def _to_bfloat16(self, s):
        """float32 to bfloat16 bits, rounding to nearest even (as ml_dtypes and torch); NaN stays NaN."""
        b = self.b
        bits = b.bitcast(s.value, I32)
        odd = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
        rounded = b.lshr(b.add(bits, b.add(ir.Constant(I32, 0x7FFF), odd)), ir.Constant(I32, 16))
        nan = b.fcmp_unordered("uno", s.value, s.value)
        quiet = b.or_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x40))
        return Scalar(b.trunc(b.select(nan, quiet, rounded), I16), _dt.bfloat16)

    # Arithmetic --------------------------------------------------------------------

    def _binary(self, fop, iop, a, b, flags=()):
        if a.dtype.is_floating_point:
            return Scalar(getattr(self.b, fop)(a.value, b.value, flags=flags), a.dtype)
        return Scalar(getattr(self.b, iop)(a.value, b.value), a.dtype)

    def add(self, a, b, reassociate=False):
        """``a + b``; ``reassociate`` lets LLVM reorder a float sum (reductions: it vectorises them)."""
        if a.dtype is _dt.bool:
            return Scalar(self.b.or_(a.value, b.value), a.dtype)
        return self._binary("fadd", "add", a, b, ("reassoc",) if reassociate else ())

    def sub(self, a, b):
        return self._binary("fsub", "sub", a, b)

    def mul(self, a, b, reassociate=False):
        if a.dtype is _dt.bool:
            return Scalar(self.b.and_(a.value, b.value), a.dtype)
        return self._binary("fmul", "mul", a, b, ("reassoc",) if reassociate else ())

    def div(self, a, b):
        return Scalar(self.b.fdiv(a.value, b.value), a.dtype)

    def neg(self, a):
        if a.dtype.is_floating_point:
            return Scalar(self.b.fneg(a.value), a.dtype)
        return Scalar(self.b.sub(ir.Constant(a.value.type, 0), a.value), a.dtype)

    def intrinsic(self, name, *args):
        """A call of an allow-listed LLVM intrinsic, overloaded on the first argument's type."""
        if name not in ALLOWED_INTRINSICS:
            raise ValueError(f"intrinsic {name} is not allowed")
        t = args[0].value.type
        fn = self.b.module.declare_intrinsic(name, [t], ir.FunctionType(t, [t] * len(args)))
        return Scalar(self.b.call(fn, [a.value for a in args]), args[0].dtype)

    def math(self, name, *args):
        from . import mathlib
        return Scalar(mathlib.emit(self.b, name, *[a.value for a in args]), args[0].dtype)

    # Comparisons and selection ----------------------------------------------------------

    def compare(self, op, a, b):
        """``a op b`` as a bool: ordered for floats (NaN compares false) except ``!=``."""
        if a.dtype.is_floating_point:
            v = self.b.fcmp_unordered(op, a.value, b.value) if op == "!=" else self.b.fcmp_ordered(op, a.value, b.value)
        elif a.dtype.is_signed:
            v = self.b.icmp_signed(op, a.value, b.value)
        else:
            v = self.b.icmp_unsigned(op, a.value, b.value)
        return Scalar(v, _dt.bool)

    def isnan(self, a):
        if not a.dtype.is_floating_point:
            return self.const(False, _dt.bool)
        return Scalar(self.b.fcmp_unordered("uno", a.value, a.value), _dt.bool)

    def select(self, c, a, b):
        return Scalar(self.b.select(c.value, a.value, b.value), a.dtype)

    def logical(self, op, a, b):
        return Scalar(getattr(self.b, op)(a.value, b.value), _dt.bool)

    def bitwise(self, op, a, b):
        return Scalar(getattr(self.b, op)(a.value, b.value), a.dtype)

    # Integer division, remainders and shifts -------------------------------------------------

    def int_divmod(self, a, b):
        """C's ``(a / b, a % b)`` on integers (quotient toward zero), made total as NumPy makes it:
        ``b == 0`` gives ``(0, 0)`` and ``b == -1`` gives ``(-a, 0)`` (wrapping), where the hardware
        would trap. The division runs by a safe divisor, so no lane of a vector traps either."""
        zero, one = self.const(0, a.dtype), self.const(1, a.dtype)
        by_zero = self.compare("==", b, zero)
        bad = by_zero
        if a.dtype.is_signed:
            by_minus_one = self.compare("==", b, self.const(-1, a.dtype))
            bad = self.logical("or_", by_zero, by_minus_one)
        safe = self.select(bad, one, b).value
        div, rem = (self.b.sdiv, self.b.srem) if a.dtype.is_signed else (self.b.udiv, self.b.urem)
        q = Scalar(div(a.value, safe), a.dtype)
        if a.dtype.is_signed:
            q = self.select(by_minus_one, self.neg(a), q)
        return self.select(by_zero, zero, q), self.select(bad, zero, Scalar(rem(a.value, safe), a.dtype))

    def shift_left(self, a, n):
        """``a << n``; counts that are negative or reach the bit width give 0 (LLVM leaves them undefined)."""
        inside = self._count_inside(a, n)
        count = self.select(inside, n, self.const(0, n.dtype))
        return self.select(inside, Scalar(self.b.shl(a.value, count.value), a.dtype), self.const(0, a.dtype))

    def shift_right(self, a, n):
        """``a >> n``, arithmetic for signed integers. Counts outside the bit width shift everything out:
        a signed value shifts by width - 1 (giving 0 or -1), an unsigned one becomes 0."""
        inside = self._count_inside(a, n)
        if a.dtype.is_signed:
            count = self.select(inside, n, self.const(a.dtype.itemsize * 8 - 1, n.dtype))
            return Scalar(self.b.ashr(a.value, count.value), a.dtype)
        count = self.select(inside, n, self.const(0, n.dtype))
        return self.select(inside, Scalar(self.b.lshr(a.value, count.value), a.dtype), self.const(0, a.dtype))

    def _count_inside(self, a, n):
        """Whether shift count ``n`` is in [0, width): one unsigned compare (negative counts are huge)."""
        width = ir.Constant(n.value.type, a.dtype.itemsize * 8)
        return Scalar(self.b.icmp_unsigned("<", n.value, width), _dt.bool)

    def fmod(self, a, b):
        """C's ``fmod`` of two floats, exact (the remainder of floats always is): a call of the
        module's definition for the type (see `_fmod_function`)."""
        return Scalar(self.b.call(_fmod_function(self.b.module, a.value.type), [a.value, b.value]), a.dtype)


# Intrinsics known to lower on every target jitorch emits for (see LLVM-NOTES).
ALLOWED_INTRINSICS = frozenset({
    "llvm.fma", "llvm.fabs", "llvm.floor", "llvm.ceil", "llvm.trunc", "llvm.rint", "llvm.nearbyint",
    "llvm.copysign", "llvm.sqrt", "llvm.minnum", "llvm.maxnum",
})


def _fmod_function(module, t):
    """The module's ``jitorch.fmod.<type>(x, y)``, defined on first use: C's fmod without libm, which
    NVPTX lacks (LLVM's ``frem`` becomes ``x - trunc(x / y) * y`` there, wrong once the quotient has
    more bits than the significand).

    Long division on the significands as integers: with ``|x| = mx * 2**ex`` and ``|y| = my * 2**ey``
    (``ex >= ey``), ``fmod(|x|, |y|) = (mx * 2**(ex - ey) mod my) * 2**ey``; the exponent difference is
    shifted in a few bits at a time so that ``r << s`` fits 64 bits, and the result, an integer below
    ``my``, converts back exactly. NaN, an infinite ``x`` or a zero ``y`` give NaN; ``|x| < |y|`` gives ``x``.
    """
    name = f"jitorch.fmod.{t.intrinsic_name}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(t, [t, t]), name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    double = isinstance(t, ir.DoubleType)
    mant, bias = (52, 1023) if double else (23, 127)
    it = I64 if double else I32
    step = 63 - mant  # bits shifted in per division: the remainder (< 2**(mant+1)) times 2**step fits 64 bits
    x, y = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    quick, slow, head, body, done = (fn.append_basic_block(n) for n in ("quick", "slow", "head", "body", "done"))
    absmask, inf_bits = it((1 << (it.width - 1)) - 1), it(((2 * bias + 1) << mant))
    bx, by = b.and_(b.bitcast(x, it), absmask), b.and_(b.bitcast(y, it), absmask)
    invalid = b.or_(b.or_(b.icmp_unsigned("==", by, it(0)), b.icmp_unsigned(">=", bx, inf_bits)),
                    b.icmp_unsigned(">", by, inf_bits))
    b.cbranch(b.or_(invalid, b.icmp_unsigned("<", bx, by)), quick, slow)

    b.position_at_end(quick)
    xy = b.fmul(x, y)  # NaN from a NaN input (kept), inf * y, or 0 * x: then xy / xy is NaN
    b.ret(b.select(invalid, b.fdiv(xy, xy), x))

    b.position_at_end(slow)

    def significand(bits):
        """(integer significand, exponent >= 1) as i64: a subnormal has exponent 1 and no implicit bit."""
        bits = b.zext(bits, I64) if it is not I64 else bits
        e = b.lshr(bits, I64(mant))
        normal = b.icmp_unsigned("!=", e, I64(0))
        frac = b.and_(bits, I64((1 << mant) - 1))
        return b.select(normal, b.or_(frac, I64(1 << mant)), frac), b.select(normal, e, I64(1))

    mx, ex = significand(bx)
    my, ey = significand(by)
    first, shifts = b.urem(mx, my), b.sub(ex, ey)
    b.branch(head)

    b.position_at_end(head)
    r, left = b.phi(I64), b.phi(I64)
    r.add_incoming(first, slow)
    left.add_incoming(shifts, slow)
    b.cbranch(b.icmp_signed(">", left, I64(0)), body, done)

    b.position_at_end(body)
    s = b.select(b.icmp_signed("<", left, I64(step)), left, I64(step))
    r.add_incoming(b.urem(b.shl(r, s), my), body)
    left.add_incoming(b.sub(left, s), body)
    b.branch(head)

    b.position_at_end(done)
    # r * 2**k with k = ey - bias - mant; 2**k is subnormal for small ey: scale by 2**(k + mant + 1),
    # a normal power, then by 2**-(mant + 1), exact since the result is a multiple of 2**k
    k = b.sub(ey, I64(bias + mant))
    low = b.icmp_signed("<", k, I64(1 - bias))
    k = b.select(low, b.add(k, I64(mant + 1)), k)
    power_bits = b.shl(b.add(k, I64(bias)), I64(mant))
    power = b.bitcast(b.trunc(power_bits, it) if it is not I64 else power_bits, t)
    tail = b.select(low, ir.Constant(t, 2.0 ** -(mant + 1)), ir.Constant(t, 1.0))
    magnitude = b.fmul(b.fmul(b.uitofp(r, t), power), tail)
    copysign = module.declare_intrinsic("llvm.copysign", [t], ir.FunctionType(t, [t, t]))
    b.ret(b.call(copysign, [magnitude, x]))
    return fn
