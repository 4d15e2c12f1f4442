"""Diagonals and writes into views: ``diag``, ``diag_embed``, ``diagflat``, ``fill_diagonal_``, the
``diagonal``/``select``/``slice`` scatters, ``tril_indices``/``triu_indices`` and ``vander``.

A scatter into a view is ``as_strided_scatter`` at the view's geometry in a contiguous tensor of
``self``'s shape (what the tracer records for in-place writes through views), so every op here but
the index factories is a composite with gradients from its parts.
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.device import to_device
from ..runtime.strided import contiguous_strides, wrap_dim
from . import functions
from .creation import OPTIONS
from .registry import OPS, TensorSpec, defop, scalar_name, write_where
from .views import contiguous_format


# Writes into views -------------------------------------------------------------------------------------

def scatter_into_view(x, src, view):
    """A copy of ``x`` with ``src`` written at the elements ``view`` (a view op on a tensor of ``x``'s shape)
    picks."""
    part = view(functions.empty(tuple(x.shape), device="meta"))
    return functions.as_strided_scatter(x, src, tuple(part.shape), part.stride(), part.storage_offset())


def _diagonal_scatter(x, src, offset, dim1, dim2):
    return scatter_into_view(x, src, lambda t: t.diagonal(offset, dim1, dim2))


def _select_scatter(x, src, dim, index):
    return scatter_into_view(x, src, lambda t: t.select(dim, index))


def _slice_scatter(x, src, dim, start, end, step):
    return scatter_into_view(x, src, lambda t: OPS["slice"](t, dim, start, end, step))


_SCATTER_FORMS = ("function", "method")
defop("diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor",
      composite=_diagonal_scatter, kind="shape", variants=_SCATTER_FORMS,
      doc="A copy of ``self`` with ``src`` written at ``self.diagonal(offset, dim1, dim2)``.")
defop("select_scatter(Tensor self, Tensor src, int dim, int index) -> Tensor", composite=_select_scatter,
      kind="shape", variants=_SCATTER_FORMS,
      doc="A copy of ``self`` with ``src`` written at ``self.select(dim, index)``.")
defop("slice_scatter(Tensor self, Tensor src, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor",
      composite=_slice_scatter, kind="shape", variants=_SCATTER_FORMS,
      doc="A copy of ``self`` with ``src`` written at ``self[start:end:step]`` along ``dim``.")


# diag, diag_embed, diagflat -----------------------------------------------------------------------------

def _diag(x, diagonal):
    if x.ndim not in (1, 2):
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")
    if x.ndim == 2:
        return x.diagonal(diagonal).clone(memory_format=contiguous_format)
    n = x.shape[0] + abs(diagonal)
    return _diagonal_scatter(functions.zeros((n, n), dtype=x.dtype, device=x.device), x, diagonal, 0, 1)


# torch's diag(out=) is diag_embed's (a vector) or diagonal_copy's (a matrix) out= form, which its autograd
# fallback serves: inputs that require grad give a result whose backward raises
defop("diag(Tensor self, int diagonal=0) -> Tensor", composite=_diag, kind="shape",
      variants=("function", "method", "out"), out_autograd_fallback=lambda args: True,
      out_guard_name=lambda args: "diag_embed" if args[0].ndim == 1 else "diagonal_copy",
      doc="A vector's square matrix with it on the ``diagonal``-th diagonal, or a copy of a matrix's diagonal.")


def _diag_embed(x, offset, dim1, dim2):
    ndim = x.ndim + 1
    d1, d2 = wrap_dim(dim1, ndim), wrap_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = x.shape[-1] + abs(offset)
    shape = list(x.shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, n)
    zeros = functions.zeros(tuple(shape), dtype=x.dtype, device=x.device)
    return _diagonal_scatter(zeros, x, offset, d1, d2)


defop("diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor", composite=_diag_embed,
      kind="shape", variants=("function", "method"),
      doc="Matrices (in dims ``dim1``, ``dim2`` of the result) whose ``offset``-th diagonals are the last dim of "
          "``self``, zeros elsewhere.")


def _diagflat(x, offset):
    return _diag(x.reshape(-1), offset)


defop("diagflat(Tensor self, int offset=0) -> Tensor", composite=_diagflat, kind="shape",
      variants=("function", "method"),
      doc="The square matrix with the flattened ``self`` on its ``offset``-th diagonal.")


def _diagonal_positions(shape, wrap):
    """(count, step): the filled diagonal's elements, every ``step``-th of ``shape``'s in row-major order."""
    step = sum(contiguous_strides(shape))
    count = min(shape)
    if wrap and len(shape) == 2 and shape[0] > shape[1] + 1:
        count = -(-prod(shape) // step)  # the diagonal restarts a row below each square block
    return count, step


def fill_diagonal(x, fill_value, wrap):
    if x.ndim < 2:
        raise RuntimeError("dimensions must larger than 1")
    shape = tuple(x.shape)
    if x.ndim > 2 and len(set(shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    count, step = _diagonal_positions(shape, wrap)
    values = functions.full((count,), fill_value, dtype=x.dtype, device=x.device)
    return functions.as_strided_scatter(x, values, (count,), (step,), 0)


def _diagonal_filled(shape, fill_value, wrap):
    """The elements fill_diagonal_ writes (`registry.write_inplace`): torch writes the diagonal of an expanded tensor
    through its memory, with no check that elements share it (fuzz seed 5560333 of ``--edges 0.5``:
    ``x0.fill_diagonal_(-0.75)`` of a [1, 4] input expanded from [1, 1] raised torch's overlap error)."""
    count, step = _diagonal_positions(shape, wrap)
    mask = np.zeros(prod(shape), bool)
    mask[np.arange(count) * step] = True
    return mask.reshape(shape)


defop("fill_diagonal(Tensor self, Scalar fill_value, bool wrap=False) -> Tensor", composite=fill_diagonal,
      kind="shape", variants=("inplace",), expanded_write=write_where(_diagonal_filled),
      doc="Write ``fill_value`` on the main diagonal (all dims of one size beyond 2-D); with ``wrap`` a tall "
          "matrix's diagonal restarts below each square block.")


# Index factories and Vandermonde matrices ----------------------------------------------------------------

def _triangle_indices(name, lower):
    def meta(row, col, offset, dtype, device, requires_grad):
        if row < 0:
            raise RuntimeError(f"row must be non-negative, got{row}")
        if col < 0:
            raise RuntimeError(f"col must be non-negative, got{col}")
        dtype = dtype or _dt.int64
        if dtype.is_floating_point or dtype is _dt.bool:
            raise NotImplementedError(f"\"{name}\" not implemented for '{scalar_name(dtype)}'")
        count = int(np.count_nonzero((np.tri if lower else _upper)(row, col, offset, dtype=bool)))
        return TensorSpec((2, count), dtype, to_device(device))

    def cpu(spec, row, col, offset, *rest):
        mask = (np.tri if lower else _upper)(row, col, offset, dtype=bool)
        return np.stack(np.nonzero(mask)) if mask.size else np.zeros((2, 0), np.int64)
    return meta, cpu


def _upper(row, col, offset, dtype):
    return ~np.tri(row, col, offset - 1, dtype=bool)


for _name, _lower in (("tril_indices", True), ("triu_indices", False)):
    _meta, _cpu = _triangle_indices(_name, _lower)
    defop(f"{_name}(int row, int col, int offset=0, *, {OPTIONS}) -> Tensor", meta=_meta, cpu=_cpu,
          kind="creation", variants=("function",),
          doc=f"The (row, column) indices of the {'lower' if _lower else 'upper'} triangle of a ``row`` x ``col`` "
              "matrix from the ``offset``-th diagonal, as a 2 x N tensor in row-major order.")


def _vander(x, n, increasing):
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if n is None else n
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    dtype = _dt.promote_types(x.dtype, _dt.int64)
    rows = x.shape[0]
    # (the ones made like x: under vmap every column is batched as x, as torch's, so that a batched value can be
    # written into the result in place; fuzz seed 7991388: vander of a one-element sample was unbatched)
    ones = functions.ones_like(x, dtype=dtype).unsqueeze(1)
    if n == 0:
        return ones[:, :0]
    powers = [ones]
    if n > 1:
        powers.append(x.to(dtype).unsqueeze(1).expand(rows, n - 1).cumprod(1))
    result = functions.cat(powers, 1)
    return result if increasing else result.flip([1])


defop("vander(Tensor x, int? N=None, bool increasing=False) -> Tensor", composite=_vander, kind="shape",
      variants=("function",),
      doc="The Vandermonde matrix of ``x``: its powers 0..N-1 as columns (decreasing unless ``increasing``); "
          "integers and bools give int64.")
