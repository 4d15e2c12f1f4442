"""Reductions over dims: sums, means, extremes, statistics, norms, scans and softmax.

Most reductions share one shape: wrap ``dim`` (None or () means every dim),
pick the result dtype and the dtype to compute in, cast the input, call a NumPy
reduction with ``axis``/``keepdims``. Those are rows of the `_REDUCTIONS`
table; the families with other shapes (index results, (values, indices)
pairs, scans, softmax, moments, norms) are small tables of their own.
"""

from __future__ import annotations

import math
from collections import namedtuple
from numbers import Number

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors, threads
from ..runtime.casts import convert
from ..runtime.device import CPU
from ..runtime.summation import BLOCK, add_reduce
from . import registry
from .half_products import rounded_prod
from .index_positions import flat_positions
from .meta import opmath, reduced_shape, reduction_dims, wrap_dim
from .overlap import written_with_dim
from .reduction_out import fast_axis, out_path
from .registry import FUNCTIONS, OPS, TensorSpec, defop, scalar_name

_ALL_FORMS = ("function", "method", "out")


# Dims ---------------------------------------------------------------------

def numpy_axis(x, dim):
    """NumPy's ``axis`` for a dim argument: None when every dim is reduced."""
    dims = reduction_dims(x, dim)
    return dims if dims and x.ndim else None


def reduced_count(shape, axis):
    """How many elements each output element reduces over (``axis`` None: every element)."""
    return math.prod(shape if axis is None else (shape[d] for d in axis))


def _check_nonempty(name, x, dims, error=RuntimeError, hint=" Specify the reduction dim with the 'dim' argument."):
    """Reductions without an identity (max, argmax, ...) refuse empty reductions, as torch does."""
    if not dims:
        if math.prod(x.shape) == 0:
            raise error(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.{hint}")
        return
    for d in dims:
        if x.ndim and x.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


# Dtype rules: (op name, input, dtype argument) -> (result dtype, compute dtype) ----

def _accumulated(name, x, dtype):
    """sum, prod, cumsum: integers and bools accumulate as int64; ``dtype=`` casts the input first."""
    out = dtype or (x.dtype if x.dtype.is_floating_point else _dt.int64)
    return out, opmath(out)


def _same(name, x, dtype):
    return x.dtype, opmath(x.dtype)


def _floating_mean(name, x, dtype):
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError(f"{name}(): could not infer output dtype. Optional dtype must be either a floating point "
                           f"or complex dtype. Got: {scalar_name(dtype)}")
    if dtype is None and not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): could not infer output dtype. Input dtype must be either a floating point "
                           f"or complex dtype. Got: {scalar_name(x.dtype)}")
    out = dtype or x.dtype
    return out, opmath(out)


def _floating_nanmean(name, x, dtype):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): expected input to have floating point or complex dtype but got "
                           f"{scalar_name(x.dtype)}")
    return _floating_mean(name, x, dtype)


def _logical(name, x, dtype):
    """all/any return bool, except that uint8 input keeps uint8 (torch's legacy rule)."""
    return (_dt.uint8 if x.dtype is _dt.uint8 else _dt.bool), opmath(x.dtype)


def _counted(name, x, dtype):
    return _dt.int64, opmath(x.dtype)


def _int_to_float(name, x, dtype):
    out = x.dtype if x.dtype.is_floating_point else _dt.get_default_dtype()
    return out, opmath(out)


# NumPy reductions in the compute dtype: fn(a, axis=, keepdims=) ------------------

def _mean(a, axis, keepdims, out=None):
    total = add_reduce(a, axis, keepdims, out)
    # divided by the count in the sum's dtype, as torch divides: NumPy 1.x would divide a sum of one element
    # (a NumPy scalar) by a Python int in float64, and not round a count above 2**24 to float32
    count = total.dtype.type(reduced_count(a.shape, axis))
    return total / count if out is None else np.true_divide(out, count, out=out)


def _nanmean(a, axis, keepdims):
    return _nansum(a, axis, keepdims) / np.sum(~np.isnan(a), axis=axis, keepdims=keepdims)


def _nansum(a, axis=None, keepdims=False, out=None):
    """``np.nansum`` (NaN read as zero) in `add_reduce`'s order. A small float input is summed as it is first: a
    sum that read a NaN is a NaN, so a result without NaNs read none and is the same sum of the same elements
    (checking the result costs less than zeroing the input's NaNs, which a larger input pays at once: its sum
    would cost as much again where it holds a NaN); else `_nan_zeroed_sum`."""
    if a.dtype.kind not in "fc":
        return add_reduce(a, axis, keepdims, out)
    if a.size <= BLOCK:
        r = add_reduce(a, axis, keepdims, out)
        if not np.isnan(r).any():
            return r
    return _nan_zeroed_sum(a, axis, keepdims, out)


def _nan_zeroed_sum(a, axis, keepdims, out=None):
    """The `add_reduce` of float ``a`` with its NaNs read as zero."""
    return add_reduce(np.where(np.isnan(a), a.dtype.type(0), a), axis, keepdims, out)


def _logsumexp(a, axis, keepdims):
    # Shift by the finite max only: rows of -inf stay -inf, rows holding +inf give +inf.
    m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(add_reduce(np.exp(a - m), axis, True)) + m
    return out if keepdims else np.squeeze(out, axis)


# The table ----------------------------------------------------------------------

# ``empty_is_none``: an explicit empty dim list reduces no dim (torch's all/any: an elementwise truth test),
# where the other reductions read it as every dim
_Reduction = namedtuple("_Reduction", "schema dtype_rule fn nonempty doc variants empty_is_none",
                        defaults=(_ALL_FORMS, False))
_DIMS = "int[]? dim=None, bool keepdim=False"
_DIMS_DTYPE = f"{_DIMS}, *, ScalarType? dtype=None"

