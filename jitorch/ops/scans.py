"""Scans along one dim and their relatives: running extremes (``cummax``, ``cummin``) with their indices,
``logcumsumexp``, finite differences (``diff``, ``gradient``) and trapezoid integrals.

The running extremes and ``logcumsumexp`` are NumPy kernels (accumulating ufuncs); the others are
composites of slices and arithmetic, written as torch's own implementations are so that values, dtypes
and errors agree, and gradients come from their parts.
"""

from __future__ import annotations

from numbers import Number

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.strided import wrap_dim
from . import functions
from .meta import opmath
from .registry import OPS, TensorSpec, defop, scalar_name

_SCAN_FORMS = ("function", "method", "out")


# Running extremes ---------------------------------------------------------------------------------

def _running_meta(x, dim):
    wrap_dim(dim, x.ndim)
    return TensorSpec(x.shape, x.dtype, x.device, opmath(x.dtype)), TensorSpec(x.shape, _dt.int64, x.device)


def _running_kernel(accumulate):
    """The running extreme along ``dim`` and the index it was last taken at: an element equal to the
    extreme so far takes over (ties give the latest index), and once NaN appears each NaN does, as torch."""
    def kernel(spec, x, dim):
        a = x.astype(spec[0].compute.np, copy=False)
        if x.ndim == 0:
            return a.copy(), np.zeros((), np.int64)
        axis = wrap_dim(dim, x.ndim)
        values = accumulate(a, axis=axis)
        taken = (a == values) | (np.isnan(a) & np.isnan(values)) if a.dtype.kind == "f" else a == values
        shape = [1] * a.ndim
        shape[axis] = a.shape[axis]
        positions = np.where(taken, np.arange(a.shape[axis]).reshape(shape), 0)
        return values, np.maximum.accumulate(positions, axis=axis)
    return kernel


for _name, _ufunc, _what in (("cummax", np.maximum, "maximum"), ("cummin", np.minimum, "minimum")):
    defop(f"{_name}(Tensor self, int dim) -> (Tensor values, Tensor indices)", meta=_running_meta,
          cpu=_running_kernel(_ufunc.accumulate), kind="scan", variants=_SCAN_FORMS,
          doc=f"The running {_what} along ``dim`` and the index of the element it was last taken from "
              "(the latest on ties); NaN propagates.")


def _logcumsumexp_meta(x, dim):
    wrap_dim(dim, x.ndim)
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for '{scalar_name(x.dtype)}'")
    return TensorSpec(x.shape, x.dtype, x.device, opmath(x.dtype))


def _logcumsumexp_cpu(spec, x, dim):
    # torch's CPU kernel carries a float32 scan in double (its CPU accumulate type), a half type's in float
    a = x.astype(np.float64 if spec.dtype is _dt.float32 else spec.compute.np, copy=False)
    if x.ndim == 0:
        return a.copy()
    return np.logaddexp.accumulate(a, axis=wrap_dim(dim, x.ndim))


defop("logcumsumexp(Tensor self, int dim) -> Tensor", meta=_logcumsumexp_meta, cpu=_logcumsumexp_cpu, kind="scan",
      variants=_SCAN_FORMS, doc="``log(cumsum(exp(x)))`` along ``dim``, computed without overflow; floating only.")


# Differences ----------------------------------------------------------------------------------------

def _diff(x, n, dim, prepend, append):
    if x.ndim < 1:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    for extra in (prepend, append):
        if extra is not None and extra.ndim != x.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
    d = wrap_dim(dim, x.ndim)
    if n == 0:
        return x.clone()
    if prepend is not None or append is not None:
        x = functions.cat([t for t in (prepend, x, append) if t is not None], d)
    for _ in range(min(n, x.shape[d])):
        length = x.shape[d] - 1
        later, earlier = x.narrow(d, 1, length), x.narrow(d, 0, length)
        x = functions.logical_xor(later, earlier) if x.dtype is _dt.bool else later - earlier
    return x


defop("diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor", composite=_diff,
      kind="scan", variants=_SCAN_FORMS,
      # torch's diff_out of order 0 resizes out as self and copy_-s self into it (copy_'s autograd, no out= guard;
      # fuzz seed 7203191)
      out_copies=lambda args: args[1] == 0, out_resize_error="cannot resize variables that require grad",
      doc="The ``n``-th forward difference along ``dim`` (after joining ``prepend`` and ``append``); "
          "bools give their exclusive or.")


