"""The vectorisable math library: accuracy in ulps, special values, and vector code.

Each function is compiled into a small kernel ``void f(T* in..., T* out, i64 n)`` that maps
it over arrays, optimised at O3 for the host CPU and run on NumPy arrays. float32 results are
compared with NumPy's float64 functions, float64 results with mpmath at 100 bits.
"""

import ctypes
import functools
import itertools
import math
import pathlib
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from llvmlite import binding as llvm
from llvmlite import ir

from jitorch.codegen import mathlib

import mpmath  # noqa: E402  (a test dependency: the float64 oracle)

F32, F64 = np.float32, np.float64
NAMES = sorted(mathlib.FUNCTIONS)

# Largest error in ulps each function may make. The double-word algorithms measure under 1 ulp
# (erfc 1.05 near 2.2 in float32) and sqrt is correctly rounded; float64 tanh and sigmoid use one-word
# arithmetic for speed (measured 1.5 and 2.2 ulp); rsqrt is 1/sqrt(x), bit-identical to the
# eager op (1.5 ulp); float64 Phi is erfc's half with a first-order tail correction (measured 1.99), phi an exp
# with x * x's rounding put back (2.41).
ULP_BOUND = {name: 1.0 for name in NAMES}
ULP_BOUND.update({"sqrt": 0.5, "erfc": 1.5, "tanh": 2.0, "sigmoid": 2.5, "rsqrt": 1.5, "normal_cdf": 2.5,
                  "normal_pdf": 2.5})
# float32 functions evaluated in float arithmetic: the largest error over every float32 input
# (tools/float32_exhaustive.py: exp 0.988, log 0.882, tanh 0.949, erf 1.123, sigmoid 2.40), rounded up.
FLOAT32_BOUND = {"erf": 1.13, "exp": 1.0, "log": 1.0, "tanh": 1.0, "sigmoid": 2.5}
# GELU's Phi and phi (one branch-free formula each, relative error in the tail; tools/gelu_ulp.py measures
# GELU over every float32): their largest errors on these tests' samples, rounded up
FLOAT32_BOUND.update({"normal_cdf": 6.0, "normal_pdf": 2.0})
ERF32_BOUND = FLOAT32_BOUND["erf"]


# Compiling and running ------------------------------------------------------------------------

@functools.cache
def _target_machine():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)


@functools.cache
def _jit():
    # One engine for the session: LLJIT keeps every library linked into it alive.
    return llvm.create_lljit_compiler(_target_machine())


_names = itertools.count()


def _map_module(name, dtype, lanes=None, target_machine=None, triple=None):
    """(module text, symbol) of ``void f(T* in..., T* out, i64 n)`` applying ``name`` elementwise
    (``lanes`` elements per step when a vector type is given), for the host unless told."""
    scalar = ir.DoubleType() if dtype == F64 else ir.FloatType()
    t = ir.VectorType(scalar, lanes) if lanes else scalar
    arity = mathlib.FUNCTIONS[name]
    module = ir.Module()
    module.triple = triple or llvm.get_process_triple()
    module.data_layout = str((target_machine or _target_machine()).target_data)
    i64 = ir.IntType(64)
    symbol = f"map_{name}_{next(_names)}"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [t.as_pointer()] * (arity + 1) + [i64]), symbol)
    *ins, out, n = fn.args
    for p in (*ins, out):
        p.add_attribute("noalias")
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, i64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(i64(0), entry)
    align = 8 if dtype == F64 else 4  # NumPy's alignment, not the vector type's
    result = mathlib.emit(b, name, *[b.load(b.gep(p, [i]), align=align) for p in ins])
    b.store(result, b.gep(out, [i]), align=align)
    nxt = b.add(i, i64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return str(module), symbol


def _optimised(text):
    mod = llvm.parse_assembly(text)
    mod.verify()
    tm = _target_machine()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    return mod


@functools.cache
def compiled(name, dtype, lanes=None):
    """A Python function mapping ``name`` over NumPy arrays of ``dtype``, and its optimised IR."""
    text, symbol = _map_module(name, dtype, lanes)
    mod = _optimised(text)
    optimised_ir = str(mod)
    lib = llvm.JITLibraryBuilder().add_ir(mod).export_symbol(symbol).link(_jit(), symbol)
    arity = mathlib.FUNCTIONS[name]
    cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (arity + 1), ctypes.c_int64)(lib[symbol])

    def run(*arrays):
        arrays = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
        out = np.empty_like(arrays[0])
        cfunc(*[a.ctypes.data for a in arrays], out.ctypes.data, out.size // (lanes or 1))
        return out

    run.lib = lib  # keeps the compiled code alive as long as the function
    run.ir = optimised_ir
    return run


# References and errors ---------------------------------------------------------------------------

_NUMPY = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": np.vectorize(math.erf, otypes=[F64]), "erfc": np.vectorize(math.erfc, otypes=[F64]),
    "pow": np.power, "log_defined": np.log,
    "normal_cdf": np.vectorize(lambda x: 0.5 * math.erfc(-x / math.sqrt(2)), otypes=[F64]),
    "normal_pdf": lambda x: np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi),
}

