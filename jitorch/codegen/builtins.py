"""jitorch's own copy of the compiler-rt functions that LLVM's code may call.

LLVM lowers some operations to calls into a runtime library rather than
instructions, depending on the CPU: without F16C a float <-> half conversion
becomes ``__extendhfsf2``/``__truncsfhf2``, double -> half is always
``__truncdfhf2``, 128-bit division is ``__divti3``, ``llvm.powi`` is
``__powidf2``. The JIT links against the process, which has libc and libm but
not compiler-rt or libgcc, so these are written here in LLVM IR (integer
operations only, so that compiling them never calls out again) and linked
into every JIT that runs kernels and into the AOT C library.

The algorithms are compiler-rt's (``fp_trunc_impl.inc``, ``fp_extend_impl.inc``,
``udivmodti4.c`` in spirit, ``powidf2.c``): conversions round to nearest even
and keep NaNs quiet, exactly as the instructions they stand in for.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

from llvmlite import ir

I1, I16, I32, I64, I128 = ir.IntType(1), ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.IntType(128)


class _BFloat(ir.types.Type):
    """LLVM's ``bfloat``, which llvmlite's IR builder does not name."""

    null = "0xR0000"

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash(_BFloat)


@dataclasses.dataclass(frozen=True)
class _Format:
    """An IEEE binary format: its LLVM type, width, exponent and significand (fraction) bits."""

    type: ir.Type
    bits: int
    exp_bits: int

    @property
    def sig_bits(self):
        return self.bits - 1 - self.exp_bits

    @property
    def int(self):
        return ir.IntType(self.bits)

    @property
    def bias(self):
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def inf_exp(self):
        return (1 << self.exp_bits) - 1


HALF = _Format(ir.HalfType(), 16, 5)
BFLOAT = _Format(_BFloat(), 16, 8)
FLOAT = _Format(ir.FloatType(), 32, 8)
DOUBLE = _Format(ir.DoubleType(), 64, 11)


def _define(module, name, ret, args):
    fn = ir.Function(module, ir.FunctionType(ret, args), name)
    fn.attributes.add("nounwind")  # (integer maths only: no unwind tables, which kernels' objects never have)
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _round_nearest_even(b, value, bits, src, dst):
    """``value`` (the truncated result) rounded by the ``bits`` shifted out of it: nearest, ties to even."""
    t = src.int
    shift = src.sig_bits - dst.sig_bits
    round_bits = b.and_(bits, t((1 << shift) - 1))
    halfway = t(1 << (shift - 1))
    up = b.or_(b.icmp_unsigned(">", round_bits, halfway),
               b.and_(b.icmp_unsigned("==", round_bits, halfway), b.trunc(value, I1)))
    return b.add(value, b.zext(up, t))


def _truncate(module, name, src, dst):
    """``dst name(src)``: a narrowing conversion, correctly rounded (compiler-rt's fp_trunc_impl)."""
    fn, b = _define(module, name, dst.type, [src.type])
    t = src.int
    shift = src.sig_bits - dst.sig_bits
    rep = b.bitcast(fn.args[0], t)
    sign_mask = 1 << (src.bits - 1)
    absolute = b.and_(rep, t(sign_mask - 1))
    underflow = t((src.bias + 1 - dst.bias) << src.sig_bits)
    overflow = t((src.bias + dst.inf_exp - dst.bias) << src.sig_bits)
    infinity = t(src.inf_exp << src.sig_bits)

    normal = b.icmp_unsigned("<", b.sub(absolute, underflow), b.sub(absolute, overflow))
    scaled = b.sub(b.lshr(absolute, t(shift)), t((src.bias - dst.bias) << dst.sig_bits))
    normal_result = _round_nearest_even(b, scaled, absolute, src, dst)

    quiet = t((dst.inf_exp << dst.sig_bits) | (1 << (dst.sig_bits - 1)))
    payload = b.and_(b.lshr(b.and_(absolute, t((1 << (src.sig_bits - 1)) - 1)), t(shift)),
                     t((1 << (dst.sig_bits - 1)) - 1))
    nan_result = b.or_(quiet, payload)
    inf_result = t(dst.inf_exp << dst.sig_bits)

    # below the smallest normal: shift the significand right, keeping a sticky bit. A subnormal source (no
    # implicit bit, exponent 1) only reaches here when the formats share an exponent range (bfloat16).
    exponent = b.lshr(absolute, t(src.sig_bits))
    subnormal_source = b.icmp_unsigned("==", exponent, t(0))
    exponent = b.select(subnormal_source, t(1), exponent)
    denormal_shift = b.sub(t(src.bias - dst.bias + 1), exponent)
    too_small = b.icmp_signed(">", denormal_shift, t(src.sig_bits))
    clamped = b.select(too_small, t(src.sig_bits), b.select(b.icmp_signed("<", denormal_shift, t(0)), t(0),
                                                             denormal_shift))
    significand = b.or_(b.and_(rep, t((1 << src.sig_bits) - 1)),
                        b.select(subnormal_source, t(0), t(1 << src.sig_bits)))
    shifted_out = b.sub(b.shl(t(1), clamped), t(1))
    sticky = b.zext(b.icmp_unsigned("!=", b.and_(significand, shifted_out), t(0)), t)
    denormalized = b.or_(b.lshr(significand, clamped), sticky)
    denormal_result = _round_nearest_even(b, b.lshr(denormalized, t(shift)), denormalized, src, dst)
    denormal_result = b.select(too_small, t(0), denormal_result)

    result = b.select(normal, normal_result,
                      b.select(b.icmp_unsigned(">", absolute, infinity), nan_result,
                               b.select(b.icmp_unsigned(">=", absolute, overflow), inf_result, denormal_result)))
    sign = b.trunc(b.lshr(b.and_(rep, t(sign_mask)), t(src.bits - dst.bits)), dst.int)
    b.ret(b.bitcast(b.or_(b.trunc(result, dst.int), sign), dst.type))


def _extend(module, name, src, dst):
    """``dst name(src)``: a widening conversion, exact (compiler-rt's fp_extend_impl)."""
    fn, b = _define(module, name, dst.type, [src.type])
    s, t = src.int, dst.int
    shift = dst.sig_bits - src.sig_bits
    rep = b.bitcast(fn.args[0], s)
    absolute = b.and_(rep, s((1 << (src.bits - 1)) - 1))
    min_normal, infinity = s(1 << src.sig_bits), s(src.inf_exp << src.sig_bits)
    wide = b.zext(absolute, t)

    normal = b.icmp_unsigned("<", b.sub(absolute, min_normal), b.sub(infinity, min_normal))
    normal_result = b.add(b.shl(wide, t(shift)), t((dst.bias - src.bias) << dst.sig_bits))
    special_result = b.or_(t(dst.inf_exp << dst.sig_bits), b.shl(b.zext(b.and_(absolute, s((1 << src.sig_bits) - 1)),
                                                                      t), t(shift)))
    ctlz = module.declare_intrinsic("llvm.ctlz", [s], ir.FunctionType(s, [s, I1]))
    scale = b.sub(b.zext(b.call(ctlz, [absolute, I1(1)]), t), t(src.exp_bits))  # leading zeros beyond the sign
    subnormal = b.xor(b.shl(wide, b.add(t(shift), scale)), t(1 << dst.sig_bits))
    subnormal_result = b.or_(subnormal, b.shl(b.sub(t(dst.bias - src.bias + 1), scale), t(dst.sig_bits)))
    result = b.select(normal, normal_result,
                      b.select(b.icmp_unsigned(">=", absolute, infinity), special_result,
                               b.select(b.icmp_unsigned("==", absolute, s(0)), t(0), subnormal_result)))
    sign = b.shl(b.zext(b.and_(rep, s(1 << (src.bits - 1))), t), t(dst.bits - src.bits))
    b.ret(b.bitcast(b.or_(result, sign), dst.type))


def _udivmod(b, a, d):
    """Unsigned 128-bit (quotient, remainder) by shift and subtract, one bit a step."""
    fn = b.function
    loop, done = fn.append_basic_block("loop"), fn.append_basic_block("done")
    start = b.block
    b.branch(loop)
    b.position_at_end(loop)
    i, q, r = b.phi(I128), b.phi(I128), b.phi(I128)
    bit = b.sub(I128(127), i)
    shifted = b.or_(b.shl(r, I128(1)), b.and_(b.lshr(a, bit), I128(1)))
    fits = b.icmp_unsigned(">=", shifted, d)
    r_next = b.select(fits, b.sub(shifted, d), shifted)
    q_next = b.or_(q, b.shl(b.zext(fits, I128), bit))
    i_next = b.add(i, I128(1))
    for phi, first, nxt in ((i, I128(0), i_next), (q, I128(0), q_next), (r, I128(0), r_next)):
        phi.add_incoming(first, start)
        phi.add_incoming(nxt, loop)
    b.cbranch(b.icmp_unsigned("<", i_next, I128(128)), loop, done)
    b.position_at_end(done)
    return q_next, r_next


def _division(module, name, signed, remainder):
    fn, b = _define(module, name, I128, [I128, I128])
    a, d = fn.args
    if not signed:
        q, r = _udivmod(b, a, d)
        b.ret(r if remainder else q)
        return
    negative_a, negative_d = b.icmp_signed("<", a, I128(0)), b.icmp_signed("<", d, I128(0))
    q, r = _udivmod(b, b.select(negative_a, b.neg(a), a), b.select(negative_d, b.neg(d), d))
    if remainder:
        b.ret(b.select(negative_a, b.neg(r), r))
    else:
        b.ret(b.select(b.xor(negative_a, negative_d), b.neg(q), q))


def _powi(module, name, fmt):
    """``x ** n`` for an int32 ``n`` by repeated squaring, then a reciprocal for negative ``n``."""
    fn, b = _define(module, name, fmt.type, [fmt.type, I32])
    x, n = fn.args
    start, loop, done = b.block, fn.append_basic_block("loop"), fn.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    base, exponent, result = b.phi(fmt.type), b.phi(I32), b.phi(fmt.type)
    odd = b.trunc(exponent, I1)
    result_next = b.select(odd, b.fmul(result, base), result)
    exponent_next = b.sdiv(exponent, I32(2))
    base_next = b.fmul(base, base)
    for phi, first, nxt in ((base, x, base_next), (exponent, n, exponent_next),
                            (result, ir.Constant(fmt.type, 1.0), result_next)):
        phi.add_incoming(first, start)
        phi.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("!=", exponent_next, I32(0)), loop, done)
    b.position_at_end(done)
    b.ret(b.select(b.icmp_signed("<", n, I32(0)), b.fdiv(ir.Constant(fmt.type, 1.0), result_next), result_next))