_REDUCTIONS = (
    _Reduction(f"sum(Tensor self, {_DIMS_DTYPE}) -> Tensor", _accumulated, add_reduce, False,
               "Sum over ``dim`` (all dims by default); integers and bools sum as int64."),
    _Reduction(f"nansum(Tensor self, {_DIMS_DTYPE}) -> Tensor", _accumulated, _nansum, False,
               "Sum over ``dim`` treating NaN as zero."),
    _Reduction("prod(Tensor self, int? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
               _accumulated, np.multiply.reduce, False, "Product over one dim (all by default); integers multiply as int64."),
    _Reduction(f"mean(Tensor self, {_DIMS_DTYPE}) -> Tensor", _floating_mean, _mean, False,
               "Mean over ``dim`` of a floating tensor (or of any tensor with a floating ``dtype=``)."),
    _Reduction(f"nanmean(Tensor self, {_DIMS_DTYPE}) -> Tensor", _floating_nanmean, _nanmean, False,
               "Mean over ``dim`` of the values that are not NaN."),
    _Reduction("amax(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor", _same, np.maximum.reduce, True,
               "Maximum over ``dim`` (all dims by default); NaN propagates."),
    _Reduction("amin(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor", _same, np.minimum.reduce, True,
               "Minimum over ``dim`` (all dims by default); NaN propagates."),
    _Reduction("max(Tensor self) -> Tensor", _same, np.max, True,
               "The largest element as a 0-d tensor; NaN propagates."),
    _Reduction("min(Tensor self) -> Tensor", _same, np.min, True,
               "The smallest element as a 0-d tensor; NaN propagates."),
    _Reduction(f"all(Tensor self, {_DIMS}) -> Tensor", _logical, np.logical_and.reduce, False,
               "Whether every element over ``dim`` is nonzero (bool; uint8 for uint8 input); ``dim=()`` tests "
               "each element.", _ALL_FORMS, True),
    _Reduction(f"any(Tensor self, {_DIMS}) -> Tensor", _logical, np.logical_or.reduce, False,
               "Whether some element over ``dim`` is nonzero (bool; uint8 for uint8 input); ``dim=()`` tests "
               "each element.", _ALL_FORMS, True),
    _Reduction("count_nonzero(Tensor self, int[]? dim=None) -> Tensor", _counted, np.count_nonzero, False,
               "Number of nonzero elements over ``dim`` (int64).", ("function", "method")),
    _Reduction("logsumexp(Tensor self, int[] dim, bool keepdim=False) -> Tensor", _int_to_float, _logsumexp, False,
               "``log(sum(exp(x)))`` over ``dim``, computed without overflow; integers give the default float."),
)


def reduces_nothing(dim):
    """Whether all/any's ``dim`` is an explicit empty list: then no dim is reduced."""
    return dim is not None and not isinstance(dim, int) and len(dim) == 0


def _reduction_meta(name, dtype_rule, nonempty, empty_is_none):
    def meta(x, dim=None, keepdim=False, dtype=None):
        out, compute = dtype_rule(name, x, dtype)  # (torch refuses an integer mean before a dim out of range)
        dims = reduction_dims(x, dim)
        if nonempty:
            _check_nonempty(name, x, dims)
        shape = tuple(x.shape) if empty_is_none and reduces_nothing(dim) else reduced_shape(x.shape, dims, keepdim)
        return TensorSpec(shape, out, x.device, compute)
    return meta


def _through_dtype(x, spec):
    """``x`` converted to the result dtype (as torch converts the input of an op given ``dtype=``),
    then widened to the compute dtype."""
    a = x if x.dtype == spec.dtype.np else convert(x, spec.dtype.np)
    return a.astype(spec.compute.np, copy=False)


def _reduction_kernel(fn, casts_input, empty_is_none, half_fn=None):
    """``casts_input``: the rule's result dtype is the input's converted one (``sum(x, dtype=)``).
    ``half_fn(x, axis, keepdims, dtype)``: computes a result of half type ``dtype`` from the input as given
    (torch rounds prod's every step to it; mean reads the input in float32, never rounded to the half type)."""
    def kernel(spec, x, dim=None, keepdim=False, dtype=None):
        axis = () if empty_is_none and reduces_nothing(dim) else numpy_axis(x, dim)  # NumPy's () reduces none
        if half_fn is not None and spec.dtype.np in _dt.HALF_NP:
            return half_fn(x, axis, keepdim, spec.dtype.np)
        a = _through_dtype(x, spec) if casts_input else x.astype(spec.compute.np, copy=False)
        return fn(a, axis=axis, keepdims=keepdim)
    return kernel


# Rules under which a float32/float64 input gives a result of its own dtype, computed in it (nanmean's
# NumPy formula divides by an integer count array, which NumPy promotes to float64: not worth a fast path);
# they are also the rules whose result dtype is the input's, converted
_KEEPS_FLOAT = (_accumulated, _floating_mean)
_FAST_DTYPES = (_dt.float32, _dt.float64)
# Rules under which the input is converted to the result dtype first (nanmean: torch's nansum with dtype=)
_CASTS_INPUT = (*_KEEPS_FLOAT, _floating_nanmean)


def _reduction_fast(op, fn, whole=None):
    """``fast(args, record=True)``: a float reduction over dims given as Python ints, without the
    general path's conversion and meta rule; None for anything else (`registry.OpDef.fast`). ``whole``, if
    given, is the ufunc whose reduction ``fn(a, None, False)`` is for a float array of at most
    `summation.BLOCK` elements (sum's ``np.add``: `add_reduce` is NumPy's sum there): such a full reduction is
    ``whole.reduce`` into a 0-d array of the dtype, called at once (the same loop; 0.35 µs less than making an
    array of NumPy's scalar result, and no Python frame between)."""
    silenced = fp_errors.silenced
    reduce = None if whole is None else whole.reduce

    def fast(args, record=True):
        x, dim, keepdim, dtype = args
        if (not isinstance(x, registry.Tensor) or x.device is not CPU or x.dtype not in _FAST_DTYPES
                or dtype is not None or keepdim.__class__ is not bool):
            return None
        axis = None if dim is None else fast_axis(dim, len(x._shape))
        if axis is False:
            return None
        grad = x._requires_grad and registry.records_grad()
        if grad and not record:
            return None
        a = x._arr if x._arr is not None else x._array()
        full = reduce is not None and axis is None and not keepdim and a.size <= BLOCK
        try:  # (positional: NumPy parses no keywords)
            r = silenced(reduce, a, None, None, np.empty((), a.dtype)) if full else silenced(fn, a, axis, keepdim)
        except RuntimeError as e:
            r = fp_errors.when_busy(e, reduce, a, None, None, np.empty((), a.dtype)) if full else \
                fp_errors.when_busy(e, fn, a, axis, keepdim)
        if full:  # (a 0-d array of a's dtype)
            result = registry.Tensor._fresh(r, x.dtype, (), ())
            return registry.record_fast(op, args, result) if grad else result
        if r.__class__ is not np.ndarray:  # (a full reduction's NumPy scalar)
            r = np.asarray(r)
        if r.dtype is not a.dtype:  # (builtin NumPy dtypes are singletons; a miss only costs the slow path)
            return None
        if r.ndim:
            result = registry.contiguous_result(r, x.dtype)
        else:  # (a full reduction's 0-d result: its shape and strides are known)
            result = registry.Tensor._fresh(r, x.dtype, (), ())
        return registry.record_fast(op, args, result) if grad else result
    return fast


