"""Reductions, scans and softmax against NumPy: values, dtypes, shapes, layouts, errors."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.ops import registry
from tests.support import FLOAT_DTYPES, INT_DTYPES, LAYOUTS, assert_close, random_array, shapes, tensor_and_array

INF = math.inf
NAN = math.nan
NUMERIC = [jt.bool] + INT_DTYPES + FLOAT_DTYPES
NO_BOOL = INT_DTYPES + FLOAT_DTYPES
EPS = {jt.float16: 1e-3, jt.bfloat16: 8e-3, jt.float32: 2e-6, jt.float64: 1e-12}


def accumulated(d):
    return d if d.is_floating_point else jt.int64


def logical(d):
    return jt.uint8 if d is jt.uint8 else jt.bool


def to_float(d):
    return d if d.is_floating_point else jt.float32


def same(d):
    return d


def int64(d):
    return jt.int64


# NumPy references: (values widened to float64/int64, axis, keepdims) -> expected -------------

def ref_logsumexp(a, axis, kd):
    return np.log(np.sum(np.exp(a), axis=axis, keepdims=kd))


def ref_norm(p):
    def ref(a, axis, kd):
        m = np.abs(a)
        if p == INF:
            return np.max(m, axis=axis, keepdims=kd)
        if p == -INF:
            return np.min(m, axis=axis, keepdims=kd)
        if p == 0:
            return np.asarray(np.count_nonzero(m, axis=axis, keepdims=kd), np.float64)  # NumPy 1 gives an int
        return np.sum(m ** p, axis=axis, keepdims=kd) ** (1 / p)
    return ref


def ref_moment(fn, correction):
    return lambda a, axis, kd: fn(a, axis=axis, ddof=correction, keepdims=kd)


def ref_scan(fn):
    return lambda a, axis, kd: a.copy() if a.ndim == 0 else fn(a, axis=axis)


def ref_softmax(a, axis, kd):
    if a.size == 0:
        return a.copy()
    e = np.exp(a - np.max(a, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def ref_log_softmax(a, axis, kd):
    return np.log(ref_softmax(a, axis, kd))


def ref_lower_median(a, axis, kd):
    return np.quantile(a, 0.5, axis=axis, method="lower", keepdims=kd)


@dataclass(frozen=True)
class Case:
    """One op against its NumPy reference.

    ``dims``: "many" (None, int or tuple), "many!" (int or tuple: dim is required), "one?" (None or int),
    "one" (an int), "scan" (an int, no keepdim). ``pair``: the op returns (values, indices).
    ``nonempty``: an empty reduction raises (tested in test_errors). ``small``: values near 1, so that
    long products neither overflow nor lose every digit.
    """

    name: str
    ref: Callable
    dtypes: list
    result: Callable = same
    dims: str = "many"
    keepdim: bool = True
    kwargs: dict = field(default_factory=dict)
    nonempty: bool = False
    method: bool = True
    pair: str = ""  # "first": indices must be the first extreme; "any": any index holding the value
    small: bool = False
    id: str = ""

    def __str__(self):
        return self.id or self.name


CASES = [
    Case("sum", lambda a, ax, kd: np.sum(a, axis=ax, keepdims=kd), NUMERIC, accumulated),
    Case("nansum", lambda a, ax, kd: np.nansum(a, axis=ax, keepdims=kd), NUMERIC, accumulated),
    Case("prod", lambda a, ax, kd: np.prod(a, axis=ax, keepdims=kd), NUMERIC, accumulated, dims="one?", small=True),
    Case("mean", lambda a, ax, kd: np.mean(a, axis=ax, keepdims=kd), FLOAT_DTYPES),
    Case("nanmean", lambda a, ax, kd: np.nanmean(a, axis=ax, keepdims=kd), FLOAT_DTYPES),
    Case("amax", lambda a, ax, kd: np.max(a, axis=ax, keepdims=kd), NUMERIC, nonempty=True),
    Case("amin", lambda a, ax, kd: np.min(a, axis=ax, keepdims=kd), NUMERIC, nonempty=True),
    Case("all", lambda a, ax, kd: np.all(a, axis=ax, keepdims=kd), NUMERIC, logical),
    Case("any", lambda a, ax, kd: np.any(a, axis=ax, keepdims=kd), NUMERIC, logical),
    Case("count_nonzero", lambda a, ax, kd: np.count_nonzero(a, axis=ax), NUMERIC, int64, keepdim=False),
    Case("logsumexp", ref_logsumexp, NUMERIC, to_float, dims="many!"),
    Case("std", ref_moment(np.std, 1), FLOAT_DTYPES),
    Case("var", ref_moment(np.var, 1), FLOAT_DTYPES),
    Case("std", ref_moment(np.std, 0), FLOAT_DTYPES, kwargs={"correction": 0}, id="std-correction0"),
    Case("var", ref_moment(np.var, 2.5), FLOAT_DTYPES, kwargs={"correction": 2.5}, id="var-correction2.5"),
    Case("var", ref_moment(np.var, 0), FLOAT_DTYPES, kwargs={"unbiased": False}, dims="many!",
         id="var-unbiased"),
    Case("std_mean", lambda a, ax, kd: (np.std(a, axis=ax, ddof=1, keepdims=kd), np.mean(a, axis=ax, keepdims=kd)),
         FLOAT_DTYPES, method=False),
    Case("var_mean", lambda a, ax, kd: (np.var(a, axis=ax, ddof=0, keepdims=kd), np.mean(a, axis=ax, keepdims=kd)),
         FLOAT_DTYPES, kwargs={"correction": 0}, method=False),
    *[Case("norm", ref_norm(p), FLOAT_DTYPES, kwargs={"p": p}, nonempty=p < 0 or p == INF, id=f"norm-p{p}")
      for p in (2, 1, 3, 0.5, 0, INF, -INF, -1)],
    Case("norm", ref_norm(2), FLOAT_DTYPES, kwargs={"p": "fro"}, id="norm-fro", dims="one?"),
    Case("argmax", lambda a, ax, kd: np.argmax(a, axis=ax, keepdims=kd), NO_BOOL, int64, dims="one?", nonempty=True),
    Case("argmin", lambda a, ax, kd: np.argmin(a, axis=ax, keepdims=kd), NO_BOOL, int64, dims="one?", nonempty=True),
    Case("max", lambda a, ax, kd: np.max(a, axis=ax, keepdims=kd), NUMERIC, dims="one", pair="first",
         nonempty=True, id="max.dim"),
    Case("min", lambda a, ax, kd: np.min(a, axis=ax, keepdims=kd), NUMERIC, dims="one", pair="first",
         nonempty=True, id="min.dim"),
    Case("median", ref_lower_median, NO_BOOL, dims="one", pair="any", nonempty=True, id="median.dim"),
    Case("cumsum", ref_scan(np.cumsum), NUMERIC, accumulated, dims="scan"),
    Case("cumprod", ref_scan(np.cumprod), NUMERIC, accumulated, dims="scan", small=True),
    Case("softmax", ref_softmax, FLOAT_DTYPES, dims="scan"),
    Case("log_softmax", ref_log_softmax, FLOAT_DTYPES, dims="scan"),
]


# Drawing inputs -----------------------------------------------------------------------------

@st.composite
def dims_for(draw, kind, ndim):
    """A dim argument of ``kind`` for an ``ndim``-d input (0-d inputs take 0 or -1)."""
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    one = st.integers(lo, hi)
    if kind in ("one", "scan"):
        return draw(one)
    if kind == "one?":
        return draw(st.none() | one)
    distinct = st.lists(st.integers(0, max(ndim, 1) - 1), unique=True, max_size=max(ndim, 1),
                        min_size=1 if kind == "many!" else 0)
    negated = distinct.flatmap(lambda ds: st.tuples(*[st.sampled_from([d, d - max(ndim, 1)]) for d in ds]))
    choices = one | negated
    return draw(choices if kind == "many!" else st.none() | choices)


def numpy_axis(dim, ndim):
    """The dim argument as NumPy's axis: None for all dims, non-negative otherwise."""
    if dim is None or ndim == 0 or dim == ():
        return None
    if isinstance(dim, int):
        return dim % ndim
    return tuple(d % ndim for d in dim)