_MP = {
    "exp": mpmath.exp, "exp2": lambda x: mpmath.power(2, x), "expm1": mpmath.expm1, "log": mpmath.log,
    "log2": lambda x: mpmath.log(x, 2), "log10": mpmath.log10, "log1p": mpmath.log1p, "sqrt": mpmath.sqrt,
    "rsqrt": lambda x: 1 / mpmath.sqrt(x), "sin": mpmath.sin, "cos": mpmath.cos, "tan": mpmath.tan,
    "asin": mpmath.asin, "acos": mpmath.acos, "atan": mpmath.atan, "atan2": mpmath.atan2,
    "sinh": mpmath.sinh, "cosh": mpmath.cosh, "tanh": mpmath.tanh,
    "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)), "asinh": mpmath.asinh, "acosh": mpmath.acosh,
    "atanh": mpmath.atanh, "erf": mpmath.erf, "erfc": mpmath.erfc, "pow": mpmath.power,
    "log_defined": mpmath.log, "normal_cdf": mpmath.ncdf, "normal_pdf": mpmath.npdf,
}


def _exact_values(name, dtype, args):
    """(exact, rounded): the true results (as float64 for float32 checks, mpmath numbers for
    float64) and those rounded to ``dtype``. Where an input is zero or not finite the result is
    NumPy's, whose C99 special cases (signed zeros, atan2's quadrants) mpmath does not follow."""
    with np.errstate(all="ignore"):
        wide = np.asarray(_NUMPY[name](*[a.astype(F64) for a in args]), dtype=F64)
        if dtype == F32:
            return wide, wide.astype(F32)
    exact = wide.astype(object)
    rounded = wide.copy()
    ordinary = np.all([np.isfinite(a) & (a != 0) for a in args], axis=0)
    with mpmath.workprec(100):
        for k in np.flatnonzero(ordinary):
            try:
                v = _MP[name](*[mpmath.mpf(float(a[k])) for a in args])
            except OverflowError:  # mpmath's erfc beyond ~1e150, where the result is exactly 0 or 2
                continue
            exact[k] = v if isinstance(v, mpmath.mpf) else mpmath.mpf("nan")  # complex: outside the domain
            rounded[k] = float(exact[k])
    return exact, rounded


def _ulp(exact, dtype):
    """The ulp of ``dtype`` at each exact value (the denormal spacing below the normal range)."""
    info = np.finfo(dtype)
    magnitude = np.array([float(abs(v)) for v in exact]) if exact.dtype == object else np.abs(exact)
    _, e = np.frexp(magnitude)
    return np.ldexp(1.0, np.maximum(e - 1, info.minexp) - info.nmant)


def ulp_errors(name, dtype, got, *args):
    """|got - f(args)| in ulps of ``dtype`` at the exact value, per element (float32: against
    NumPy's float64, float64: against mpmath at 100 bits). Where the exact result is zero, or
    rounds to an infinity or a NaN, ``got`` must be that value, sign included."""
    exact, rounded = _exact_values(name, dtype, args)
    with np.errstate(all="ignore"):
        special = ~np.isfinite(rounded) | (exact == 0) | ~np.isfinite(got)
        same = (np.isnan(got) & np.isnan(rounded)) | ((got == rounded) & (np.signbit(got) == np.signbit(rounded)))
        errors = np.where(special, np.where(same, 0.0, np.inf), 0.0)
    ordinary = np.flatnonzero(~special)
    if ordinary.size:
        x = exact[ordinary]
        diff = (np.array([float(abs(mpmath.mpf(float(g)) - v)) for g, v in zip(got[ordinary], x)])
                if x.dtype == object else np.abs(got[ordinary].astype(F64) - x))
        errors[ordinary] = diff / _ulp(x, dtype)
    return errors