# A float reduction's NumPy function -> `reduction_out.out_path`'s arguments: its ufunc reduction of an input of at
# most `BLOCK` elements (where `add_reduce` is NumPy's own), the `reduction_out.FINISH` lines after it, and the
# function computing any input into an ``out`` array
_OUT_STEPS = {add_reduce: (np.add.reduce, add_reduce), _mean: (np.add.reduce, _mean, "mean"),
              _nansum: (np.add.reduce, _nansum, "nansum", _nan_zeroed_sum)}
# (the extremes raise no floating-point error: checked under ``np.errstate(all="raise")`` on NumPy 1.26 and 2.4,
# float32/64, NaNs of both kinds, infinities, zeros of both signs, subnormals and the largest values)
_OUT_STEPS.update({np.multiply.reduce: (np.multiply.reduce,), np.maximum.reduce: (np.maximum.reduce, None, None, None, True),
                   np.minimum.reduce: (np.minimum.reduce, None, None, None, True)})


# Ops that, given ``out=`` and no ``dtype=``, compute in the out tensor's dtype (torch's
# ``infer_dtype_from_optional``): ``torch.sum(floats, out=longs)`` sums the floats cast to int64.
_DTYPE_FROM_OUT = frozenset({"sum", "nansum", "prod", "cumsum", "cumprod"})
# Ops that, given ``out=`` of another floating dtype, read a floating input cast to it (another out=
# dtype gets the result cast, or torch's error).
_INPUT_FROM_OUT = frozenset({"mean", "nanmean"})


def _logsumexp_into(x, dim, keepdim, dtype):
    """torch's ``logsumexp_out`` into an out= tensor of ``dtype``, step by step: the maximum is shifted out
    and the exponentials taken in the input's own dtype (the default float for integers; rounded to it for
    the half types), they are summed in ``dtype``, and the maximum is added back to the log of the sum."""
    if not dtype.is_floating_point:
        raise RuntimeError(f"logsumexp(): Expected floating point type for result tensor, but got: "
                           f"{scalar_name(dtype)}")
    if not x.dtype.is_floating_point:
        x = x.to(_dt.get_default_dtype())
    if not x.numel():  # no maximum to shift by
        return x.exp().sum(dim, keepdim, dtype=dtype).log()
    top = x.amax(dim, keepdim=True)
    top = top.masked_fill(top.abs() == math.inf, 0)  # rows of -inf stay -inf, rows holding +inf give +inf
    total = (x - top).exp().sum(dim, keepdim, dtype=dtype)
    return total.log() + top.view(total.shape)

# Ops whose out= form is another computation, given the out tensor's dtype (`registry.call`)
_OUT_COMPOSITES = {"logsumexp": _logsumexp_into}


def _mean_to_half(x, axis, keepdims, dtype):
    """torch's CPU mean into a half type (its dtype= or out= tensor): the input read in float32, summed and
    divided in float32, rounded once."""
    return _mean(convert(x, np.float32), axis, keepdims)


def _nanmean_to_half(x, axis, keepdims, dtype):
    """torch's CPU nanmean into a half type: the nansum of the input cast to it, rounded to it, then divided
    by the count in float32 and rounded again."""
    a = convert(convert(x, dtype), np.float32)
    total = convert(convert(_nansum(a, axis, keepdims), dtype), np.float32)
    return total / np.sum(~np.isnan(a), axis=axis, keepdims=keepdims).astype(np.float32)


# Ops whose half-type results torch's CPU kernels compute otherwise than from the input cast to that type
_HALF_STEPS = {"prod": rounded_prod, "mean": _mean_to_half, "nanmean": _nanmean_to_half}

for _r in _REDUCTIONS:
    _name = _r.schema.split("(", 1)[0]
    _op = defop(_r.schema, meta=_reduction_meta(_name, _r.dtype_rule, _r.nonempty, _r.empty_is_none),
                cpu=_reduction_kernel(_r.fn, _r.dtype_rule in _CASTS_INPUT, _r.empty_is_none,
                                      _HALF_STEPS.get(_name)),
                kind="reduction", variants=_r.variants, doc=_r.doc, dtype_from_out=_name in _DTYPE_FROM_OUT,
                input_from_out=_name in _INPUT_FROM_OUT, out_composite=_OUT_COMPOSITES.get(_name))
    if _r.dtype_rule in _KEEPS_FLOAT and not _r.nonempty and _r.schema.startswith(_name + "(Tensor self, int[]?"):
        _op.fast = _reduction_fast(_op, _r.fn, np.add if _r.fn is add_reduce else None)
    if _r.fn in _OUT_STEPS and _r.dtype_rule in (*_KEEPS_FLOAT, _same):
        _op.fast_out = out_path(*_OUT_STEPS[_r.fn])


# Index choices: argmax/argmin, and (values, indices) from max/min/median over one dim ----

def _argmax(a, axis):
    return np.argmax(a, axis=axis, keepdims=True)  # the first NaN wins, as in torch


def _argmin(a, axis):
    return np.argmin(a, axis=axis, keepdims=True)


def _median_index(a, axis):
    """Index of the lower median along ``axis`` (keepdims); a row holding NaN picks its first NaN."""
    k = (a.shape[axis] - 1) // 2
    idx = np.take(np.argsort(a, axis=axis, kind="stable"), [k], axis=axis)
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        idx = np.where(nan.any(axis=axis, keepdims=True), np.argmax(nan, axis=axis, keepdims=True), idx)
    return idx