def _conversions(with_bfloat):
    yield "__truncsfhf2", _truncate, FLOAT, HALF
    yield "__truncdfhf2", _truncate, DOUBLE, HALF
    yield "__extendhfsf2", _extend, HALF, FLOAT
    yield "__extendhfdf2", _extend, HALF, DOUBLE
    # the names older GCC runtimes and LLVM releases used for the same two conversions
    yield "__gnu_f2h_ieee", _truncate, FLOAT, HALF
    yield "__gnu_h2f_ieee", _extend, HALF, FLOAT
    if with_bfloat:
        yield "__truncsfbf2", _truncate, FLOAT, BFLOAT
        yield "__truncdfbf2", _truncate, DOUBLE, BFLOAT


_DIVISIONS = (("__udivti3", False, False), ("__umodti3", False, True), ("__divti3", True, False),
              ("__modti3", True, True))
_POWERS = (("__powisf2", FLOAT), ("__powidf2", DOUBLE))


def _bfloat_default() -> bool:
    """Whether the builtins hold the bfloat16 conversions: LLVM 17 or newer names them ``__trunc*bf2``."""
    import llvmlite.binding as llvm
    return llvm.llvm_version_info >= (17,)


def module_text(with_bfloat: bool | None = None) -> str:
    """The LLVM IR of every builtin; ``with_bfloat`` (default: LLVM 17 or newer, which names ``bfloat``
    conversions ``__trunc*bf2``) adds the bfloat16 ones."""
    if with_bfloat is None:
        with_bfloat = _bfloat_default()
    module = ir.Module(name="jitorch_builtins")
    for name, make, src, dst in _conversions(with_bfloat):
        make(module, name, src, dst)
    for name, signed, remainder in _DIVISIONS:
        _division(module, name, signed, remainder)
    for name, ty in _POWERS:
        _powi(module, name, ty)
    return str(module)


@functools.cache
def fingerprint() -> str:
    """A short text naming what `module_text` gives: this module's own source (it imports nothing else of
    jitorch) and the bfloat16 choice. The JIT keys its cached object code of the builtins by it (with
    llvmlite's version, which every cache key holds), so that a new process need not build the IR
    (tens of milliseconds of Python) to find it."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return f"jitorch builtins, source sha256 {digest}, bfloat16 conversions: {_bfloat_default()}"


@functools.cache
def names() -> frozenset[str]:
    """Every symbol the builtins define (`module_text` defines exactly these: a test checks it)."""
    return frozenset([name for name, *_ in _conversions(_bfloat_default())] + [d[0] for d in _DIVISIONS]
                     + [p[0] for p in _POWERS])
