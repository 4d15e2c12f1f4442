"""isin's dtype rules against torch: refused bool inputs, the dtype each pair is compared in (which depends on
the algorithm torch's size rule picks), and the wide unsigned types' errors."""

import itertools

import numpy as np
import pytest
import torch

import jitorch as jt


def _outcome(T, a, b, **kwargs):
    try:
        return T.isin(a, b, **kwargs).tolist()
    except Exception as e:  # (torch's type and message are what is compared)
        return type(e).__name__, str(e)


def _make(T, spec):
    """A number as itself; (values, dtype name[, "0-d"]) as a tensor of ``T``."""
    if not isinstance(spec, tuple):
        return spec
    t = T.tensor(spec[0], dtype=getattr(T, spec[1]))
    return t.reshape(()) if spec[2:] == ("0-d",) else t


BOOLS = [([True, False], "bool"), ([True], "bool", "0-d"), True, False]
OTHERS = [([1, 0, 3], "int64"), ([1.0, 0.0], "float32"), ([1, 0], "uint8"), 1, 0, 1.0]


BOOL_PAIRS = [(a, b) for a, b in [*itertools.product(BOOLS, BOOLS + OTHERS), *itertools.product(OTHERS, BOOLS)]
              if isinstance(a, tuple) or isinstance(b, tuple)]  # (isin takes a tensor on one side at least)


@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("a,b", BOOL_PAIRS)
def test_isin_of_bool_raises_as_torch(a, b, invert):
    """isin with a bool tensor or a Python bool on either side ran (np.isin of bools) where torch raises
    ``RuntimeError: Unsupported input type encountered for isin(): Bool``."""
    expected = _outcome(torch, _make(torch, a), _make(torch, b), invert=invert)
    assert expected == ("RuntimeError", "Unsupported input type encountered for isin(): Bool")
    assert _outcome(jt, _make(jt, a), _make(jt, b), invert=invert) == expected


def test_isin_of_bool_raises_compiled_as_eager():
    """The check is the op's meta rule, so a compiled call raises it while tracing."""
    f = jt.compile(lambda x, y: jt.isin(x, y))
    with pytest.raises(RuntimeError, match="Unsupported input type encountered for isin\\(\\): Bool"):
        f(jt.tensor([True, False]), jt.tensor([1, 2]))


SIZES = [(1, 9), (1, 10), (1, 12), (0, 3), (3, 0), (100, 19), (100, 20), (1000, 27), (1000, 28), (5, 1)]
PAIRS = [("uint8", "int64"), ("int64", "uint8"), ("float32", "float64"), ("float64", "float32"),
         ("uint16", "uint16"), ("uint16", "int64"), ("int64", "float32"), ("float16", "float32"),
         ("bfloat16", "float64"), ("int16", "uint8")]


@pytest.mark.parametrize("n,m", SIZES)
@pytest.mark.parametrize("da,db", PAIRS)
def test_isin_compares_in_torchs_dtype_for_each_algorithm(n, m, da, db):
    """isin compared the two in NumPy's float64 (int64 16777217 was not in float32 [16777216.]: torch compares
    in float32), and ran for uint16 where torch raises; torch compares each pair in the result type when the
    tests are few (``m < int(10 * n ** 0.145)``, in a kernel without uint16/32/64) and else sorts both
    flattened, promoted as two tensors (a 0-d one or a number weighs as much as any: -1 is not in uint8 [255]
    of 12 tests, though it is among 2)."""
    rng = np.random.default_rng(n * 100 + m)
    frac = {"f": 0.1, "b": 0.1}
    av = rng.integers(-3, 300, n) + frac.get(da[0], 0.0)
    bv = rng.integers(-3, 300, m) + frac.get(db[0], 0.0)
    k = min(n, m, 3)
    bv[:k] = av[:k]
    results = []
    for T in (torch, jt):
        a, b = T.tensor(av).to(getattr(T, da)), T.tensor(bv).to(getattr(T, db))
        got = [_outcome(T, a, b), _outcome(T, a, b, invert=True)]
        got += [_outcome(T, number, b) for number in (-1, 0.1, 255, int(av[0]) if n else 5)]
        got += [_outcome(T, b, number) for number in (-1, 0.1, 255)]
        if n == 1:
            got.append(_outcome(T, a.reshape(()), b))
        results.append(got)
    assert results[1] == results[0]


def test_isin_of_int64_among_float32_compares_in_float32_as_torch():
    """The silently wrong case: 16777217 rounds to float32's 16777216, so torch finds it (both ways)."""
    for T in (torch, jt):
        big, rounded = T.tensor([16777217]), T.tensor([16777216.0])
        assert T.isin(big, rounded).tolist() == T.isin(rounded, big).tolist() == [True]
    f = jt.compile(lambda x, y: jt.isin(x, y))
    assert f(jt.tensor([16777217]), jt.tensor([16777216.0])).tolist() == [True]