def _index_meta(name):
    def meta(x, dim, keepdim):
        if x.dtype is _dt.bool:
            raise RuntimeError(f"{name}(): does not support bool input")
        if dim is None:
            _check_nonempty(name, x, (), IndexError, hint="")
            return TensorSpec((1,) * x.ndim if keepdim else (), _dt.int64, x.device, opmath(x.dtype))
        d = wrap_dim(dim, x.ndim)
        _check_nonempty(name, x, (d,))
        return TensorSpec(reduced_shape(x.shape, (d,), keepdim), _dt.int64, x.device, opmath(x.dtype))
    return meta


def _index_kernel(pick):
    def kernel(spec, x, dim, keepdim):
        a = x.astype(spec.compute.np, copy=False)
        if dim is None or x.ndim == 0:
            return pick(a.reshape(-1), 0).reshape(spec.shape)
        d = wrap_dim(dim, x.ndim)
        idx = pick(a, d)
        return idx if keepdim else np.squeeze(idx, d)
    return kernel


def _unsupported_bool(kernel_name):
    def check(x):
        if x.dtype is _dt.bool:
            raise NotImplementedError(f"\"{kernel_name}\" not implemented for 'Bool'")
    return check


def _select_meta(name, check):
    def meta(x, dim, keepdim):
        d = wrap_dim(dim, x.ndim)
        _check_nonempty(name, x, (d,))
        check(x)  # (after the dim's checks, as torch: median of an empty bool tensor over dim 0)
        shape = reduced_shape(x.shape, (d,), keepdim)
        return TensorSpec(shape, x.dtype, x.device, opmath(x.dtype)), TensorSpec(shape, _dt.int64, x.device)
    return meta


def _select_kernel(pick):
    def kernel(spec, x, dim, keepdim):
        a = x.astype(spec[0].compute.np, copy=False)
        if x.ndim == 0:
            return np.array(a), np.zeros((), np.int64)
        d = wrap_dim(dim, x.ndim)
        idx = pick(a, d)
        if a.flags.c_contiguous and idx.size:  # (one flat take: take_along_axis indexes with a full array per dim)
            values = a.reshape(-1).take(flat_positions(a.shape, d, idx))
        else:
            values = np.take_along_axis(a, idx, axis=d)
        return (values, idx) if keepdim else (np.squeeze(values, d), np.squeeze(idx, d))
    return kernel


def _no_check(x):
    return None


for _name, _pick in (("argmax", _argmax), ("argmin", _argmin)):
    defop(f"{_name}(Tensor self, int? dim=None, bool keepdim=False) -> Tensor", meta=_index_meta(_name),
          cpu=_index_kernel(_pick), kind="reduction", variants=_ALL_FORMS,
          doc=f"Index of the {_name[3:]}imum over ``dim`` (over the flattened input by default); "
              "the first one on ties, the first NaN if any.")

def _values_written(out, x, dim, keepdim):
    """Where max/min/median.dim write an out tensor: with the reduced dim kept (as torch's kernels), so that
    values written over ``x``'s own memory overlap it fully, not partly, when that dim has size 1."""
    if x.ndim == 0:
        return out
    d = wrap_dim(dim, x.ndim)
    shape = tuple(x.shape[:d]) + tuple(x.shape[d + 1:])
    if keepdim and tuple(out.shape) == shape[:d] + (1,) + shape[d:]:
        return out
    return written_with_dim(out, shape, d)


for _name, _pick, _check, _what in (
        ("max", _argmax, _no_check, "maximum"),
        ("min", _argmin, _no_check, "minimum"),
        ("median", _median_index, _unsupported_bool("median_out"), "lower median")):
    defop(f"{_name}.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
          meta=_select_meta(_name, _check), cpu=_select_kernel(_pick), kind="reduction", variants=_ALL_FORMS,
          overlap="partial", overlap_written=_values_written,
          doc=f"The {_what} over ``dim`` and its index, as a ``(values, indices)`` namedtuple.")


def _median_meta(x):
    if x.numel():  # (torch answers an empty input before it looks at the dtype)
        _unsupported_bool("median_cpu")(x)
    return TensorSpec((), x.dtype, x.device, opmath(x.dtype))


def _median_cpu(spec, x):
    a = x.astype(spec.compute.np, copy=False).reshape(-1)
    if a.size == 0:
        # torch's answer is NaN cast to the dtype: INT64_MIN for int64, 0 for int8, True for bool
        return convert(np.array(np.nan), spec.dtype.np)
    return a[_median_index(a, 0)].reshape(())


defop("median(Tensor self) -> Tensor", meta=_median_meta, cpu=_median_cpu, kind="reduction",
      variants=("function", "method"),
      doc="The lower median of all elements (NaN if any element is NaN, or if there are none).")


def _elementwise(fname):
    def composite(x, other):
        return FUNCTIONS[fname](x, other)
    return composite


for _name, _pointwise in (("max", "maximum"), ("min", "minimum")):
    defop(f"{_name}.other(Tensor self, Tensor other) -> Tensor", composite=_elementwise(_pointwise),
          variants=_ALL_FORMS, overlap="partial", doc=f"The elementwise {_pointwise} of two tensors (``jitorch.{_pointwise}``).")


# Moments: std and var with torch's three overloads, std_mean and var_mean --------------

def _moment_meta(name):
    def meta(x, dim, correction, keepdim):
        if not x.dtype.is_floating_point:
            raise RuntimeError("std and var only support floating point and complex dtypes")
        n = reduced_count(x.shape, numpy_axis(x, dim))
        if n - (1 if correction is None else correction) <= 0:
            registry.meta_warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than "
                               "the reduction factor (input numel divided by output numel).")
        shape = reduced_shape(x.shape, reduction_dims(x, dim), keepdim)
        return TensorSpec(shape, x.dtype, x.device, opmath(x.dtype))
    return meta


def moment_divisor(n, correction):
    """What var and std divide the squared deviations' sum of ``n`` elements by: ``n - correction``, none
    below 0 (a correction of ``n`` or more gives inf or NaN), and 0 for no elements, whatever the correction:
    torch's variance of nothing is NaN (a negative correction does not make it 0)."""
    return max(n - (1 if correction is None else correction), 0) if n else 0


