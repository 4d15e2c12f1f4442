"""Python numbers in eager pointwise ops: the same bits as torch whatever NumPy is installed.

torch converts a Python number to the dtype an op computes in, then computes in that dtype (a half type's
multiplier or divisor read in float32). NumPy 1.x casts by value: a Python float with a 0-d float32 array
computes in float64, one beyond float32's range widens even a 1-d array's computation, and a Python int
reaches a float32 array through float64 (rounded twice). NumPy 2 (NEP 50) keeps the array's dtype, but not
torch's int conversion either. jitorch converts each number itself, before NumPy sees it; these tests compare
every binary pointwise op that takes a number, its in-place form, ``alpha=`` and ``value=``, with torch bit for
bit under whichever NumPy runs them (the minimum-versions CI run has NumPy 1.26).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import jitorch as jt

DTYPES = [jt.float32, jt.float64, jt.float16, jt.bfloat16, jt.int8, jt.uint8, jt.int32, jt.int64]
TORCH = {d: getattr(torch, d.name) for d in DTYPES}
# numbers that round, overflow or wrap in some dtype: float32's and float16's largest and beyond, the int
# above 2**53 that float64 and a direct conversion to float32 round differently, a subnormal, NaN
SPECIAL_FLOATS = [-0.0, 0.1, 1 / 3, 1e40, 3.4028235e38, 65520.0, 70000.0, 1e-45, float("nan")]
SPECIAL_INTS = [-129, 256, 70000, 2**53 + 1, 2**60 + 2**36 + 1]


def _numbers(rng):
    """Two random Python floats of many magnitudes and two random ints, then the special ones."""
    floats = [float(v) for v in rng.uniform(-10, 10, 2) * 10.0 ** rng.integers(-4, 5, 2)]
    ints = [int(v) for v in rng.integers(-300, 300, 2)]
    return floats + ints + SPECIAL_FLOATS + SPECIAL_INTS


def _values(dtype, shape, rng):
    """A tensor's values in ``dtype``: random, with a zero, infinities and NaN for floats of 1 dim."""
    if dtype.is_floating_point:
        v = rng.uniform(-10, 10, shape) * 10.0 ** rng.integers(-3, 4, shape)
        if shape:
            v[:4] = [0.0, np.inf, -np.inf, np.nan]
    else:
        lo, hi = (0, 256) if dtype is jt.uint8 else (-100, 100)
        v = rng.integers(lo, hi, shape)
    return np.asarray(v).astype(dtype.np)


def _to_torch(a):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _bits(t):
    """A result's bytes with NaNs made one NaN (torch and NumPy may give a NaN another sign or payload), its
    dtype name and shape."""
    a = t.detach().cpu()
    if a.dtype in (torch.bfloat16, torch.float16):
        a = a.float()
    a = a.numpy()
    if a.dtype.kind in "fc":
        a = np.where(np.isnan(a), np.nan, a)
    return str(t.dtype).split(".")[-1], tuple(t.shape), a.tobytes()


# (name, call(module, x, number, y)) with ``y`` a tensor like ``x``: each op given a Python number whose result
# torch rounds correctly (so NumPy computes its bits). Left out: pow, ``number ** x``, float_power and xlogy
# (jitorch's own, `ops.powers`, within an ulp of torch's math library: tests/ops/test_powers.py), and the ops torch
# fuses into a multiply-add (add and sub with ``alpha``, addcmul's float64, lerp; ``alpha`` is tested on integers),
# which jitorch's eager kernels compute unfused; addcmul and addcdiv, where torch refuses a ``value`` beyond the
# dtype's range and jitorch does not.
CALLS = [
    ("add", lambda m, x, w, y: x.add(w)), ("radd", lambda m, x, w, y: w + x),
    ("sub", lambda m, x, w, y: x.sub(w)), ("rsub", lambda m, x, w, y: w - x),
    ("mul", lambda m, x, w, y: x.mul(w)), ("rmul", lambda m, x, w, y: w * x),
    ("div", lambda m, x, w, y: x.div(w)),
    ("div_trunc", lambda m, x, w, y: x.div(w, rounding_mode="trunc")),
    ("div_floor", lambda m, x, w, y: x.div(w, rounding_mode="floor")),
    ("remainder", lambda m, x, w, y: x.remainder(w)), ("fmod", lambda m, x, w, y: x.fmod(w)),
    ("eq", lambda m, x, w, y: x.eq(w)), ("ne", lambda m, x, w, y: x.ne(w)), ("lt", lambda m, x, w, y: x < w),
    ("le", lambda m, x, w, y: x <= w), ("gt", lambda m, x, w, y: x > w), ("ge", lambda m, x, w, y: x >= w),
    ("clamp_min", lambda m, x, w, y: x.clamp(min=w)), ("clamp_max", lambda m, x, w, y: x.clamp(max=w)),
    ("clamp", lambda m, x, w, y: x.clamp(-abs(w), abs(w))),
    ("where", lambda m, x, w, y: m.where(x > 0, x, w)),
    ("sub_alpha_int", lambda m, x, w, y: x.sub(y, alpha=w if w.__class__ is int and not x.is_floating_point() else 2)),
    ("copysign", lambda m, x, w, y: m.copysign(x, w)),
    ("bitwise_and", lambda m, x, w, y: x & w), ("bitwise_or", lambda m, x, w, y: x | w),
    ("bitwise_xor", lambda m, x, w, y: x ^ w), ("lshift", lambda m, x, w, y: x << w),
    ("rshift", lambda m, x, w, y: x >> w),
    ("add_", lambda m, x, w, y: x.clone().add_(w)), ("sub_", lambda m, x, w, y: x.clone().sub_(w)),
    ("mul_", lambda m, x, w, y: x.clone().mul_(w)), ("div_", lambda m, x, w, y: x.clone().div_(w)),
    ("clamp_", lambda m, x, w, y: x.clone().clamp_(min=w)),
]


