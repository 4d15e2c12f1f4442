"""Ops that look values up or count them: ``searchsorted``/``bucketize``, ``isin``, ``unique_consecutive``,
``bincount``, ``histc`` and ``histogram``.

They are NumPy kernels; their results are indices, masks or counts (no gradient). ``bincount`` and
``unique_consecutive`` have sizes only the data decides.
"""

from __future__ import annotations

import math
from numbers import Number

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.casts import convert
from ..runtime.strided import list_str, wrap_dim
from . import functions
from .creation import lin_values
from .meta import opmath
from .registry import TensorSpec, cpp_name, defop, scalar_name


def _sortable(a):
    """NumPy cannot order ml_dtypes' half types: their float32 values order the same."""
    return a.astype(np.float32) if a.dtype in _dt.HALF_NP else a


def _as_tensor(value, like):
    """A Python number as a 0-d tensor on ``like``'s device (floats in float64, so comparisons are exact)."""
    dtype = _dt.float64 if isinstance(value, float) else None
    return functions.full((), value, dtype=dtype, device=like.device)


# searchsorted and bucketize ----------------------------------------------------------------------------

def _searchsorted_meta(boundaries, x, out_int32, right, side, sorter):
    if side is not None and side not in ("left", "right"):
        raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
    if sorter is not None:
        if sorter.dtype is not _dt.int64:
            raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype "
                               f"{scalar_name(sorter.dtype)}")
        if tuple(sorter.shape) != tuple(boundaries.shape):
            raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same size, but got boundary "
                               f"tensor {list_str(boundaries.shape)}and got sorter tensor {list_str(sorter.shape)}")
    if side == "left" and right:
        raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left while "
                           "right was True")
    if x.ndim == 0 and boundaries.ndim != 1:
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension "
                           f"is 1, but we got boundaries tensor dim({boundaries.ndim}) and input value's dim(0) numel(1)")
    if boundaries.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
    if boundaries.ndim != 1 and tuple(boundaries.shape[:-1]) != tuple(x.shape[:-1]) or (
            boundaries.ndim != 1 and boundaries.ndim != x.ndim):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions "
                           f"of boundaries tensor and input value tensor must match, but we got boundaries tensor "
                           f"{list_str(boundaries.shape)} and input value tensor {list_str(x.shape)}")
    return TensorSpec(x.shape, _dt.int32 if out_int32 else _dt.int64, x.device)


class _Geometry:
    """An array's jitorch dtype and ndim: what `dtypes.result_type` reads of an operand."""

    def __init__(self, a):
        self.dtype, self.ndim = _dt.from_numpy_dtype(a.dtype), a.ndim


def _in_common_dtype(boundaries, x):
    """Both arrays in torch's result type of the two, as its search compares them: a 0-d value beside a
    narrower integer sequence wraps into the sequence's dtype, an integer sequence beside float values is
    rounded to their dtype."""
    common = _dt.result_type(_Geometry(boundaries), _Geometry(x)).np
    return tuple(v if v.dtype == common else convert(v, common) for v in (boundaries, x))