def _moment_kernel(root):
    def kernel(spec, x, dim, correction, keepdim):
        a = x.astype(spec.compute.np, copy=False)
        axis = numpy_axis(x, dim)
        n = reduced_count(a.shape, axis)
        dof = moment_divisor(n, correction)
        dev = a - add_reduce(a, axis, True) / n
        var = add_reduce(dev * dev, axis, keepdim) / dof
        return np.sqrt(var) if root else var
    return kernel


# torch's overloads, in resolution order: arguments after self -> (dim, correction, keepdim).
_MOMENT_FORMS = (
    ("", "bool unbiased=True", lambda unbiased: (None, int(unbiased), False)),
    (".dim", "int[]? dim, bool unbiased=True, bool keepdim=False",
     lambda dim, unbiased, keepdim: (dim, int(unbiased), keepdim)),
    (".correction", "int[]? dim=None, *, Scalar? correction=None, bool keepdim=False",
     lambda dim, correction, keepdim: (dim, correction, keepdim)),
)


def _legacy_moment(name, canonical):
    def composite(x, *rest):
        return OPS[f"{name}.correction"](x, *canonical(*rest))
    return composite


def moments(x, dim, correction, keepdim, name="var"):
    """``(var or std, mean)`` over ``dim``, two passes, the mean the sum over the count: what the normalisation
    layers compute (`var_mean` adds torch's Welford infinities to the mean)."""
    return OPS[f"{name}.correction"](x, dim, correction, keepdim), OPS["mean"](x, dim, keepdim, None)


def _moment_with_mean(name, canonical):
    def composite(x, *rest):
        if not x.dtype.is_floating_point:
            raise RuntimeError(f"{name}_mean only support floating point and complex dtypes")
        dim, correction, keepdim = canonical(*rest)
        with registry.warnings_renamed(f"{name}():", f"{name}_mean():"):  # torch's names the function called
            spread, mean = moments(x, dim, correction, keepdim, name)
        return spread, _welford_infinities(x, dim, keepdim, mean)
    return composite


def _welford_infinities(x, dim, keepdim, mean):
    """``mean`` as torch's var_mean/std_mean give it: their CPU kernel accumulates the mean by Welford's update
    ``mean += (v - mean) / k``, which is NaN once an infinity is followed by any element (``[inf, 1]``; ``[1, inf]``
    is inf), where the sum over the count is infinite. Elements in index order: torch's for a contiguous input.
    Eagerly the fix is made only where the mean has an infinity; a trace records it always. (A float32 sum past
    the float range stays inf: torch's Welford mean is accumulated in double.)"""
    dims = reduction_dims(x, dim) or tuple(range(x.ndim))
    if x.ndim == 0 or any(x.shape[d] == 0 for d in dims):
        return mean  # one element, or none: the sum over the count is Welford's
    f = FUNCTIONS
    if not registry.DISPATCH_HOOKS and (mean.device.type == "meta" or not bool(f["any"](f["isinf"](mean)))):
        return mean  # (a meta tensor has no values to fix)
    last = x
    for d in dims:
        last = last.narrow(d, x.shape[d] - 1, 1)
    if not keepdim:
        last = last.squeeze(dims)
    count = f["sum"](f["isinf"](x), dims, keepdim)
    welford_nan = f["logical_and"](count > 0, f["logical_not"](f["logical_and"](count == 1, f["isinf"](last))))
    # (v + -0.0 is v, signed zeros too; the gradient stays the mean's)
    return mean + f["where"](welford_nan, float("nan"), -0.0).to(mean.dtype).detach()


for _name, _what in (("std", "Standard deviation"), ("var", "Variance")):
    _doc = (f"{_what} over ``dim`` dividing by ``N - correction`` (``unbiased=True`` is correction 1); "
            "half types compute in float32.")
    for _suffix, _args, _canonical in _MOMENT_FORMS:
        _schema = f"{_name}{_suffix}(Tensor self, {_args}) -> Tensor"
        if _suffix == ".correction":
            defop(_schema, meta=_moment_meta(_name), cpu=_moment_kernel(_name == "std"), kind="reduction",
                  variants=_ALL_FORMS, doc=_doc, input_from_out=True)
        else:
            defop(_schema, composite=_legacy_moment(_name, _canonical), variants=_ALL_FORMS, doc=_doc,
                  input_from_out=True)
    for _suffix, _args, _canonical in _MOMENT_FORMS:
        defop(f"{_name}_mean{_suffix}(Tensor self, {_args}) -> (Tensor, Tensor)",
              composite=_moment_with_mean(_name, _canonical), variants=("function",),
              doc=f"``({_name}, mean)`` over ``dim`` in one call.")


# Norms ---------------------------------------------------------------------------

def norm_order(p, dim):
    """The vector order torch.norm uses for ``p``, or "matrix" when it calls linalg.matrix_norm."""
    if isinstance(p, str):
        return 2.0 if p == "fro" and (dim is None or len(dim) <= 2) else "matrix"
    if p is None:
        return 2.0
    if not isinstance(p, Number) or isinstance(p, complex):
        raise TypeError(f"norm(): argument 'p' must be a Number or str, not {type(p).__name__}")
    return float(p)


def _norm_dtype(kind, x, dtype):
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"linalg.{kind}_norm: Expected a floating point or complex tensor as input. "
                           f"Got {scalar_name(x.dtype)}")
    if dtype is not None and _dt.promote_types(x.dtype, dtype) is not dtype:
        raise RuntimeError(f"linalg.{kind}_norm: the dtype of the input ({scalar_name(x.dtype)}) should be "
                           f"convertible without narrowing to the specified dtype ({scalar_name(dtype)})")
    out = dtype or x.dtype
    return out, opmath(out)


def _matrix_dims(x, p, dim):
    if x.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    dims = tuple(range(x.ndim)) if dim is None else reduction_dims(x, dim)
    if len(dims) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dims))}")
    if p != "nuc":
        raise RuntimeError(f"linalg.matrix_norm: Order {p} not supported.")
    return dims