def ulp_bound(name, dtype):
    return FLOAT32_BOUND[name] if dtype == F32 and name in FLOAT32_BOUND else ULP_BOUND[name]


def assert_accurate(name, dtype, *args):
    got = compiled(name, dtype)(*args)
    errors = ulp_errors(name, dtype, got, *args)
    worst = int(np.argmax(errors))
    assert errors[worst] <= ulp_bound(name, dtype), (
        f"{name}({', '.join(repr(a[worst]) for a in args)}) = {got[worst]!r}: "
        f"{errors[worst]:.3g} ulp (bound {ulp_bound(name, dtype)})")


# Inputs ---------------------------------------------------------------------------------------------

# The part of the real line where each function is not trivially constant, NaN or infinite.
CORE = {
    "exp": (-110, 90, -750, 710), "exp2": (-155, 130, -1080, 1025), "expm1": (-20, 90, -40, 710),
    "sinh": (-90, 90, -711, 711), "cosh": (-90, 90, -711, 711), "tanh": (-10, 10, -20, 20),
    "sigmoid": (-110, 20, -750, 40), "erf": (-6, 6, -6, 6), "erfc": (-4, 11, -6, 28),
    "normal_cdf": (-15, 6, -39, 9), "normal_pdf": (-15, 15, -39, 39),
    "asin": (-1, 1, -1, 1), "acos": (-1, 1, -1, 1), "atanh": (-1, 1, -1, 1),
    "log1p": (-1, 10, -1, 10), "acosh": (1, 100, 1, 100),
}


def log_uniform(rng, n, dtype, lo=None, hi=None, signed=True):
    """``n`` values with magnitudes spread evenly over the exponents from the smallest
    denormal (or ``lo``) to the largest finite value (or ``hi``), with random signs."""
    info = np.finfo(dtype)
    lo = float(info.smallest_subnormal) if lo is None else lo
    hi = float(info.max) if hi is None else hi
    mags = np.exp2(rng.uniform(math.log2(lo), math.log2(hi), n))
    signs = rng.choice([-1.0, 1.0], n) if signed else 1.0
    return np.clip(mags * signs, -hi, hi).astype(dtype)


