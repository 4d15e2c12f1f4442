"""torch.fft's real-valued helpers: sample frequencies and shifts (the transforms take complex numbers,
which jitorch does not have)."""

from __future__ import annotations

from .ops.creation import tensor as _tensor
from .runtime.dtypes import get_default_dtype, to_dtype

__all__ = ["fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def _frequencies(name, values, n, d, dtype, device, requires_grad):
    dtype = get_default_dtype() if dtype is None else to_dtype(dtype)
    if not dtype.is_floating_point:  # (an integer tensor divided would give floats of another dtype)
        raise RuntimeError(f"{name} requires a floating point or complex dtype")
    return (_tensor(values, dtype=dtype, device=device) / (n * d))._require_grad(requires_grad, "factory")


def fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, layout=None, out=None):
    """The sample frequencies of an ``n``-point FFT with sample spacing ``d``: ``[0, 1, ..., -1] / (d * n)``."""
    values = list(range((n + 1) // 2)) + list(range(-(n // 2), 0))
    return _result(_frequencies("fftfreq", values, n, d, dtype, device, requires_grad), out)


def rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, layout=None, out=None):
    """The sample frequencies of an ``n``-point real FFT: ``[0, 1, ..., n // 2] / (d * n)``."""
    return _result(_frequencies("rfftfreq", list(range(n // 2 + 1)), n, d, dtype, device,
                                requires_grad), out)


def _result(t, out):
    if out is None:
        return t
    if tuple(out.shape) != tuple(t.shape):
        raise RuntimeError(f"out= of shape {list(out.shape)} for frequencies of shape {list(t.shape)}: jitorch "
                           "writes into an out= of the result's shape only")
    return out.copy_(t)


def _shift(input, dim, sign):
    dims = range(input.ndim) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    dims = [d % input.ndim for d in dims] if input.ndim else []
    return input.roll([sign * (input.shape[d] // 2) for d in dims], dims)


def fftshift(input, dim=None):
    """``input`` rolled so that the zero frequency is in the middle of each of ``dim`` (all by default)."""
    return _shift(input, dim, 1)


def ifftshift(input, dim=None):
    """The inverse of `fftshift`."""
    return _shift(input, dim, -1)
