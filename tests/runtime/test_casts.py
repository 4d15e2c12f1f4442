"""The cast table (jitorch/runtime/casts.py) against torch, bit for bit, over every ordered pair of the thirteen
dtypes: all values of the 8- and 16-bit types, edge and random values of the wider ones. Eager casts,
compiled kernels (contiguous and strided inputs, and casts inside fused chains) must give torch's results
on x86 whatever NumPy and ml_dtypes would; the emulated CUDA device is checked in tests/cuda/test_casts.py.
torch is the only oracle: no expected value comes from NumPy's or ml_dtypes' conversions."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.runtime import dtypes as D
from jitorch.runtime.casts import convert
from tests.codegen.test_kernels import fused_result

UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
TORCH_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
QUIET_BIT = {D.float16: 0x200, D.bfloat16: 0x40}
# (mantissa bits, smallest normal exponent) of the float types a value may round into
PRECISIONS = ((10, -14), (7, -126), (23, -126))


def _ties(precision, emin, exponents):
    """Values halfway between two neighbours of a float type with ``precision`` mantissa bits (normal and
    subnormal), as exact float64s."""
    out = []
    for e in exponents:
        ulp = 2.0 ** (max(e, emin) - precision)
        base = 2.0 ** e if e >= emin else 0.0
        out += [base + (k + 0.5) * ulp for k in (0, 1, 2, 3, 2 ** precision - 1)]
    return out


def _special_floats():
    """Signed zeros, infinities, NaN, the integer types' bounds and their neighbours, and rounding ties
    of float16, bfloat16 and float32 (exact, and nudged by an ulp of float32 and of float64 either way)."""
    near = [0.0, 0.49, 0.5, 0.51, 1.0, 1.5, 2.5, 2053.0, 65504.0, 65519.99, 65520.0, 3.3895313892515355e38,
            3.4028234663852886e38, 3.5e38, 1e10, 3e9, 1e19, 1.7976931348623157e308, 2.0 ** -149, 2.0 ** -150,
            2.0 ** -1074, 2.0 ** -126, 2.0 ** -133, 2.0 ** -134]
    for k in (7, 8, 15, 16, 24, 31, 32, 53, 63, 64):
        near += [2.0 ** k + d for d in (-1, -0.5, 0, 0.5, 1)]
        near += [2.0 ** k * (1 - 2.0 ** -24), 2.0 ** k * (1 - 2.0 ** -53)]
    for precision, emin in PRECISIONS:
        near += _ties(precision, emin, (emin - 4, emin - 1, -1, 0, 1, 11, 15, 30, 127))
    nudged = [v * f for v in near for f in (1, 1 + 2.0 ** -23, 1 - 2.0 ** -24, 1 + 2.0 ** -52, 1 - 2.0 ** -53)]
    return np.array(nudged + [-v for v in nudged] + [np.inf, -np.inf, np.nan], np.float64)


def _integer_edges(dtype):
    bits = 8 * dtype.itemsize
    values = [2053, 2 ** 24 + 1, 2 ** 24 + 3, 65519, 65520, 2 ** 53 + 1, 2 ** 53 + 2 ** 29 + 1]
    for k in range(bits):
        values += [s * 2 ** k + d for s in (1, -1) for d in (-1, 0, 1)]
        # just above a tie of bfloat16 and of float32, which rounding through float32 (or float64) moves
        values += [s * (2 ** k + 2 ** (k - p) + 1) for s in (1, -1) for p in (8, 24) if k > p]
    low, high = int(np.iinfo(dtype.np).min), int(np.iinfo(dtype.np).max)
    return np.array([v for v in values if low <= v <= high] + [low, high], dtype.np)


def sources(dtype, rng):
    """The values of ``dtype`` every cast from it is checked on: all of them for bool and the 8- and
    16-bit types; edges, rounding ties, subnormals and random bit patterns for the wider ones."""
    n = dtype.itemsize
    if dtype is D.bool:
        return np.array([False, True])
    if n <= 2:
        return np.arange(2 ** (8 * n)).astype(UNSIGNED[n]).view(dtype.np)
    if not dtype.is_floating_point:
        return np.concatenate([_integer_edges(dtype), rng.integers(np.iinfo(dtype.np).min, np.iinfo(dtype.np).max,
                                                                   3000, dtype.np, endpoint=True)])
    with np.errstate(all="ignore"):
        special = _special_floats().astype(dtype.np)  # inputs only: torch gets the same bits
    random = rng.integers(0, 2 ** (8 * n), 3000, UNSIGNED[n], endpoint=False).view(dtype.np)
    subnormal = rng.integers(0, 2 ** (8 * n - 12), 500, UNSIGNED[n]).view(dtype.np)
    return np.concatenate([special, random, subnormal])


def to_torch(values):
    """A torch tensor holding the same bits (torch does not take ml_dtypes' bfloat16)."""
    values = np.array(values, order="C")
    return torch.from_numpy(values.view(np.uint16) if values.dtype == D.bfloat16.np else values).view(
        _torch_dtype(values.dtype))


def _torch_dtype(npd):
    return getattr(torch, D.from_numpy_dtype(npd).name)


def _torch_bits(t):
    return t.contiguous().view(TORCH_BITS[t.element_size()]).numpy().view(UNSIGNED[t.element_size()])


def assert_as_torch(got, src, dst, what=""):
    """``got`` (jitorch's ``src`` cast to ``dst``, a NumPy array) equals torch's cast bit for bit; NaN
    where torch gives NaN (torch's payloads vary between its kernels), a quiet one when converted into a
    half type."""
    got = np.array(got, order="C")
    assert got.dtype == dst.np and got.shape == src.shape, what
    expected = to_torch(src).to(getattr(torch, dst.name))
    got_t = to_torch(got)
    g, e = _torch_bits(got_t), _torch_bits(expected)
    wrong = g != e
    if dst.is_floating_point:
        nan = torch.isnan(expected).numpy()
        assert np.array_equal(torch.isnan(got_t).numpy(), nan), f"{what}: NaN where torch gives none, or none"
        wrong &= ~nan
        if dst in QUIET_BIT and src.dtype != dst.np:
            assert np.all(g[nan] & QUIET_BIT[dst]), f"{what}: a signalling NaN"
    if wrong.any():
        i = np.flatnonzero(wrong)[:5]
        src_bits = _torch_bits(to_torch(src))
        raise AssertionError(f"{what} {src.dtype}->{dst}: {wrong.sum()} values differ from torch's, e.g. source bits "
                             f"{[hex(v) for v in src_bits[i]]} gave {[hex(v) for v in g[i]]}, torch "
                             f"{[hex(v) for v in e[i]]}")


ALL = [pytest.param(d, id=d.name) for d in D.ALL]


@pytest.fixture(scope="module")
def values():
    rng = np.random.default_rng(14)
    return {d: sources(d, rng) for d in D.ALL}


@pytest.mark.parametrize("src", ALL)
def test_cast_table_gives_torchs_results(values, src):
    for dst in D.ALL:
        assert_as_torch(convert(values[src], dst.np), values[src], dst, "convert")


def test_cast_table_gives_zero_dim_arrays_for_zero_dim_arrays(values):
    # NumPy's operators give scalars for 0-d operands: a bfloat16 value once came back as a float32 scalar
    for src in D.ALL:
        for dst in D.ALL:
            r = convert(values[src][-1:].reshape(()), dst.np)
            assert r.__class__ is np.ndarray and r.shape == () and r.dtype == dst.np, (src, dst)


@pytest.mark.parametrize("src", ALL)
def test_eager_casts_give_torchs_results(values, src):
    for dst in D.ALL:
        assert_as_torch(jt.from_numpy(values[src].copy()).to(dst).numpy(), values[src], dst, "to")


def all_casts(x):
    return [x.to(d) for d in D.ALL]


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("src", ALL)
def test_compiled_casts_give_torchs_results(values, src, layout):
    x = jt.from_numpy(values[src].copy())
    if layout == "strided":
        x = jt.from_numpy(np.repeat(values[src], 2))[1::2]
    got = fused_result(all_casts, x, ops=["_to_copy"])
    assert len(jt.compile(all_casts).lower(x).kernels) == 1
    for dst, r in zip(D.ALL, got):
        assert_as_torch(r.numpy(), values[src], dst, f"compiled, {layout}")


def test_casts_inside_fused_chains_match_eager_and_torch():
    x = np.array([-1.5, 300.25, -300.0, 1e10, np.nan, np.inf, -2.7, 127.9, 2.0 ** 31, 70000.0, 1 + 2.0 ** -11],
                 np.float64)

    def chain(t):
        return (t * 2).to(jt.uint8) + 1, (t - 1).to(jt.int16) * 3, (t * 1).to(jt.float16) - 1, (t / 3).to(jt.bfloat16)

    def reference(t):
        return (t * 2).to(torch.uint8) + 1, (t - 1).to(torch.int16) * 3, (t * 1).to(torch.float16) - 1, \
            (t / 3).to(torch.bfloat16)

    got = fused_result(chain, jt.tensor(x), ops=["_to_copy", "mul", "add"])
    for g, e, want in zip(got, chain(jt.tensor(x)), reference(torch.from_numpy(x))):
        np.testing.assert_array_equal(_torch_bits(to_torch(g.numpy())), _torch_bits(to_torch(e.numpy())))
        np.testing.assert_array_equal(g.float().numpy(), want.float().numpy())


def test_float_to_uint8_goes_through_int64_as_torchs():
    # torch converts floats to uint8 through int64 (static_cast_with_inter_type), to int8 through int32
    x = jt.tensor([-2.0 ** 31 - 1, 2.0 ** 40 + 5, -300.0], dtype=jt.float64)
    assert x.to(jt.uint8).tolist() == [255, 5, 212]
    assert x.to(jt.int8).tolist() == [0, 0, -44]


def test_bfloat16_to_uint8_wraps_instead_of_giving_ml_dtypes_zeros():
    x = jt.tensor([-1., 300., -300., 1e10, np.nan, np.inf, -2., 256., 127., -129.], dtype=jt.bfloat16)
    assert x.to(jt.uint8).tolist() == [255, 44, 212, 0, 0, 0, 254, 0, 127, 127]


def test_float64_and_int64_round_twice_into_half_types_as_torch():
    x = jt.tensor([1 + 2.0 ** -11 + 2.0 ** -40, 2.0 ** -25 + 2.0 ** -50], dtype=jt.float64)
    assert x.half().tolist() == [1.0, 0.0]
    assert jt.tensor([1 + 2.0 ** -8 + 2.0 ** -40], dtype=jt.float64).bfloat16().tolist() == [1.0]
    assert jt.tensor([2053]).half().tolist() == [2052.0]
    assert jt.tensor([2 ** 24 + 1]).bfloat16().tolist() == [16777216.0]