def sample(name, dtype, rng, n):
    """Inputs over the whole range (half) and over the function's core interval (half)."""
    whole = log_uniform(rng, n // 2, dtype)
    if name in CORE:
        lo32, hi32, lo64, hi64 = CORE[name]
        lo, hi = (lo32, hi32) if dtype == F32 else (lo64, hi64)
        core = rng.uniform(lo, hi, n - n // 2).astype(dtype)
    else:
        core = log_uniform(rng, n - n // 2, dtype, lo=1e-6, hi=1e6)
    return np.concatenate([whole, core])


def special_values(dtype):
    info = np.finfo(dtype)
    tiny, big = float(info.smallest_subnormal), float(info.max)
    values = [0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, float(info.smallest_normal),
              float(info.smallest_normal) - tiny, big, -big, 1.0, -1.0, 0.5, -0.5, 2.0, 0.625, -0.625,
              2.5, 6.0, 10.0, 1e-8, 1e-4, 0.1, 1e10, 1e30, -1e30]
    # overflow and underflow thresholds of exp/expm1/exp2/sinh/cosh/erfc and their neighbours
    edges = ([88.72283, 88.7228394, 89.41599, 89.4159, 103.97, 104.0, 87.33655, 126.0, 128.0, 149.0,
              150.0, 10.0546, 9.194, 16.6355, 17.3287]
             if dtype == F32 else
             [709.782712893384, 709.7827128933841, 710.4758600739439, 710.475860073944, 745.1332191019411,
              745.14, 708.3964185322641, 1022.0, 1024.0, 1074.0, 1075.0, 26.5437, 27.2982, 36.7368, 37.4299])
    for e in edges:
        values += [e, -e, float(np.nextafter(dtype(e), dtype(np.inf))), float(np.nextafter(dtype(e), dtype(0)))]
    # multiples of pi/2 (the hardest arguments for trigonometric range reduction)
    for k in [1, 2, 3, 4, 5, 10, 100, 1000, 1e5, 1e7, 1e15, 1e22, 1e100, 1e300]:
        v = float(dtype(k * math.pi / 2))
        if math.isfinite(v):
            values += [v, -v]
    return np.array(values, dtype=dtype)


# Hard trigonometric arguments: the double closest to a multiple of pi/2 (within 2**-60.9;
# Muller, "Elementary Functions"), a float within 2**-29.2 of one, and huge values.
HARD_TRIG = {F64: [6381956970095103.0 * 2.0 ** 797, 1.0e22, 2.0 ** 1023, 1.7976931348623157e308],
             F32: [16367173.0 * 2.0 ** 72, 1.0e22, 1e38, 3.4028235e38]}


# Tests -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", [n for n in NAMES if mathlib.FUNCTIONS[n] == 1])
def test_random_inputs_within_ulp_bound(name, dtype):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    assert_accurate(name, dtype, sample(name, dtype, rng, 20000 if dtype == F32 else 1500))


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", [n for n in NAMES if mathlib.FUNCTIONS[n] == 1])
def test_special_values(name, dtype):
    extra = HARD_TRIG[dtype] if name in ("sin", "cos", "tan") else []
    assert_accurate(name, dtype, np.concatenate([special_values(dtype), np.array(extra, dtype=dtype)]))


@pytest.mark.parametrize("name", ["sqrt", "sin", "tan", "tanh", "erf", "expm1", "log1p", "asin", "atan",
                                  "sinh", "asinh", "atanh"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_odd_functions_keep_signed_zero(name, dtype):
    out = compiled(name, dtype)(np.array([-0.0, 0.0], dtype=dtype))
    assert out.tolist() == [0.0, 0.0] and np.signbit(out).tolist() == [True, False]


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_pow_and_atan2_random(dtype):
    rng = np.random.default_rng(7)
    n = 10000 if dtype == F32 else 1000
    x = log_uniform(rng, n, dtype, lo=1e-3, hi=1e3, signed=False)
    y = rng.uniform(-60, 60, n).astype(dtype)
    y[::3] = np.round(y[::3])  # integral exponents, also with negative bases
    x[::6] *= -1
    assert_accurate("pow", dtype, x, y)
    assert_accurate("atan2", dtype, log_uniform(rng, n, dtype), log_uniform(rng, n, dtype))


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["pow", "atan2"])
def test_binary_special_values(name, dtype):
    values = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, 1e-30, 1e30, 100.0, -100.0,
                       np.inf, -np.inf, np.nan, float(np.finfo(dtype).smallest_subnormal)], dtype=dtype)
    x, y = (a.ravel() for a in np.meshgrid(values, values))
    assert_accurate(name, dtype, x, y)


@pytest.mark.parametrize("name", NAMES)
def test_vector_type_matches_scalar(name):
    """A call on <8 x float> computes lane by lane what the scalar call does (also the table
    lookups of the trigonometric functions)."""
    x = log_uniform(np.random.default_rng(3), 256, F32)
    args = [x, x[::-1].copy()][:mathlib.FUNCTIONS[name]]
    scalar = compiled(name, F32)(*args)
    vector = compiled(name, F32, lanes=8)(*args)
    np.testing.assert_array_equal(vector.view(np.uint32), scalar.view(np.uint32))


@given(hnp.arrays(F32, 16, elements=st.floats(width=32)))
def test_any_float32_input_is_accurate(x):
    for name in ("exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "pow"):
        args = (x, x[::-1].copy()) if name == "pow" else (x,)
        assert_accurate(name, F32, *args)


def test_float32_erf_over_strided_float32_inputs():
    """Every 1021st float32 below 4.5 (past it erf is +-1), and every float of [0.9, 1.0] around the switch
    from x + x P(x**2) to 1 - exp(R(x)) where the error peaks (1.123 ulp at 0.934 over every float32;
    its mean is a correctly rounded function's, 0.25)."""
    strided = np.arange(0, int(np.float32(4.5).view(np.uint32)), 1021, dtype=np.uint32).view(F32)
    around_switch = np.append(np.arange(*np.array([0.9, 1.0], F32).view(np.uint32), 7, dtype=np.uint32).view(F32),
                              F32(0.9342826))
    for x in (strided, around_switch):
        for signed in (x, -x):
            got = compiled("erf", F32)(signed)
            errors = ulp_errors("erf", F32, got, signed)
            assert errors.max() <= ERF32_BOUND, signed[np.argmax(errors)]
    assert errors.mean() < 0.3


def _with_vector_width(text, bits):
    """The map module ``text`` with its entry asking LLVM for ``bits``-bit vectors."""
    return re.sub(r"^(define void @\"?map_[\w.]+\"?\(.*\))", rf'\1 "prefer-vector-width"="{bits}"', text, flags=re.M)


# Arguments where the float32 evaluations in float switch formula or clamp, or their error peaks over every
# float32 (tools/float32_exhaustive.py): exp's clamps (-104, 100), overflow (88.72) and denormal results
# (below -87.34); log's exponent split at 2/3 and 4/3, 1 and the denormals; tanh's switch at 1 and its
# saturation at 9; sigmoid's exp of -|x|.
FLOAT32_EDGES = {
    "exp": [-104.0, 100.0, 88.72283, 88.7228394, -87.33655, -103.97, -0.5 * math.log(2), 0.5 * math.log(2)],
    "log": [2 / 3, 4 / 3, 1.0, 0.5, 2.0, float(np.finfo(F32).smallest_normal), 1e-40, 3.4e38],
    "tanh": [1.0, 0.5, 9.0, 9.02, 44.36],
    "sigmoid": [0.0, 1.0, -1.0, 88.72, -88.72, -103.97, 16.6, 17.33],
}


@pytest.mark.parametrize("name", sorted(FLOAT32_EDGES))
def test_float32_over_strided_inputs_and_edges(name):
    """Every 4099th float32 bit pattern (both signs, denormals, infinities, NaNs) and every float within 4096
    ulps of each edge: at most the bound `tools/float32_exhaustive.py` measured over all 2**32 inputs, special
    values exactly as the float64 function rounds them, and (over the ordinary results) a mean error near a
    correctly rounded function's 0.25."""
    strided = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32).view(F32)
    around = [(np.arange(int(b) - 4096, int(b) + 4096) % 2 ** 32).astype(np.uint32).view(F32)
              for v in FLOAT32_EDGES[name] for b in np.array([v, -v], F32).view(np.uint32)]
    x = np.concatenate([strided, *around])
    got = compiled(name, F32)(x)
    errors = ulp_errors(name, F32, got, x)
    worst = int(np.argmax(errors))
    assert errors[worst] <= ulp_bound(name, F32), (x[worst], got[worst], errors[worst])
    assert errors[np.isfinite(got)].mean() < 0.3


@pytest.mark.parametrize("name", ["erf", "tanh", "exp", "log", "pow", "sin", "erfc"])
def test_wider_vectors_change_no_bit(name):
    """Every lane computes what a scalar would: the CPU target asks for 512-bit vectors in kernels of math
    functions (cpu target's `module_text`), and the results are those of 256-bit and scalar code."""
    rng = np.random.default_rng(5)
    args = [sample(name, F32, rng, 4099), sample(name, F32, rng, 4099)][:mathlib.FUNCTIONS[name]]
    text, symbol = _map_module(name, F32)
    outs = []
    for bits in (128, 256, 512):
        mod = _optimised(_with_vector_width(text, bits))
        widths = {int(w) for w in re.findall(r"<(\d+) x float>", str(mod))}
        if "+avx512f" in llvm.get_host_cpu_features().flatten().split(","):
            # (pow's vectors of doubles hold half as many lanes, which LLVM may take for its float lanes)
            assert max(widths) in ((bits // 32, bits // 64) if name == "pow" else (bits // 32,)), (bits, widths)
        lib = llvm.JITLibraryBuilder().add_ir(mod).export_symbol(symbol).link(_jit(), f"{symbol}_{bits}")
        cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(args) + 1), ctypes.c_int64)(lib[symbol])
        out = np.empty_like(args[0])
        cfunc(*[a.ctypes.data for a in args], out.ctypes.data, out.size)
        outs.append(out.view(np.uint32))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def _vector_width(features):
    return 8 if "+avx2" in features.split(",") else 4


@pytest.mark.parametrize("name", NAMES)
def test_float32_loop_vectorises_without_calls(name):
    """After O3 the map loop uses vectors of at least the host's float width and calls only
    intrinsics: ours, and the integer min/max, gathers and class tests LLVM's own passes introduce."""
    text = compiled(name, F32).ir
    widths = [int(w) for w in re.findall(r"<(\d+) x float>", text)]
    assert widths and max(widths) >= _vector_width(llvm.get_host_cpu_features().flatten()), name
    callees = set(re.findall(r"\bcall\b[^@]*@([\w.$]+)", text))
    # (is.fpclass: InstCombine's fold of compares such as float32 acosh's ``x == inf`` beside ``isnan``)
    llvm_made = re.compile(r"llvm\.(umin|umax|smin|smax|abs|masked\.gather|is\.fpclass)\.")
    for callee in callees:
        base = re.sub(r"\.(v\d+)?[fi]\d+.*$", "", callee)
        assert base in mathlib.ALLOWED_INTRINSICS or llvm_made.match(callee), callee


@pytest.mark.parametrize("lanes", [None, 4])
@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_emitted_ir_uses_only_allowed_intrinsics(dtype, lanes):
    """What mathlib itself emits: internal always-inline definitions, and declarations of
    allowed intrinsics only (no libm, nothing external)."""
    text = "\n".join(_map_module(name, dtype, lanes)[0] for name in NAMES)
    declared = set(re.findall(r'^declare [^@]*@"?([\w.]+)"?\(', text, flags=re.M))
    assert {re.sub(r"\.(v\d+)?f(32|64)$", "", d) for d in declared} <= mathlib.ALLOWED_INTRINSICS
    definitions = re.findall(r'^define (internal )?[^@]*@"?([\w.]+)"?\(.*$', text, flags=re.M)
    math_defs = [line for line in re.findall(r"^define .*$", text, flags=re.M) if "jitorch.math." in line]
    assert len(math_defs) == len(NAMES)
    assert all(line.startswith("define internal") and "alwaysinline" in line for line in math_defs)
    assert all(internal or name.startswith("map_") for internal, name in definitions)


def test_one_definition_per_name_and_type():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(mathlib.emit(b, "exp", mathlib.emit(b, "exp", fn.args[0])))
    text = str(module)
    assert text.count('define internal float @"jitorch.math.exp.f32"') == 1
    assert text.count('call float @"jitorch.math.exp.f32"') == 2


@pytest.mark.parametrize("args, error, match", [
    (("expo", "f32"), ValueError, "no function 'expo'"),
    (("exp", "i32"), TypeError, "float or double"),
    (("exp", "f16"), TypeError, "float or double"),
    (("pow", "f32"), TypeError, "takes 2 argument"),
])
def test_bad_calls_raise(args, error, match):
    name, kind = args
    t = {"f32": ir.FloatType(), "i32": ir.IntType(32), "f16": ir.HalfType()}[kind]
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(t, [t]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(error, match=match):
        mathlib.emit(b, name, fn.args[0])


def test_mixed_argument_types_raise():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.FloatType(), [ir.FloatType(), ir.DoubleType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(TypeError, match="share one type"):
        mathlib.emit(b, "pow", *fn.args)


def compile_all_for_nvptx():
    """Child-process body (LLVM aborts instead of raising): every function, in both precisions,
    compiled to PTX; exits non-zero naming any that leaves a call or an external symbol."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    triple = "nvptx64-nvidia-cuda"
    try:
        tm = llvm.Target.from_triple(triple).create_target_machine(cpu="sm_80", opt=3)
    except RuntimeError:
        sys.exit("no NVPTX target")
    for dtype, name in itertools.product((F32, F64), NAMES):
        mod = llvm.parse_assembly(_map_module(name, dtype, target_machine=tm, triple=triple)[0])
        mod.verify()
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
        pb.getModulePassManager().run(mod, pb)
        ptx = tm.emit_assembly(mod)
        if ".extern" in ptx or re.search(r"\bcall(\.uni)?\b", ptx):
            sys.exit(f"{name} {dtype.__name__}: the PTX calls a function")


@pytest.mark.cpu_independent
def test_every_function_compiles_for_nvptx_without_calls():
    code = "from tests.codegen.test_mathlib import compile_all_for_nvptx; compile_all_for_nvptx()"
    root = pathlib.Path(__file__).resolve().parents[2]
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=root)
    assert child.returncode == 0, child.stderr[-2000:]