def _spacings(spacing, dims):
    """Per dim: a Python number (uniform spacing) or a 1-D tensor of coordinates."""
    if isinstance(spacing, Number):
        return [spacing] * len(dims)
    if not isinstance(spacing, (list, tuple)):
        spacing = [spacing]
    return list(spacing)


def _gradient_dims(x, spacing, dim, edge_order):
    if x.dtype is _dt.uint8:
        raise RuntimeError("torch.gradient does not support uint8 input.")
    given = None if isinstance(spacing, Number) else len(spacing) if isinstance(spacing, (list, tuple)) else 1
    dims = tuple(range(x.ndim)) if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    if given is not None and dim is None and given != x.ndim:
        raise RuntimeError("torch.gradient expected spacing to be unspecified, a scalar, or a list of length equal to "
                           f"'self.dim() = {x.ndim}', since dim argument was not given, but got a list of length "
                           f"{given}")
    if given is not None and dim is not None and given != len(dims):
        raise RuntimeError("torch.gradient expected spacing to be unspecified, a scalar or it's spacing and dim "
                           f"arguments to have the same length, but got a spacing argument of length {given} and a "
                           f"dim argument of length {len(dims)}.")
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    dims = tuple(wrap_dim(d, x.ndim) for d in dims)
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"dim {dims[0]} appears multiple times in the list of dims")
    if any(x.shape[d] < edge_order + 1 for d in dims):
        raise RuntimeError("torch.gradient expected each dimension size to be at least edge_order+1")
    return dims


def _part(x, d, start, end=None):
    """``x`` sliced ``start:end`` along ``d`` (Python's bounds)."""
    return OPS["slice"](x, d, start, end, 1)


def _uniform_gradient(x, d, h, edge_order):
    center = (_part(x, d, 2) - _part(x, d, 0, -2)) / h
    if edge_order == 1:
        first = (_part(x, d, 1, 2) - _part(x, d, 0, 1)) / h
        last = (_part(x, d, -1) - _part(x, d, -2, -1)) / h
    else:
        first = (_part(x, d, 0, 1) * -1.5 + _part(x, d, 1, 2) * 2 - _part(x, d, 2, 3) * 0.5) / h
        last = (_part(x, d, -3, -2) * 0.5 + _part(x, d, -2, -1) * -2 + _part(x, d, -1) * 1.5) / h
    return functions.cat([first, center / 2, last], d)


def _coordinate_gradient(x, d, coords, edge_order):
    shape = [1] * x.ndim
    shape[d] = -1
    dx = coords.diff(1, 0)
    dx1, dx2 = _part(dx, 0, 0, -1), _part(dx, 0, 1)
    a = (-dx2 / (dx1 * (dx1 + dx2))).reshape(shape)
    b = ((dx2 - dx1) / (dx1 * dx2)).reshape(shape)
    c = (dx1 / (dx2 * (dx1 + dx2))).reshape(shape)
    center = a * _part(x, d, 0, -2) + b * _part(x, d, 1, -1) + c * _part(x, d, 2)
    if edge_order == 1:
        first = (_part(x, d, 1, 2) - _part(x, d, 0, 1)) / dx[0]
        last = (_part(x, d, -1) - _part(x, d, -2, -1)) / dx[-1]
    else:
        h0, h1, hl, hk = dx[0], dx[1], dx[-1], dx[-2]
        first = (-(2.0 * h0 + h1) / (h0 * (h0 + h1)) * _part(x, d, 0, 1) + (h0 + h1) / (h0 * h1) * _part(x, d, 1, 2)
                 + (-h0) / (h1 * (h0 + h1)) * _part(x, d, 2, 3))
        last = (hl / (hk * (hl + hk)) * _part(x, d, -3, -2) - (hl + hk) / (hl * hk) * _part(x, d, -2, -1)
                + (2 * hl + hk) / (hl * (hl + hk)) * _part(x, d, -1))
    return functions.cat([first, center, last], d)


def _gradient(x, spacing, dim, edge_order):
    spacing = 1 if spacing is None else spacing
    dims = _gradient_dims(x, spacing, dim, edge_order)
    results = []
    for d, h in zip(dims, _spacings(spacing, dims)):
        if isinstance(h, Number):
            results.append(_uniform_gradient(x, d, h, edge_order))
        else:
            results.append(_coordinate_gradient(x, d, h, edge_order))
    return tuple(results)


