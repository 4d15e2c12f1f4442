"""Order statistics and moments beyond the plain reductions: ``aminmax``, ``mode``, ``nanmedian``,
``quantile``/``nanquantile``, ``msort``, ``cov`` and ``corrcoef``.

``mode`` and ``nanmedian`` are NumPy kernels giving (values, indices); the rest are composites written
after torch's own implementations (``quantile`` sorts, then gathers and interpolates), so that their
gradients come from their parts.
"""

from __future__ import annotations

from numbers import Number

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.strided import wrap_dim
from . import functions
from .meta import opmath, reduced_shape
from .overlap import _resized_or_new
from .registry import TensorSpec, defop, meta_warn, scalar_name
from .value_checks import check

_ALL_FORMS = ("function", "method", "out")


# aminmax -----------------------------------------------------------------------------------------------

def _aminmax(x, dim, keepdim):
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                               "identity.")
        dims = ()
    else:
        d = wrap_dim(dim, x.ndim)
        if x.ndim and x.shape[d] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
        dims = (d,) if x.ndim else ()
    return _AMINMAX.result_type(x.amin(dims, keepdim), x.amax(dims, keepdim))


_AMINMAX = defop("aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)",
                 composite=_aminmax, kind="reduction", variants=_ALL_FORMS,
                 doc="``(amin, amax)`` over ``dim`` (every element by default) in one call.")


# mode and nanmedian: (values, indices) over one dim ------------------------------------------------------

def _dim_selection_meta(name, bool_kernel=None):
    def meta(x, dim, keepdim):
        d = wrap_dim(dim, x.ndim)
        if x.ndim and x.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
        if bool_kernel and x.dtype is _dt.bool:
            raise NotImplementedError(f"\"{bool_kernel}\" not implemented for 'Bool'")
        shape = reduced_shape(x.shape, (d,) if x.ndim else (), keepdim)
        return TensorSpec(shape, x.dtype, x.device, opmath(x.dtype)), TensorSpec(shape, _dt.int64, x.device)
    return meta


def _rows(x, dim, compute):
    """``x`` in ``compute`` with ``dim`` last, as rows of a 2-D array; and the shape of the rows' results."""
    a = x.astype(compute, copy=False)
    if x.ndim == 0:
        return a.reshape(1, 1), ()
    a = np.moveaxis(a, wrap_dim(dim, x.ndim), -1)
    return a.reshape(-1, a.shape[-1]), a.shape[:-1]


def _by_rows(pick):
    """A (values, indices) kernel from ``pick(row) -> index`` applied to each row along ``dim``."""
    def kernel(spec, x, dim, keepdim):
        rows, shape = _rows(x, dim, spec[0].compute.np)
        idx = np.array([pick(row) for row in rows], np.int64)
        values = rows[np.arange(len(rows)), idx]
        return values.reshape(spec[0].shape), idx.reshape(spec[1].shape)
    return kernel


def _mode_index(row):
    """The smallest of the most frequent values, at its last occurrence (torch's choice). NaNs count one by one,
    as in torch's scan of its sorted row, where NaN equals nothing (``[1, nan, nan]``: 1)."""
    values, counts = np.unique(row, return_counts=True, equal_nan=False)
    value = values[np.argmax(counts)]
    same = (row == value) | (np.isnan(row) & np.isnan(value)) if row.dtype.kind == "f" else row == value
    return len(row) - 1 - int(np.argmax(same[::-1]))


