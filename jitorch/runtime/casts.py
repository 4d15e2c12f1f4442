"""The one cast table: how every dtype converts to every other, as torch does on x86.

NumPy's and ml_dtypes' own conversions differ from torch's where C leaves a result
undefined (NaN and out-of-range floats into integers, which also differ between hosts
and between ml_dtypes versions) and where torch rounds twice (float64 and integers into
the half types go through float32, as c10::Half and c10::BFloat16 are built from a
float). Every conversion that can change a value goes through `convert`, so eager
kernels on any host give torch-on-x86's results; the compiled kernels' emitter
(`codegen/emitter.py`) implements the same rules, stated once here:

- to bool: ``x != 0`` (NaN is True);
- float to integer (`float_to_integer_route`): truncation toward zero through a 32-bit
  integer (int64 for int64, and for uint8 as torch's ``static_cast_with_inter_type``),
  NaN, infinities and values outside that integer's range give its smallest value; the
  result then wraps to the destination's width. uint32 and uint64 convert as x86 code
  converts to an unsigned type of that width: values from 2**(w-1) up are converted
  less 2**(w-1), with the top bit set again (so 2**w and beyond give 0); values below
  convert through the signed type of width w as above. float16 into uint32 goes through
  int64 instead (torch's kernel widens it). float16 and bfloat16 widen to float32 first
  (exactly);
- integer to narrower integer: wraps (two's complement);
- to float32 or float64: rounded to nearest even;
- to float16 or bfloat16: to float32 first (rounded to nearest even), then rounded to
  nearest even once more; NaN stays a quiet NaN.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dt

_BOOL, _U8, _I64 = np.dtype(np.bool_), np.dtype(np.uint8), np.dtype(np.int64)
_U32, _U64 = np.dtype(np.uint32), np.dtype(np.uint64)
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
    if dst.kind in "iu" and src.kind == "f":
        return _float_to_integer(_to_float32(a) if src in _HALVES else a, src, dst)
    if src in _HALVES:
        a, src = _to_float32(a), _F32
    if dst.kind in "iu":
        return a.astype(dst)
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


def float_to_integer_route(src, dst) -> tuple:
    """(width, unsigned): how float NumPy dtype ``src`` converts to integer NumPy dtype ``dst`` (see
    the module docstring), for `convert` and the compiled kernels' emitter alike."""
    if dst == _U64 or (dst == _U32 and src != _F16):
        return dst.itemsize * 8, True
    return (64 if dst in (_I64, _U8, _U32) else 32), False


def _float_to_integer(a, src, dst):
    """A float array (float32 or float64; ``src``: the dtype it was before widening) into integer
    dtype ``dst`` by `float_to_integer_route`."""
    bits, unsigned = float_to_integer_route(src, dst)
    wide = np.dtype(f"int{bits}")
    if not unsigned:
        return _truncated(a, wide).astype(dst)
    half = 2.0 ** (bits - 1)
    high = a >= half
    low_part = _truncated(np.where(high, a - half, a), wide)
    return np.where(high, low_part ^ np.iinfo(wide).min, low_part).astype(dst)


def _truncated(a, wide):
    """Truncation toward zero into signed ``wide``; x86's smallest integer for NaN and out-of-range values."""
    limit = 2.0 ** (wide.itemsize * 8 - 1)
    if a.size and a.min() >= -limit and a.max() < limit:  # (the common case in two reductions; NaN fails them)
        return a.astype(wide)
    inside = (a >= -limit) & (a < limit)  # NaN compares false
    return np.where(inside, np.where(inside, a, 0).astype(wide), np.iinfo(wide).min)


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