def widen(arr, dtype):
    """Exact values in float64 (floats) or int64 (integers and bools) for the reference."""
    return arr.astype(np.float64 if dtype.is_floating_point else np.int64)


def make_values(shape, dtype, small, rng):
    if small and dtype.is_floating_point:
        return rng.choice(np.array([-1, -0.5, 0, 0.5, 1, 0.75], dtype=np.float32), size=shape).astype(dtype.np)
    return random_array(shape, dtype, rng)


def tolerance(dtype, a, case):
    """Accumulating ops err by about eps times the sum of magnitudes; others by eps times the largest."""
    eps = EPS[dtype]
    mags = np.abs(a[np.isfinite(a)]) if a.size else np.zeros(1)
    scale = max(1.0, float(mags.sum() if case.name in ("sum", "nansum", "cumsum") else mags.max(initial=0)))
    if case.name in ("std", "var", "std_mean", "var_mean"):
        scale = scale * scale
    return 4 * eps, 4 * eps * scale


def call(case, t, dim, keepdim, as_method):
    kwargs = dict(case.kwargs)
    if dim is not None:
        kwargs["dim"] = dim
    if case.keepdim and case.dims != "scan":
        kwargs["keepdim"] = keepdim
    return getattr(t, case.name)(**kwargs) if as_method else getattr(jt, case.name)(t, **kwargs)