def _nanmedian_index(row):
    """The lower median of the values that are not NaN (the first NaN when all are)."""
    order = np.argsort(row, kind="stable")  # NaN sorts last
    present = int(np.count_nonzero(~np.isnan(row))) if row.dtype.kind == "f" else len(row)
    return int(order[max(present - 1, 0) // 2])


defop("mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)",
      meta=_dim_selection_meta("mode"), cpu=_by_rows(_mode_index), kind="reduction", variants=_ALL_FORMS,
      doc="The most frequent value along ``dim`` (the smallest on ties) and the index of its last occurrence.")
defop("nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
      meta=_dim_selection_meta("nanmedian", "median_out"), cpu=_by_rows(_nanmedian_index), kind="reduction",
      variants=_ALL_FORMS,
      doc="The lower median along ``dim`` of the values that are not NaN, and its index (NaN if all are).")


def _nanmedian_meta(x):
    if x.numel() and x.dtype is _dt.bool:
        raise NotImplementedError("\"median_cpu\" not implemented for 'Bool'")
    return TensorSpec((), x.dtype, x.device, opmath(x.dtype))


def _nanmedian_cpu(spec, x):
    row = x.astype(spec.compute.np, copy=False).reshape(-1)
    if row.size == 0:
        return np.array(np.nan, np.float64)  # cast as torch casts NaN to the dtype
    return row[_nanmedian_index(row)].reshape(())


defop("nanmedian(Tensor self) -> Tensor", meta=_nanmedian_meta, cpu=_nanmedian_cpu, kind="reduction",
      variants=("function", "method"),
      doc="The lower median of the elements that are not NaN (NaN if all are, or there are none).")


def _msort(x):
    return x.sort(0).values


# (its out= form checks overlap as sort's kernel, whose out is first resized to the input's shape: a composite has
# no meta rule to give that shape; ``T.msort(x, out=x)`` raised TypeError, main fuzz seed 8492305)
defop("msort(Tensor self) -> Tensor", composite=_msort, kind="sort", variants=_ALL_FORMS,
      overlap_written=lambda out, x: _resized_or_new(out, x._shape),
      doc="``self`` sorted along dim 0 (``sort(self, 0).values``).")


# quantile and nanquantile ---------------------------------------------------------------------------------

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_checks(x, q, interpolation):
    if x.numel() == 0:
        raise RuntimeError("quantile() input tensor must be non-empty")
    if not isinstance(q, Number) and q.ndim > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    if x.dtype not in (_dt.float32, _dt.float64):
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    if not isinstance(q, Number) and q.dtype is not x.dtype:
        raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError("quantile() interpolation must be one of linear, lower, higher, midpoint or nearest, "
                           f"but got {interpolation}")
    if isinstance(q, Number):
        if not 0 <= q <= 1:
            raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {q}")
    else:  # (a value check: per sample under vmap, fuzz seed 7875511; each call of a compiled graph)
        check("quantiles", [q])


def _sorted_rows(x, dim, keepdim):
    """``x`` sorted along ``dim`` moved last (every element when ``dim`` is None), the other dims shaped as the
    reduction's result."""
    if dim is None:
        return x.reshape((1,) * x.ndim * keepdim + (-1,)).sort(-1).values
    d = wrap_dim(dim, x.ndim)
    if not x.ndim:
        return x.reshape(1)
    rows = x.unsqueeze(-1).transpose(d, -1)
    return (rows if keepdim else rows.squeeze(d)).sort(-1).values


def _ranks(sorted_, q, ignore_nan):
    """Fractional positions of the quantiles in the sorted rows: the last one where a row holds NaN (quantile),
    or among the values that are not NaN (nanquantile)."""
    if ignore_nan:
        ranks = q * (sorted_.isnan().logical_not().sum(-1, keepdim=True) - 1)
        return ranks.masked_fill(ranks < 0, 0)
    last = sorted_.shape[-1] - 1
    return (q * last).masked_fill(sorted_.isnan().any(-1, keepdim=True), last)


def _quantile(x, q, dim, keepdim, interpolation, ignore_nan):
    _quantile_checks(x, q, interpolation)
    sorted_ = _sorted_rows(x, dim, keepdim)
    scalar = isinstance(q, Number) or q.ndim == 0
    q = functions.full((), q, dtype=x.dtype, device=x.device) if isinstance(q, Number) else q
    k = 1 if scalar else q.shape[0]
    sorted_ = sorted_.unsqueeze(0).expand((k,) + tuple(sorted_.shape))
    ranks = _ranks(sorted_, q.reshape((k,) + (1,) * (sorted_.ndim - 1)), ignore_nan)
    ranks = ranks.expand(tuple(sorted_.shape[:-1]) + (1,))
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    below = ranks.to(_dt.int64)
    values = sorted_.gather(-1, below)
    if interpolation in ("linear", "midpoint"):
        weights = functions.full_like(ranks, 0.5) if interpolation == "midpoint" else ranks - below
        values = values.lerp(sorted_.gather(-1, ranks.ceil().to(_dt.int64)), weights)
    values = values.squeeze(-1)
    return values.squeeze(0) if scalar else values


def _quantile_form(ignore_nan):
    def composite(x, q, dim, keepdim, interpolation):
        return _quantile(x, q, dim, keepdim, interpolation, ignore_nan)
    return composite


for _name, _ignore in (("quantile", False), ("nanquantile", True)):
    _doc = (f"The ``q``-th quantiles along ``dim`` (of every element by default){' ignoring NaN' * _ignore}, "
            "interpolating between neighbours as ``interpolation`` says; a 1-D ``q`` gives a leading dim.")
    for _q in ("Tensor q", "float q"):
        defop(f"{_name}{'.scalar' * (_q == 'float q')}(Tensor self, {_q}, int? dim=None, bool keepdim=False, *, "
              "str interpolation='linear') -> Tensor", composite=_quantile_form(_ignore), kind="sort",
              variants=_ALL_FORMS, out_copies=lambda args: True, doc=_doc)  # (torch's out=: the result copy_-ed)


# Covariance and correlation ---------------------------------------------------------------------------------

def _check_weights(name, w, observations, integral):
    if w.ndim > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with {w.ndim} "
                           "dimensions")
    kind_ok = (not w.dtype.is_floating_point and w.dtype is not _dt.bool) if integral else w.dtype.is_floating_point
    if not kind_ok:
        raise RuntimeError(f"cov(): expected {name} to have {'integral' if integral else 'floating point'} dtype but "
                           f"got {name} with {scalar_name(w.dtype)} dtype")
    if w.numel() != observations:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are observations in the input "
                           f"but got {w.numel()} != {observations}")
    if observations and bool(w.min() < 0):
        raise RuntimeError(f"cov(): {name} cannot be negative")


