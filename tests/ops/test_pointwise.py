"""Pointwise ops against NumPy: every op over dtypes, layouts, broadcasting and Python scalars;
torch's edge values (NaN, inf, signed zeros, integer corner cases); in-place and out= forms;
Python operators; errors."""

import math
import operator
import warnings
from collections import namedtuple

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jitorch as jt
from jitorch.runtime.dtypes import result_type as result_type_of
from tests.support import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, LAYOUTS, assert_close, tensor_and_array, to_numpy

NOBOOL = INT_DTYPES + FLOAT_DTYPES
INTEGRAL = [jt.bool] + INT_DTYPES
HALVES = (jt.float16, jt.bfloat16)

# kind: the result dtype ("float": integers give the default float, "same": the promoted dtype, "bool").
# exact: the reference runs in the op's compute dtype (rounding and division, where float64 could round
# a quotient differently); otherwise in float64. nonzero: the second operand avoids 0 (integer division).
# tensors_only: torch takes no Python number as an operand (no Scalar overload).
Op = namedtuple("Op", "names ref low high dtypes kind exact nonzero tensors_only kwargs")


def op(names, ref, low=-10, high=10, dtypes=ALL_DTYPES, kind="same", exact=False, nonzero=False, tensors_only=False,
       **kwargs):
    return Op(names, ref, low, high, dtypes, kind, exact, nonzero, tensors_only, kwargs)


def _ints_unchanged(fn):
    return lambda x: x.copy() if x.dtype.kind in "iu" else fn(x)


def _sign(x):
    return x if x.dtype == np.bool_ else np.sign(x)


_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])

UNARY = [
    op("exp", np.exp, -5, 5, kind="float"),
    op("exp2", np.exp2, -5, 5, kind="float"),
    op("expm1", np.expm1, -5, 5, kind="float"),
    op("log", np.log, 0.1, 10, kind="float"),
    op("log2", np.log2, 0.1, 10, kind="float"),
    op("log10", np.log10, 0.1, 10, kind="float"),
    op("log1p", np.log1p, -0.9, 10, kind="float"),
    op("sqrt", np.sqrt, 0, 10, kind="float"),
    op("rsqrt", lambda x: 1 / np.sqrt(x), 0.5, 10, kind="float"),
    op("reciprocal", lambda x: 1 / x, 0.5, 10, kind="float"),
    op("sin", np.sin, kind="float"),
    op("cos", np.cos, kind="float"),
    op("tan", np.tan, -1.4, 1.4, kind="float"),
    op("asin arcsin", np.arcsin, -0.99, 0.99, kind="float"),
    op("acos arccos", np.arccos, -0.99, 0.99, kind="float"),
    op("atan arctan", np.arctan, kind="float"),
    op("sinh", np.sinh, -5, 5, kind="float"),
    op("cosh", np.cosh, -5, 5, kind="float"),
    op("tanh", np.tanh, kind="float"),
    op("asinh arcsinh", np.arcsinh, kind="float"),
    op("acosh arccosh", np.arccosh, 1, 10, kind="float"),
    op("atanh arctanh", np.arctanh, -0.99, 0.99, kind="float"),
    op("sigmoid", lambda x: 1 / (1 + np.exp(-x)), kind="float"),
    op("erf", _erf, -5, 5, kind="float"),
    op("erfc", _erfc, -5, 5, kind="float"),
    op("neg negative", np.negative, dtypes=NOBOOL),
    op("abs absolute", np.abs, dtypes=NOBOOL),
    op("sign sgn", _sign),
    op("square", np.square, dtypes=NOBOOL),
    op("relu", lambda x: np.maximum(x, 0), dtypes=NOBOOL),
    op("floor", _ints_unchanged(np.floor), dtypes=NOBOOL, exact=True),
    op("ceil", _ints_unchanged(np.ceil), dtypes=NOBOOL, exact=True),
    op("trunc fix", _ints_unchanged(np.trunc), dtypes=NOBOOL, exact=True),
    op("round", _ints_unchanged(np.round), dtypes=NOBOOL, exact=True),
    op("frac", lambda x: x - np.trunc(x), dtypes=FLOAT_DTYPES, exact=True),
    op("bitwise_not", np.invert, dtypes=INTEGRAL),
    op("logical_not", np.logical_not, kind="bool"),
    op("isnan", np.isnan, kind="bool"),
    op("isinf", np.isinf, kind="bool"),
    op("isfinite", np.isfinite, kind="bool"),
]


def _int_pow(a, b):
    return np.power(a, np.maximum(b, 0))


def _shift_ref(left):
    """torch's shifts on Python ints: counts outside the width give 0 (or the sign for >> of signed)."""
    def ref(a, b):
        bits = a.dtype.itemsize * 8
        signed = a.dtype.kind == "i"

        def one(x, n):
            if n < 0 or n >= bits:
                return 0 if left or not signed else (-1 if x < 0 else 0)
            if not left:
                return x >> n
            wrapped = (x << n) % (1 << bits)
            return wrapped - (1 << bits) if signed and wrapped >= 1 << (bits - 1) else wrapped
        return np.vectorize(one, otypes=[np.int64])(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)
    return ref


def _div_trunc(a, b):
    if a.dtype.kind in "iu":
        return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)
    return np.trunc(a / b)


BINARY = [
    op("add", np.add),
    op("sub subtract", np.subtract, dtypes=NOBOOL),
    op("mul multiply", np.multiply),
    op("true_divide div divide", np.true_divide, 0.5, 10, kind="float"),
    op("floor_divide", np.floor_divide, 0.5, 10, dtypes=NOBOOL, exact=True, nonzero=True),
    op("div divide", np.floor_divide, 0.5, 10, dtypes=NOBOOL, exact=True, nonzero=True, rounding_mode="floor"),
    op("div divide", _div_trunc, 0.5, 10, dtypes=NOBOOL, exact=True, nonzero=True, rounding_mode="trunc"),
    op("remainder", np.remainder, 0.5, 10, dtypes=NOBOOL, exact=True, nonzero=True),
    op("fmod", np.fmod, 0.5, 10, dtypes=NOBOOL, exact=True, nonzero=True),
    op("pow", _int_pow, 0, 3, dtypes=NOBOOL),
    op("atan2 arctan2", np.arctan2, kind="float", tensors_only=True),
    op("hypot", np.hypot, dtypes=FLOAT_DTYPES, tensors_only=True),
    op("logaddexp", np.logaddexp, dtypes=FLOAT_DTYPES, tensors_only=True),
    op("maximum", np.maximum, tensors_only=True),
    op("minimum", np.minimum, tensors_only=True),
    op("eq", np.equal, kind="bool"),
    op("ne not_equal", np.not_equal, kind="bool"),
    op("lt less", np.less, kind="bool"),
    op("le less_equal", np.less_equal, kind="bool"),
    op("gt greater", np.greater, kind="bool"),
    op("ge greater_equal", np.greater_equal, kind="bool"),
    op("logical_and", np.logical_and, kind="bool", tensors_only=True),
    op("logical_or", np.logical_or, kind="bool", tensors_only=True),
    op("logical_xor", np.logical_xor, kind="bool", tensors_only=True),
    op("bitwise_and", np.bitwise_and, dtypes=INTEGRAL),
    op("bitwise_or", np.bitwise_or, dtypes=INTEGRAL),
    op("bitwise_xor", np.bitwise_xor, dtypes=INTEGRAL),
    op("bitwise_left_shift", _shift_ref(True), -2, 10, dtypes=INT_DTYPES),
    op("bitwise_right_shift", _shift_ref(False), -2, 10, dtypes=INT_DTYPES),
]


def _expand(table):
    return [pytest.param(name, spec, id="-".join([name, *spec.kwargs.values()]))
            for spec in table for name in spec.names.split()]


def values(shape, dtype, rng, low=-10, high=10, nonzero=False):
    """Random values of ``dtype`` in [low, high] (uint8: from 0)."""
    if dtype is jt.bool:
        return rng.random(shape) < 0.5
    if dtype.is_floating_point:
        arr = rng.uniform(low, high, size=shape).astype(dtype.np)
        return np.where(arr == 0, dtype.np.type(1), arr) if nonzero else arr
    lo = max(math.ceil(low), 0 if dtype is jt.uint8 else -10)
    arr = rng.integers(lo, max(math.floor(high), lo) + 1, size=shape).astype(dtype.np)
    return np.where(arr == 0, arr.dtype.type(1), arr) if nonzero else arr


def result_dtype(kind, common):
    if kind == "bool":
        return jt.bool
    if kind == "float" and not common.is_floating_point:
        return jt.get_default_dtype()
    return common