def check_values(got, expected, dtype, a, case):
    assert got.dtype is dtype, f"{case}: dtype {got.dtype} != {dtype}"
    expected = np.asarray(expected)
    if dtype.is_floating_point:
        rtol, atol = tolerance(dtype, a, case)
        assert_close(got, expected, rtol=rtol, atol=atol)
    else:
        assert_close(got, expected.astype(dtype.np))


def reduces_empty(shape, axis):
    if axis is None:
        return math.prod(shape) == 0
    return any(shape[d] == 0 for d in ((axis,) if isinstance(axis, int) else axis))


@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")
@pytest.mark.parametrize("case", CASES, ids=str)
@given(data=st.data())
def test_matches_numpy(case, data):
    dtype = data.draw(st.sampled_from(case.dtypes), label="dtype")
    shape = data.draw(shapes(max_dims=3, max_side=4), label="shape")
    layout = data.draw(st.sampled_from(LAYOUTS), label="layout")
    dim = data.draw(dims_for(case.dims, len(shape)), label="dim")
    keepdim = data.draw(st.booleans(), label="keepdim")
    as_method = case.method and data.draw(st.booleans(), label="method")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    arr = make_values(shape, dtype, case.small, rng)
    if dtype.is_floating_point and arr.size and data.draw(st.booleans(), label="nan"):
        arr.reshape(-1)[rng.integers(arr.size)] = NAN
    t, arr = tensor_and_array(arr, layout)
    # all/any over an explicit () reduce no dim (NumPy's axis=() too); the other reductions read it as every dim
    axis = () if case.name in ("all", "any") and dim == () else numpy_axis(dim, len(shape))
    if case.nonempty and reduces_empty(shape, axis):
        return  # no identity: test_errors checks the error
    a = widen(arr, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = call(case, t, dim, keepdim, as_method)
        expected = case.ref(a, axis, keepdim)
    result = case.result(dtype)
    if case.pair:
        assert type(got).__name__ == case.name and got._fields == ("values", "indices")
        check_values(got.values, expected, result, a, case)
        assert got.indices.dtype is jt.int64 and got.indices.shape == got.values.shape
        idx = got.indices.numpy()
        if a.ndim:
            picked = np.take_along_axis(a, idx if keepdim else np.expand_dims(idx, axis), axis)
            assert_close(got.values, picked if keepdim else np.squeeze(picked, axis), rtol=0, atol=0)
        if case.pair == "first" and a.ndim:
            first = np.argmax if case.name == "max" else np.argmin
            np.testing.assert_array_equal(idx, first(a, axis, keepdims=keepdim))
    elif isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            check_values(g, e, result, a, case)
    else:
        check_values(got, expected, result, a, case)


# Forms of the arguments ------------------------------------------------------------------

X = np.array([[1.0, 2.0, 4.0], [3.0, -1.0, 0.5]])


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("call, ref", [
    (lambda x: x.std(0), np.std(X, 0, ddof=1)),
    (lambda x: x.std(unbiased=False), np.std(X)),
    (lambda x: x.std(True), np.std(X, ddof=1)),
    (lambda x: x.std(1, False, True), np.std(X, 1, keepdims=True)),
    (lambda x: x.var(1, correction=0), np.var(X, 1)),
    (lambda x: x.var((0, 1), keepdim=True, correction=2), np.var(X, ddof=2, keepdims=True)),
    (lambda x: jt.var(x, dim=-1, unbiased=True, keepdim=False), np.var(X, -1, ddof=1)),
    (lambda x: x.std(0, correction=5), np.full(3, np.inf)),
    (lambda x: jt.std_mean(x, 0)[0], np.std(X, 0, ddof=1)),
    (lambda x: jt.var_mean(x, False)[1], np.mean(X)),
    (lambda x: x.sum(()), np.sum(X)),
    (lambda x: x.amax(()), np.max(X)),
    (lambda x: x.sum([0, 1], True), np.sum(X, keepdims=True)),
    (lambda x: x.max(), np.max(X)),
    (lambda x: jt.min(x), np.min(X)),
    (lambda x: x.median(), np.float64(1.0)),
    (lambda x: x.prod(1), np.prod(X, 1)),
    (lambda x: x.argmax(keepdim=True), np.array([[2]])),
    (lambda x: x.norm(), np.linalg.norm(X)),
    (lambda x: x.norm(1, 1, True), np.abs(X).sum(1, keepdims=True)),
    (lambda x: x.norm("fro", (0, 1)), np.linalg.norm(X)),
    (lambda x: x.norm("nuc"), np.linalg.norm(X, "nuc")),
    (lambda x: jt.norm(x, p="nuc", keepdim=True), np.linalg.norm(X, "nuc").reshape(1, 1)),
    (lambda x: x.norm(dtype=jt.float64), np.linalg.norm(X)),
    (lambda x: x.logsumexp((0, 1)), np.log(np.exp(X).sum())),
    (lambda x: x.softmax(-1, jt.float64), np.exp(X) / np.exp(X).sum(-1, keepdims=True)),
    (lambda x: x.cumsum(1, dtype=jt.int64), np.cumsum(X.astype(np.int64), 1)),
    (lambda x: x.sum(dtype=jt.int64), np.sum(X.astype(np.int64))),
    (lambda x: x.count_nonzero((0, 1)), np.int64(6)),
])
def test_argument_forms(call, ref):
    got = call(jt.tensor(X, dtype=jt.float32))
    assert_close(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "uint8", "bool", "float32", "bfloat16"])
