"""jitorch's compiler-rt functions, called the way LLVM's code calls them: kernels compiled for the
x86-64-v2 baseline (no F16C) turn half conversions into calls, which must give IEEE's correctly rounded
results; 128-bit division and powi are checked against Python's integers and floats."""

import ctypes
import platform

import numpy as np
import pytest
from llvmlite import ir

from jitorch.codegen import builtins, linker
from jitorch.codegen.cache import KernelCache, cache_key
from jitorch.codegen.errors import CompileError
from jitorch.codegen.linker import Linker, undefined_symbols
from jitorch.codegen.machine import parse, selected

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="the x86-64-v2 baseline is an x86-64 target")

I64 = ir.IntType(64)
ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture(scope="module")
def baseline():
    machine = parse("x86-64-v2")
    return machine, Linker(machine, opt=3, codemodel="jitdefault")


def _loop_kernel(body, src_type, dst_type):
    """``convert(src*, dst*, n)``: ``dst[i] = body(builder, src[i])`` for every i < n."""
    module = ir.Module(name="convert")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [src_type.as_pointer(), dst_type.as_pointer(), I64]),
                     "convert")
    src, dst, n = fn.args
    entry, loop, done = (fn.append_basic_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, I64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    b.store(body(b, module, b.load(b.gep(src, [i]))), b.gep(dst, [i]))
    nxt = b.add(i, I64(1))
    i.add_incoming(I64(0), entry)
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return str(module)


def _run(baseline, text, src, dst_dtype):
    import llvmlite.binding as llvm
    machine, linker = baseline
    tm = machine.target_machine(opt=3, codemodel="jitdefault")
    module = llvm.parse_assembly(text)
    module.triple, module.data_layout = machine.triple, str(tm.target_data)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(module, pb)
    obj = tm.emit_object(module)
    library = linker.link(obj, ["convert"])
    out = np.empty(len(src), dst_dtype)
    ENTRY(library["convert"])(src.ctypes.data, out.ctypes.data, len(src))
    return out, undefined_symbols(obj)


def _convert(baseline, src, src_type, dst_type, dst_dtype, op):
    text = _loop_kernel(lambda b, m, x: getattr(b, op)(x, dst_type), src_type, dst_type)
    return _run(baseline, text, src, dst_dtype)


def _finite_values(fmt):
    """Every non-negative finite value of a 16-bit format, ascending, as exact float64s; their bits; the
    value one ulp past the largest (where rounding up overflows)."""
    if fmt == "half":
        bits = np.arange(0x7C00, dtype=np.uint16)
        return bits.view(np.float16).astype(np.float64), bits, 65536.0
    bits = np.arange(0x7F80, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64), bits, 2.0 ** 128


def _nearest(x, fmt):
    """IEEE round-to-nearest-even of float64 ``x`` to the bits of a 16-bit format, by search among all its
    values (no conversion routine involved): ties go to the even significand, beyond max + half an ulp to
    infinity (the bits one past the largest finite value)."""
    values, bits, past_max = _finite_values(fmt)
    magnitude = np.abs(x)
    lo = np.clip(np.searchsorted(values, magnitude, side="right") - 1, 0, len(values) - 1)
    hi_value = np.where(lo + 1 < len(values), values[np.minimum(lo + 1, len(values) - 1)], past_max)
    middle = (values[lo] + hi_value) / 2  # exact: one bit more than the format has
    up = (magnitude > middle) | ((magnitude == middle) & (bits[lo] % 2 == 1))
    result = np.where(up, lo + 1, lo).astype(np.uint16)
    result = np.where(np.isinf(magnitude), np.uint16(len(values)), result)
    return result | np.where(np.signbit(x), np.uint16(0x8000), np.uint16(0))


def _special_and_random(dtype, rng, n=20000):
    info = np.finfo(dtype)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, 65536.0, 1e-8, 2.0 ** -24,
                         2.0 ** -25, 2.0 ** -25 * 1.5, 2.0 ** -14, 6.1e-5, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11,
                         float(info.max), float(info.tiny), float(info.smallest_subnormal)], dtype)
    uint = np.uint32 if dtype == np.float32 else np.uint64
    random_bits = rng.integers(0, np.iinfo(uint).max, n, dtype=uint, endpoint=True).view(dtype)
    # values in the half's range, where the rounding is
    scaled = (rng.standard_normal(n) * 10.0 ** rng.uniform(-9, 5, n)).astype(dtype)
    values = np.concatenate([specials, -specials, random_bits, scaled])
    return values[~np.isnan(values)]


@pytest.mark.parametrize("src_dtype, src_type, symbol", [
    (np.float32, ir.FloatType(), "__truncsfhf2"),
    (np.float64, ir.DoubleType(), "__truncdfhf2"),
])
def test_narrowing_to_half_rounds_to_nearest_even(baseline, rng, src_dtype, src_type, symbol):
    src = _special_and_random(src_dtype, rng)
    out, needed = _convert(baseline, src, src_type, ir.HalfType(), np.float16, "fptrunc")
    assert symbol in needed  # the baseline has no F16C: the kernel called jitorch's builtin
    np.testing.assert_array_equal(out.view(np.uint16), _nearest(src.astype(np.float64), "half"))


