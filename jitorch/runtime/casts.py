"""The one cast table: how every dtype converts to every other, as torch does on x86.

NumPy's and ml_dtypes' own conversions differ from torch's where C leaves a result
undefined (NaN and out-of-range floats into integers, which also differ between hosts
and between ml_dtypes versions) and where torch rounds twice (float64 and integers into
the half types go through float32, as c10::Half and c10::BFloat16 are built from a
float). Every conversion that can change a value goes through `convert`, so eager
kernels on any host give torch-on-x86's results; the compiled kernels' emitter
(`codegen/emitter.py`) implements the same rules, stated once here:

- to bool: ``x != 0`` (NaN is True);
- float to integer: truncation toward zero through a 32-bit integer (int64 for int64,
  and for uint8 as torch's ``static_cast_with_inter_type``), NaN, infinities and values
  outside that integer's range give its smallest value; the result then wraps to the
  destination's width. float16 and bfloat16 widen to float32 first (exactly);
- integer to narrower integer: wraps (two's complement);
- to float32 or float64: rounded to nearest even;
- to float16 or bfloat16: to float32 first (rounded to nearest even), then rounded to
  nearest even once more; NaN stays a quiet NaN.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dt

_BOOL, _U8, _I64 = np.dtype(np.bool_), np.dtype(np.uint8), np.dtype(np.int64)
_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_HALVES = _dt.HALF_NP
_BF16_QUIET, _F16_QUIET = 0x0040, 0x0200


def convert(values, dtype) -> np.ndarray:
    """``values`` (a NumPy array of a jitorch storage type) as a new array of NumPy
    dtype ``dtype`` (a jitorch dtype's ``.np``), converted as torch converts on x86."""
    a = np.asarray(values)
    dst = np.dtype(dtype)
    if a.dtype == dst:
        return a.copy()
    # converted as 1-d: NumPy's operators give scalars for 0-d operands, and NumPy 1's value-based casting
    # would widen a 0-d uint32 shifted by a Python int to int64
    return np.asarray(_converted(a.reshape(-1), dst)).reshape(a.shape)


def _converted(a, dst):
    src = a.dtype
    if dst == _BOOL:
        return _bits(a) & 0x7FFF != 0 if src in _HALVES else a != 0
    if src == _BOOL:
        a, src = a.view(_U8), _U8
    if src in _HALVES:
        a, src = _to_float32(a), _F32
    if dst.kind in "iu":
        return _float_to_integer(a, dst) if src.kind == "f" else a.astype(dst)
    with np.errstate(over="ignore", invalid="ignore"):  # out of range: infinity; a signalling NaN: quiet
        if dst in _HALVES:
            return _float32_to_half(a if src == _F32 else a.astype(_F32), dst)
        return a.astype(dst)  # ints and floats into float32/float64 round to nearest even


def copy_into(dst: np.ndarray, src) -> None:
    """Write ``src`` (an array broadcastable to ``dst``) into ``dst``, converting with `convert`."""
    src = np.asarray(src)
    np.copyto(dst, src if src.dtype == dst.dtype else convert(src, dst.dtype))


def _bits(a):
    return a.view(np.uint16)


def _to_float32(a):
    """float16 or bfloat16 to float32: exact (bfloat16 is float32's top half)."""
    if a.dtype == _F16:
        return a.astype(_F32)
    return (_bits(a).astype(np.uint32) << 16).view(_F32)


def _float_to_integer(a, dst):
    """Truncation toward zero through int32 (int64 for int64 and uint8); x86's smallest
    integer for NaN and out-of-range values; then wrapped to ``dst``."""
    wide = np.dtype(np.int64) if dst in (_I64, _U8) else np.dtype(np.int32)
    limit = 2.0 ** (wide.itemsize * 8 - 1)
    inside = (a >= -limit) & (a < limit)  # NaN compares false
    return np.where(inside, np.where(inside, a, 0).astype(wide), np.iinfo(wide).min).astype(dst)


def _float32_to_half(a, dst):
    """float32 to float16 or bfloat16, rounding to nearest even; NaN gives a quiet NaN."""
    nan = np.isnan(a)
    if dst == _F16:
        bits = _bits(a.astype(_F16))
        return np.where(nan, bits | _F16_QUIET, bits).astype(np.uint16).view(_F16)
    bits = a.view(np.uint32)
    odd = (bits >> 16) & 1
    rounded = (np.where(nan, 0, bits).astype(np.uint32) + (0x7FFF + odd)) >> 16
    return np.where(nan, (bits >> 16) | _BF16_QUIET, rounded).astype(np.uint16).view(dst)
