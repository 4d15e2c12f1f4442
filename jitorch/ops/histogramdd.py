"""``histogramdd``: a histogram of N points in D dimensions (the input's last dim), as torch's.

Two kernels: ``_histogramdd_edges`` (one dim's equal bins over the given range or
the data's, torch's checks and NumPy's widening of an empty range) and ``_histogramdd_from_bin_tensors`` (the
counts given every dim's edges: a point outside any dim's outer edges, or NaN, is not counted; the last bin of
each dim includes its right edge). ``histogramdd`` composes them. Their results' shapes follow from the
arguments, so a compiled call runs each kernel as an eager step. No gradient, as torch's: its autograd fallback
serves them, so their results require grad where an input does and a backward (or a forward-mode tangent) through
them raises, naming torch's ops (``_histogramdd_bin_edges``; ``_histogramdd_from_bin_cts`` for the counts of bin
counts, ``_histogramdd_from_bin_tensors`` for those of given edges).
"""

from __future__ import annotations

import builtins

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.strided import list_str
from . import functions
from .creation import lin_values
from .registry import TensorSpec, _return_type, cpp_name, defop
from .searching import _counts, _searched_bins, check_weight_dtype, finite_range, kernel_dtype

_HistogramddResult = _return_type("histogramdd", ("hist", "bin_edges"))


def _points(x):
    """The input as N points (rows) of D dims; torch's error for a 1-d input."""
    if x.ndim < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    return x.reshape(-1, x.shape[-1])


def _edges_meta(x, dim, bins, lo, hi, weight):
    kernel_dtype(x)
    return TensorSpec((bins + 1,), x.dtype, x.device)


def _edges_cpu(spec, x, dim, bins, lo, hi, weight):
    column = x.reshape(-1, x.shape[-1])[:, dim]
    if lo is None:  # the data's range (torch's aminmax), [0, 1] without data
        lo, hi = (float(column.min()), float(column.max())) if column.size else (0.0, 1.0)
    finite_range(lo, hi, dim)
    if lo > hi:
        raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {lo:g} max {hi:g} for "
                           f"dimension {dim}")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5  # NumPy's widening of an empty range
    return lin_values(lo, hi, bins + 1, _dt.to_dtype(x.dtype)).astype(x.dtype)


# (``weight`` is not read: torch's ``_histogramdd_bin_edges`` takes it, so its autograd fallback makes the edges
# require grad, and a backward through them raise, where the weight requires grad)
defop("_histogramdd_edges(Tensor self, int dim, int bins, float? min=None, float? max=None, Tensor? weight=None) "
      "-> Tensor",
      meta=_edges_meta, cpu=_edges_cpu, kind="reduction", variants=("function",),
      autograd_fallback=lambda args: True, fallback_name="_histogramdd_bin_edges",
      doc="The ``bins + 1`` edges of dim ``dim`` of a histogramdd of ``self``: equal bins between ``min`` and "
          "``max``, or the data's extremes in that dim when they are None.")


def _counts_meta(x, bins, weight, density):
    kernel_dtype(x)
    if weight is not None:
        check_weight_dtype(x, weight)
    if weight is not None and (tuple(weight.shape) or (1,)) != tuple(x.shape[:-1]):
        raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           "input tensor excluding its innermost dimension, but got input with shape "
                           f"{list_str(x.shape)} and weight with shape {list_str(weight.shape)}")
    points = x.shape[-1] if x.ndim else 0
    if len(bins) != points:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    for d, edges in enumerate(bins):
        if edges.dtype is not x.dtype:
            raise RuntimeError("torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                               f"input with dtype {cpp_name(x.dtype).lower()} and bins for dimension {d} with dtype "
                               f"{cpp_name(edges.dtype).lower()}")
        if edges.ndim != 1:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, but got {edges.ndim} "
                               f"dimensions in the bins tensor for dimension {d}")
        if edges.shape[0] == 0:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have at least 1 element, but got "
                               f"{edges.shape[0]} elements in the bins tensor for dimension {d}")
    return TensorSpec(tuple(e.shape[0] - 1 for e in bins), x.dtype, x.device)


def _counts_cpu(spec, x, bins, weight, density):
    points = x.reshape(-1, x.shape[-1])
    sizes = spec.shape
    flat = np.zeros(points.shape[0], np.int64)
    for d, edges in enumerate(bins):
        where = _searched_bins(points[:, d], edges.astype(points.dtype))
        flat = np.where((flat < 0) | (where < 0), -1, flat * sizes[d] + where)
    hist = _counts(int(np.prod(sizes)), flat, weight, x.dtype).reshape(sizes)
    if density:  # torch's order: by the total, then by each dim's bin widths
        hist = hist / hist.sum()
        for d, edges in enumerate(bins):
            hist = hist / np.diff(edges.astype(x.dtype)).reshape([-1 if i == d else 1 for i in range(len(sizes))])
    return np.ascontiguousarray(hist, x.dtype)


# (one kernel under torch's two names, which its backward's error gives: the counts of edges that
# ``_histogramdd_edges`` made from bin counts, and of edges the caller gave)
for _name in ("_histogramdd_from_bin_tensors", "_histogramdd_from_bin_cts"):
    defop(f"{_name}(Tensor self, Tensor[] bins, *, Tensor? weight=None, bool density=False) -> Tensor",
          meta=_counts_meta, cpu=_counts_cpu, kind="reduction", variants=("function",),
          autograd_fallback=lambda args: True,
          doc="The counts (or summed ``weight``, or density) of a histogramdd of ``self`` between the edges "
              "``bins`` of each dim.")


def _histogramdd(x, bins, range, weight, density):
    points = _points(x)
    d = points.shape[-1]
    if isinstance(bins, (list, tuple)) and bins and not isinstance(bins[0], int):
        edges = tuple(bins)
    else:
        counts = [bins] * d if isinstance(bins, int) else list(bins)
        if len(counts) != d:
            raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
        if range is not None and len(range) != 2 * d:
            raise RuntimeError(f"torch.histogramdd: for a {d}-dimensional histogram range should have {2 * d} "
                               f"elements, but got {len(range)}")
        for i, n in enumerate(counts):
            if n <= 0:
                raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {n} for dimension {i}")
        bounds = [(None, None) if range is None else range[2 * i:2 * i + 2] for i in builtins.range(d)]
        edges = tuple(functions._histogramdd_edges(x, i, n, *bounds[i], weight=weight) for i, n in enumerate(counts))
        hist = functions._histogramdd_from_bin_cts(x, [e.detach() for e in edges], weight=weight, density=density)
        return _HistogramddResult(hist, edges)
    hist = functions._histogramdd_from_bin_tensors(x, list(edges), weight=weight, density=density)
    return _HistogramddResult(hist, edges)


defop("histogramdd(Tensor self, Any bins, Any? range=None, Tensor? weight=None, bool density=False) -> Any",
      composite=_histogramdd, kind="reduction", variants=("function",),
      doc="A histogram of the points ``self[..., :]`` (the last dim their coordinates): ``bins`` an int (equal "
          "bins per dim over ``range``, [min0, max0, min1, max1, ...], or the data's range), a list of ints per "
          "dim, or a list of edge tensors; weighted by ``weight``, a density with ``density``. Returns "
          "``(hist, bin_edges)``.")
