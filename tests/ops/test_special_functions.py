"""lgamma, digamma, polygamma, erfinv, i0 and torch.special's functions against torch over wide ranges and edge
values (poles, zeros, infinities, NaN, tiny and huge arguments), in float32 and float64; the new pointwise ops'
errors; jitorch.special's aliases are the ops themselves."""

import math

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import special_math

EDGES = [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 0.5, 1e-300, 5e-324, -1e-300, 1e-8, 1e308, -1e308, 170.5, 1e17,
         np.inf, -np.inf, np.nan, 1.4616321449683622, -2.4570247382208006]


def wide(rng, n=4000):
    """Random values over many magnitudes and both signs, and the edge values."""
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 6, n)
    return np.concatenate([x, np.arange(-40, 40, 0.25), EDGES])


def assert_close_to_torch(got, expected, rtol, atol):
    got, expected = got.numpy().astype(np.float64), expected.numpy().astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(got[~finite], expected[~finite])
    np.testing.assert_allclose(got[finite], expected[finite], rtol=rtol, atol=atol)


UNARY = {"lgamma": (jt.lgamma, torch.lgamma), "digamma": (jt.digamma, torch.digamma), "i0": (jt.i0, torch.i0),
         "i0e": (jt.special.i0e, torch.special.i0e), "i1": (jt.special.i1, torch.special.i1),
         "i1e": (jt.special.i1e, torch.special.i1e), "trigamma": (lambda t: t.polygamma(1), lambda t: t.polygamma(1)),
         "polygamma3": (lambda t: jt.polygamma(3, t), lambda t: torch.polygamma(3, t))}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_special_functions_float64_match_torch_over_wide_ranges(name, rng):
    mine, theirs = UNARY[name]
    x = wide(rng)
    if name.startswith("polygamma"):
        x = x[np.abs(x) < 1e4]  # the sum over negative arguments takes |x| terms (as torch's)
    # absolute slack for lgamma's zeros at negative arguments (-2.457...), where both are ~1e-16 off
    assert_close_to_torch(mine(jt.tensor(x)), theirs(torch.from_numpy(x)), rtol=2e-14, atol=1e-15)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_special_functions_float32_match_torch(name, rng):
    mine, theirs = UNARY[name]
    x = wide(rng).astype(np.float32)
    x = x[np.abs(x) < 1e4]
    if name in ("trigamma", "digamma"):  # computed in float32 as torch does (trigamma's finite values at the
        expected = theirs(torch.from_numpy(x))  # poles are float32's, digamma is far off near its root as torch's)
    else:
        expected = theirs(torch.from_numpy(x).double()).float()
    assert_close_to_torch(mine(jt.tensor(x)), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_trigamma_at_the_poles_matches_torch_in_each_dtype(dtype):
    # torch's trigamma computes in float32 for float32 and the half types: pi * x at a negative integer is not
    # a multiple of pi there, so its values at the poles are finite and float32's (1.29e15 at -1), not float64's
    x = [0.0, -0.0, -1.0, -2.0, -3.0, -17.0, -0.5, 0.25, 1.0, -1e6, 3.5]
    expected = torch.polygamma(1, torch.tensor(x, dtype=getattr(torch, dtype)))
    eager = jt.polygamma(1, jt.tensor(x, dtype=getattr(jt, dtype)))
    compiled = jt.compile(lambda t: t.polygamma(1))(jt.tensor(x, dtype=getattr(jt, dtype)))
    for got in (eager, compiled):
        assert got.dtype.name == dtype
        assert_close_to_torch(got.float(), expected.float(), rtol=4e-7, atol=0)
    if dtype in ("float32", "bfloat16"):  # (float16's overflows to inf)
        assert 1e15 < float(expected[2]) < 2e15


def test_trigamma_of_integers_computes_in_float32_at_the_poles():
    got, expected = jt.polygamma(1, jt.tensor([0, -1, -2, 3])), torch.polygamma(1, torch.tensor([0, -1, -2, 3]))
    assert got.dtype == jt.float32
    assert_close_to_torch(got, expected, rtol=4e-7, atol=0)


def test_lgamma_is_accurate_relative_to_its_zeros_at_1_and_2():
    # the rational approximation is exact only relative to 1 there; a Taylor series keeps the relative accuracy
    x = np.array([1 + 1e-10, 1 - 1e-12, 2 + 3e-9, 2 - 1e-14, 0.99131336919792, 2.0041432621866555])
    np.testing.assert_allclose(jt.lgamma(jt.tensor(x)).numpy(), torch.lgamma(torch.from_numpy(x)).numpy(),
                               rtol=1e-14, atol=0)


def test_erfinv_matches_torch_up_to_one():
    y = np.concatenate([np.linspace(-1, 1, 2001), 1 - 10.0 ** -np.linspace(1, 16, 200),
                        -1 + 10.0 ** -np.linspace(1, 16, 200), [1e-300, 5e-324, -0.0, 1.5, -1.5, np.nan]])
    assert_close_to_torch(jt.erfinv(jt.tensor(y)), torch.erfinv(torch.from_numpy(y)), rtol=5e-16, atol=0)
    y32 = y.astype(np.float32)
    assert_close_to_torch(jt.erfinv(jt.tensor(y32)), torch.erfinv(torch.from_numpy(y32)), rtol=2e-7, atol=0)


def test_zeta_matches_torch():
    x = np.array([1.0, 1.5, 2.0, 3.0, 10.0, 0.5, 4.0, 4.0, 2.5, 3.0])
    q = np.array([1.0, 2.0, -1.0, 0.5, 3.0, 1.0, -2.5, -2.0, -2.5, 1e-8])
    assert_close_to_torch(jt.special.zeta(jt.tensor(x), jt.tensor(q)),
                          torch.special.zeta(torch.from_numpy(x), torch.from_numpy(q)), rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", [jt.int64, jt.bool, jt.float16, jt.bfloat16], ids=str)
def test_special_functions_promote_as_torch(dtype):
    x = jt.tensor([1, 0, 1]).to(dtype)
    t = torch.tensor([1, 0, 1]).to(getattr(torch, dtype.name))
    for name in ("lgamma", "digamma", "erfinv", "i0", "sinc", "deg2rad", "logit", "angle"):
        assert getattr(jt, name)(x).dtype.name == str(getattr(torch, name)(t).dtype).split(".")[1], name


def test_errors_as_torch():
    with pytest.raises(RuntimeError, match="does not support negative n"):
        jt.polygamma(-1, jt.tensor([1.0]))
    with pytest.raises(RuntimeError, match="base given to float_power_ has dtype Float"):
        jt.tensor([2.0]).float_power_(2)
    with pytest.raises(RuntimeError, match="output given to float_power has dtype Float"):
        jt.float_power(jt.tensor([2.0]), 2, out=jt.empty(1))
    with pytest.raises(RuntimeError, match="only supports floating-point dtypes"):
        jt.frexp(jt.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="different dtypes"):
        jt.heaviside(jt.tensor([1.0]), jt.tensor([1.0], dtype=jt.float64))
    with pytest.raises(NotImplementedError, match="zeta_cpu"):
        jt.special.zeta(jt.tensor([2.0]).half(), jt.tensor([1.0]).half())
    with pytest.raises(NotImplementedError, match="gcd_cpu"):
        jt.gcd(jt.tensor([1.0]), jt.tensor([2.0]))
    with pytest.raises(TypeError, match="must be Tensor"):
        jt.fmax(jt.tensor([1.0]), 2.0)
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        jt.mvlgamma(jt.tensor([3.0]), 0)


def test_heaviside_backward_raises_as_torch():
    x = jt.tensor([1.0, -1.0], requires_grad=True)
    y = jt.heaviside(x, jt.tensor([0.5]))
    with pytest.raises(RuntimeError, match="derivative for aten::heaviside is not implemented"):
        y.sum().backward()


def test_nan_to_num_converts_its_fills_to_the_dtype():
    x = [math.nan, math.inf, -math.inf, 1.5]
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        got = jt.nan_to_num(jt.tensor(x).to(getattr(jt, dtype)), posinf=1e300).float().numpy()
        expected = torch.nan_to_num(torch.tensor(x).to(getattr(torch, dtype)), posinf=1e300).float().numpy()
        np.testing.assert_array_equal(got, expected)


def test_nextafter_steps_in_the_half_types():
    for dtype in ("float16", "bfloat16"):
        a, b = [1.0, 0.0, -2.0], [2.0, -1.0, -3.0]
        got = jt.nextafter(jt.tensor(a).to(getattr(jt, dtype)), jt.tensor(b).to(getattr(jt, dtype)))
        expected = torch.nextafter(torch.tensor(a).to(getattr(torch, dtype)), torch.tensor(b).to(getattr(torch, dtype)))
        np.testing.assert_array_equal(got.float().numpy(), expected.float().numpy())


def test_special_aliases_are_the_ops_themselves():
    assert jt.special.expit is jt.sigmoid and jt.special.gammaln is jt.lgamma
    assert jt.special.psi is jt.special.digamma is jt.digamma and jt.special.multigammaln is jt.mvlgamma
    assert jt.special.xlogy is jt.xlogy and jt.special.logsumexp is jt.logsumexp
    assert not hasattr(jt, "special_zeta")


def test_entr_and_ndtr_edges_match_torch():
    x = [-1.0, 0.0, 0.5, 2.0, math.nan, math.inf, -10.0]
    for name in ("entr", "ndtr"):
        np.testing.assert_array_equal(getattr(jt.special, name)(jt.tensor(x)).numpy(),
                                      getattr(torch.special, name)(torch.tensor(x)).numpy())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_digamma_near_its_poles_is_torchs_in_float32(dtype, compiled):
    """Fuzz seed 7100390: float32 ``digamma_`` applied thrice differed from torch's by 1e-3 relative: jitorch
    computed in float64, torch in float32 (the half types too), whose rounding of ``1 - x`` and of the steps up
    shows near a pole and grows through the next application."""
    poles = -np.arange(0.0, 12.0)[:, None]
    values = (poles + np.array([1e-4, -1e-4, 0.01, -0.01, 0.3, -0.7])).ravel()
    values = np.concatenate([values, [0.5, 1.5, 3.25, 9.75, 10.0, 12.5, 40.0, 1e-30, -1e-30]])
    want = torch.tensor(values, dtype=getattr(torch, dtype))
    for _ in range(3):
        want.digamma_()
    got = jt.tensor(values, dtype=getattr(jt, dtype))

    def thrice(t):
        for _ in range(3):
            t.digamma_()
        return t
    (jt.compile(thrice) if compiled else thrice)(got)
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_lgamma_of_one_and_two_is_positive_zero(dtype):
    """Fuzz seed 7501476: the series at 1 gave -0.0 for ``lgamma(1)`` (torch's, C's: +0.0), so ``log2`` of it
    had the gradient +inf where torch's is -inf (``x.lgamma_(); x.log2()``)."""
    got = jt.lgamma(jt.tensor([1.0, 2.0], dtype=dtype)).numpy()
    assert got.tolist() == [0.0, 0.0] and not np.signbit(got).any()
    x = jt.tensor([1.0], dtype=dtype, requires_grad=True)
    x.lgamma().log2().backward()
    want = torch.tensor([1.0], dtype=getattr(torch, dtype.np.name), requires_grad=True)
    want.lgamma().log2().backward()
    assert x.grad.item() == want.grad.item() == -math.inf  # (1 / (+0.0 log 2) times digamma(1) < 0)


def test_digammas_reflection_takes_the_c_librarys_tangent_not_numpys():
    """digamma(x < 0) subtracts ``pi / tan(pi x)`` from a term of about its size: at -22.75 a last-bit change
    of the tangent moves the result 2.8e-13 relative. NumPy 1.26's float64 tan (SVML's, on AVX-512) gives
    exactly 1.0 at ``-3 pi / 4`` where the C library's, torch's, gives the correctly rounded value: jitorch
    takes the C library's long double functions (`special_math._c_library`) whatever NumPy's version."""
    x = np.concatenate([-np.arange(1, 60) - q for q in (0.25, 0.5, 0.75)])
    for dtype in ("float64", "float32"):
        got = jt.digamma(jt.tensor(x).to(getattr(jt, dtype))).double().numpy()
        want = torch.digamma(torch.from_numpy(x).to(getattr(torch, dtype))).double().numpy()
        np.testing.assert_allclose(got, want, rtol=2e-15 if dtype == "float64" else 2e-7, atol=0)
    tangent = special_math._c_library(np.tan, np.array([-0.75 * np.pi]), np.float64)
    assert tangent[0] == math.tan(-0.75 * np.pi) != 1.0


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_float32_i0_and_i1_are_torchs_float64_values_rounded_seed_7610939(compiled):
    """Fuzz seed 7610939: ``x.i0_(); x.arccosh()`` of a zero gave NaN in torch (its float32 kernel's ``i0(0)`` is
    ``1 - 2**-24``), 0 in jitorch. torch's float32 series is a few ulps off and overflows for ``88.72 < |x| <
    91.9``; jitorch's float32 results are torch's float64 ones rounded once (docs/differences-from-torch.md)."""
    x = np.array([0.0, 1e-3, -0.75, 2.375, 30.0, 80.0, 88.8, 90.0, -91.5, 91.9, 92.0], dtype=np.float32)
    for name in ("i0", "i1"):
        op = getattr(jt.special, name)
        fn = jt.compile(lambda t: op(t) * 1) if compiled else op
        got = fn(jt.tensor(x)).numpy()
        want = getattr(torch.special, name)(torch.from_numpy(x).double()).float().numpy()
        np.testing.assert_array_equal(got, want)
    assert jt.tensor(x[:1]).i0_().arccosh().item() == 0.0
    assert torch.i0(torch.tensor(0.0)).item() == 1 - 2 ** -24 and torch.i0(torch.tensor(90.0)).isinf()