def _norm_meta(x, p, dim, keepdim, dtype):
    order = norm_order(p, dim)
    if order == "matrix":
        out, compute = _norm_dtype("matrix", x, dtype)
        dims = _matrix_dims(x, p, dim)
        if x.dtype in (_dt.float16, _dt.bfloat16):  # torch's SVD has no half kernels
            raise RuntimeError(f"linalg.matrix_norm: Low precision dtypes not supported. Got {scalar_name(x.dtype)}")
    else:
        out, compute = _norm_dtype("vector", x, dtype)
        dims = reduction_dims(x, dim)
        if order < 0 or order == math.inf:
            _check_vector_norm_nonempty(x, dims, order)
    return TensorSpec(reduced_shape(x.shape, dims, keepdim), out, x.device, compute)


def _check_vector_norm_nonempty(x, dims, order):
    what = f"the {order:g} norm on"
    if not dims and math.prod(x.shape) == 0:
        raise RuntimeError(f"linalg.vector_norm cannot compute {what} an empty tensor because the operation "
                           "does not have an identity")
    for d in dims:
        if x.ndim and x.shape[d] == 0:
            raise RuntimeError(f"linalg.vector_norm cannot compute {what} the dimension {d} because this "
                               "dimension is empty and the operation does not have an identity")


def _vector_norm(a, order, axis, keepdims):
    if order == 2:  # (``|a| ** 2`` is NumPy's square; a sum of squares needs no array of them: `add_reduce`)
        return add_reduce(a, axis, keepdims, squares=True) ** (1 / order)
    m = np.abs(a)
    if order == math.inf:
        return np.max(m, axis=axis, keepdims=keepdims)
    if order == -math.inf:
        return np.min(m, axis=axis, keepdims=keepdims)
    if order == 0:
        return np.asarray(np.count_nonzero(m, axis=axis, keepdims=keepdims), m.dtype)
    if order == 1:
        return add_reduce(m, axis, keepdims)
    return add_reduce(m ** order, axis, keepdims) ** (1 / order)


def _nuclear_norm(a, dims, keepdims):
    s = np.linalg.svd(np.moveaxis(a, dims, (-2, -1)), compute_uv=False).sum(-1)
    return np.expand_dims(s, dims) if keepdims else s


def _norm_cpu(spec, x, p, dim, keepdim, dtype):
    a = _through_dtype(x, spec)
    order = norm_order(p, dim)
    if order == "matrix":
        return _nuclear_norm(a, _matrix_dims(x, p, dim), keepdim)
    return _vector_norm(a, order, numpy_axis(x, dim), keepdim)


defop("norm(Tensor self, Any p=\"fro\", int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
      meta=_norm_meta, cpu=_norm_cpu, kind="reduction", variants=_ALL_FORMS,
      out_copies=lambda args: args[1] == "nuc",  # (torch's out= form of the nuclear norm: its result copy_-ed)
      doc="The ``p``-norm over ``dim`` as torch.norm: a number ``p`` (incl. inf, -inf, 0) or 'fro' is the vector "
          "norm of the elements over ``dim`` (all by default); 'nuc' the nuclear norm over two dims.")


def _dist(x, other, p):
    difference = x - other
    if not difference.dtype.is_floating_point:
        raise RuntimeError("norm(): input dtype should be either floating point or complex. "
                           f"Got {scalar_name(difference.dtype)} instead.")
    return difference.norm(p)


defop("dist(Tensor self, Tensor other, Scalar p=2) -> Tensor", composite=_dist, kind="reduction",
      doc="The ``p``-norm of ``self - other`` (broadcast), over every element.")


# Scans and softmax: one dim, the input's shape -------------------------------------

def _scan_meta(name):
    def meta(x, dim, dtype):
        wrap_dim(dim, x.ndim)
        # (also the dtype of a bool out=, which the scan computes in); torch copies a 0-d or empty input
        if dtype is _dt.bool and x.ndim and math.prod(x.shape):
            raise NotImplementedError(f"\"{name}_out_cpu\" not implemented for 'Bool'")
        out, compute = _accumulated(name, x, dtype)
        return TensorSpec(x.shape, out, x.device, compute)
    return meta


def _scan_kernel(fn):
    def kernel(spec, x, dim, dtype):
        a = _through_dtype(x, spec)
        if x.ndim == 0:
            return np.array(a)
        return fn(a, axis=wrap_dim(dim, x.ndim))
    return kernel


for _name, _fn, _what in (("cumsum", np.cumsum, "sums"), ("cumprod", np.cumprod, "products")):
    defop(f"{_name}(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor", meta=_scan_meta(_name),
          cpu=_scan_kernel(_fn), kind="scan", variants=("function", "method", "inplace", "out"),
          dtype_from_out=_name in _DTYPE_FROM_OUT,
          doc=f"Cumulative {_what} along ``dim``; integers and bools accumulate as int64.")


# ``np.max`` and ``np.sum`` of an array are these ufuncs' reductions, called through Python wrappers that cost
# more than softmax's arithmetic on a small tensor
_max_of, _sum_of = np.maximum.reduce, add_reduce


def _softmax(a, axis):
    if a.size >= threads.ROWS_SPLIT_MIN and _split_rows(a, axis):
        return _by_rows(_softmax_rows, a)
    if _one_wide(a, axis):
        return _softmax_one_wide(a)
    if _one_row(a, axis):
        return _softmax_one_row(a)
    e = np.exp(a - _max_of(a, axis=axis, keepdims=True, initial=-np.inf))
    return e / _sum_of(e, axis=axis, keepdims=True)


def _one_wide(a, axis):
    """Whether (log-)softmax of ``a`` along ``axis`` takes rows of one element, in a C-contiguous array:
    there NumPy's two reductions (0.9 us each on a tiny array, most of a tiny softmax) give each element
    itself, bit for bit (``max(-inf, v)`` is ``v``, NaN included; a sum of one term ``e`` is ``e``), so the
    formula uses the element for them (`_softmax_one_wide`). (C-contiguous: then ``a - a`` has the layout
    ``a - max`` has, and NumPy's exp runs the same loop on it.)"""
    return axis is not None and a.shape[axis] == 1 and a.flags.c_contiguous