def _searchsorted_cpu(spec, boundaries, x, out_int32, right, side, sorter):
    side = "right" if right or side == "right" else "left"
    b, a = (_sortable(v) for v in _in_common_dtype(boundaries, x))
    if sorter is not None:
        if sorter.size and (sorter.min() < 0 or sorter.max() >= sorter.shape[-1]):
            raise RuntimeError("torch.searchsorted(): sorter index out of range")
        b = np.take_along_axis(b, sorter, -1)
    rows = math.prod(b.shape[:-1])  # (1 for a 1-D sequence, which every value is searched in)
    rows_a = a.reshape(rows, a.size // rows if rows else 0)
    return _binary_search(b.reshape(rows, b.shape[-1]), rows_a, side == "right").reshape(a.shape)


def _binary_search(rows_b, rows_a, right):
    """torch's CPU binary search of each row of ``rows_a`` in the same row of ``rows_b``: the first index whose
    value is not below (``right``: not at most) the value searched, by comparisons false for NaN, so that a
    sequence holding NaN (or not sorted) gives torch's index, where NumPy's search orders NaN last and
    narrows its range from the previous value's answer."""
    n = rows_b.shape[1]
    start = np.zeros(rows_a.shape, np.int64)
    end = np.full(rows_a.shape, n, np.int64)
    rows = np.arange(rows_b.shape[0])[:, None]
    with np.errstate(invalid="ignore"):
        while True:
            active = start < end
            if not active.any():
                return start
            mid = start + ((end - start) >> 1)
            mid_value = rows_b[rows, np.minimum(mid, n - 1)]
            onward = ~(mid_value > rows_a) if right else ~(mid_value >= rows_a)
            start = np.where(active & onward, mid + 1, start)
            end = np.where(active & ~onward, mid, end)


_SEARCH_OPTIONS = "*, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None"
defop(f"searchsorted.Tensor(Tensor sorted_sequence, Tensor self, {_SEARCH_OPTIONS}) -> Tensor",
      meta=_searchsorted_meta, cpu=_searchsorted_cpu, kind="sort", variants=("function", "out"),
      doc="For each element of ``self``, the index where it would be inserted into the sorted last dim of "
          "``sorted_sequence`` to keep it sorted (after equal values with ``right=True`` or ``side='right'``).")


def _wrapped_number(value, boundaries):
    """A number searched for, as torch wraps it: a 0-d tensor of its result type with ``boundaries`` (an int
    beside a uint8 sequence wraps into uint8: -2 is 254; a float beside float32 ones is rounded to float32)."""
    return _as_tensor(value, boundaries).to(_dt.result_type(boundaries, value))


def _searchsorted_scalar(boundaries, value, out_int32, right, side, sorter):
    return functions.searchsorted(boundaries, _wrapped_number(value, boundaries), out_int32=out_int32, right=right,
                                  side=side, sorter=sorter)


defop(f"searchsorted.Scalar(Tensor sorted_sequence, Scalar self, {_SEARCH_OPTIONS}) -> Tensor",
      composite=_searchsorted_scalar, kind="sort", variants=("function",),
      doc="``searchsorted`` of one number: a 0-d index.")


def _bucketize(x, boundaries, out_int32, right):
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    x = _wrapped_number(x, boundaries) if isinstance(x, Number) else x
    return functions.searchsorted(boundaries, x, out_int32=out_int32, right=right)


for _overload, _type in (("Tensor", "Tensor"), ("Scalar", "Scalar")):
    defop(f"bucketize.{_overload}({_type} self, Tensor boundaries, *, bool out_int32=False, bool right=False) "
          "-> Tensor", composite=_bucketize, kind="sort", variants=("function", "out") if _type == "Tensor" else
          ("function",),
          doc="The index of the bucket of each element among the sorted 1-D ``boundaries`` (``searchsorted`` with "
              "the arguments swapped).")


# isin -----------------------------------------------------------------------------------------------------

def _check_isin_dtypes(*dtypes):
    """torch's isin refuses bool (and complex) inputs, a number's type included: ``isin(x, True)`` too."""
    for d in dtypes:
        if d is _dt.bool:
            raise RuntimeError("Unsupported input type encountered for isin(): Bool")


_WIDE_UNSIGNED = (_dt.uint16, _dt.uint32, _dt.uint64)


def _compares_pairs(n, tests):
    """Whether torch's isin of ``n`` elements among ``tests`` compares each pair (NumPy's size rule), rather
    than sorting the two flattened together: the two promote differently."""
    return tests < int(10.0 * n ** 0.145)


def _isin_meta(elements, test_elements, assume_unique, invert):
    _check_isin_dtypes(elements.dtype, test_elements.dtype)
    n = math.prod(elements.shape)
    if not n:  # (torch runs nothing, so promotes nothing)
        common = elements.dtype
    elif _compares_pairs(n, math.prod(test_elements.shape)):
        # the result type of the two (a 0-d one weighs less), in a kernel without the wide unsigned types
        common = _dt.result_type(elements, test_elements)
        if common in _WIDE_UNSIGNED:
            raise NotImplementedError(f"\"isin_default_cpu\" not implemented for '{scalar_name(common)}'")
    else:  # both flattened and concatenated: their dtypes promoted as any two (uint16 with int64 refused)
        common = _dt.promote_types(elements.dtype, test_elements.dtype)
    return TensorSpec(elements.shape, _dt.bool, elements.device, compute=common)


def _isin_cpu(spec, elements, test_elements, assume_unique, invert):
    # both compared in their common dtype, as torch: int64 16777217 is in float32 [16777216.]
    common = spec.compute.np
    return np.isin(_sortable(convert(elements, common)), _sortable(convert(test_elements, common)), invert=invert)


defop("isin.Tensor_Tensor(Tensor elements, Tensor test_elements, *, bool assume_unique=False, bool invert=False) "
      "-> Tensor", meta=_isin_meta, cpu=_isin_cpu, kind="index", variants=("function", "out"),
      doc="Whether each element of ``elements`` is among ``test_elements`` (or not, with ``invert``).")


def _isin_tensor_scalar(elements, test_element, assume_unique, invert):
    _check_isin_dtypes(elements.dtype, _dt.bool if isinstance(test_element, bool) else None)
    # torch's eq/ne with the number, which wraps it in the result type with the tensor (fuzz seed 7964168: -1
    # beside uint8 is 255, 0.1 beside float32 is float32's 0.1)
    return (functions.ne if invert else functions.eq)(elements, test_element)


def _isin_scalar_tensor(element, test_elements, assume_unique, invert):
    _check_isin_dtypes(_dt.bool if isinstance(element, bool) else None, test_elements.dtype)
    # torch wraps the number as a 0-d tensor that promotes as a number where pairs are compared (-1 beside
    # uint8 tests is 255) and as its own dtype (int64, float64) where the two are sorted together
    pairs = _compares_pairs(1, math.prod(test_elements.shape))
    element = (_wrapped_number if pairs else _as_tensor)(element, test_elements)
    return functions.isin(element, test_elements, assume_unique=assume_unique, invert=invert)


defop("isin.Tensor_Scalar(Tensor elements, Scalar test_element, *, bool assume_unique=False, bool invert=False) "
      "-> Tensor", composite=_isin_tensor_scalar, kind="index", variants=("function",),
      doc="Whether each element of ``elements`` equals ``test_element``.")
defop("isin.Scalar_Tensor(Scalar element, Tensor test_elements, *, bool assume_unique=False, bool invert=False) "
      "-> Tensor", composite=_isin_scalar_tensor, kind="index", variants=("function",),
      doc="Whether ``element`` is among ``test_elements``, as a 0-d bool tensor.")


# unique_consecutive -----------------------------------------------------------------------------------------

def unique_dim(x, dim):
    """``dim`` of ``x`` wrapped, for unique and unique_consecutive over slices; torch's errors where another
    dimension is empty (there would be no slices to compare, yet as many of them as ``dim`` is long)."""
    d = wrap_dim(dim, x.ndim)
    if sum(n == 0 for n in x.shape) > 1:
        raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
    if any(n == 0 for i, n in enumerate(x.shape) if i != d):
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    return d


def _unique_consecutive_meta(x, return_inverse, return_counts, dim):
    if dim is None:
        values, inverse = (None,), x.shape
    else:
        d = unique_dim(x, dim)
        values = tuple(None if i == d else n for i, n in enumerate(x.shape))
        inverse = (x.shape[d],)
    return (TensorSpec(values, x.dtype, x.device), TensorSpec(inverse, _dt.int64, x.device),
            TensorSpec((None,), _dt.int64, x.device))


def _unique_consecutive_cpu(spec, x, return_inverse, return_counts, dim):
    if dim is None:
        slices = x.reshape(-1, 1)
    else:
        d = wrap_dim(dim, x.ndim)
        moved = np.moveaxis(x, d, 0)
        slices = moved.reshape(moved.shape[0], math.prod(moved.shape[1:]))
    starts = np.ones(len(slices), bool)
    if len(slices) > 1:
        starts[1:] = np.any(slices[1:] != slices[:-1], axis=1)
    first = np.flatnonzero(starts)
    counts = np.diff(np.append(first, len(slices)))
    inverse = np.cumsum(starts) - 1
    if dim is None:
        values = x.reshape(-1)[first]
    else:
        values = np.moveaxis(np.take(moved, first, axis=0), 0, d)
    return values, inverse.reshape(spec[1].shape), counts


defop("_unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None) "
      "-> (Tensor values, Tensor inverse, Tensor counts)", meta=_unique_consecutive_meta,
      cpu=_unique_consecutive_cpu, kind="sort", variants=("function",),
      doc="The values left when each run of equal consecutive elements (slices along ``dim``) is cut to one, "
          "the index of each input element's run, and the runs' lengths.")


def _unique_consecutive(x, return_inverse, return_counts, dim):
    values, inverse, counts = functions._unique_consecutive(x, return_inverse, return_counts, dim)
    extra = (inverse,) * return_inverse + (counts,) * return_counts
    return (values, *extra) if extra else values


defop("unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None) -> Any",
      composite=_unique_consecutive, kind="sort", variants=("function", "method"),
      doc="Runs of equal consecutive elements cut to one; with ``return_inverse``/``return_counts`` also each "
          "element's run index and the run lengths (a tuple, as torch returns).")


# Counting: bincount, histc, histogram ------------------------------------------------------------------------

def _bincount_meta(x, weights, minlength):
    if x.dtype.is_floating_point or x.dtype is _dt.bool:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{scalar_name(x.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if x.ndim != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != x.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    dtype = _dt.int64 if weights is None else _dt.float32 if weights.dtype is _dt.float32 else _dt.float64
    return TensorSpec((None,), dtype, x.device)


def _bincount_cpu(spec, x, weights, minlength):
    if x.size and x.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else weights.astype(spec.dtype.np)
    return np.bincount(x, w, minlength)


defop("bincount(Tensor self, Tensor? weights=None, int minlength=0) -> Tensor", meta=_bincount_meta,
      cpu=_bincount_cpu, kind="reduction", variants=("function", "method"),
      autograd_fallback=lambda args: True,  # (torch's: weights that require grad give a result whose backward raises)
      doc="How often each value ``0..max(self)`` occurs in the 1-D non-negative integer ``self`` (at least "
          "``minlength`` bins), or the sum of ``weights`` at those positions.")


def _histc_range(x, bins, lo, hi):
    """torch.histc's outer edges: ``min``/``max``, the data's extremes when they are equal, widened by one
    either way when still equal."""
    lo, hi = float(lo), float(hi)
    if lo == hi and x.size:
        lo, hi = float(np.min(x)), float(np.max(x))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
    if lo >= hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    return lo, hi


def _histc_meta(x, bins, lo, hi):
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for '{scalar_name(x.dtype)}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    return TensorSpec((bins,), x.dtype, x.device, opmath(x.dtype))


def _linear_bins(a, edges, bins):
    """Each element's bin by torch's linear interpolation between the outer edges (no search), the last edge
    inclusive; -1 for elements outside them (and NaN). Each step is rounded to the input's dtype, as torch's
    half-type arithmetic rounds it."""
    def rounded(v):
        return v if a.dtype not in _dt.HALF_NP else convert(v, a.dtype).astype(np.float32)
    wide = a.astype(np.float32) if a.dtype in _dt.HALF_NP else a
    lo, hi = (wide.dtype.type(e) for e in (edges[0], edges[-1]))
    inside = (wide >= lo) & (wide <= hi)
    scaled = rounded(rounded(rounded(wide - lo) * wide.dtype.type(bins)) / rounded(np.asarray(hi - lo)))
    pos = np.where(inside, scaled, 0).astype(np.int64)
    return np.where(inside, np.minimum(pos, bins - 1), -1)


def _counts(bins, positions, weights, dtype):
    keep = positions >= 0
    w = None if weights is None else weights.reshape(-1)[keep.reshape(-1)]
    return np.bincount(positions[keep].reshape(-1), w, bins).astype(dtype)


def _histc_cpu(spec, x, bins, lo, hi):
    a = x.reshape(-1)
    lo, hi = _histc_range(_sortable(a), bins, lo, hi)
    edges = lin_values(lo, hi, bins + 1, spec.dtype)
    return _counts(bins, _linear_bins(a, edges, bins), None, spec.compute.np)


defop("histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor", meta=_histc_meta, cpu=_histc_cpu,
      kind="reduction", variants=("function", "method", "out"),
      doc="A histogram of ``bins`` equal bins between ``min`` and ``max`` (the data's range when both are 0); "
          "elements outside are ignored.")


def kernel_dtype(x, kernel="histogramdd", dtypes=(_dt.float32, _dt.float64)):
    """torch's error for a histogram's input of a dtype its CPU kernel ``kernel`` lacks (given edges, torch's
    histogram_cpu takes the half types too: fuzz seed 7300360), which torch dispatches on after its checks of the
    arguments. For an empty input it runs no such kernel, only histogram_cpu's, which takes the half types (fuzz seed
    5730044 of ``--export --edges 0.4``: ``histogram(v, 1, weight=v)`` of an empty bfloat16 ``v`` gave one empty bin)."""
    if x.numel() == 0:
        kernel, dtypes = "histogram_cpu", _HALVES_TOO
    if x.dtype not in dtypes:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(x.dtype)}'")


def _weight_checks(x, weight):
    """torch's checks of a histogram's weight: its dtype, then its number of elements."""
    if weight is None:
        return
    check_weight_dtype(x, weight)
    # torch reads both flattened (the input as N points of one dimension): any weight of as many elements
    # (fuzz seed 7200679: weights of shape [2, 1] for an input of [1, 1, 2] raised)
    if weight.numel() != x.numel():
        raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           f"input tensor excluding its innermost dimension, but got input with shape "
                           f"{list_str((x.numel(), 1))} and weight with shape {list_str((weight.numel(),))}")


def check_weight_dtype(x, weight):
    """torch.histogramdd's (and histogram's) error for a weight of another dtype than the input."""
    if weight.dtype is not x.dtype:
        raise RuntimeError("torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should "
                           f"have the same dtype, but got input({cpp_name(x.dtype)}), and "
                           f"weight({cpp_name(weight.dtype)})")


def _histogram_out_dtypes(out, x):
    """torch's error for an out tensor of histogram of another dtype than the input (it wrote into it after a cast:
    ``histogram(x, 3, out=(h, e))`` with ``x`` float16 and ``h`` float32 raised the kernel's NotImplementedError)."""
    for what, t, dim in zip(("hist", "bin_edges"), out, ("", " for dimension 0")):
        if t.dtype is not x.dtype:
            raise RuntimeError(f"torch.histogram: input tensor and {what} tensor should have the same dtype, but got "
                               f"input {cpp_name(x.dtype)} and {what} {cpp_name(t.dtype)}{dim}")


_HALVES_TOO = (_dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)


def _histogram_bins_inputs(x, bins, weight):
    """torch's checks of histogram's edges and weight (those of its out tensors follow, then its kernel's dtypes)."""
    if bins.dtype is not x.dtype:
        raise RuntimeError("torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                           f"input with dtype {cpp_name(x.dtype)} and bins for dimension 0 with dtype "
                           f"{cpp_name(bins.dtype)}")
    if bins.ndim != 1:
        raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, but got {bins.ndim} "
                           "dimensions in the bins tensor for dimension 0")
    if not bins.numel():
        raise RuntimeError("torch.histogramdd: bins tensor should have at least 1 element, but got 0 elements in "
                           "the bins tensor for dimension 0")
    _weight_checks(x, weight)