def _cov(x, correction, fweights, aweights):
    if x.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with {x.ndim} "
                           "dimensions")
    if x.dtype is _dt.bool:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    rows = x.view(1, -1) if x.ndim < 2 else x
    observations = rows.shape[1]
    w = None
    if fweights is not None:
        _check_weights("fweights", fweights, observations, True)
        w = fweights
    if aweights is not None:
        _check_weights("aweights", aweights, observations, False)
        w = aweights if w is None else w * aweights
    w_sum = functions.full((), observations, dtype=_dt.int64, device=x.device) if w is None else w.sum()
    if w is not None and not bool(w_sum != 0):
        raise RuntimeError("cov(): weights sum to zero, can't be normalized")
    mean = (rows if w is None else rows * w).sum(1) / w_sum
    if w is not None and correction != 0 and aweights is not None:
        norm = w_sum - correction * (w * aweights).sum() / w_sum
    else:
        norm = w_sum - correction
    if bool(norm <= 0):
        meta_warn("cov(): degrees of freedom is <= 0. Correction should be strictly less than the number of "
                  "observations.")
        norm = norm * 0
    if w is not None and observations == 1:
        # torch 2.13 zeroes its input's one observation in place here rather than subtracting the mean (which
        # promotes): the product then keeps the input's dtype and refuses weights of a wider one, as torch's mm
        # does (fuzz seed 7100612); the input itself jitorch leaves (docs/differences-from-torch.md)
        centred = functions.zeros_like(rows)
    else:
        centred = rows - mean.unsqueeze(1)
    return functions.true_divide(centred.mm((centred if w is None else centred * w).t()), norm).squeeze()


defop("cov(Tensor self, *, int correction=1, Tensor? fweights=None, Tensor? aweights=None) -> Tensor",
      composite=_cov, kind="reduction", variants=("function", "method"),
      doc="The covariance matrix of the rows of ``self`` (variables) over its columns (observations), with "
          "integer frequency weights ``fweights`` and floating observation weights ``aweights``.")


def _corrcoef(x):
    if x.ndim > 2:
        raise RuntimeError(f"corrcoef(): expected input to have two or fewer dimensions but got an input with "
                           f"{x.ndim} dimensions")
    c = _cov(x, 1, None, None)
    if c.ndim == 0:
        return c / c
    std = c.diagonal().sqrt()
    c = c / std.view(-1, 1)
    c = c / std.view(1, -1)
    return c.clip(-1, 1)


defop("corrcoef(Tensor self) -> Tensor", composite=_corrcoef, kind="reduction", variants=("function", "method"),
      doc="Pearson's correlation coefficients of the rows of ``self``, clipped to [-1, 1].")