def compute_np(dtype, exact):
    """The NumPy dtype a reference computes in for inputs promoted to ``dtype``."""
    if not dtype.is_floating_point:
        return dtype.np
    if exact:
        return np.float32 if dtype in HALVES else dtype.np
    return np.float64


def as_compute(x, common, exact, kind="same"):
    """Operand values as the op sees them, widened: integers cast (and wrap) to the promoted dtype; floats
    to float32 for the half types (arithmetic computes there), or to the half type itself for comparisons."""
    cast = np.float32 if common in HALVES and kind != "bool" else common.np
    return np.asarray(x).astype(cast).astype(compute_np(common, exact))


def check_values(got, expected, dtype):
    assert got.dtype is dtype
    assert_close(got, np.asarray(expected).astype(np.float64 if dtype.is_floating_point else dtype.np), dtype)


@pytest.mark.parametrize("name, spec", _expand(UNARY))
@given(data=st.data())
def test_unary_matches_numpy(name, spec, data):
    dtype = data.draw(st.sampled_from(spec.dtypes), label="dtype")
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4), label="shape")
    layout = data.draw(st.sampled_from(LAYOUTS), label="layout")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    x, arr = tensor_and_array(values(shape, dtype, rng, spec.low, spec.high), layout)
    got = getattr(jt, name)(x)
    expected_dtype = jt.int64 if (name == "square" and dtype is jt.bool) else result_dtype(spec.kind, dtype)
    if spec.kind == "bool":
        expected = spec.ref(arr.astype(np.float32) if dtype in HALVES else arr)
    else:
        expected = spec.ref(as_compute(arr, expected_dtype if spec.kind == "float" else dtype, spec.exact))
    check_values(got, expected, expected_dtype)
    assert getattr(x, name)().dtype is expected_dtype  # the method form


@st.composite
def binary_operands(draw, spec):
    """(a, b, values of a, values of b): tensors in any layout, broadcastable, or b a Python number."""
    da = draw(st.sampled_from(spec.dtypes), label="dtype a")
    db = draw(st.sampled_from(spec.dtypes), label="dtype b")
    sa, sb = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0,
                                                    max_side=4), label="shapes").input_shapes
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    a, va = tensor_and_array(values(sa, da, rng), draw(st.sampled_from(LAYOUTS), label="layout a"))
    if not spec.tensors_only and draw(st.booleans(), label="scalar b"):
        vb = values((), db, rng, spec.low, spec.high, spec.nonzero).item()
        return a, vb, va, vb
    b, vb = tensor_and_array(values(sb, db, rng, spec.low, spec.high, spec.nonzero),
                             draw(st.sampled_from(LAYOUTS), label="layout b"))
    return a, b, va, vb


@pytest.mark.parametrize("name, spec", _expand(BINARY))
@given(data=st.data())
def test_binary_matches_numpy(name, spec, data):
    a, b, va, vb = data.draw(binary_operands(spec))
    common = jt.result_type(a, b)
    expected_dtype = result_dtype(spec.kind, common)
    if spec.nonzero and not common.is_floating_point and np.any(as_compute(vb, common, True) == 0):
        return  # a value wrapped to zero (300 as uint8 is 44, 256 is 0): division by zero is tested below
    got = getattr(jt, name)(a, b, **spec.kwargs)
    ref_dtype = jt.float32 if spec.kind == "float" and not common.is_floating_point else common
    expected = spec.ref(*(as_compute(v, ref_dtype, spec.exact, spec.kind) for v in (va, vb)))
    check_values(got, expected, expected_dtype)
    assert getattr(a, name)(b, **spec.kwargs).dtype is expected_dtype  # the method form


@given(st.sampled_from(ALL_DTYPES), st.sampled_from(ALL_DTYPES), st.sampled_from(ALL_DTYPES),
       hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3),
       st.sampled_from(LAYOUTS), st.integers(0, 2**32 - 1))
def test_where_selects_and_promotes_like_numpy(da, db, dc, shapes, layout, seed):
    rng = np.random.default_rng(seed)
    sc, sa, sb = shapes.input_shapes
    cond, vc = tensor_and_array(values(sc, jt.bool, rng), layout)
    a, va = tensor_and_array(values(sa, da, rng), layout)
    b = jt.tensor(values(sb, db, rng))
    common = jt.result_type(a, b)  # the condition takes no part in promotion
    expected = np.where(vc, va.astype(common.np), b.numpy().astype(common.np))
    check_values(jt.where(cond, a, b), expected, common)
    check_values(a.where(cond, b), expected, common)


@pytest.mark.parametrize("first, x, y, dtype", [
    (True, 1.0, 0, jt.float32), (True, 1, 0, jt.int64), (False, True, False, jt.bool),
    (True, jt.tensor(1, dtype=jt.int32), 0, jt.int32),
    (False, jt.tensor(3), jt.tensor(0.5, dtype=jt.float64), jt.float64),
])
def test_where_with_scalars_and_zero_dim_tensors(first, x, y, dtype):
    got = jt.where(jt.tensor([first, not first]), x, y)
    assert got.dtype is dtype and got.shape == (2,)
    assert got.tolist() == ([float(x), float(y)] if first else [float(y), float(x)])


@given(st.sampled_from(NOBOOL), st.sampled_from(["num", "tensor", None]), st.sampled_from(["num", "tensor", None]),
       hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3),
       st.sampled_from(LAYOUTS), st.integers(0, 2**32 - 1))
def test_clamp_matches_numpy(dtype, lo_kind, hi_kind, shapes, layout, seed):
    if lo_kind is None and hi_kind is None:
        return
    rng = np.random.default_rng(seed)
    sx, slo, shi = shapes.input_shapes
    x, vx = tensor_and_array(values(sx, dtype, rng), layout)

    def bound(kind, shape):
        if kind == "num":
            v = values((), dtype, rng).item()
            return v, v
        v = values(shape, dtype, rng)
        return jt.tensor(v), v
    lo, vlo = bound(lo_kind, slo) if lo_kind else (None, None)
    hi, vhi = bound(hi_kind, shi) if hi_kind else (None, None)
    if {lo_kind, hi_kind} == {"num", "tensor"}:  # torch's clamp overloads take two numbers or two tensors
        if (lo if lo_kind == "tensor" else hi).ndim == 0:
            return  # a 0-d tensor is a number then: test_clamp_takes_a_0d_tensor_bound_as_a_number
        with pytest.raises(TypeError, match=r"clamp\(\) received an invalid combination of arguments - got \(Tensor, "):
            jt.clamp(x, lo, hi)
        return
    common = result_type_of(*[v for v in (x, lo, hi) if v is not None])
    cast = compute_np(common, True)
    expected = vx.astype(cast)
    if lo is not None:
        expected = np.maximum(expected, np.asarray(vlo).astype(cast))
    if hi is not None:
        expected = np.minimum(expected, np.asarray(vhi).astype(cast))
    check_values(jt.clamp(x, lo, hi), expected, common)
    check_values(x.clip(min=lo, max=hi), expected, common)
    if lo is not None:
        check_values(jt.clamp_min(x, lo), np.maximum(vx.astype(cast), np.asarray(vlo).astype(cast)),
                     jt.result_type(x, lo))


@pytest.mark.parametrize("dtype", ["int8", "float32"])
@pytest.mark.parametrize("bounds", [
    (("t", 1), 3), (1.5, ("t", 3)), (("t", 1), 3.5), (("t", 1.5), 3), (("t", 1.5, "float64"), 3),
    (("t", True), 3), (True, ("t", 2)), (("t", 1.5, "bfloat16"), 3), (("t", 1), 300),
])
def test_clamp_takes_a_0d_tensor_bound_as_a_number(dtype, bounds):
    """torch's argument parser takes a 0-d tensor that does not require grad as a Number: a number and a
    0-d tensor bound call clamp's Number overload (its dtype: a float bound makes int8 float32)."""
    def run(lib):
        def bound(b):
            return lib.tensor(b[1], dtype=getattr(lib, b[2]) if len(b) > 2 else None) if isinstance(b, tuple) else b
        x = lib.arange(-2, 5, dtype=getattr(lib, dtype))
        try:
            return lib.clamp(x, *map(bound, bounds)), x.clone().clamp_(*map(bound, bounds))
        except RuntimeError as e:
            return type(e)
    got, expected = run(jt), run(torch)
    if isinstance(expected, type):
        assert got is expected
        return
    for g, e in zip(got, expected):
        assert str(g.dtype).split(".")[1] == str(e.dtype).split(".")[1]
        np.testing.assert_array_equal(g.float().numpy(), e.float().numpy())