def test_median_of_an_empty_tensor_is_torchs_nan_cast_to_its_dtype(dtype):
    """Found by the fuzzer (seed 2500171): torch's median of nothing is NaN cast to the dtype (INT64_MIN for
    int64, True for bool, which it answers before refusing bools); jitorch gave 0 for integers."""
    got = jt.zeros(0, 3, dtype=getattr(jt, dtype)).median()
    want = torch.zeros(0, 3, dtype=getattr(torch, dtype)).median()
    assert str(got.dtype).split(".")[1] == dtype
    np.testing.assert_array_equal(np.asarray(got.float().item()), np.asarray(want.float().item()))


def test_max_min_median_return_namedtuples():
    x = jt.tensor([[3.0, 7.0, 7.0], [2.0, 2.0, 9.0]])
    r = jt.max(x, 1, True)
    assert type(r).__name__ == "max" and type(r).__module__ == "jitorch.return_types"
    values, indices = r
    assert values.tolist() == [[7.0], [9.0]] and indices.tolist() == [[1], [2]] and r.indices is indices
    assert x.min(dim=0).indices.tolist() == [1, 1, 0]
    assert x.median(1).values.tolist() == [7.0, 2.0]


def test_out_variants_write_and_resize():
    x = jt.tensor(X, dtype=jt.float32)
    out = jt.empty(0)
    assert jt.sum(x, 1, out=out) is out and out.tolist() == [7.0, 2.5]
    values, indices = jt.empty(0), jt.empty(0, dtype=jt.int64)
    r = jt.max(x, 0, out=(values, indices))
    assert type(r).__name__ == "max" and r.values is values
    assert values.tolist() == [3.0, 2.0, 4.0] and indices.tolist() == [1, 0, 0]
    wide = jt.empty(2, 3, dtype=jt.float64)
    jt.cumsum(x, 0, out=wide)
    np.testing.assert_array_equal(wide.numpy(), np.cumsum(X, 0))
    ints = jt.zeros(2, dtype=jt.int64)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        jt.mean(x, 1, out=ints)
    assert ints.tolist() == [0, 0]


def test_cumsum_in_place_keeps_dtype():
    x = jt.tensor([1, 2, 3], dtype=jt.int32)
    assert x.cumsum_(0) is x and x.dtype is jt.int32 and x.tolist() == [1, 3, 6]


@pytest.mark.parametrize("call, message", [
    (lambda x, o: x.cumsum_(0, dtype=jt.int64),
     "Bad in-place call: input tensor dtype int and output tensor dtype long int should match"),
    (lambda x, o: x.cumprod_(0, dtype=jt.float32),
     "Bad in-place call: input tensor dtype int and output tensor dtype float should match"),
    (lambda x, o: jt.cumsum(x, 0, dtype=jt.int64, out=o),
     "Expected out tensor to have dtype long int, but got float instead"),
    (lambda x, o: jt.sum(x, 0, dtype=jt.float64, out=o), "Expected out tensor to have dtype double, but got float"),
    (lambda x, o: jt.softmax(x.double(), 0, jt.float64, out=o), "Expected out tensor to have dtype double"),
])
def test_a_dtype_argument_is_not_cast_into_a_self_or_out_of_another_dtype(call, message):
    """torch refuses ``dtype=`` naming another dtype than the in-place self or the out= tensor has (jitorch
    cast the result into it; found by tests/ops/test_against_torch.py); nothing is written."""
    x = jt.tensor([1, 2, 3], dtype=jt.int32)
    out = jt.zeros(3)
    with pytest.raises(RuntimeError, match=message):
        call(x, out)
    assert x.tolist() == [1, 2, 3] and out.tolist() == [0.0, 0.0, 0.0]
    assert jt.cumsum(x, 0, dtype=jt.float32, out=out) is out and out.tolist() == [1.0, 3.0, 6.0]