def _histogram_bins_out_check(out, x, bins, weight, density):
    _histogram_bins_inputs(x, bins, weight)
    _histogram_out_dtypes(out, x)


def _histogram_bins_meta(x, bins, weight, density):
    _histogram_bins_inputs(x, bins, weight)
    kernel_dtype(x, "histogram_cpu", _HALVES_TOO)
    n = max(bins.shape[0] - 1, 0)
    return TensorSpec((n,), x.dtype, x.device), TensorSpec(bins.shape, x.dtype, x.device)


def _upper_bound(edges, a):
    """For each element of ``a``, the first place in ``edges`` whose edge exceeds it, by the bisection of torch's
    kernel (std::upper_bound). Edges that do not increase give torch's bins, not NumPy's searchsorted's (which
    starts each search from the last key's place: fuzz seed 7896234, ``histogram(x, x)``)."""
    lo = np.zeros(a.shape, np.intp)
    count = np.full(a.shape, len(edges), np.intp)
    while count.any():
        half = count // 2
        middle = np.minimum(lo + half, len(edges) - 1)
        right = (count > 0) & ~(a < edges[middle])
        lo = np.where(right, middle + 1, lo)
        count = np.where(right, count - half - 1, half)
    return lo


def _searched_bins(a, edges):
    """Each element's bin by binary search among ``edges`` (the last edge inclusive), -1 outside them."""
    bins = len(edges) - 1
    inside = (a >= edges[0]) & (a <= edges[-1])
    pos = np.minimum(_upper_bound(edges, a) - 1, bins - 1)
    return np.where(inside, pos, -1)