def test_clamp_refuses_a_mix_of_a_number_and_a_tensor_that_requires_grad_or_has_dims():
    for bound in (jt.tensor(1.0, requires_grad=True), jt.tensor([1.0])):
        with pytest.raises(TypeError, match=r"clamp\(\) received an invalid combination of arguments"):
            jt.clamp(jt.zeros(3), bound, 2)
        with pytest.raises(TypeError, match=r"clip\(\) received an invalid combination of arguments"):
            jt.zeros(3).clip(2, bound)


@given(st.sampled_from(FLOAT_DTYPES), st.booleans(),
       hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3),
       st.integers(0, 2**32 - 1))
def test_lerp_matches_numpy(dtype, tensor_weight, shapes, seed):
    rng = np.random.default_rng(seed)
    ss, se, sw = shapes.input_shapes
    vs, ve = values(ss, dtype, rng), values(se, dtype, rng)
    vw = values(sw, dtype, rng, -1, 2) if tensor_weight else float(rng.uniform(-1, 2))
    weight = jt.tensor(vw) if tensor_weight else vw
    wide = [np.asarray(v).astype(np.float64) for v in (vs, ve, vw)]
    expected = wide[0] + wide[2] * (wide[1] - wide[0])
    check_values(jt.lerp(jt.tensor(vs), jt.tensor(ve), weight), expected, dtype)


def with_nans(v, fraction, rng):
    """``v`` with about ``fraction`` of its elements NaN. The NaN has ``v``'s dtype: NumPy 1 would make a bare
    one float16, which has no common dtype with bfloat16."""
    return np.where(rng.random(v.shape) < fraction, np.array(np.nan, v.dtype), v)