# Softmax and log_softmax of rows of one element, the general formulas with each row's max and sum the element
# itself, and fewer NumPy calls than they take, bit for bit: ``a - a`` is +0 or a NaN, so ``e = exp(a - a)`` is 1
# or a NaN and softmax's ``e / e`` is ``e`` (1 / 1; a NaN operand's NaN is the quotient, as x86 and Arm give the
# first NaN operand); log_softmax's ``shifted - log(exp(shifted))`` is ``shifted`` (0 - 0; the first NaN).
# tests/ops/test_softmax_one_wide.py compares both with the general formulas on every NaN payload class.
def _softmax_one_wide(a):
    return np.exp(np.subtract(a, a))


def _log_softmax_one_wide(a):
    return np.subtract(a, a)


def _one_row(a, axis):
    """Whether (log-)softmax of ``a`` along ``axis`` takes one row, of at most `summation.BLOCK` elements, in a
    C-contiguous array (a sampling step's logits): there the row's max and sum are taken into 0-d arrays
    (`_softmax_one_row`). NumPy broadcasts a (1, 1) operand against a row through its general iterator, 0.7 us
    more per call than a 0-d one, twice per softmax; the reductions run the same loop on the same elements
    either way, and each elementwise step computes each element alike, so the bits are the general formula's."""
    return axis is not None and a.size == a.shape[axis] and a.size <= BLOCK and a.flags.c_contiguous


def _row_max(a):
    """The max of every element of ``a`` (a float array), from -inf as the general formula's, as a 0-d array."""
    return _max_of(a, None, None, np.empty((), a.dtype), False, -np.inf)


def _row_sum(e):
    # (at most `BLOCK` elements: `add_reduce` is NumPy's own sum, called here with a 0-d ``out``)
    return np.add.reduce(e, None, None, np.empty((), e.dtype))


def _softmax_one_row(a):
    e = np.exp(np.subtract(a, _row_max(a)))
    return np.divide(e, _row_sum(e), out=e)


def _log_softmax_one_row(a):
    shifted = np.subtract(a, _row_max(a))
    norm = _row_sum(np.exp(shifted))
    return np.subtract(shifted, np.log(norm, out=norm), out=shifted)


# Whether a one-wide formula ends with an exp (softmax's) after ``a - a``: the fast path makes the same calls
# one by one, each `fp_errors.silenced`, which costs less than one silenced Python call making them both
_ONE_WIDE_EXP = {_softmax_one_wide: True, _log_softmax_one_wide: False}


def _softmax_rows(a, out):
    """`_softmax`'s passes along the rows of 2-D ``a``, into ``out``."""
    np.subtract(a, _max_of(a, axis=1, keepdims=True, initial=-np.inf), out=out)
    np.exp(out, out=out)
    np.divide(out, _sum_of(out, axis=1, keepdims=True), out=out)


def _log_softmax(a, axis):
    if a.size >= threads.ROWS_SPLIT_MIN and _split_rows(a, axis):
        return _by_rows(_log_softmax_rows, a)
    if _one_wide(a, axis):
        return _log_softmax_one_wide(a)
    if _one_row(a, axis):
        return _log_softmax_one_row(a)
    shifted = a - _max_of(a, axis=axis, keepdims=True, initial=-np.inf)
    norm = np.log(_sum_of(np.exp(shifted), axis=axis, keepdims=True))
    return np.subtract(shifted, norm, out=shifted) if shifted.ndim else shifted - norm  # (0-d: a NumPy scalar)


def _log_softmax_rows(a, out):
    """`_log_softmax`'s passes along the rows of 2-D ``a``, into ``out``."""
    np.subtract(a, _max_of(a, axis=1, keepdims=True, initial=-np.inf), out=out)
    np.subtract(out, np.log(_sum_of(np.exp(out), axis=1, keepdims=True)), out=out)


def _split_rows(a, axis):
    """Whether a large (log-)softmax of ``a`` along ``axis`` runs by rows on the team (`threads.by_rows`): along
    the last dim of a C-contiguous array, at more than one thread."""
    return axis == a.ndim - 1 and a.ndim > 1 and a.flags.c_contiguous and threads.get_num_threads() > 1


def _by_rows(fn, a):
    out = np.empty(a.shape, a.dtype)
    threads.by_rows(fn, a.reshape(-1, a.shape[-1]), out.reshape(-1, a.shape[-1]))
    return out


# (op name, NumPy dtype name, row width) -> a compiled row kernel (codegen/rows.py's `RowKernel`: called on a
# C-contiguous float array, it returns the softmax of its rows) or None; set by the code generator, which the
# ops layer cannot import
ROW_KERNEL = None
# From this many elements an eager softmax along the last dim runs the row kernel: at 2**14 float32 elements
# NumPy's five passes took ~45 us against ~18, and a width's kernel costs ~50 ms to build once per process
# (then it is read from the kernel cache), which smaller calls would take long to win back.
ROW_KERNEL_MIN = 1 << 14


def _softmax_through_kernel(name, fn, a, axis):
    """``fn(a, axis)`` (NumPy's softmax or log_softmax), through the registered row kernel where ``a`` is a
    large C-contiguous float32/float64 array taken along its last dim."""
    if (ROW_KERNEL is not None and a.size >= ROW_KERNEL_MIN and axis == a.ndim - 1 and a.flags.c_contiguous
            and a.dtype in _ROW_DTYPES):
        kernel = ROW_KERNEL(name, a.dtype.name, a.shape[-1])
        if kernel is not None:
            return kernel(a)
    return fn(a, axis)


_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _softmax_meta(name):
    def meta(x, dim, dtype):
        d = wrap_dim(dim, x.ndim)
        out = dtype or x.dtype
        if not out.is_floating_point and 0 not in x.shape:  # torch's kernel checks, never run when empty
            kernel = f"{name}_lastdim_kernel_impl" if d == max(x.ndim, 1) - 1 else f"{name}_kernel_impl"
            raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(out)}'")
        return TensorSpec(x.shape, out, x.device, opmath(out))
    return meta


def _softmax_kernel(name, fn):
    def kernel(spec, x, dim, dtype):
        if x.size == 0:  # of any dtype (`_softmax_meta`)
            return np.empty(x.shape, spec.dtype.np)
        a = _through_dtype(x, spec)
        return _softmax_through_kernel(name, fn, a, wrap_dim(dim, x.ndim) if x.ndim else None)
    return kernel


