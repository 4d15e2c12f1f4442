"""The generated loops of torch.special's Cephes functions (codegen/c_calls.py): the C library's functions called
per element from machine code and the correctly rounded fma give the bits of the fallback (ctypes calls, NumPy's
fma emulation) over special values and branch boundaries, for every function and dtype, and they ran."""

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import c_calls
from jitorch.ops import orthogonal_polynomials, special_cephes
from jitorch.ops.special_ops import CEPHES

DTYPES = [np.float32, np.float64]
# Every C function the Cephes modules call (read from their source, so a new one is covered)
C_FUNCTIONS = sorted({name for module in (special_cephes, orthogonal_polynomials)
                      for name in re.findall(r'libm\("(\w+)"', Path(module.__file__).read_text())})


def special_values(f):
    """+-0, +-inf, NaN, subnormals, the range's ends, the branch boundaries of the functions (and their
    neighbours), a spread of magnitudes."""
    info = np.finfo(f)
    edges = np.array([0.0, 1.0, 0.5, 2.0, 5.0, 8.0, 2.09, 8.3203353, 103.892, 50.0, 5e7, 6.1, 26.7, 1e-8, 1e-300,
                      5e-324, 1e300, 2.404825557695773, 0.8935769662791675, 0.13533528323661269189, 1 - 0.1353352832,
                      0.7071067811865476, 30.0, 88.0, 709.0, 2.0 ** -126, 3.4e38], np.float64)
    with np.errstate(over="ignore"):
        edges = np.concatenate([edges.astype(f), [info.tiny, info.smallest_subnormal, info.max, info.eps]])
    near = np.concatenate([np.nextafter(edges, f(np.inf)), np.nextafter(edges, f(-np.inf))])
    spread = (10.0 ** np.linspace(-12, 3, 60)).astype(f)
    x = np.concatenate([edges, near, spread, np.linspace(-40, 40, 81).astype(f), [np.inf, np.nan]])
    return np.concatenate([x, -x]).astype(f)


def without_loops(monkeypatch, fn, *args):
    """``fn(*args)`` with no generated loop: the fallback's values."""
    with monkeypatch.context() as m, np.errstate(all="ignore"):  # (as the ops call them: IEEE's values)
        m.setattr(special_cephes, "LOOP_KERNEL", None)
        return fn(*args)


def loop_calls():
    """How many times the generated loops have run, all together."""
    return sum(kernel.calls for _, kernel in c_calls._kernels.items() if kernel is not None)


def differing_bits(got, expected):
    """Where two arrays of one dtype and shape differ in their bits, any NaN counting as any other (a NaN's sign
    and payload are not torch's contract: its tests compare NaN-ness)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    ints = {4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    return (got.view(ints) != expected.view(ints)) & ~(np.isnan(got) & np.isnan(expected))


def assert_same_bits(got, expected):
    np.testing.assert_array_equal(np.flatnonzero(differing_bits(got, expected)), [])


def assert_fallbacks_bits_or_torchs(got, fallback, torch_fn, *args):
    """``got`` has the fallback's bits, but where NumPy's fma emulation misrounds (a tie of its last sum): there
    torch's (a true fma, as its build contracts)."""
    differ = differing_bits(got, fallback)
    if differ.any():
        expected = torch_fn(*(torch.from_numpy(np.ascontiguousarray(a)) for a in args)).numpy()
        assert_same_bits(got[differ], expected[differ])


def test_every_c_function_is_found_in_the_source():
    assert {"exp", "log", "log1p", "erfc", "lgamma", "sin", "cos", "acos", "pow", "expm1"} <= set(C_FUNCTIONS)


@pytest.mark.parametrize("f", DTYPES)
@pytest.mark.parametrize("name", C_FUNCTIONS)
def test_c_function_loops_give_the_ctypes_calls_bits(name, f, monkeypatch):
    x = special_values(f)
    operands = (x[:, None], x[None, ::7]) if name == "pow" else (x,)  # (pow: a grid of bases and exponents)
    before = loop_calls()
    got = special_cephes.libm(name, *operands[:1], f, *operands[1:])
    assert loop_calls() == before + 1  # (one loop, not a fallback)
    assert_same_bits(got, without_loops(monkeypatch, special_cephes.libm, name, *operands[:1], f, *operands[1:]))