def test_half_precision_accumulates_in_float32():
    big = jt.tensor([60000.0, 60000.0, 60000.0], dtype=jt.float16)
    assert big.mean().dtype is jt.float16 and big.mean().item() == 60000.0
    assert big.std().item() == 0.0 and big.var().dtype is jt.float16
    assert jt.tensor([60000.0, -60000.0], dtype=jt.bfloat16).sum().item() == 0.0


def test_numerically_stable_exponentials():
    x = jt.tensor([[1000.0, 1000.0], [-INF, -INF], [INF, 1.0], [-1000.0, -1000.0]])
    np.testing.assert_allclose(jt.logsumexp(x, 1).numpy(), [1000 + np.log(2), -INF, INF, -1000 + np.log(2)])
    sm = jt.softmax(x, 1).numpy()
    np.testing.assert_allclose(sm[[0, 3]], 0.5)
    assert np.isnan(sm[1]).all() and np.isnan(sm[2]).all()
    ls = jt.log_softmax(jt.tensor([-INF, 0.0, 1000.0]), 0).numpy()
    np.testing.assert_allclose(ls, [-INF, -1000.0, 0.0])


def test_nan_propagates_through_extremes():
    x = jt.tensor([1.0, NAN, 5.0, NAN])
    assert math.isnan(x.max().item()) and math.isnan(x.amin().item())
    assert x.argmax().item() == 1 and x.argmin().item() == 1
    assert x.max(0).indices.item() == 1 and math.isnan(x.median().item())
    assert x.nansum().item() == 6.0 and x.nanmean().item() == 3.0


def test_empty_reductions_take_the_identity():
    e = jt.zeros(0, 3)
    assert e.sum().item() == 0 and e.prod().item() == 1 and math.isnan(e.mean().item())
    assert e.sum(0).tolist() == [0, 0, 0] and e.all().item() is True and e.any().item() is False
    assert jt.logsumexp(e, 0).tolist() == [-INF] * 3 and e.norm().item() == 0.0
    assert e.max(1).values.shape == (0,) and e.amax(1).shape == (0,) and e.argmax(1).shape == (0,)


def test_zero_dim_inputs_accept_dim_0_and_minus_1():
    z = jt.tensor(2.5)
    assert z.sum(0).shape == () and z.amax(-1, True).shape == () and z.argmax(0).item() == 0
    assert z.max(0).values.item() == 2.5 and z.cumsum(-1).item() == 2.5 and z.softmax(0).item() == 1.0


@pytest.mark.skipif("maximum" not in registry.FUNCTIONS, reason="jitorch.maximum is not declared yet")
def test_max_of_two_tensors_is_the_elementwise_maximum():
    a, b = jt.tensor([1.0, 5.0, NAN]), jt.tensor([3, 2, 0])
    np.testing.assert_array_equal(jt.max(a, b).numpy(), [3.0, 5.0, NAN])
    np.testing.assert_array_equal(a.min(b).numpy(), [1.0, 2.0, NAN])


# Errors ------------------------------------------------------------------------------------

