"""pow, float_power and xlogy as jitorch defines them (`jitorch.ops.powers`): the same bits eagerly (NumPy arrays,
Python floats, the compiled kernel) and compiled, whatever NumPy's version or the CPU, and close to torch's."""

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import powers

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLOATS = [jt.float16, jt.bfloat16, jt.float32, jt.float64]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, 1e-30, 1e30,
           100.0, -100.0, 1e-310, -1e-310, 5e-324, 1.7976931348623157e308]


def _operands(n, seed):
    """(bases, exponents) as float64: special values crossed, then random bases over the whole range (both signs,
    near 1, subnormal) with real, integral and half-integral exponents (tiny and huge too)."""
    rng = np.random.default_rng(seed)
    sx, sy = (a.ravel() for a in np.meshgrid(SPECIAL, SPECIAL))
    x = np.exp2(rng.uniform(-1074, 1023, n)) * rng.choice([-1.0, 1.0], n)
    x[::5] = 1 + rng.normal(0, 1e-3, n)[::5]
    y = rng.uniform(-60, 60, n)
    y[::3] = np.round(y[::3])
    y[1::7] = np.round(y[1::7]) + 0.5
    y[2::11] = np.exp2(rng.uniform(-1074, 100, n))[2::11] * rng.choice([-1.0, 1.0], n)[2::11]
    return np.concatenate([sx, x]), np.concatenate([sy, y])