@pytest.mark.parametrize("f", DTYPES)
@pytest.mark.parametrize("name", CEPHES)
def test_cephes_functions_through_the_loops_give_the_fallbacks_bits(name, f, monkeypatch):
    x = special_values(f)
    if name == "ndtri":
        x = np.concatenate([x, np.linspace(0, 1, 101).astype(f)])
    before = loop_calls()
    got = getattr(jt.special, name)(jt.tensor(x)).numpy()
    assert loop_calls() > before
    fallback = without_loops(monkeypatch, lambda: getattr(jt.special, name)(jt.tensor(x)).numpy())
    assert_fallbacks_bits_or_torchs(got, fallback, getattr(torch.special, name), x)


@pytest.mark.parametrize("f", DTYPES)
@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_incomplete_gamma_through_the_loops_gives_the_fallbacks_bits(name, f, monkeypatch):
    v = special_values(f)
    a, x = np.meshgrid(v[::5], v[::3])
    before = loop_calls()
    got = getattr(jt, name)(jt.tensor(a), jt.tensor(x)).numpy()
    assert loop_calls() > before
    fallback = without_loops(monkeypatch, lambda: getattr(jt, name)(jt.tensor(a), jt.tensor(x)).numpy())
    assert_fallbacks_bits_or_torchs(got, fallback, getattr(torch, name), a, x)


@pytest.mark.parametrize("f", DTYPES)
@pytest.mark.parametrize("name", orthogonal_polynomials.NAMES)
def test_orthogonal_polynomials_through_the_loops_give_the_fallbacks_bits(name, f, monkeypatch):
    x = np.concatenate([special_values(f)[::4], np.linspace(-1.2, 1.2, 25).astype(f)])
    n = np.array([0, 1, 2, 3, 7, 30, 2.5, np.nan, np.inf, -1], f)
    xx, nn = np.meshgrid(x, n)
    before = loop_calls()
    got = getattr(jt.special, name)(jt.tensor(xx), jt.tensor(nn)).numpy()
    assert loop_calls() > before
    fallback = without_loops(monkeypatch, lambda: getattr(jt.special, name)(jt.tensor(xx), jt.tensor(nn)).numpy())
    assert_fallbacks_bits_or_torchs(got, fallback, getattr(torch.special, name), xx, nn)


def rounded(q, f):
    """The exact rational ``q`` rounded to nearest ``f`` (ties to even), None beyond ``f``'s range."""
    try:
        r = f(float(q))
    except OverflowError:
        return None
    if not np.isfinite(r):
        return None
    ints = {4: np.int32, 8: np.int64}[np.dtype(f).itemsize]
    near = [np.nextafter(r, f(-np.inf)), r, np.nextafter(r, f(np.inf))]
    return min((v for v in near if np.isfinite(v)), key=lambda v: (abs(Fraction(float(v)) - q), int(v.view(ints)) & 1))


def exact_fma(a, b, c, f):
    return np.array([rounded(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), f)
                     for x, y, z in zip(a, b, c)], f)


@pytest.mark.parametrize("f", DTYPES)
def test_fma_loop_is_correctly_rounded_on_special_values(f):
    v = special_values(f)
    v = v[np.isfinite(v)]
    a, b, c = (g.ravel() for g in np.meshgrid(v[::23], v[::29], v[::31]))
    with np.errstate(all="ignore"):
        inside = np.abs(a.astype(np.float64) * b + c) < np.finfo(f).max / 2  # (the result in range)
    a, b, c = a[inside], b[inside], c[inside]
    before = loop_calls()
    got = special_cephes.fma(a, b, c, f)
    assert loop_calls() == before + 1
    assert_same_bits(got, exact_fma(a, b, c, f))


def test_fma_loop_is_exact_where_the_emulations_split_overflows(monkeypatch, rng):
    """Beyond ~1e300 Dekker's split overflows and the emulation gives the plain ``a * b + c`` (0 here); the
    loop's fma (torch's contraction) the rounding error of the product."""
    a = rng.uniform(1.5e300, 1.7e300, 50)
    b = rng.uniform(1.01, 1.05, 50)
    c = -(a * b)
    got = special_cephes.fma(a, b, c, np.float64)
    assert_same_bits(got, exact_fma(a, b, c, np.float64))
    assert np.count_nonzero(got) > 40
    assert not without_loops(monkeypatch, special_cephes.fma, a, b, c, np.float64).any()