F = jt.tensor(X, dtype=jt.float32)
I = jt.tensor([[1, 2], [3, 4]])
E = jt.zeros(0, 3)
SPECIFY = "Specify the reduction dim with the 'dim' argument"


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("fn, error, message", [
    (lambda: I.mean(), RuntimeError, r"mean\(\): could not infer output dtype. Input dtype must be either a floating "
                                     r"point or complex dtype. Got: Long"),
    (lambda: F.mean(dtype=jt.int32), RuntimeError, r"Optional dtype must be either a floating point or complex dtype. "
                                                   r"Got: Int"),
    (lambda: I.nanmean(), RuntimeError, r"nanmean\(\): expected input to have floating point or complex dtype but got "
                                        r"Long"),
    (lambda: I.std(), RuntimeError, "std and var only support floating point and complex dtypes"),
    (lambda: I.var(0, correction=0), RuntimeError, "std and var only support floating point and complex dtypes"),
    (lambda: jt.var_mean(I), RuntimeError, "var_mean only support floating point and complex dtypes"),
    (lambda: E.max(), RuntimeError, rf"max\(\): Expected reduction dim to be specified for input.numel\(\) == 0. "
                                    rf"{SPECIFY}"),
    (lambda: E.amin(), RuntimeError, rf"amin\(\): Expected reduction dim to be specified .* {SPECIFY}"),
    (lambda: E.max(0), IndexError, r"max\(\): Expected reduction dim 0 to have non-zero size"),
    (lambda: E.amax((1, 0)), IndexError, r"amax\(\): Expected reduction dim 0 to have non-zero size"),
    (lambda: E.argmin(), IndexError, r"argmin\(\): Expected reduction dim to be specified for input.numel\(\) == 0"),
    (lambda: E.argmax(0), IndexError, r"argmax\(\): Expected reduction dim 0 to have non-zero size"),
    (lambda: E.median(0), IndexError, r"median\(\): Expected reduction dim 0 to have non-zero size"),
    (lambda: F.sum(2), IndexError, r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"),
    (lambda: F.amax(-3), IndexError, r"expected to be in range of \[-2, 1\], but got -3"),
    (lambda: F.max(2), IndexError, r"expected to be in range of \[-2, 1\], but got 2"),
    (lambda: F.cumsum(5), IndexError, r"expected to be in range of \[-2, 1\], but got 5"),
    (lambda: jt.tensor(1.0).softmax(1), IndexError, r"expected to be in range of \[-1, 0\], but got 1"),
    (lambda: F.sum((0, -2)), RuntimeError, "dim 0 appears multiple times in the list of dims"),
    (lambda: F.std((1, 1)), RuntimeError, "dim 1 appears multiple times in the list of dims"),
    (lambda: jt.tensor(1.0).all((0, -1)), RuntimeError, "dim 0 appears multiple times in the list of dims"),
    (lambda: I.softmax(0), NotImplementedError, "\"softmax_kernel_impl\" not implemented for 'Long'"),
    (lambda: I.log_softmax(-1), NotImplementedError, "\"log_softmax_lastdim_kernel_impl\" not implemented for 'Long'"),
    (lambda: F.softmax(0, jt.int32), NotImplementedError, "not implemented for 'Int'"),
    (lambda: I.bool().argmax(), RuntimeError, r"argmax\(\): does not support bool input"),
    (lambda: I.bool().median(0), NotImplementedError, "\"median_out\" not implemented for 'Bool'"),
    (lambda: I.norm(), RuntimeError, "linalg.vector_norm: Expected a floating point or complex tensor as input. "
                                     "Got Long"),
    (lambda: F.norm(dtype=jt.float16), RuntimeError, r"the dtype of the input \(Float\) should be convertible without "
                                                     r"narrowing to the specified dtype \(Half\)"),
    (lambda: E.norm(INF), RuntimeError, "cannot compute the inf norm on an empty tensor because the operation does "
                                        "not have an identity"),
    (lambda: E.norm(-1, 0), RuntimeError, "cannot compute the -1 norm on the dimension 0"),
    (lambda: jt.ones(3).norm("nuc"), RuntimeError, "linalg.matrix_norm: The input tensor A must have at least 2 "
                                                   "dimensions"),
    (lambda: jt.ones(2, 2, 2).norm("fro", (0, 1, 2)), RuntimeError, "linalg.matrix_norm: dim must be a 2-tuple. "
                                                                     "Got 0 1 2"),
    (lambda: F.norm("abc"), RuntimeError, "linalg.matrix_norm: Order abc not supported"),
    (lambda: jt.ones(2, 3, dtype=jt.float16).norm("nuc", dtype=jt.float32), RuntimeError,
     "linalg.matrix_norm: Low precision dtypes not supported. Got Half"),
    (lambda: F.prod((0, 1)), TypeError, r"prod\(\): argument 'dim' \(position 2\) must be int, not tuple"),
    (lambda: F.max(keepdim=True), TypeError, r"max\(\) received an invalid combination of arguments"),
    (lambda: jt.logsumexp(F), TypeError, "dim"),
    (lambda: F.cumsum(), TypeError, "dim"),
])
def test_errors(fn, error, message):
    with pytest.raises(error, match=message):
        fn()


def test_degrees_of_freedom_warning():
    with pytest.warns(UserWarning, match=r"std\(\): degrees of freedom is <= 0"):
        assert math.isnan(jt.tensor([1.0]).std().item())


@pytest.mark.parametrize("call", [
    lambda L, x, o: L.cumprod(x, 0, out=o),
    lambda L, x, o: L.cumsum(x, 0, out=o),
    lambda L, x, o: L.sum(x, 0, out=o[0]),
    lambda L, x, o: L.prod(x, 0, out=o[0]),
])
@pytest.mark.parametrize("src, dst", [("bfloat16", "int64"), ("float32", "int32"), ("float32", "bool"),
                                      ("int64", "bool"), ("float64", "float16")])
def test_cumprod_and_sum_with_an_out_of_another_dtype_compute_in_its_dtype(call, src, dst):
    """Found by the fuzzer (seed 1000247): ``cumprod(bf16, 1, out=int64)`` raised "can't be cast" where
    torch computes in the out tensor's dtype (the input cast to it first); a bool one it refuses."""
    got, want = [], []
    for lib, into in ((jt, got), (torch, want)):
        x = lib.tensor([0.5, 1.5, 2.5, 3.0]).to(getattr(lib, src))
        o = lib.zeros(4, dtype=getattr(lib, dst))
        try:
            call(lib, x, o)
            into.append((str(o.dtype).split(".")[-1], o.tolist()))
        except (RuntimeError, NotImplementedError) as e:
            into.append(type(e).__name__)
    assert got == want


def test_cumsum_with_a_dtype_needs_an_out_of_that_dtype():
    for lib in (jt, torch):
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype long int, but got float"):
            lib.cumsum(lib.ones(3), 0, dtype=lib.int64, out=lib.zeros(3))


def test_cumsum_of_a_0d_or_empty_tensor_into_a_bool_out_copies():
    """Found by the fuzzer (seed 2300344): torch copies a 0-d or empty input without its (bool-less) kernel."""
    for lib in (jt, torch):
        for x in (lib.tensor(1.5), lib.ones(0)):
            o = lib.zeros(x.shape, dtype=lib.bool)
            lib.cumsum(x, 0, out=o)
            assert o.tolist() == (True if x.ndim == 0 else [])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["mean", "nanmean", "var", "std"])