@pytest.mark.skipif(builtins.names().isdisjoint({"__truncsfbf2"}), reason="LLVM before 17 has no bfloat calls")
@pytest.mark.parametrize("src_dtype, src_type, symbol", [
    (np.float32, ir.FloatType(), "__truncsfbf2"),
    (np.float64, ir.DoubleType(), "__truncdfbf2"),
])
def test_narrowing_to_bfloat16_rounds_to_nearest_even(baseline, rng, src_dtype, src_type, symbol):
    src = _special_and_random(src_dtype, rng)
    if src_dtype == np.float64:
        src = np.concatenate([src, (rng.standard_normal(5000) * 10.0 ** rng.uniform(-40, 38, 5000))])
    out, needed = _convert(baseline, src, src_type, builtins.BFLOAT.type, np.uint16, "fptrunc")
    if symbol in needed:  # F16C machines convert float to bfloat16 inline
        np.testing.assert_array_equal(out, _nearest(src.astype(np.float64), "bfloat16"))


def test_narrowing_nan_to_half_stays_nan(baseline):
    src = np.array([np.nan, -np.nan, np.float32(np.nan) * 0], np.float32)
    out, _ = _convert(baseline, src, ir.FloatType(), ir.HalfType(), np.float16, "fptrunc")
    assert np.isnan(out).all()


@pytest.mark.parametrize("dst_dtype, dst_type", [(np.float32, ir.FloatType()), (np.float64, ir.DoubleType())])
def test_widening_every_half_is_exact(baseline, dst_dtype, dst_type):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out, needed = _convert(baseline, bits.view(np.float16), ir.HalfType(), dst_type, dst_dtype, "fpext")
    assert "__extendhfsf2" in needed
    exact = bits.view(np.float16).astype(np.float64)
    nan = np.isnan(exact)
    np.testing.assert_array_equal(np.isnan(out), nan)
    np.testing.assert_array_equal(out[~nan].astype(np.float64), exact[~nan])
    np.testing.assert_array_equal(np.signbit(out[~nan]), np.signbit(exact[~nan]))


def _i128_kernel(op):
    """``dst[i] = low 64 bits of (op(sext a, sext b))`` over pairs (a, b) of int64."""
    pair = ir.ArrayType(I64, 2)
    i128 = ir.IntType(128)

    def body(b, module, v):
        a, d = (b.sext(b.extract_value(v, k), i128) for k in (0, 1))
        # move the values into the high half too, so the division needs all 128 bits
        a = b.add(b.shl(a, i128(40)), a)
        return b.trunc(getattr(b, op)(a, d), I64)
    return _loop_kernel(body, pair, I64)