def finite_range(lo, hi, dim=0):
    """torch's check of a histogram's outer edges (given, or the data's extremes)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"torch.histogramdd: dimension {dim}'s range [{lo:g}, {hi:g}] is not finite")


def _histogram_result(a, edges, weight, density, dtype):
    bins = len(edges) - 1
    hist = _counts(bins, _searched_bins(a, edges), weight, dtype)
    if density:
        widths = np.diff(edges)
        hist = hist / (hist.sum() * widths)
    return hist.astype(dtype), edges.astype(dtype)


def _histogram_bins_cpu(spec, x, bins, weight, density):
    # (a half type searched and counted in float32, which holds its values exactly; the result rounded to it)
    c = opmath(_dt.from_numpy_dtype(x.dtype)).np
    hist, edges = _histogram_result(x.reshape(-1).astype(c), bins.astype(x.dtype).astype(c),
                                    None if weight is None else weight.astype(c), density, c)
    return hist.astype(x.dtype), edges.astype(x.dtype)


# histogram is served by torch's autograd fallback (no derivative): its results require grad where an input does,
# a backward or a tangent through them raises, and its out= form refuses out tensors that require grad
defop("histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) "
      "-> (Tensor hist, Tensor bin_edges)", meta=_histogram_bins_meta, cpu=_histogram_bins_cpu, kind="reduction",
      variants=("function", "method", "out"), out_autograd_fallback=lambda args: True,
      autograd_fallback=lambda args: True,
      out_check=_histogram_bins_out_check,
      doc="A histogram over the bins between consecutive edges ``bins`` (the last bin includes its right edge), "
          "weighted by ``weight``, normalised to a density with ``density``; and the edges.")


def _histogram_count_meta(x, bins, range, weight, density):
    """torch's checks in its order (after its out tensors', `_histogram_out_dtypes`): the bin count, the range, the
    input's dtype (torch finds the data's range by the kernel's dtypes), the weight."""
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if range is not None and range[0] > range[1]:
        raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {range[0]:g} max "
                           f"{range[1]:g} for dimension 0")
    kernel_dtype(x)
    _weight_checks(x, weight)
    return TensorSpec((bins,), x.dtype, x.device), TensorSpec((bins + 1,), x.dtype, x.device)


def _histogram_count_cpu(spec, x, bins, range, weight, density):
    a = x.reshape(-1)
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
    else:
        lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 1.0)  # NumPy's range of no data
    finite_range(lo, hi)  # (a NaN among the data raised nothing: fuzz seed 7892606)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5  # NumPy's widening of an empty range
    edges = lin_values(lo, hi, bins + 1, _dt.to_dtype(x.dtype))
    return _histogram_result(a, edges, weight, density, x.dtype)


defop("histogram.bin_ct(Tensor self, int bins=100, *, Any? range=None, Tensor? weight=None, bool density=False) "
      "-> (Tensor hist, Tensor bin_edges)", meta=_histogram_count_meta, cpu=_histogram_count_cpu, kind="reduction",
      variants=("function", "method", "out"), out_autograd_fallback=lambda args: True,
      autograd_fallback=lambda args: True,
      out_check=lambda out, x, *args: _histogram_out_dtypes(out, x),
      doc="A histogram of ``bins`` equal bins over ``range`` (the data's range by default), weighted by "
          "``weight``, normalised to a density with ``density``; and the bin edges.")