def test_reduction_of_halves_into_float_out_computes_in_float_not_rounded_to_half(name, dtype):
    # torch's make_reduction reads the input cast to out='s dtype (logsumexp does not: see below)
    x = np.random.default_rng(0).uniform(-3, 3, (3, 4)).astype(np.float32)
    half = jt.tensor(x).to(getattr(jt, dtype))
    out = jt.empty(0)
    getattr(jt, name)(half, 1, out=out)
    want = getattr(torch, name)(torch.from_numpy(np.asarray(half.float().numpy())), 1)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-6)
    assert not np.array_equal(out.numpy(), getattr(jt, name)(half, 1).float().numpy())


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int64"])
@pytest.mark.parametrize("shape, dim", [((0,), 0), ((2, 0), 0), ((0, 3), -1), ((), 0), ((3, 2), 0), ((3, 2), 1)])
def test_softmax_of_an_integer_tensor_raises_only_when_not_empty_as_torch(name, dtype, shape, dim):
    """Fuzz seed 3001299: torch checks the dtype in the kernel, which an empty tensor never runs, and
    returns an empty result of the input's dtype; a 0-d tensor's dim is the last one."""
    def run(T):
        try:
            r = getattr(T.zeros(shape, dtype=getattr(T, dtype)), name)(dim)
        except NotImplementedError as e:
            return str(e)
        return str(r.dtype).split(".")[-1], tuple(r.shape)
    assert run(jt) == run(torch)


def _logsumexp_out(T, a, dtype, out_dtype, dims):
    out = T.empty(0, dtype=getattr(T, out_dtype))
    T.logsumexp(T.tensor(a).to(getattr(T, dtype)), dims, out=out)
    return torch.tensor(out.to(jt.float64).numpy()) if T is jt else out.double()


@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "float64"), ("float16", "float64"), ("bfloat16", "float16"),
                                              ("float16", "float16")])
def test_logsumexp_into_an_out_of_another_dtype_rounds_the_exponentials_as_torch(dtype, out_dtype):
    """torch's logsumexp_out takes the exponentials in the input's dtype (rounding them to a half type) and
    sums them in out's; jitorch read the input cast to out's dtype, 2e-5 off on bfloat16 (fuzz seed 2200339).
    Rounded to a half type, the exponentials leave no room for the math libraries' last-bit differences, and
    their float64 sum is exact; the log of a float64 sum is eager float64 ``log``, NumPy's (whose last bit is
    NumPy's version's: 1.26's differs from torch's at -0.687, 2.4's does not), applied to torch's sum."""
    rng = np.random.default_rng(7)
    for scale in (1, 8, 40):
        a = np.round(rng.standard_normal((3, 4, 5)) * scale)
        for dims in ([0, 2], [-1], [1]):
            got, want = (_logsumexp_out(T, a, dtype, out_dtype, dims) for T in (jt, torch))
            if out_dtype == "float64":
                torch.testing.assert_close(got, want, rtol=2.3e-16, atol=0)  # within an ulp of torch's log
                x = torch.tensor(a).to(getattr(torch, dtype))
                top = x.amax(dims, keepdim=True)
                total = (x - top).exp().sum(dims, dtype=torch.float64)
                want = torch.from_numpy(jt.log(jt.tensor(total.numpy())).numpy()) + top.double().squeeze(dims)
            assert torch.equal(got, want)


@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float64"), ("float64", "float32"), ("float32", "float16"),
                                              ("int64", "float64")])