def _bits(a):
    """Float bits with every NaN made one (a NaN's sign and payload are not part of the definition)."""
    a = np.asarray(a)
    a = np.where(np.isnan(a), np.nan, a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _tensor(a, dtype):
    return jt.from_numpy(np.ascontiguousarray(a)).to(dtype)


def _np(t):
    return t.float().numpy() if t.dtype is jt.bfloat16 else t.numpy()


@pytest.fixture
def kernel_calls(monkeypatch):
    """The ops `powers.KERNEL` served while the test runs, as (name, dtype) pairs."""
    calls = []
    real = powers.KERNEL

    def recording(name, dtype):
        calls.append((name, dtype))
        return real(name, dtype)
    monkeypatch.setattr(powers, "KERNEL", recording)
    return calls


@pytest.fixture
def each_calls(monkeypatch):
    """The algorithms that ran element by element on Python floats (`powers._each`) while the test runs."""
    calls = []
    real = powers._each

    def recording(algorithm, dtype, *operands):
        calls.append(algorithm.__name__)
        return real(algorithm, dtype, *operands)
    monkeypatch.setattr(powers, "_each", recording)
    return calls


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (selects discard the overflows and NaNs of lanes not taken)
@pytest.mark.parametrize("pow_algorithm, log_algorithm, dtype", [
    (powers.pow_double, powers.log_double, "float64"), (powers.pow_single, powers.log_single, "float32")],
    ids=["double", "single"])
def test_numpy_arrays_python_floats_and_the_kernel_compute_the_same_bits(pow_algorithm, log_algorithm, dtype):
    """An algorithm on NumPy arrays, on each element as Python floats (the reference that no NumPy math function
    takes part in), traced into a Python function (`powers.on_floats`) and by the code generator's kernel is one
    definition: equal bits. (float32's: operands float32 values, results rounded to float32.)"""
    x, y = (v.astype(dtype).astype(np.float64) for v in _operands(3000, 1))
    rounded = np.dtype(dtype).type
    arrays = pow_algorithm(powers.Arrays(), x, y).astype(dtype)
    floats = np.array([pow_algorithm(powers.Floats(), a, b) for a, b in zip(x.tolist(), y.tolist())]).astype(dtype)
    traced = np.array([powers.on_floats(pow_algorithm, 2)(a, b) for a, b in zip(x.tolist(), y.tolist())], dtype)
    kernel = powers.KERNEL("pow", dtype)(x.astype(dtype), y.astype(dtype))[0]
    for got in (arrays, traced, kernel):
        np.testing.assert_array_equal(_bits(got), _bits(floats))
    logs = log_algorithm(powers.Arrays(), np.abs(x)).astype(dtype)
    each = np.array([rounded(log_algorithm(powers.Floats(), a)) for a in np.abs(x).tolist()])
    traced = np.array([rounded(powers.on_floats(log_algorithm, 1)(a)) for a in np.abs(x).tolist()])
    np.testing.assert_array_equal(_bits(logs), _bits(each))
    np.testing.assert_array_equal(_bits(traced), _bits(each))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float32_pow_in_plain_double_rounds_as_the_double_word_pow():
    """float32's `pow_single` (plain double) rounds to the float32 that the double-word `pow_double` rounds to
    (correctly rounded but where the exact power is within ~2**-20 ulp of a midpoint: about one in a million
    random operands, benchmarks/pow_accuracy.py --exact), over the whole range and near its ends."""
    x, y = (v.astype(np.float32).astype(np.float64) for v in _operands(20000, 7))
    rng = np.random.default_rng(7)
    ends = np.exp2(rng.uniform(-20, 20, 20000)).astype(np.float32).astype(np.float64)
    x = np.concatenate([x, ends])
    y = np.concatenate([y, (rng.choice([-1, 1], 20000) * rng.uniform(110, 149, 20000)
                            / np.abs(np.log2(ends))).astype(np.float32)])
    plain = powers.pow_single(powers.Arrays(), x, y).astype(np.float32)
    words = powers.pow_double(powers.Arrays(), x, y).astype(np.float32)
    np.testing.assert_array_equal(_bits(plain), _bits(words))


# float32 powers whose exact value is a number of 25 bits, halfway between two float32s (odd), as (x, y, x ** y)
MIDPOINTS = [(4097.0, 2.0, 4097 ** 2), (5791.0 * 2.0 ** 20, 2.0, 5791 ** 2 * 2.0 ** 40),
             (4099.0 * 2.0 ** -70, 2.0, 4099 ** 2 * 2.0 ** -140), (257.0, 3.0, 257 ** 3), (321.0, 3.0, 321 ** 3),
             (11.0, 7.0, 11 ** 7), (257.0 ** 2, 1.5, 257 ** 3), (319.0 ** 2 * 2.0 ** -60, 1.5, 319 ** 3 * 2.0 ** -90),
             (29.0 ** 2, 2.5, 29 ** 5), (31.0 ** 2, 2.5, 31 ** 5)]


def test_float32_exact_powers_halfway_between_two_floats_round_to_even():
    """A float32 power halfway between two floats (4097 ** 2 = 16785409) rounds to the even one, as the exact power
    does (torch's powf rounds 297 of the 848 odd 13-bit squares the other way): eagerly on each path and
    compiled. `pow_single` alone is within 2**-45 of the midpoint, either side: it takes the 25-bit value."""
    x, y, exact = (np.array([case[i] for case in MIDPOINTS] * 10, np.float64) for i in range(3))
    want = exact.astype(np.float32)
    assert np.all(want != exact) and np.all(x.astype(np.float32) == x)  # (halfway; the operands are float32s)
    compiled = jt.compile(lambda a, b: a ** b)
    for n in (1, 5, 40, 100):
        a, b = _tensor(x[:n], jt.float32), _tensor(y[:n], jt.float32)
        np.testing.assert_array_equal((a ** b).numpy(), want[:n])
        np.testing.assert_array_equal(compiled(a, b).numpy(), want[:n])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("size", [1, 5, 40, 300], ids=["one", "few", "some", "kernel"])
def test_eager_pow_and_xlogy_are_the_compiled_bits(dtype, size, kernel_calls, each_calls):
    """Eager pow and xlogy (up to `powers.EACH_MAX` elements: each on Python floats; then NumPy arrays; from
    `powers.KERNEL_MIN`: the compiled kernel) give a compiled function's bits, special values and every dtype
    included; float32 and the half types by `pow_single` and `log_single`, float64 by the double-word ones."""
    x, y = _operands(4000, 2)
    x, y = _tensor(x, dtype), _tensor(y, dtype)
    compiled = jt.compile(lambda a, b: (a ** b, jt.xlogy(b, a.abs())))
    for start in range(0, x.numel() - size, max(size, x.numel() // 30)):
        a, b = x[start:start + size], y[start:start + size]
        pow_bits, xlogy_bits = (_bits(_np(r)) for r in compiled(a, b))
        np.testing.assert_array_equal(_bits(_np(a ** b)), pow_bits)
        np.testing.assert_array_equal(_bits(_np(jt.xlogy(b, a.abs()))), xlogy_bits)
    compute = "float64" if dtype is jt.float64 else "float32"
    assert set(kernel_calls) == ({("pow", compute), ("xlogy", compute)} if size >= powers.KERNEL_MIN else set())
    width = "double" if dtype is jt.float64 else "single"
    assert set(each_calls) == ({f"pow_{width}", f"log_{width}"} if size <= powers.EACH_MAX else set())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("exponent", [-1.5, 0.5, 7.0, 16.0, 15.5, 17.0, -0.3, 1e-300])
def test_eager_pow_by_a_number_is_the_compiled_bits(dtype, exponent):
    """A Python-number exponent: float32's products and square root (`powers.pow_by_products`) or pow, the
    compiled path's choice too, the number rounded to the compute dtype as a compiled constant is."""
    x, _ = _operands(500, 3)
    x = _tensor(x, dtype)
    compiled = jt.compile(lambda a: a ** exponent)
    for part in (x[:1], x[1:40], x):
        np.testing.assert_array_equal(_bits(_np(part ** exponent)), _bits(_np(compiled(part))))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (`powers.power` called outside an op's kernel)
def test_float_power_and_rpow_and_in_place_forms_are_pow():
    """float_power is pow in float64, ``number ** t`` pow of the number, ``pow_`` pow written in place."""
    x, y = _operands(200, 4)
    for a, b in ((x, y), (x[:50], y[:50]), (x[:1], y[:1])):
        a, b = a.astype(np.float32), b.astype(np.float32)
        ta, tb = _tensor(a, jt.float32), _tensor(b, jt.float32)
        want = _bits(powers.power(a.astype(np.float64), b.astype(np.float64), np.float64))
        np.testing.assert_array_equal(_bits(jt.float_power(ta, tb).numpy()), want)
        np.testing.assert_array_equal(_bits(ta.double().float_power_(tb).numpy()), want)
        np.testing.assert_array_equal(_bits(ta.clone().pow_(tb).numpy()), _bits(powers.power(a, b, np.float32)))
    t = _tensor(y[:300], jt.float64)
    np.testing.assert_array_equal(_bits((2.0 ** t).numpy()), _bits(powers.power(2.0, y[:300], np.float64)))


def _ulps(got, want):
    """Ulps of ``got``'s dtype between two float arrays of one dtype, where both are finite; and whether their
    NaNs and infinities agree."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]
    infinite = np.isinf(got)
    same_kind = np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[infinite], want[infinite])
    finite = np.isfinite(got) & np.isfinite(want)

    def ordered(a):
        i = a[finite].view(bits).astype(np.int64)
        return np.where(i < 0, np.iinfo(bits).min - i, i)
    return np.abs(ordered(got) - ordered(want)), same_kind


# torch's CPU pow: glibc's pow (float64), SLEEF's 1-ulp powf (float32, and the half types in float32); its xlogy
# multiplies by glibc's log, which for the half types it rounds to the half type first (jitorch: to float32).
# jitorch's pow is within an ulp of either, its xlogy within an ulp of torch's but for float32 (the product of
# two logs an ulp apart), at most this share of elements differing (measured over 2e5 operands per dtype:
# benchmarks/pow_accuracy.py; NumPy's own power() and log() were up to 4 ulps from torch's, on up to 26%).
# op -> (largest difference in ulps of the dtype, largest share of elements that differ)
TORCH_ULPS = {"pow": (1, 0.002), "pow by 2.7": (1, 0.01), "xlogy": (1, 0.0)}
TORCH_ULPS_OF = {(jt.float32, "xlogy"): (2, 0.005), (jt.float16, "xlogy"): (1, 0.1), (jt.bfloat16, "xlogy"): (1, 0.1)}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pow_and_xlogy_within_an_ulp_of_torch(dtype):
    x, y = _operands(8000, 5)
    tdt = getattr(torch, str(dtype).split(".")[1])
    tx, ty = torch.from_numpy(x).to(tdt), torch.from_numpy(y).to(tdt)
    jx, jy = _tensor(x, dtype), _tensor(y, dtype)
    for op, got, want in (("pow", jx ** jy, tx ** ty), ("pow by 2.7", jx ** 2.7, tx ** 2.7),
                          ("xlogy", jt.xlogy(jy, jx.abs()), torch.xlogy(ty, tx.abs()))):
        ulps, same_kind = _ulps(_np(got), want.float().numpy() if tdt is torch.bfloat16 else want.numpy())
        ulps = ulps >> 16 if dtype is jt.bfloat16 else ulps  # (compared as float32)
        most, share = TORCH_ULPS_OF.get((dtype, op), TORCH_ULPS[op])
        assert same_kind and ulps.max() <= most and (ulps != 0).mean() <= share, (op, ulps.max(), (ulps != 0).mean())


@pytest.mark.parametrize("dtype", [jt.int32, jt.int64, jt.uint8, jt.int8])
def test_integer_pow_stays_exact_and_raises_as_torch(dtype):
    rng = np.random.default_rng(6)
    tdt = getattr(torch, str(dtype).split(".")[1])
    x = rng.integers(-9 if dtype is not jt.uint8 else 0, 10, 300)
    y = rng.integers(0, 9, 300)
    want = torch.pow(torch.tensor(x, dtype=tdt), torch.tensor(y, dtype=tdt))
    got = jt.pow(jt.tensor(x, dtype=dtype), jt.tensor(y, dtype=dtype))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    if dtype is not jt.uint8:
        with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed."):
            jt.tensor([2], dtype=dtype) ** -1
        with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed."):
            torch.tensor([2], dtype=tdt) ** -1


def test_small_pow_and_xlogy_load_no_code_generator():
    """Below `powers.KERNEL_MIN` elements pow and xlogy compute in NumPy and Python: ``import jitorch`` and a
    program of tiny tensors never load LLVM."""
    code = textwrap.dedent("""
        import sys
        import jitorch as jt
        x = jt.tensor([0.5, 2.0, 3.0])
        print((x ** x).tolist(), (x ** 2.7)[0].item(), jt.xlogy(x, x).tolist(), jt.float_power(x[:1], 0.3).item())
        print("llvmlite" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False"


def test_float_power_of_narrower_floats_skips_the_casts_with_the_composites_bits(monkeypatch):
    """float_power of float32 (float16, bfloat16) CPU tensors and numbers runs `pointwise._float_power_fast`:
    `_pow` of the operands widened, without the composite's two ``_to_copy`` tensors; the same bits, shape and
    strides as the composite over tensors, broadcasting, 0-d and empty operands and torch's special powers (2,
    -0.5...), NaN results included; grad mode with a tensor that requires grad takes the composite."""
    from jitorch.ops import registry
    copies = []  # (the ops `registry.execute` runs: the casts among them)
    real_execute = registry.execute
    monkeypatch.setattr(registry, "execute", lambda op, *a: copies.append(op.name) or real_execute(op, *a))
    rng = np.random.default_rng(3)
    op = registry.OPS["float_power"]
    cases = []
    for dtype in (jt.float32, jt.float16, jt.bfloat16):
        def t(shape):
            return jt.tensor(rng.uniform(-3, 3, shape).astype(np.float32)).to(dtype)
        cases += [(t((5,)), t((5,))), (t((3, 1)), t((1, 4))), (t(()), t((4,))), (t(()), t(())), (t((0,)), t((0,))),
                  (t((70,)), t((70,)))]
        cases += [(t(shape), n) for n in (2, 3, -1, -2, 0.5, -0.5, 2.5, 0.1, 0) for shape in ((), (6,), (70,))]
        cases += [(n, t((6,))) for n in (2, -1.5)]
    for x, e in cases:
        del copies[:]
        fast = jt.float_power(x, e)
        assert "_to_copy" not in copies
        slow = _composite_result(op, x, e)
        assert (fast.dtype, fast.shape, fast.stride()) == (slow.dtype, slow.shape, slow.stride())
        assert fast.numpy().tobytes() == slow.numpy().tobytes()
    x = jt.tensor([1.5, 2.0], requires_grad=True)
    del copies[:]
    jt.float_power(x, 2.5).sum().backward()
    assert copies.count("_to_copy") >= 1 and x.grad is not None


def _composite_result(op, x, e):
    """float_power's composite (its casts and pow), through the registry's general path."""
    from jitorch.ops import registry
    return registry.call(op, (x, e))