def _softmax_entry(op, fn, one_wide, one_row):
    """``entry(general)`` (`registry.OpDef.entry`): ``softmax(input, dim, dtype=None)`` of a CPU float tensor along a
    dim given as a Python int, without the general path's conversion and meta rule, in the public variant's one
    frame; every other call (a dispatch hook or autocast on, ``out=``, ``axis=``, ``dtype=``, other dtypes or
    devices, a dim out of range) goes to ``general``, or, with ``general`` None, gives None. Its tests are written
    out and a small input goes to ``fn`` at once (rows of one element to ``one_wide``, ``fn``'s own formula for
    them, one row to ``one_row``): on a tiny tensor each Python call is a measurable share of the op."""
    contiguous = registry.CONTIGUOUS_STRIDES
    hooks, autocast, absent, missing = registry.DISPATCH_HOOKS, registry._AUTOCAST_STATE, registry.ABSENT, \
        registry.MISSING
    silenced, when_busy = fp_errors.silenced, fp_errors.when_busy
    subtract, exp, then_exp = np.subtract, np.exp, _ONE_WIDE_EXP[one_wide]

    def entry(general):
        miss = registry.entry_miss(general)
        Tensor, cpu, fast_dtypes = registry.Tensor, CPU, _FAST_DTYPES  # (read from the closure: no global lookups)
        fresh = Tensor._fresh

        def softmax(input, dim=missing, dtype=None, *, axis=absent, out=None):
            # (a plain tensor's class tested before isinstance, whose call is a measurable share here)
            if (hooks or out is not None or axis is not absent or autocast.key is not None or dtype is not None
                    or dim.__class__ is not int or input.__class__ is not Tensor and not isinstance(input, Tensor)):
                return miss((input, dim, dtype), axis=axis, out=out)
            shape = input._shape
            n = len(shape)
            dt = input.dtype
            if input.device is not cpu or dt not in fast_dtypes or not -n <= dim < n:  # (n == 0: not served)
                return miss((input, dim, dtype))
            a = input._arr
            if a is None:
                a = input._array()
            strides = contiguous.get(shape)
            width = shape[dim]
            flat = strides is not None and input._stride == strides  # (then `_one_wide` and `_one_row` hold here)
            if width == 1 and flat:
                try:  # (ufuncs' result on C-contiguous ``a``: C-contiguous)
                    r = silenced(subtract, a, a)
                except RuntimeError as e:
                    r = when_busy(e, subtract, a, a)
                if then_exp:  # (of +0 or a quiet NaN, which raises no floating-point error: called as it is)
                    r = exp(r)
                result = fresh(r, dt, shape, strides)
            elif flat and width == a.size and width <= BLOCK:
                try:  # (C-contiguous, ``a``'s shape)
                    r = silenced(one_row, a)
                except RuntimeError as e:
                    r = when_busy(e, one_row, a)
                result = fresh(r, dt, shape, strides)
            else:
                token = fp_errors.enter()
                try:
                    r = fn(a, dim % n) if a.size < ROW_KERNEL_MIN else _softmax_through_kernel(op.name, fn, a, dim % n)
                finally:
                    fp_errors.leave(token)
                if strides is not None and r.flags.c_contiguous:  # (r has a's shape)
                    result = fresh(r, dt, shape, strides)
                else:
                    result = registry.contiguous_result(r, dt)
            if input._requires_grad and registry.records_grad():
                return registry.record_fast(op, (input, dim, None), result)
            return result
        return softmax
    return entry


def _softmax_fast(entry):
    """`registry.OpDef.fast` of an op whose ``entry`` is `_softmax_entry`'s: the entry without its general path
    (made at the first call: the entry reads the tensor class, which `registry.install` sets)."""
    served = []

    def fast(args, record=True):
        x = args[0]
        if not record and isinstance(x, registry.Tensor) and x._requires_grad and registry.records_grad():
            return None
        if not served:
            served.append(entry(None))
        return served[0](*args)
    return fast


for _name, _fn, _one, _row, _what in (
        ("softmax", _softmax, _softmax_one_wide, _softmax_one_row, "``exp(x) / sum(exp(x))``"),
        ("log_softmax", _log_softmax, _log_softmax_one_wide, _log_softmax_one_row, "``x - logsumexp(x)``")):
    _op = defop(f"{_name}(Tensor self, int dim, ScalarType? dtype=None) -> Tensor", meta=_softmax_meta(_name),
                cpu=_softmax_kernel(_name, _fn), kind="softmax", variants=_ALL_FORMS,
                out_autograd_fallback=lambda args: True,
                doc=f"{_what} along ``dim``, shifted by the max for stability; ``dtype=`` casts the input first.")
    _op.entry = _softmax_entry(_op, _fn, _one, _row)
    _op.fast = _softmax_fast(_op.entry)


def _log_softmax_stats_meta(x, dim):
    if not x.dtype.is_floating_point or x.ndim == 0 or x.shape[wrap_dim(dim, x.ndim)] == 0:
        raise RuntimeError(f"_log_softmax_stats: expected a floating point tensor with elements along dim {dim}, "
                           f"got {scalar_name(x.dtype)} of shape {list(x.shape)}")
    spec = TensorSpec(reduced_shape(x.shape, (wrap_dim(dim, x.ndim),), True), x.dtype, x.device)
    return spec, spec


def _log_softmax_stats_kernel(spec, x, dim):
    d = wrap_dim(dim, x.ndim)
    with np.errstate(all="ignore"):  # (NaN and infinite rows give NaN log-probs, as log_softmax's kernel)
        m = np.max(x, axis=d, keepdims=True)
        return m, np.log(np.exp(x - m).sum(axis=d, keepdims=True)).astype(x.dtype)


_LOG_SOFTMAX_STATS = defop("_log_softmax_stats(Tensor self, int dim) -> (Tensor max, Tensor log_sum)",
                           meta=_log_softmax_stats_meta, cpu=_log_softmax_stats_kernel, kind="softmax",
                           variants=(),
                           doc="log_softmax's per-row statistics along ``dim`` (kept, of size one): the max ``m`` and "
                               "``log(sum(exp(x - m)))``, so that ``(x - m) - log_sum`` is ``log_softmax(x, dim)``. "
                               "The compiler's ``lse`` pass makes it where the log-probs need not be written.")