def test_logsumexp_into_an_out_of_another_dtype_computes_in_torchs_dtypes(dtype, out_dtype):
    """float32 exponentials (of integers too) summed in float64, not float64 exponentials; float64 ones summed
    in float32: within a float32 ulp of torch's (whose exp differs from NumPy's in the last bit)."""
    rng = np.random.default_rng(3)
    a = np.round(rng.standard_normal((6, 50)) * 10)
    got, want = (_logsumexp_out(T, a, dtype, out_dtype, [1]) for T in (jt, torch))
    eps = torch.finfo(getattr(torch, out_dtype) if out_dtype != "float64" else torch.float32).eps
    torch.testing.assert_close(got, want, rtol=eps, atol=0)
    if (dtype, out_dtype) == ("float32", "float64"):  # the old way, the input read as float64, is elsewhere
        read_as_out = jt.logsumexp(jt.tensor(a).to(jt.float32).to(jt.float64), [1])
        assert not torch.equal(torch.tensor(read_as_out.numpy()), want)


def test_logsumexp_into_an_integer_out_raises_torchs_error():
    x = jt.ones(3)
    for T, t in ((jt, x), (torch, torch.ones(3))):
        with pytest.raises(RuntimeError, match="logsumexp\\(\\): Expected floating point type for result tensor, "
                                               "but got: Long"):
            T.logsumexp(t, [0], out=T.empty(0, dtype=T.int64))


def test_compiled_logsumexp_into_an_out_of_another_dtype_is_eagers():
    a = np.random.default_rng(5).standard_normal((1, 2, 5)) * 4

    def fn(x):
        out = jt.zeros(2, dtype=jt.float64)
        jt.logsumexp(x, [0, 2], out=out)
        return out

    x = jt.tensor(a).to(jt.bfloat16)
    assert torch.equal(torch.tensor(jt.compile(fn)(x).numpy()), torch.tensor(fn(x).numpy()))
    assert torch.equal(torch.tensor(fn(x).numpy()), _logsumexp_out(torch, a, "bfloat16", "float64", [0, 2]))


@pytest.mark.parametrize("name", ["all", "any"])
@pytest.mark.parametrize("dim", [(), []])
@pytest.mark.parametrize("dtype", ["float32", "uint8", "bool"])
def test_all_any_over_an_empty_dim_list_reduce_nothing_as_torch(name, dim, dtype):
    values = [[1.5, 0.0], [2.0, 3.0]]
    x, t = jt.tensor(values).to(getattr(jt, dtype)), torch.tensor(values).to(getattr(torch, dtype))
    for keepdim in (False, True):
        ours, theirs = getattr(jt, name)(x, dim, keepdim=keepdim), getattr(torch, name)(t, dim, keepdim=keepdim)
        assert ours.tolist() == theirs.tolist() and str(ours.dtype)[8:] == str(theirs.dtype)[6:]
    assert getattr(x, name)(dim=dim).shape == (2, 2)
    assert getattr(jt, name)(x).shape == () and jt.sum(x, dim).shape == torch.sum(t, dim).shape == ()


WELFORD_ROWS = [[1.0, INF, 2.0], [INF, INF, 1.0], [-INF, 3.0, 4.0], [1.0, 2.0, INF], [1.0, NAN, INF], [1.0, 2.0, 3.0]]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_and_std_mean_give_torchs_welford_mean_of_infinities(name, compiled):
    """torch's var_mean/std_mean accumulate the mean by Welford's update: NaN once an infinity is followed by
    another element, inf where one infinity comes last (the documented difference of the last stop: jitorch's mean
    was the sum over the count, inf); along each dim, several dims, all dims and keepdim. The gradient of the mean
    stays 1/n, as torch's; layer norm's and batch norm's moments keep the plain mean."""
    def program(T, x):
        fn = getattr(T, name)
        return (*fn(x, 1), *fn(x, 0, keepdim=True), *fn(x), *fn(x.view(2, 3, 3), (1, 2)))
    data = WELFORD_ROWS
    want = program(torch, torch.tensor(data))
    fn = jt.compile(lambda x: program(jt, x)) if compiled else lambda x: program(jt, x)
    got = fn(jt.tensor(data))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
    grads = []
    for T in (torch, jt):
        x = T.tensor(data, requires_grad=True)
        getattr(T, name)(x, 1)[1].sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_and_std_mean_warnings_name_themselves_as_torchs(name, compiled):
    """var_mean's warning of no degrees of freedom said ``var():``; torch's says ``var_mean():`` (fuzz seed 7300067:
    the compiled call's too); a plain var's still says ``var():``."""
    def program(T, x):
        return getattr(T, name)(x, [])[0] * 1, getattr(T, name[:3])(x)
    messages = []
    for T in (torch, jt):
        fn = jt.compile(lambda x: program(jt, x)) if compiled and T is jt else lambda x: program(T, x)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(T.tensor(1.0))
        messages.append([str(w.message).split(" (Triggered")[0] for w in caught])
    assert messages[0] == messages[1]
    assert [m.split(" ")[0] for m in messages[0]] == [f"{name}():", f"{name[:3]}():"]