@pytest.mark.parametrize("op, symbol, reference", [
    ("sdiv", "__divti3", lambda a, d: abs(a) // abs(d) * (1 if (a < 0) == (d < 0) else -1)),
    ("srem", "__modti3", lambda a, d: abs(a) % abs(d) * (1 if a >= 0 else -1)),
    ("udiv", "__udivti3", lambda a, d: (a % 2 ** 128) // (d % 2 ** 128)),
    ("urem", "__umodti3", lambda a, d: (a % 2 ** 128) % (d % 2 ** 128)),
])
def test_128_bit_division_matches_python_integers(baseline, rng, op, symbol, reference):
    pairs = rng.integers(-2 ** 63, 2 ** 63 - 1, (500, 2), dtype=np.int64)
    pairs[:50, 1] = rng.integers(-9, 9, 50)
    pairs[pairs[:, 1] == 0, 1] = 7
    pairs[50:60] = [[-2 ** 63, -1], [-2 ** 63, 1], [2 ** 63 - 1, -2 ** 63], [0, 3], [1, -1],
                    [-1, 2 ** 63 - 1], [12345, 12345], [-7, 2], [7, -2], [-7, -2]]
    out, needed = _run(baseline, _i128_kernel(op), pairs, np.int64)
    assert symbol in needed
    expected = []
    for a, d in pairs.tolist():
        value = reference((a << 40) + a, d)
        expected.append((value + 2 ** 63) % 2 ** 64 - 2 ** 63)
    assert out.tolist() == expected


def _powi_reference(x, n, dtype):
    """compiler-rt's __powidf2 in the same arithmetic: square-and-multiply, then one reciprocal."""
    result, base, k = dtype(1), dtype(x), n
    while True:
        if k % 2:
            result = dtype(result * base)
        k = int(k / 2)
        if k == 0:
            break
        base = dtype(base * base)
    return dtype(1) / result if n < 0 else result


@pytest.mark.parametrize("dtype, float_type, symbol", [(np.float64, ir.DoubleType(), "__powidf2"),
                                                         (np.float32, ir.FloatType(), "__powisf2")])
def test_powi_matches_square_and_multiply(baseline, rng, dtype, float_type, symbol):
    n = 64
    pair = ir.LiteralStructType([float_type, ir.IntType(32)])

    def body(b, module, v):
        powi = module.declare_intrinsic("llvm.powi", [float_type, ir.IntType(32)],
                                        ir.FunctionType(float_type, [float_type, ir.IntType(32)]))
        return b.call(powi, [b.extract_value(v, 0), b.extract_value(v, 1)])

    src = np.zeros(n, np.dtype([("x", dtype), ("n", np.int32)], align=True))  # LLVM's layout of the pair
    src["x"] = rng.uniform(-2, 2, n)
    src["n"] = rng.integers(-40, 40, n)
    src["n"][:3] = [0, 1, -1]
    out, needed = _run(baseline, _loop_kernel(body, pair, float_type), src, dtype)
    assert symbol in needed
    with np.errstate(all="ignore"):
        expected = np.array([_powi_reference(x, int(k), dtype) for x, k in zip(src["x"], src["n"])], dtype)
    np.testing.assert_array_equal(out, expected)


def test_every_builtin_is_defined_and_compiles():
    expected = {"__truncsfhf2", "__truncdfhf2", "__extendhfsf2", "__extendhfdf2", "__divti3", "__modti3",
                "__udivti3", "__umodti3", "__powisf2", "__powidf2"}
    assert expected <= builtins.names()
    # names() is written without LLVM: it must be exactly what module_text defines
    import llvmlite.binding as llvm
    defined = {f.name for f in llvm.parse_assembly(builtins.module_text()).functions if not f.is_declaration}
    assert builtins.names() == defined


def test_the_builtins_fingerprint_follows_their_source(tmp_path, monkeypatch):
    text = builtins.fingerprint()
    assert text == builtins.fingerprint() and "bfloat16 conversions" in text
    changed = tmp_path / "builtins.py"
    changed.write_bytes(open(builtins.__file__, "rb").read() + b"\n# changed\n")
    monkeypatch.setattr(builtins, "__file__", str(changed))
    builtins.fingerprint.cache_clear()
    try:
        assert builtins.fingerprint() != text
    finally:
        monkeypatch.undo()
        builtins.fingerprint.cache_clear()
    assert builtins.fingerprint() == text


def test_a_symbol_nothing_defines_is_a_compile_error_naming_it(baseline):
    machine, linker = baseline
    module = ir.Module(name="calls_nowhere")
    missing = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "jitorch_no_such_symbol")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "calls_nowhere")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(missing, [])
    b.ret_void()
    import llvmlite.binding as llvm
    tm = machine.target_machine(opt=0, codemodel="jitdefault")
    parsed = llvm.parse_assembly(str(module))
    parsed.triple = machine.triple
    with pytest.raises(CompileError, match="jitorch_no_such_symbol"):
        linker.link(tm.emit_object(parsed), ["calls_nowhere"])


def test_object_code_that_is_not_elf_is_a_compile_error(baseline):
    _, linker = baseline
    for junk in (b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 100, b"MZ" + bytes(200)):
        with pytest.raises(CompileError, match="not usable"):
            linker.link(junk, ["f"])


def test_a_new_jit_takes_the_builtins_from_the_kernel_cache_and_rebuilds_a_damaged_entry(tmp_path, monkeypatch):
    host = selected()
    made = linker.builtins_object(host)
    emitted = []
    monkeypatch.setattr(linker, "builtins_object", lambda m: emitted.append(m) or made)

    def new_process():  # its own memory, the same folder
        kernels = KernelCache(tmp_path / "kernels")
        monkeypatch.setattr(linker, "builtins_cache", lambda: kernels)
        linker.jit_builtins_object.cache_clear()
        return linker.jit_builtins_object(host)

    assert new_process() == made and emitted == [host]
    assert new_process() == made and emitted == [host]  # read, not emitted
    (entry,) = (tmp_path / "kernels").rglob("*.jitk")
    entry.write_bytes(entry.read_bytes()[:-8] + b"\0" * 8)  # damaged: a miss, made again
    assert new_process() == made and emitted == [host, host]
    # code that checks out as an entry but is not the builtins (another function): rejected, made again
    import llvmlite.binding as llvm
    other = llvm.parse_assembly('define void @not_a_builtin() nounwind {\n  ret void\n}\n')
    other.triple = host.triple
    text = builtins.fingerprint()
    KernelCache(tmp_path / "kernels").put(cache_key("builtins", text, host.id()),
                                          host.target_machine(opt=0).emit_object(other), text)
    assert new_process() == made and emitted == [host, host, host]
    linker.jit_builtins_object.cache_clear()