defop("gradient(Tensor self, *, Any spacing=1, Any dim=None, int edge_order=1) -> Any", composite=_gradient,
      kind="scan", variants=("function",),
      doc="The derivative estimated by central differences along each of ``dim`` (all dims by default), one "
          "tensor per dim; ``spacing`` is a number, one number per dim or 1-D coordinates per dim; the edges "
          "use one-sided differences of order ``edge_order``.")


# Trapezoid integrals --------------------------------------------------------------------------------

def _sample_spacing(y, x, d):
    """The differences of the sample points ``x``, shaped to broadcast against ``y``'s along ``d``."""
    if x.ndim == 1:
        if x.shape[0] != y.shape[d]:
            raise RuntimeError("trapezoid: There must be one `x` value for each sample point")
        shape = [1] * y.ndim
        shape[d] = x.shape[0]
        x = x.view(shape)
    elif x.ndim < y.ndim:
        x = x.view((1,) * (y.ndim - x.ndim) + tuple(x.shape))
    return _part(x, d, 1) - _part(x, d, 0, -1)


def _no_bools(*tensors):
    if any(t.dtype is _dt.bool for t in tensors):
        raise RuntimeError("trapezoid: received a bool input for `y`, but bool is not supported")


def _empty_integral(y, d):
    return functions.zeros(tuple(n for i, n in enumerate(y.shape) if i != d), dtype=y.dtype, device=y.device)


def _trapezoid_x(y, x, dim):
    d = wrap_dim(dim, y.ndim)
    if y.shape[d] == 0:
        return _empty_integral(y, d)
    _no_bools(y, x)
    dx = _sample_spacing(y, x, d)
    return ((_part(y, d, 1) + _part(y, d, 0, -1)) * dx).sum(d) / 2.0


def _trapezoid_dx(y, dx, dim):
    if y.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    d = wrap_dim(dim, y.ndim)
    if y.shape[d] == 0:
        return _empty_integral(y, d)
    _no_bools(y)
    if isinstance(dx, bool):
        raise RuntimeError("trapezoid: Currently, we only support dx as a real number.")
    return (y.sum(d) - (y.select(d, 0) + y.select(d, -1)) * 0.5) * float(dx)


for _name in ("trapezoid", "trapz"):
    defop(f"{_name}.x(Tensor y, Tensor x, *, int dim=-1) -> Tensor", composite=_trapezoid_x, kind="scan",
          variants=("function",),
          doc="The integral of ``y`` along ``dim`` by the trapezoid rule at sample points ``x``.")
defop("trapezoid.dx(Tensor y, *, Scalar dx=1, int dim=-1) -> Tensor", composite=_trapezoid_dx, kind="scan",
      variants=("function",), doc="The integral of ``y`` along ``dim`` by the trapezoid rule, samples ``dx`` apart.")
defop("trapz.dx(Tensor y, *, float dx=1, int dim=-1) -> Tensor", composite=_trapezoid_dx, kind="scan",
      variants=("function",), doc="The integral of ``y`` along ``dim`` by the trapezoid rule, samples ``dx`` apart.")


def _cumulative_trapezoid_x(y, x, dim):
    d = wrap_dim(dim, y.ndim)
    _no_bools(y, x)
    dx = _sample_spacing(y, x, d)
    # (torch's order: integer sums and products wrap in the operands' dtype before the halving, seeds 8400204 and
    # 7895898; the product is in the promoted type of y and x, a half-type y's with integer x's, seed 7999678)
    return ((_part(y, d, 0, -1) + _part(y, d, 1)) * dx).cumsum(d) / 2.0


def _cumulative_trapezoid_dx(y, dx, dim):
    if y.ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, y.ndim)
    _no_bools(y)
    return (float(dx) / 2.0 * (_part(y, d, 0, -1) + _part(y, d, 1))).cumsum(d)


defop("cumulative_trapezoid.x(Tensor y, Tensor x, *, int dim=-1) -> Tensor", composite=_cumulative_trapezoid_x,
      kind="scan", variants=("function",),
      doc="The running integral of ``y`` along ``dim`` by the trapezoid rule at sample points ``x``.")
defop("cumulative_trapezoid.dx(Tensor y, *, Scalar dx=1, int dim=-1) -> Tensor", composite=_cumulative_trapezoid_dx,
      kind="scan", variants=("function",),
      doc="The running integral of ``y`` along ``dim`` by the trapezoid rule, samples ``dx`` apart.")