@given(st.sampled_from(ALL_DTYPES), hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       st.floats(0, 0.1), st.floats(0, 0.5), st.booleans(), st.integers(0, 2**32 - 1))
def test_isclose_and_allclose_match_numpy(dtype, shapes, rtol, atol, equal_nan, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes.input_shapes
    va = values(sa, dtype, rng)
    if dtype.is_floating_point:  # NaNs, some of them facing NaNs in ``vb``
        va = with_nans(va, 0.2, rng)
    vb = (np.broadcast_to(va, np.broadcast_shapes(sa, sb)) if rng.random() < 0.5 else values(sb, dtype, rng))
    vb = np.ascontiguousarray(vb)
    if dtype.is_floating_point:  # nudge some values inside or outside the tolerance, plant NaNs
        vb = (vb.astype(np.float64) * (1 + rng.uniform(-0.05, 0.05, vb.shape))).astype(dtype.np)
        vb = with_nans(vb, 0.1, rng)
    a, b = jt.tensor(va), jt.tensor(vb)
    cast = np.float64 if dtype.is_floating_point else np.float32
    wa, wb = va.astype(cast), vb.astype(cast)
    expected = np.isclose(wa, wb, rtol=rtol, atol=atol, equal_nan=equal_nan)
    got = jt.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    assert got.dtype is jt.bool
    # float32 and half tolerances are computed in their own precision: only compare clear-cut elements
    margin = np.abs(np.abs(wa - wb) - (atol + rtol * np.abs(wb))) > 1e-2 * (atol + rtol * np.abs(wb)) + 1e-6
    clear = margin | ~np.isfinite(wa) | ~np.isfinite(wb) | (wa == wb)
    np.testing.assert_array_equal(got.numpy()[clear], expected[clear])
    if clear.all():
        assert jt.allclose(a, b, rtol, atol, equal_nan) is bool(expected.all())
        assert a.allclose(b, rtol=rtol, atol=atol, equal_nan=equal_nan) is bool(expected.all())


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_pow_by_two_is_torchs_product_on_numpy_before_2_1(dtype):
    """``x ** 2`` gives torch's bits (``x * x``): NumPy's power() before 2.1 is an ulp off for some."""
    rng = np.random.default_rng(0)
    numbers = (rng.standard_normal(10_000) * 10.0 ** rng.integers(-15, 15, 10_000)).astype(dtype.np)
    expected = (torch.from_numpy(numbers) ** 2).numpy()
    x = jt.tensor(numbers)
    for got in (x ** 2, x.pow(2.0), jt.pow(x, jt.tensor(2.0, dtype=dtype))):
        np.testing.assert_array_equal(got.numpy(), expected)


def test_equal_compares_shape_and_values():
    x = jt.tensor([1.0, 2.0])
    assert jt.equal(x, jt.tensor([1.0, 2.0])) is True
    assert x.equal(jt.tensor([1, 2])) is True            # values compare after promotion
    assert jt.equal(x, jt.tensor([1.0])) is False         # no broadcasting
    assert jt.equal(jt.tensor([math.nan]), jt.tensor([math.nan])) is False
    assert jt.equal(jt.tensor([0.0]), jt.tensor([-0.0])) is True
    assert jt.equal(jt.zeros(0, 3), jt.zeros(0, 3)) is True


INF, NAN = math.inf, math.nan
F = [-4.0, 4.0, -1.0, 1.0, 5.0, 0.0, -0.0, 1.0, 7.0, -0.0, 2.5]
G = [2.0, -2.0, INF, -INF, 0.0, 0.0, 3.0, -3.0, 0.1, -3.0, -INF]
INTS_A, INTS_B = [-7, 7, -7, 7, -128, 0], [2, 2, -2, -2, -1, 5]
# (op, inputs, input dtype, keyword arguments, torch's result, its dtype), generated once with torch 2.13.
TORCH_VALUES = [
    ("remainder", [F, G], "float32", {}, [-0.0, 0.0, INF, -INF, NAN, NAN, -0.0, -2.0, 0.09999989718198776, -0.0, -INF],
     "float32"),
    ("fmod", [F, G], "float32", {}, [-0.0, 0.0, -1.0, 1.0, NAN, NAN, -0.0, 1.0, 0.09999989718198776, -0.0, 2.5],
     "float32"),
    ("floor_divide", [F, G], "float32", {}, [-2.0, -2.0, -1.0, -1.0, INF, NAN, -0.0, -1.0, 69.0, 0.0, -1.0],
     "float32"),
    ("div", [F, G], "float32", {"rounding_mode": "trunc"},
     [-2.0, -2.0, -0.0, -0.0, INF, NAN, -0.0, -0.0, 70.0, 0.0, -0.0], "float32"),
    ("div", [F, G], "float32", {"rounding_mode": "floor"},
     [-2.0, -2.0, -1.0, -1.0, INF, NAN, -0.0, -1.0, 69.0, 0.0, -1.0], "float32"),
    ("div", [F, G], "float32", {}, [-2.0, -2.0, -0.0, -0.0, INF, NAN, -0.0, -0.3333333432674408, 70.0, 0.0, -0.0],
     "float32"),
    ("remainder", [INTS_A, INTS_B], "int8", {}, [1, 1, -1, -1, 0, 0], "int8"),
    ("fmod", [INTS_A, INTS_B], "int8", {}, [-1, 1, -1, 1, 0, 0], "int8"),
    ("floor_divide", [INTS_A, INTS_B], "int8", {}, [-4, 3, 3, -4, -128, 0], "int8"),
    ("div", [INTS_A, INTS_B], "int8", {"rounding_mode": "trunc"}, [-3, 3, 3, -3, -128, 0], "int8"),
    ("maximum", [[-0.0, 0.0, NAN, 1.0, NAN, -INF], [0.0, -0.0, 1.0, NAN, NAN, INF]], "float32", {},
     [-0.0, 0.0, NAN, NAN, NAN, INF], "float32"),
    ("minimum", [[-0.0, 0.0, NAN, 1.0, NAN, -INF], [0.0, -0.0, 1.0, NAN, NAN, INF]], "float32", {},
     [-0.0, 0.0, NAN, NAN, NAN, -INF], "float32"),
    ("sign", [[NAN, -0.0, 0.0, -INF, 3.0]], "float32", {}, [0.0, 0.0, 0.0, -1.0, 1.0], "float32"),
    ("relu", [[-0.0, NAN, -INF, 2.0]], "float32", {}, [-0.0, NAN, 0.0, 2.0], "float32"),
    ("clamp", [[-0.0, 0.0, NAN, 5.0]], "float32", {"min": 0.0}, [-0.0, 0.0, NAN, 5.0], "float32"),
    ("clamp", [[-0.0, 0.0, NAN, 5.0]], "float32", {"max": -0.0}, [-0.0, 0.0, NAN, -0.0], "float32"),
    ("clamp", [[1.0, NAN, -1.0]], "float32", {"min": NAN}, [NAN, NAN, NAN], "float32"),
    ("clamp", [[1.0, 2.0, 3.0]], "float32", {"min": 2.5, "max": 1.5}, [1.5, 1.5, 1.5], "float32"),
    ("abs", [[-0.0, -INF, NAN]], "float32", {}, [0.0, INF, NAN], "float32"),
    ("neg", [[0.0, -0.0, INF]], "float32", {}, [-0.0, 0.0, -INF], "float32"),
    ("neg", [[0, 1, 255]], "uint8", {}, [0, 255, 1], "uint8"),
    ("abs", [[-128, -1, 5]], "int8", {}, [-128, 1, 5], "int8"),
    ("sqrt", [[-0.0, -1.0, INF]], "float32", {}, [-0.0, NAN, INF], "float32"),
    ("rsqrt", [[0.0, -0.0, -1.0, INF, 4.0]], "float32", {}, [INF, -INF, NAN, 0.0, 0.5], "float32"),
    ("reciprocal", [[0.0, -0.0, INF]], "float32", {}, [INF, -INF, 0.0], "float32"),
    ("log", [[0.0, -0.0, -1.0, INF]], "float32", {}, [-INF, -INF, NAN, INF], "float32"),
    ("sigmoid", [[-1000.0, 1000.0, -0.0]], "float32", {}, [0.0, 1.0, 0.5], "float32"),
    ("erf", [[0.0, -0.0, INF, -INF, NAN, 1e-300, -30.0]], "float32", {}, [0.0, -0.0, 1.0, -1.0, NAN, 0.0, -1.0],
     "float32"),
    ("erfc", [[0.0, INF, -INF, NAN, 30.0, -30.0, 27.0]], "float64", {}, [1.0, 0.0, 2.0, NAN, 0.0, 2.0, 5.23705e-319],
     "float64"),
    ("round", [[0.5, 1.5, 2.5, -0.5, -2.5, 1.2345]], "float32", {}, [0.0, 2.0, 2.0, -0.0, -2.0, 1.0], "float32"),
    ("round", [[1.2345, -1.2355, 0.125]], "float32", {"decimals": 2},
     [1.2300000190734863, -1.2400000095367432, 0.11999999731779099], "float32"),
    ("round", [[1234.5, 15.0, 25.0, -15.0]], "float32", {"decimals": -1}, [1230.0, 20.0, 20.0, -20.0], "float32"),
    ("round", [[1.5, 1e30]], "float32", {"decimals": 10}, [1.5, INF], "float32"),
    ("frac", [[-0.0, -1.5, 1e30, INF, 2.25]], "float32", {}, [0.0, -0.5, 0.0, NAN, 0.25], "float32"),
    ("trunc", [[-0.5, 0.5, -INF, NAN]], "float32", {}, [-0.0, 0.0, -INF, NAN], "float32"),
    ("floor", [[-0.5, -0.0, 1.5]], "float32", {}, [-1.0, -0.0, 1.0], "float32"),
    ("ceil", [[-0.5, 0.5, -0.0]], "float32", {}, [-0.0, 1.0, -0.0], "float32"),
    ("pow", [[-1, 1, 2, 0, -1, 3], [-1, -1, -2, -1, -2, 0]], "int64", {}, [-1, 1, 0, 0, 1, 1], "int64"),
    ("pow", [[0.0, -0.0, -8.0, 2.0, NAN, 1.0], [-1.0, -1.0, 1 / 3, INF, 0.0, NAN]], "float32", {},
     [INF, -INF, NAN, INF, 1.0, 1.0], "float32"),
    ("square", [[True, False]], "bool", {}, [1, 0], "int64"),
    ("bitwise_left_shift", [[1, -1, 5, 3, -128], [7, 8, -1, 1, 1]], "int8", {}, [-128, 0, 0, 6, 0], "int8"),
    ("bitwise_right_shift", [[1, -1, 5, -128, 64], [7, 8, -1, 100, 3]], "int8", {}, [0, -1, 0, -1, 8], "int8"),
    ("bitwise_left_shift", [[1, 255, 5, 1], [7, 8, 200, 0]], "uint8", {}, [128, 0, 0, 1], "uint8"),
    ("bitwise_right_shift", [[1, 255, 5, 128], [7, 8, 200, 7]], "uint8", {}, [0, 0, 0, 1], "uint8"),
    ("bitwise_left_shift", [[1, -1, 1], [63, 64, 62]], "int64", {}, [-2**63, 0, 2**62], "int64"),
    ("bitwise_right_shift", [[1, -1, -2**63], [63, 64, 63]], "int64", {}, [0, -1, -1], "int64"),
    ("logaddexp", [[INF, -INF, -INF, 1.0, NAN], [INF, -INF, 1.0, -INF, 1.0]], "float32", {},
     [INF, -INF, 1.0, 1.0, NAN], "float32"),
    ("hypot", [[INF, NAN, 3.0, -0.0], [NAN, INF, 4.0, 0.0]], "float32", {}, [INF, INF, 5.0, 0.0], "float32"),
    ("atan2", [[0.0, -0.0, 0.0, -0.0, 1.0], [0.0, 0.0, -0.0, -0.0, INF]], "float32", {},
     [0.0, -0.0, 3.1415927410125732, -3.1415927410125732, 0.0], "float32"),
    ("lerp", [[1.0, 1.0, 0.0, 1e30], [3.0, 3.0, 1.0, -1e30]], "float32", {"weight": 1.0},
     [3.0, 3.0, 1.0, -1.0000000150474662e30], "float32"),
    ("lerp", [[1.0, 1.0, 0.0], [3.0, 3.0, 1.0]], "float32", {"weight": 0.25}, [1.5, 1.5, 0.25], "float32"),
    ("isclose", [[NAN, INF, -INF, INF, 1.0, 1.0], [NAN, INF, INF, 1e300, 1.0000001, 1.1]], "float32",
     {"equal_nan": True}, [True, True, False, True, True, False], "bool"),
    ("isclose", [[NAN, 1.0], [NAN, 1.0]], "float32", {}, [False, True], "bool"),
    ("isclose", [[NAN, 1.0, 1.0], [NAN, 1.0, 1.5]], "bfloat16", {"equal_nan": True}, [True, True, False], "bool"),
    ("isclose", [[NAN, 1.0, 1.0], [NAN, 1.0, 1.5]], "float16", {"equal_nan": True}, [True, True, False], "bool"),
    ("isclose", [[1, 2], [2, 1]], "uint8", {"atol": 1}, [True, True], "bool"),
    ("eq", [[1], [-1]], "uint8", {}, [False], "bool"),
    ("expm1", [[1e-10, -0.0]], "float32", {}, [1.000000013351432e-10, -0.0], "float32"),
    ("log1p", [[1e-10, -1.0, -0.0]], "float32", {}, [1.000000013351432e-10, -INF, -0.0], "float32"),
    ("tanh", [[INF, -INF, -0.0]], "float32", {}, [1.0, -1.0, -0.0], "float32"),
]


@pytest.mark.parametrize("name, inputs, dtype, kwargs, expected, out_dtype", TORCH_VALUES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(TORCH_VALUES)])
def test_edge_values_match_torch(name, inputs, dtype, kwargs, expected, out_dtype):
    args = [jt.tensor(v, dtype=getattr(jt, dtype)) for v in inputs]
    got = getattr(jt, name)(*args, **kwargs)
    assert got.dtype is getattr(jt, out_dtype)
    values = got.numpy()
    want = np.array(expected, dtype=values.dtype)
    np.testing.assert_array_equal(values, want)  # NaNs compare equal here
    if got.dtype.is_floating_point:
        number = ~np.isnan(want)  # a NaN's sign bit means nothing
        np.testing.assert_array_equal(np.signbit(values[number]), np.signbit(want[number]), err_msg="signs")


def test_integer_scalars_wrap_to_the_tensor_dtype():
    u8 = jt.tensor([1, 250], dtype=jt.uint8)
    assert (u8 + 300).tolist() == [45, 38]
    assert (u8 > -1).tolist() == [False, False]  # -1 is 255 as a uint8
    assert (u8 == 256 + 250).tolist() == [False, True]
    assert (u8 - 1).tolist() == [0, 249]
    assert jt.add(u8, u8, alpha=2).tolist() == [3, 238]


def test_bool_arithmetic_follows_torch():
    b = jt.tensor([True, False])
    assert jt.add(b, b).tolist() == [True, False] and jt.add(b, b).dtype is jt.bool
    assert jt.add(b, b, alpha=2).tolist() == [True, False]
    assert (b * b).dtype is jt.bool and (b + 1).dtype is jt.int64 and (b / b).dtype is jt.float32
    assert jt.sign(b).tolist() == [True, False] and (~b).tolist() == [False, True]
    assert (b & True).dtype is jt.bool and (b & 3).tolist() == [1, 0]