def _outcome(module, call, x, w, y):
    """The result's `_bits`, or the exception's type."""
    try:
        return _bits(call(module, x, w, y) if module is torch else _as_torch(call(module, x, w, y)))
    except Exception as e:  # noqa: BLE001 (the type is compared with torch's)
        return type(e).__name__


def _as_torch(t):
    return _to_torch(np.asarray(t.numpy()))


@pytest.mark.parametrize("shape", [(), (6,)], ids=["0d", "1d"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_python_numbers_in_pointwise_ops_give_torchs_bits(dtype, shape):
    rng = np.random.default_rng([DTYPES.index(dtype), len(shape)])
    xv, yv = _values(dtype, shape, rng), _values(dtype, shape, rng)
    tx, ty = _to_torch(xv), _to_torch(yv)
    jx, jy = jt.tensor(xv, dtype=dtype), jt.tensor(yv, dtype=dtype)
    wrong = []
    for w in _numbers(rng):
        for name, call in CALLS:
            want = _outcome(torch, call, tx, w, ty)
            got = _outcome(jt, call, jx, w, jy)
            if got != want:
                wrong.append((name, w, got if isinstance(got, str) else got[:2],
                              want if isinstance(want, str) else want[:2]))
    assert not wrong, f"{len(wrong)} differ, e.g. {wrong[:8]}"


@pytest.mark.parametrize("shape", [(), (6,)], ids=["0d", "1d"])
def test_python_numbers_in_compiled_functions_give_torchs_bits(shape):
    """A compiled function's Python numbers are constants of the kernel's dtype (typed when lowered, NumPy
    takes no part): its bits are torch's eager ones under either NumPy."""
    rng = np.random.default_rng(len(shape))
    xv = _values(jt.float32, shape, rng)
    for w in _numbers(rng)[:8]:
        def f(x):
            return (x * w - w) / 3.0 + 0.1

        got = jt.compile(f)(jt.tensor(xv))
        assert _bits(_as_torch(got)) == _bits(f(_to_torch(xv))), w


@pytest.mark.parametrize("name", ["addcmul", "addcdiv", "lerp"])
def test_multipliers_the_compute_dtype_cannot_hold_raise_as_torch(name):
    """torch converts addcmul's and addcdiv's ``value`` and lerp's number weight to the dtype its kernel
    computes in (float32 for the half types) with a check: beyond its range (an integer type's: a float,
    finite, from 0 for an unsigned one) it raises a RuntimeError; jitorch raises where torch does."""
    def outcome(module, dtype, v):
        x = module.ones(2, dtype=getattr(module, dtype))
        try:
            x.lerp(x, v) if name == "lerp" else getattr(x, name)(x, x, value=v)
        except Exception as e:  # noqa: BLE001 (the type is compared with torch's)
            return type(e).__name__
        return "ok"

    wrong = [(dtype, v, outcome(jt, dtype, v), outcome(torch, dtype, v))
             for dtype in ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32")
             for v in (1e40, 3.5e38, 1e5, 2.5, -1.5, 127.5, -128.5, 128, -129, -255, 256, float("nan"), float("inf"))
             if outcome(jt, dtype, v) != outcome(torch, dtype, v)]
    assert not wrong


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_logit_of_a_0d_tensor_keeps_its_dtype_under_either_numpy(dtype):
    """Regression (test_against_torch under NumPy 1.26): logit's ``1 - x`` with a 0-d array took NumPy 1.x's
    scalar promotion to float64, so bfloat16 logit(0.3359375) was a bfloat16 ulp off torch's. (The half types
    round each step as torch does, so their bits are torch's; float32/64 logs differ from torch's in the last
    bit whatever NumPy.)"""
    values = np.random.default_rng(5).uniform(0.01, 0.99, 64)
    for v in values:
        got = jt.tensor(v).to(getattr(jt, dtype)).logit()
        want = torch.tensor(v).to(getattr(torch, dtype)).logit()
        assert _bits(_as_torch(got)) == _bits(want), v


def test_an_int_reaches_a_float_compute_dtype_rounded_once_on_the_direct_path_as_through_convert():
    """`scalar_in` converts an int of at most 2**53 in magnitude straight to float32/float64 (exact in float64,
    then rounded once); larger ones go through `casts.convert`: the same values either way."""
    from jitorch.ops.pointwise_base import scalar_in
    from jitorch.runtime.casts import convert
    for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        for v in (0, 1, -1, 2, 300, 2 ** 24 + 1, -(2 ** 24 + 3), 2 ** 25 + 3, 2 ** 53 - 1, 2 ** 53, -2 ** 53,
                  2 ** 53 + 1, 2 ** 62 + 2 ** 40 + 1, -(2 ** 63)):
            got = scalar_in(v, dtype)
            want = convert(np.array(v), dtype)[()]
            assert got.dtype == dtype and got.tobytes() == want.tobytes(), (dtype, v)
