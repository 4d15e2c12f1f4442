"""Window functions for spectral analysis (``hann_window``, ``hamming_window``, ``blackman_window``,
``bartlett_window``, ``kaiser_window``), composites over ``arange`` in the result's dtype with torch's
arithmetic. A periodic window of length N is the symmetric one of length N + 1 without its last point."""

from __future__ import annotations

import math

from ..runtime import dtypes as _dt
from ..runtime.autocast_mode import excluded
from . import functions
from .creation import OPTIONS
from .registry import defop


def _window(name, shape):
    """A window op from ``shape(n, t, *params) -> values`` of the symmetric window of length ``n`` > 1, where
    ``t`` is ``arange(n)`` in the result dtype."""
    def composite(length, periodic, *rest):
        *params, dtype, device, requires_grad = rest
        dtype = dtype or _dt.get_default_dtype()
        if length < 0:
            raise RuntimeError(f"{name} requires non-negative window_length, got window_length={length}")
        if not dtype.is_floating_point:
            raise RuntimeError(f"{name} expects floating point dtypes, got: {dtype}")
        if length <= 1:
            result = functions.ones((length,), dtype=dtype, device=device)
        else:
            n = length + 1 if periodic else length
            # (torch's window kernels call native functions, which autocast does not see: bartlett_window's cat of a
            # float16 window under bfloat16 autocast raised cat's prioritize error, fuzz seed 5740765)
            with excluded():
                result = shape(n, functions.arange(n, dtype=dtype, device=device), *params)
            result = result[:length] if periodic else result
        return result._require_grad(True, "factory") if requires_grad else result
    return composite


def _hamming(n, t, alpha=0.54, beta=0.46):
    return (t * (2 * math.pi / (n - 1))).cos() * -beta + alpha


def _hann(n, t):
    return _hamming(n, t, 0.5, 0.5)


def _blackman(n, t):
    t = t * (math.pi / (n - 1))
    return (t * 4).cos() * 0.08 - (t * 2).cos() * 0.5 + 0.42


def _bartlett(n, t):
    t = t * (2.0 / (n - 1))
    rising = ((n - 1) >> 1) + 1
    return functions.cat([t[:rising], t[rising:] * -1 + 2])


_I0_TERMS = 60  # enough for the series to converge in float64 at the arguments of usual betas (up to ~50)


def _i0(x, one):
    """The modified Bessel function of the first kind, order 0, by its power series
    ``sum (x/2)^(2k) / (k!)^2``, for a float64 tensor or a Python float ``x`` (``one``: 1 of its kind)."""
    term = total = one
    quarter_square = x * x / 4
    for k in range(1, _I0_TERMS):
        term = term * quarter_square / (k * k)
        total = total + term
    return total


def _kaiser(n, t, beta=12.0):
    """In float64, rounded once to ``t``'s dtype (torch's kernel computes each point in float or double)."""
    alpha = (n - 1) / 2.0
    # I0(beta) in Python floats: the same float64 operations in the same order as on a tensor, so the same
    # value, without a device launch per operation of the series (half of the op's launches on CUDA)
    scale = _i0(float(beta), 1.0)
    wide = t.to(_dt.float64)
    x = beta * (1 - ((wide - alpha) / alpha) ** 2).abs().sqrt()
    return (_i0(x, functions.ones_like(x)) / scale).to(t.dtype)


for _name, _shape, _params, _what in (
        ("hann_window", _hann, "", "the Hann window ``0.5 - 0.5 cos(2 pi n / (N - 1))``"),
        ("hamming_window", _hamming, "float alpha=0.54, float beta=0.46, ",
         "the Hamming window ``alpha - beta cos(2 pi n / (N - 1))``"),
        ("blackman_window", _blackman, "", "the Blackman window"),
        ("bartlett_window", _bartlett, "", "the Bartlett (triangular) window"),
        ("kaiser_window", _kaiser, "float beta=12.0, ", "the Kaiser window of shape ``beta``")):
    defop(f"{_name}(int window_length, bool periodic=True, {_params}*, {OPTIONS}) -> Tensor",
          composite=_window(_name, _shape), kind="creation", variants=("function",),
          doc=f"{_what[0].upper()}{_what[1:]} of ``window_length`` points (periodic: for spectral analysis).")