def test_erf_is_accurate_in_float64():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-6, 6, 2000), rng.uniform(-0.6, 0.6, 1000), rng.uniform(-27, 27, 1000),
                        [0.46875, -0.46875, 4.0, -4.0, 1e-300, 5e-324]])
    for fn, ref, max_ulps in ((jt.erf, _erf, 3), (jt.erfc, _erfc, 4)):
        got = fn(jt.tensor(x)).numpy()
        want = ref(x)
        normal = np.abs(want) >= np.finfo(np.float64).tiny
        ulps = np.abs(got - want)[normal] / np.spacing(np.abs(want[normal]))
        assert ulps.max() <= max_ulps, (fn.__name__, x[normal][np.argmax(ulps)])
        np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=1e-322)


def test_integer_division_by_zero_raises_before_writing():
    x = jt.tensor([4, 5])
    for fn in (lambda: x // 0, lambda: x % jt.tensor([1, 0]), lambda: jt.fmod(x, 0),
               lambda: jt.div(x, 0, rounding_mode="trunc"), lambda: jt.div(x, 0, rounding_mode="floor"),
               lambda: x.floor_divide_(0), lambda: x.remainder_(0)):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn()
    assert x.tolist() == [4, 5] and x._version == 0
    assert (x / 0).tolist() == [INF, INF] and (x / 0).dtype is jt.float32
    assert (jt.tensor([4.0]) // 0).tolist() == [INF]


EMPTY_DIVISIONS = {  # integer division by zero of an empty tensor: nothing is divided, torch gives it empty
    "floordiv": lambda T, x, z: x // 0, "remainder": lambda T, x, z: x % 0, "fmod": lambda T, x, z: T.fmod(x, 0),
    "trunc": lambda T, x, z: T.div(x, 0, rounding_mode="trunc"),
    "floor": lambda T, x, z: T.div(x, 0, rounding_mode="floor"),
    "broadcast": lambda T, x, z: x.unsqueeze(1) // T.stack([z, z + 1]),
    "0d": lambda T, x, z: T.floor_divide(x, z), "reflected": lambda T, x, z: 5 % (x * z),
    "inplace": lambda T, x, z: x.floor_divide_(z), "inplace_remainder": lambda T, x, z: x.remainder_(0),
}


@pytest.mark.parametrize("name", sorted(EMPTY_DIVISIONS))
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_integer_division_by_zero_of_an_empty_tensor_is_empty_as_torch(name, mode):
    fn = EMPTY_DIVISIONS[name]
    expected = fn(torch, torch.zeros(0, dtype=torch.int32), torch.tensor(0, dtype=torch.int32))
    run = (lambda x, z: fn(jt, x, z)) if mode == "eager" else jt.compile(lambda x, z: fn(jt, x, z))
    got = run(jt.zeros(0, dtype=jt.int32), jt.tensor(0, dtype=jt.int32))
    assert tuple(got.shape) == tuple(expected.shape) and got.dtype.name == str(expected.dtype).split(".")[1]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # a non-empty one still raises
        run(jt.ones(2, dtype=jt.int32), jt.tensor(0, dtype=jt.int32))


BOOL_POWERS = {  # torch fills ones for a number exponent 0 and copies for 1, with no pow kernel: bools pass
    "true": lambda T, b: b ** True, "false": lambda T, b: b ** False, "function": lambda T, b: T.pow(b, True),
    "inplace": lambda T, b: b.clone().pow_(True), "one": lambda T, b: b ** 1, "zero_float": lambda T, b: b ** 0.0,
    "out": lambda T, b: T.pow(b, False, out=T.empty(2, dtype=T.bool)), "fused": lambda T, b: (b ** True) ^ b,
}


@pytest.mark.parametrize("name", sorted(BOOL_POWERS))
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_bool_tensor_to_a_number_power_0_or_1_as_torch(name, mode):
    fn = BOOL_POWERS[name]
    expected = fn(torch, torch.tensor([True, False]))
    run = (lambda b: fn(jt, b)) if mode == "eager" else jt.compile(lambda b: fn(jt, b))
    got = run(jt.tensor([True, False]))
    assert got.dtype.name == str(expected.dtype).split(".")[1] and got.tolist() == expected.tolist()
    with pytest.raises(NotImplementedError, match="\"pow\" not implemented for 'Bool'"):  # a tensor exponent
        jt.tensor([True, False]) ** jt.tensor(True)


@pytest.mark.parametrize("eps", [None, -1.0, 0.0, 0.2, 0.5, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_logit_clamps_as_torch_for_every_eps(eps, dtype):
    # torch clamps x < eps to eps and else x > 1 - eps to 1 - eps: for eps over 1/2 every x is moved, to one or
    # the other (a min/max clamp moves them all to 1 - eps); a negative eps clamps nothing
    x = [0.0, 0.1, 0.5, 0.9, 1.0, 1.5, -0.5, math.nan, 0.6, 0.4]
    expected = torch.logit(torch.tensor(x, dtype=getattr(torch, dtype)), eps=eps)
    t = jt.tensor(x, dtype=getattr(jt, dtype))
    for got in (jt.logit(t, eps=eps), jt.compile(lambda v: jt.logit(v * 1, eps=eps))(t)):
        assert got.dtype.name == dtype
        np.testing.assert_allclose(got.float().numpy(), expected.float().numpy(), rtol=1e-6)
    if dtype == "float32":
        tx, jx = torch.tensor(x, requires_grad=True), jt.tensor(x, requires_grad=True)
        torch.logit(tx, eps=eps).backward(torch.ones(len(x)))
        jt.logit(jx, eps=eps).backward(jt.ones(len(x)))
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("rounding_mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_division_rounded_by_a_tensor_rounds_steps_to_the_half_type_as_torch(dtype, rounding_mode):
    # torch's CPU kernels divide a half type by a tensor of several elements in the half type (floor: c10's
    # div_floor_floating, each step rounded; trunc: the rounded quotient), by one divisor for every element in
    # float32: bfloat16 276 // 3.3125 is 82 by a tensor (276 - fmod rounds up to 276) and 83 by a number
    rng = np.random.default_rng(0)
    a = np.concatenate([[276.0, 0.0, -0.0, 5.0, INF, -INF, math.nan, 1.0], rng.standard_normal(2000) * 300])
    b = np.concatenate([[3.3125, -2.0, 2.0, 0.0, 3.0, 0.0, 1.0, -0.0], rng.standard_normal(2000) * 3])
    ta, tb = (torch.tensor(v, dtype=torch.float32).to(getattr(torch, dtype)) for v in (a, b))
    ja, jb = (jt.tensor(v, dtype=jt.float32).to(getattr(jt, dtype)) for v in (a, b))
    forms = {"tensor": lambda T, x, y: T.div(x, y, rounding_mode=rounding_mode),
             "0-d": lambda T, x, y: T.div(x, y[0], rounding_mode=rounding_mode),
             "one element": lambda T, x, y: T.div(x, y[:1], rounding_mode=rounding_mode),
             "number": lambda T, x, y: T.div(x, 3.3125, rounding_mode=rounding_mode)}
    for name, fn in forms.items():
        expected = fn(torch, ta, tb).float().numpy()
        for got in (fn(jt, ja, jb), jt.compile(lambda x, y: fn(jt, x * 1, y))(ja, jb)):
            np.testing.assert_array_equal(got.float().numpy(), expected, err_msg=name)
    if dtype == "bfloat16" and rounding_mode == "floor":  # (the case the half-type rounding decides)
        assert (ja // jb)[0].item() == 82 and (ja // 3.3125)[0].item() == 83


# In-place and out= ---------------------------------------------------------------------------------

INPLACE = [  # (method, its arguments)
    ("add_", (2,)), ("add_", (jt.tensor([1.0, 2.0]),)), ("sub_", (0.5,)), ("mul_", (jt.tensor(2.0),)),
    ("div_", (2,)), ("div_", (2,), {"rounding_mode": "floor"}), ("true_divide_", (4,)), ("floor_divide_", (0.5,)),
    ("remainder_", (0.7,)), ("fmod_", (0.7,)), ("pow_", (2,)), ("neg_", ()), ("abs_", ()), ("sign_", ()),
    ("square_", ()), ("exp_", ()), ("sqrt_", ()), ("sigmoid_", ()), ("erf_", ()), ("floor_", ()), ("round_", ()),
    ("frac_", ()), ("clamp_", (0.2, 0.5)), ("clip_", (None, 0.5)), ("lerp_", (jt.tensor(1.0), 0.3)),
    ("hypot_", (jt.tensor(1.0),)), ("atan2_", (jt.tensor(1.0),)), ("relu_", ()), ("eq_", (0.5,)), ("lt_", (0.5,)),
    ("logical_and_", (jt.tensor(0),)), ("logical_not_", ()),
]


@pytest.mark.parametrize("case", INPLACE, ids=[f"{c[0]}{i}" for i, c in enumerate(INPLACE)])
def test_inplace_writes_into_self_and_bumps_version(case):
    method, args, kwargs = (case + ({},))[:3]
    base = jt.tensor([[0.25, -1.5, 2.0], [0.5, 3.0, -0.75]]).abs()
    x = base.t()[:, ::1]  # a non-contiguous view: the write must go through to ``base``
    expected = getattr(x, method[:-1])(*args, **kwargs)
    version = x._version
    r = getattr(x, method)(*args, **kwargs)
    assert r is x and x.dtype is jt.float32 and x._version == version + 1
    assert_close(x, to_numpy(expected).astype(np.float32), jt.float32)
    assert_close(base.t(), to_numpy(expected).astype(np.float32), jt.float32)


def test_inplace_keeps_dtype_and_checks_before_writing():
    i = jt.tensor([1, 2, 3])
    assert i.lt_(2).tolist() == [1, 0, 0] and i.dtype is jt.int64
    i = jt.tensor([1, 2, 3])
    for fn in (lambda: i.div_(2), lambda: i.add_(0.5), lambda: i.exp_(), lambda: i.mul_(jt.tensor([1.5]))):
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
            fn()
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        i.add_(jt.ones(2, 3, dtype=jt.int64))
    b = jt.tensor([True, False])
    with pytest.raises(RuntimeError, match="result type Long can't be cast to the desired output type Bool"):
        b.square_()
    assert i.tolist() == [1, 2, 3] and i._version == 0 and b._version == 0


@pytest.mark.parametrize("name, args", [
    ("add", (jt.ones(2, 3), 1)), ("div", (jt.tensor([1, 2]), 4)), ("exp", (jt.zeros(3),)),
    ("eq", (jt.tensor([1, 2]), 2)), ("where", (jt.tensor([True, False]), 1.0, 2.0)),
    ("bitwise_and", (jt.tensor([6, 3]), 2)), ("clamp", (jt.tensor([0.5, 3.0]), 1.0, 2.0)),
])
def test_out_resizes_casts_and_bumps_version(name, args):
    expected = getattr(jt, name)(*args)
    out = jt.empty(0, dtype=jt.float64)
    r = getattr(jt, name)(*args, out=out)
    assert r is out and out.shape == expected.shape and out.dtype is jt.float64 and out._version == 1
    np.testing.assert_array_equal(out.numpy(), to_numpy(expected).astype(np.float64))
    wrong = jt.zeros(5, dtype=jt.float64)
    with pytest.warns(UserWarning, match="was resized"):
        getattr(jt, name)(*args, out=wrong)
    assert wrong.shape == expected.shape


def test_out_rejects_a_lossy_dtype_before_writing():
    out = jt.zeros(3, dtype=jt.int64)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        jt.exp(jt.tensor([1, 2, 3]), out=out)
    assert out.tolist() == [0, 0, 0] and out._version == 0


# Python operators ------------------------------------------------------------------------------------

OPERATORS = [  # (operator, in-place operator, registry function)
    (operator.add, operator.iadd, "add"), (operator.sub, operator.isub, "sub"), (operator.mul, operator.imul, "mul"),
    (operator.truediv, operator.itruediv, "div"), (operator.floordiv, operator.ifloordiv, "floor_divide"),
    (operator.mod, operator.imod, "remainder"), (operator.pow, operator.ipow, "pow"),
    (operator.and_, operator.iand, "bitwise_and"), (operator.or_, operator.ior, "bitwise_or"),
    (operator.xor, operator.ixor, "bitwise_xor"), (operator.lshift, operator.ilshift, "bitwise_left_shift"),
    (operator.rshift, operator.irshift, "bitwise_right_shift"),
    (operator.eq, None, "eq"), (operator.ne, None, "ne"), (operator.lt, None, "lt"), (operator.le, None, "le"),
    (operator.gt, None, "gt"), (operator.ge, None, "ge"),
]
_BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"}


@pytest.mark.parametrize("py_op, py_iop, name", OPERATORS, ids=[c[2] for c in OPERATORS])
@pytest.mark.parametrize("dtype", [jt.int64, jt.float32], ids=["int64", "float32"])
def test_python_operators_are_the_registry_ops(py_op, py_iop, name, dtype):
    if name in _BITWISE and dtype.is_floating_point:
        return
    fn = getattr(jt, name)
    x = jt.tensor([3, 5, 6], dtype=dtype)
    y = jt.tensor([2, 1, 3], dtype=dtype)
    s = 2 if name in _BITWISE else (2 if dtype is jt.int64 else 1.5)
    # reflected: a number on the left counts as a wrapped number (comparisons take no number there)
    for got, want in ((py_op(x, y), fn(x, y)), (py_op(x, s), fn(x, s)), (py_op(s, x), fn(jt.tensor(s), x)),
                      (py_op(np.int64(2), x), fn(jt.tensor(2), x))):
        assert got.dtype is want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    if py_iop is None:
        return
    want = fn(x, s)
    target = x.clone()
    if not jt.can_cast(want.dtype, dtype):  # int64 /= 2
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            py_iop(target, s)
        return
    result = py_iop(target, s)
    assert result is target and target.dtype is dtype
    np.testing.assert_array_equal(target.numpy(), want.numpy())


def test_reflected_operators_with_python_scalars():
    x = jt.tensor([1.0, 2.0, 4.0])
    np.testing.assert_allclose((2 - x).numpy(), [1.0, 0.0, -2.0])
    np.testing.assert_allclose((2 ** x).numpy(), [2.0, 4.0, 16.0])
    np.testing.assert_allclose((1 / x).numpy(), [1.0, 0.5, 0.25])
    np.testing.assert_allclose((7 // x).numpy(), [7.0, 3.0, 1.0])
    np.testing.assert_allclose((7 % x).numpy(), [0.0, 1.0, 3.0])
    i = jt.tensor([1, 2, 3])
    assert (2 ** i).dtype is jt.int64 and (2 ** i).tolist() == [2, 4, 8]
    assert (1 / i).dtype is jt.float32 and (1 << jt.tensor([2], dtype=jt.int8)).dtype is jt.int8
    assert (3 | jt.tensor([4], dtype=jt.uint8)).tolist() == [7] and (True & jt.tensor([True])).tolist() == [True]
    assert (-x).tolist() == [-1.0, -2.0, -4.0] and abs(-x).tolist() == [1.0, 2.0, 4.0] and (+x) is x
    assert (~i).tolist() == [-2, -3, -4]
    assert (x == None) is False and (x != None) is True  # noqa: E711  (Python's fallback, as torch)
    with pytest.raises(TypeError):
        x + "a"


def test_inplace_operators_keep_identity():
    x = jt.tensor([8, 9])
    y = x
    x += 1
    x //= 2
    x **= 2
    x %= 7
    x <<= 1
    x |= 1
    assert x is y and x.tolist() == [5, 9]
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        x /= 2
    f = jt.tensor([1.0])
    f /= 4
    f -= 1
    assert f.tolist() == [-0.75]


# Errors ------------------------------------------------------------------------------------------------

_b, _i, _f = jt.tensor([True, False]), jt.tensor([1, 2]), jt.tensor([1.5, 2.5])
ERRORS = [
    (lambda: -_b, RuntimeError, r"Negation, the `-` operator, on a bool tensor is not supported"),
    (lambda: _b - _b, RuntimeError, r"Subtraction, the `-` operator, with two bool tensors is not supported"),
    (lambda: _i - _b, RuntimeError, r"Subtraction, the `-` operator, with a bool tensor is not supported"),
    (lambda: 1 - _b, RuntimeError, r"with a bool tensor is not supported"),
    (lambda: jt.rsub(_i, _b), RuntimeError, r"with a bool tensor is not supported"),
    (lambda: jt.add(_i, _i, alpha=0.5), RuntimeError,
     "For integral input tensors, argument alpha must not be a floating point number."),
    (lambda: jt.sub(_f, _f, alpha=True), RuntimeError, "Boolean alpha only supported for Boolean results."),
    (lambda: jt.add(_i.to(jt.int8), 1, alpha=200), RuntimeError,
     "value cannot be converted to type int8_t without overflow"),
    (lambda: jt.div(_i, _i, rounding_mode="x"), RuntimeError,
     "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found 'x'"),
    (lambda: _i ** -1, RuntimeError, "Integers to negative integer powers are not allowed."),
    (lambda: _i.pow_(-2), RuntimeError, "Integers to negative integer powers are not allowed."),
    (lambda: jt.pow(_b, _b), NotImplementedError, "\"pow\" not implemented for 'Bool'"),
    (lambda: jt.abs(_b), NotImplementedError, "\"abs_cpu\" not implemented for 'Bool'"),
    (lambda: jt.floor(_b), NotImplementedError, "\"floor_vml_cpu\" not implemented for 'Bool'"),
    (lambda: jt.round(_i, decimals=1), NotImplementedError, "\"round_cpu\" not implemented for 'Long'"),
    (lambda: jt.frac(_i), NotImplementedError, "\"frac_cpu\" not implemented for 'Long'"),
    (lambda: jt.relu(_b), RuntimeError, "Boolean inputs not supported for relu"),
    (lambda: jt.remainder(_b, _b), NotImplementedError, "\"remainder_cpu\" not implemented for 'Bool'"),
    (lambda: _b // _b, NotImplementedError, "\"div_floor_cpu\" not implemented for 'Bool'"),
    (lambda: jt.div(_b, _b, rounding_mode="trunc"), NotImplementedError, "\"div_trunc_cpu\" not implemented"),
    (lambda: jt.fmod(_b, _b), NotImplementedError, "\"fmod_cpu\" not implemented for 'Bool'"),
    (lambda: jt.hypot(_i, _i), NotImplementedError, "\"hypot_cpu\" not implemented for 'Long'"),
    (lambda: jt.logaddexp(_b, _b), NotImplementedError, "\"logaddexp_cpu\" not implemented for 'Bool'"),
    (lambda: _f & _f, NotImplementedError, "\"bitwise_and_cpu\" not implemented for 'Float'"),
    (lambda: jt.bitwise_not(_f), NotImplementedError, "\"bitwise_not_cpu\" not implemented for 'Float'"),
    (lambda: _i | 1.5, NotImplementedError, "\"bitwise_or_cpu\" not implemented for 'Float'"),
    (lambda: ~_f, TypeError, r"~ \(operator.invert\) is only implemented on integer and Boolean-type tensors"),
    (lambda: +_b, RuntimeError, r"The `\+` operator, on a bool tensor is not supported."),
    (lambda: _f << 1, NotImplementedError, "\"lshift_cpu\" not implemented for 'Float'"),
    (lambda: _i << 1.5, NotImplementedError, "\"lshift_cpu\" not implemented for 'Float'"),
    (lambda: _b >> _b, NotImplementedError, "\"rshift_cpu\" not implemented for 'Bool'"),
    (lambda: jt.clamp(_f), RuntimeError, "torch.clamp: At least one of 'min' or 'max' must not be None"),
    (lambda: jt.clamp(_b, min=True), NotImplementedError, "\"clamp_min_scalar_cpu\" not implemented for 'Bool'"),
    (lambda: jt.clamp(_b, min=_b, max=_b), NotImplementedError, "\"clamp_cpu\" not implemented for 'Bool'"),
    (lambda: jt.clamp(_i.to(jt.uint8), max=300), RuntimeError,
     "value cannot be converted to type uint8_t without overflow"),
    (lambda: jt.clamp(_f.half(), max=1e10), RuntimeError,
     "value cannot be converted to type c10::Half without overflow"),
    (lambda: jt.lerp(_i, _i, 0.5), NotImplementedError, "\"lerp_kernel_scalar\" not implemented for 'Long'"),
    (lambda: jt.lerp(_i, _i, _i), NotImplementedError, "\"lerp_kernel_tensor\" not implemented for 'Long'"),
    (lambda: jt.lerp(_f, _f.double(), 0.5), RuntimeError, "expected dtype float for `end` but got dtype double"),
    (lambda: jt.lerp(_f.half(), _f, _f), RuntimeError, "expected dtype c10::Half for `end` but got dtype float"),
    (lambda: jt.lerp(_f, 1.0, 0.5), TypeError, r"lerp\(\): argument 'end' \(position 2\) must be Tensor, not float"),
    (lambda: jt.where(_f, _f, _f), RuntimeError,
     "where expected condition to be a boolean tensor, but got a tensor with dtype Float"),
    (lambda: jt.where(True, _f, _f), TypeError, "must be Tensor, not bool"),
    (lambda: jt.where(_b, _f, jt.ones(3)), RuntimeError,
     r"The size of tensor a \(2\) must match the size of tensor b \(3\) at non-singleton dimension 0"),
    (lambda: jt.isclose(_f, _f.double()), RuntimeError, "Float did not match Double"),
    (lambda: jt.isclose(_f, 1.0), TypeError, "must be Tensor, not float"),
    (lambda: jt.atan2(_f, 2.5), TypeError, r"atan2\(\): argument 'other' \(position 2\) must be Tensor, not float"),
    (lambda: jt.maximum(2, _i), TypeError, r"maximum\(\): argument 'input' \(position 1\) must be Tensor, not int"),
    (lambda: _f.hypot_(1.0), TypeError, r"hypot\(\): argument 'other' \(position 2\) must be Tensor, not float"),
    (lambda: jt.logical_and(_b, True), TypeError, r"argument 'other' \(position 2\) must be Tensor, not bool"),
    (lambda: jt.eq(2, _i), TypeError, r"eq\(\): argument 'input' \(position 1\) must be Tensor, not int"),
    (lambda: jt.fmod(2.5, _f), TypeError, r"argument 'input' \(position 1\) must be Tensor, not float"),
    (lambda: jt.clamp_min(1, _i), TypeError, r"argument 'input' \(position 1\) must be Tensor, not int"),
    (lambda: jt.clip(_f, _f, 2.5), TypeError,
     r"clip\(\) received an invalid combination of arguments - got \(Tensor, Tensor, float\)"),
    (lambda: jt.isclose(_f, _f, rtol=-0.5), RuntimeError, "rtol must be greater than or equal to zero, but got -0.5"),
    (lambda: jt.allclose(_f, _f, atol=-1), RuntimeError, "atol must be greater than or equal to zero, but got -1"),
    (lambda: jt.allclose(_i, _f), RuntimeError, "Long did not match Float"),
    (lambda: jt.allclose(_f, jt.ones(3)), RuntimeError, "must match the size of tensor b"),
    (lambda: jt.equal(_i, 1), TypeError, "must be Tensor, not int"),
    (lambda: _f + jt.ones(3), RuntimeError, r"The size of tensor a \(2\) must match the size of tensor b \(3\)"),
    (lambda: jt.exp(2.0), TypeError, r"exp\(\): expected at least one Tensor argument"),
]


@pytest.mark.parametrize("fn, exc, message", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors_match_torch(fn, exc, message):
    with pytest.raises(exc, match=message):
        fn()


def test_where_warns_for_uint8_conditions():
    with pytest.warns(UserWarning, match="where received a uint8 condition tensor"):
        r = jt.where(jt.tensor([1, 0], dtype=jt.uint8), 1, 0)
    assert r.tolist() == [1, 0]


def test_where_result_dtype_ignores_a_uint8_condition():
    # the condition took part in promotion: a uint8 one made where(c, 1, 2) uint8 (torch: int64) and
    # where(c, int8 0-d, 2) uint8 (torch: int8)
    c = jt.tensor([1, 0], dtype=jt.uint8)
    with pytest.warns(UserWarning, match="uint8 condition"):
        assert jt.where(c, 1, 2).dtype is jt.int64
        assert jt.where(c, jt.tensor(1, dtype=jt.int8), 2).dtype is jt.int8


def test_floating_point_edge_cases_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (jt.log, jt.erf, jt.erfc, jt.rsqrt, jt.sigmoid, jt.acosh):
            fn(jt.tensor([0.0, -1.0, INF, -INF, NAN], dtype=jt.float64))
        jt.remainder(jt.tensor([1.0, INF]), 0.0)
        jt.lerp(jt.tensor([INF]), jt.tensor([-INF]), 0.5)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_half_comparisons_round_the_other_operand(dtype):
    x = jt.tensor([0.1], dtype=dtype)  # not 0.1 exactly: torch compares it with 0.1 rounded to the same type
    assert (x == 0.1).tolist() == [True] and (x > 0.1).tolist() == [False] and (x < 0.1).tolist() == [False]
    assert (x == jt.tensor(0.1)).tolist() == [True] and jt.isclose(x, x).tolist() == [True]


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_half_dtypes_compute_in_float32(dtype):
    r = jt.hypot(jt.tensor([300.0], dtype=dtype), jt.tensor([400.0], dtype=dtype))
    assert r.dtype is dtype and r.tolist() == [500.0]  # 300 ** 2 overflows float16
    r = jt.lerp(jt.tensor([32768.0], dtype=dtype), jt.tensor([-32768.0], dtype=dtype), 0.75)
    assert r.dtype is dtype and r.tolist() == [-16384.0]  # end - start overflows float16


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64, jt.int16, jt.uint8, jt.bool, jt.bfloat16])
def test_where_on_large_broadcast_operands_selects_bits_exactly(dtype):
    rng = np.random.default_rng(3)
    cond = rng.random((7, 1, 300)) > 0.5
    a = (rng.standard_normal((1, 5, 300)) * 100).astype(dtype.np)
    b = (rng.standard_normal((7, 5, 1)) * 100).astype(dtype.np)
    if dtype.is_floating_point:
        a[0, 0, :3] = [np.nan, -0.0, np.inf]
    got = jt.where(jt.from_numpy(cond), jt.from_numpy(a), jt.from_numpy(b))
    assert got.dtype is dtype and got.shape == (7, 5, 300)
    np.testing.assert_array_equal(got.numpy().view(np.uint8), np.where(cond, a, b).view(np.uint8))


def test_lerp_takes_a_zero_dim_weight_of_any_dtype_as_torch():
    """torch treats a 0-d weight as a number whatever its dtype; a weight with dims must match (found by the
    fuzzer, seed 57)."""
    import torch
    x = np.array([1.0, 2.0, 4.0], np.float32)
    for weight in (np.array(2), np.array(0.25, np.float64), np.array(True)):
        expected = torch.lerp(torch.from_numpy(x), torch.from_numpy(x * 3), torch.from_numpy(weight))
        got = jt.lerp(jt.from_numpy(x), jt.from_numpy(x * 3), jt.from_numpy(weight))
        assert got.dtype is jt.float32 and got.tolist() == expected.tolist()
        compiled = jt.compile(lambda a, w: jt.lerp(a, a * 3, w))(jt.from_numpy(x), jt.from_numpy(weight))
        assert compiled.tolist() == expected.tolist()
    with pytest.raises(RuntimeError, match="expected dtype float for `weight` but got dtype double"):
        jt.lerp(jt.ones(3), jt.ones(3), jt.tensor([0.5], dtype=jt.float64))


@pytest.mark.parametrize("call", [
    lambda L: L.tensor([1, 2, 3]).lerp(L.tensor([3, 2, 5]), L.tensor(0.5)),
    lambda L: L.tensor([1, 2, 3]).lerp(L.tensor([3, 2, 5]), 0.5),
    lambda L: L.tensor([1, 2, 3]).lerp(L.tensor([3, 2, 5]), L.tensor([1, 1, 1])),
    lambda L: L.tensor([True]).lerp(L.tensor([False]), 0.5),
    lambda L: L.lerp(L.tensor([1, 2]), L.tensor([3, 4]), 0.5, out=L.zeros(2)),
    lambda L: L.tensor([1, 2]).lerp_(L.tensor([3, 4]), L.tensor(0.5)),
    lambda L: L.tensor([1.0, 2.0]).lerp(L.tensor([3, 4]), 0.5),
    lambda L: L.tensor([1.0, 2.0]).lerp(L.tensor([3.0, 4.0]), L.tensor(1)),
])
def test_lerp_of_integers_runs_when_a_0d_float_weight_makes_the_result_float(call):
    """Found by the fuzzer (seed 1000036): int64 ends with a 0-d float weight raised NotImplementedError;
    torch's weight tensor takes part in the promotion (a number does not), and only the kernel's dtype
    must be floating."""
    outcome = []
    for lib in (jt, torch):
        try:
            r = call(lib)
            outcome.append((str(r.dtype).split(".")[-1], r.tolist()))
        except (RuntimeError, NotImplementedError) as e:
            outcome.append((type(e).__name__, str(e)))
    assert outcome[0] == outcome[1]


# A half tensor's operands of another dtype: torch casts them to the half type (the common dtype) before its
# kernels compute in float32, except a number multiplier, divisor or lerp weight (``original_scalar_value``)
_H = [0.5, -60000.0, 3.0, -float("inf")]
_HALF_OPERAND_CASES = {
    "half_plus_number_beyond_its_range_is_inf": (lambda L, x: x + 1e5),
    "half_minus_number_beyond_its_range_is_inf": (lambda L, x: x - 1e5),
    "half_fmod_by_a_number_that_rounds_to_zero_is_nan": (lambda L, x: L.fmod(x, 1e-8)),
    "half_remainder_by_a_number_beyond_its_range": (lambda L, x: L.remainder(x, -7e4)),
    "half_pow_of_a_number_that_rounds_to_zero_is_one": (lambda L, x: L.pow(x, 1e-8)),
    "half_plus_int_tensor_beyond_its_range_is_inf": (lambda L, x: x + L.tensor([70000, 70000, 1, 1])),
    "half_times_int_tensor_beyond_its_range_is_inf": (lambda L, x: x * L.tensor([70000, 70000, 1, 1])),
    "half_plus_0d_double_beyond_its_range_is_inf": (lambda L, x: x + L.tensor(1e5, dtype=L.float64)),
    "half_times_number_reads_it_unrounded": (lambda L, x: x * 1e5),
    "half_divided_by_0d_double_reads_it_unrounded": (lambda L, x: x / L.tensor(1e5, dtype=L.float64)),
    "half_lerp_weight_number_unrounded": (lambda L, x: L.lerp(x, x.flip(0), 1e-8)),
    "half_lerp_weight_0d_double_rounded": (lambda L, x: L.lerp(x, x.flip(0), L.tensor(1e5, dtype=L.float64))),
    "half_where_number_beyond_its_range_is_inf": (lambda L, x: L.where(x > 0, x, 1e5)),
    "bfloat16_equals_number_rounded_to_it": (lambda L, x: x == 0.1),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(_HALF_OPERAND_CASES))
def test_half_operands_of_another_dtype_round_as_torch(case, dtype):
    fn = _HALF_OPERAND_CASES[case]
    values = _H[:3] + [0.1] if case.startswith("bfloat16") else _H
    got = fn(jt, jt.tensor(values, dtype=getattr(jt, dtype)))
    want = fn(torch, torch.tensor(values, dtype=getattr(torch, dtype)))
    assert got.dtype.name == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


def test_half_pow_number_exponent_beyond_its_range_raises():
    for dtype in (jt.float16, jt.bfloat16):
        with pytest.raises(RuntimeError, match="value cannot be converted to type c10::.*without overflow"):
            jt.pow(jt.ones(2, dtype=dtype), 1e39)
    assert jt.pow(jt.ones(2), 1e40).tolist() == [1.0, 1.0]  # torch leaves float's cast unchecked


NEGATIVE_BOUNDS_AND_FACTORS = {
    "clamp_min_": lambda T, x: x.clone().clamp_min_(-1),
    "clamp_min": lambda T, x: x.clamp_min(-255),
    "clamp_max": lambda T, x: x.clamp_max(-100),
    "clamp": lambda T, x: x.clamp(-3, -2),
    "clip": lambda T, x: T.clip(x, -3),
    "where": lambda T, x: T.where(x > 4, x, -1),
    "add alpha": lambda T, x: x.add(x, alpha=-3),
    "sub_ alpha": lambda T, x: x.clone().sub_(x + 1, alpha=-3),
    "beyond -max": lambda T, x: x.clamp_min(-256),
    "beyond max": lambda T, x: x.add(x, alpha=256),
}


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("name", sorted(NEGATIVE_BOUNDS_AND_FACTORS))
def test_a_negative_number_for_an_unsigned_tensor_wraps_as_torchs(name, dtype):
    """Fuzz seed 3001481: ``x.clamp_min_(-1)`` of a uint8 tensor raised. torch converts a Number to an
    unsigned dtype as two's complement when it is at least ``-max`` (-1 clamps a uint8 tensor to 255) and
    refuses it beyond; signed dtypes take only their range."""
    def run(T):
        try:
            return NEGATIVE_BOUNDS_AND_FACTORS[name](T, T.tensor([0, 5, 100, 127], dtype=getattr(T, dtype))).tolist()
        except RuntimeError as e:
            return str(e)
    assert run(jt) == run(torch)