def test_float32_fma_of_double_operands_keeps_the_emulation():
    """An operand ``float32`` does not hold (a double constant) is not rounded to float32 first: NumPy's path."""
    before = loop_calls()
    got = special_cephes.fma(np.float32([1.5, 3.0]), np.float32([2.0, 1.0]), np.float64(0.1), np.float32)
    assert loop_calls() == before
    np.testing.assert_array_equal(got, np.float32([3.0 + 0.1, 3.0 + 0.1]))


def test_compiled_calls_run_the_loops(rng):
    x = jt.tensor(rng.uniform(0, 30, 500))
    fn = jt.compile(lambda t: jt.special.bessel_j0(t) * 2)
    fn(x)
    before = loop_calls()
    np.testing.assert_array_equal(fn(x).numpy(), jt.special.bessel_j0(x).numpy() * 2)
    assert loop_calls() > before


def test_k0_just_above_one_half_is_torchs_through_the_fma_loop(monkeypatch):
    """Found by the comparison above: K0(0.5000000000000001) in float64 took the emulation's misrounded tie
    (one ulp below torch's); the loop's true fma gives torch's bits."""
    x = np.array([0.5000000000000001])
    expected = torch.special.modified_bessel_k0(torch.from_numpy(x)).numpy()
    assert_same_bits(jt.special.modified_bessel_k0(jt.tensor(x)).numpy(), expected)
    assert differing_bits(without_loops(monkeypatch, lambda: jt.special.modified_bessel_k0(jt.tensor(x)).numpy()),
                          expected).all()


@pytest.mark.parametrize("f", DTYPES)
def test_clenshaw_loop_gives_the_numpy_steps_bits(f, monkeypatch):
    """Cephes' chbevl in one loop: each step's fma and separate sum, and the last half difference, as NumPy's
    steps round them (blocks across a block's end)."""
    z = np.concatenate([special_values(f), np.linspace(-3, 3, c_calls.RECURRENCE_BLOCK + 7).astype(f)])
    clenshaw = c_calls.loop_kernel(f.__name__, c_calls.CLENSHAW, 0)
    before = clenshaw.calls
    got = special_cephes._chebyshev(z, special_cephes.T.K0_A, f)
    assert clenshaw.calls == before + 1
    assert_same_bits(got, without_loops(monkeypatch, special_cephes._chebyshev, z, special_cephes.T.K0_A, f))


@pytest.mark.parametrize("f", DTYPES)
@pytest.mark.parametrize("start", [False, True])
def test_horner_loop_gives_the_fma_steps_bits(f, start, monkeypatch):
    """One loop through every step of Cephes' polevl (blocks of elements, across a block's end) rounds each
    step once, as the steps' fma loops and the emulation do; 0 * inf in a first step from 0 stays NaN."""
    z = np.concatenate([special_values(f), np.linspace(-3, 3, c_calls.RECURRENCE_BLOCK + 7).astype(f)])
    horner = c_calls.loop_kernel(f.__name__, c_calls.HORNER, 0)
    before = horner.calls
    got = special_cephes._horner(z, special_cephes.T.NDTRI_P0, f, start)
    assert horner.calls == before + 1
    assert_same_bits(got, without_loops(monkeypatch, special_cephes._horner, z, special_cephes.T.NDTRI_P0, f, start))
    assert np.isnan(got[np.isinf(z)]).all() != start


@pytest.mark.parametrize("name", ["bessel_y1", "modified_bessel_k1", "ndtri"])
def test_loops_split_on_threads_give_one_threads_bits(name, rng):
    """Past 2**15 elements the loops split on the thread team; an element's value does not depend on it."""
    x = jt.tensor(rng.uniform(0, 1 if name == "ndtri" else 30, 70_000).astype(np.float32))
    threads = jt.get_num_threads()
    try:
        jt.set_num_threads(1)
        alone = getattr(jt.special, name)(x).numpy()
        jt.set_num_threads(2)
        split = getattr(jt.special, name)(x).numpy()
    finally:
        jt.set_num_threads(threads)
    assert_same_bits(split, alone)
