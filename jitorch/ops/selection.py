"""Indexing ops beyond jitorch/ops/indexing.py: ``take_along_dim``, ``masked_scatter``, ``index_reduce`` and
``unravel_index``.

``masked_scatter`` is a NumPy kernel (how many elements it takes is data); the others are composites of
``gather``, ``scatter_reduce`` and integer arithmetic, as torch writes them.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.strided import broadcast_shapes, wrap_dim
from .registry import TensorSpec, defop, scalar_name
from .value_checks import check


def _take_along_dim(x, indices, dim):
    if dim is None:  # (torch checks no index dtype here: gather's rule, int32 taken too)
        return x.reshape(-1).gather(0, indices.reshape(-1))
    if x.ndim != indices.ndim:
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same number of dimensions, but "
                           f"got {x.ndim} dimensions for input, and {indices.ndim} dimensions for indices")
    if indices.dtype is not _dt.int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{scalar_name(indices.dtype)}")
    d = wrap_dim(dim, x.ndim)
    # torch 2.13 wraps the indices along ``dim`` modulo its size (``[5]`` of 3 elements is ``[2]``; of none, with
    # indices, torch's integer remainder's error), where gather would refuse them (fuzz seed 7300457)
    if x.shape[d] == 0:
        if indices.numel():
            raise RuntimeError("ZeroDivisionError")
    else:
        indices = indices.remainder(x.shape[d])
    # broadcast every dim but ``d``, where each keeps its own size
    x_sizes, index_sizes = list(x.shape), list(indices.shape)
    x_sizes[d], index_sizes[d] = indices.shape[d], x.shape[d]
    index_shape = broadcast_shapes(tuple(x_sizes), tuple(indices.shape))
    x_shape = broadcast_shapes(tuple(index_sizes), tuple(x.shape))
    return x.broadcast_to(x_shape).gather(d, indices.broadcast_to(index_shape))


defop("take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor", composite=_take_along_dim,
      kind="index", variants=("function", "method", "out"),
      doc="The elements of ``self`` at ``indices`` along ``dim`` (the other dims broadcast), as NumPy's "
          "take_along_axis; over the flattened tensors when ``dim`` is None.")


def _masked_scatter_meta(x, mask, source):
    if mask.dtype is not _dt.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{scalar_name(mask.dtype)}")
    if x.dtype is not source.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{scalar_name(x.dtype)} and {scalar_name(source.dtype)}")
    return TensorSpec(broadcast_shapes(tuple(x.shape), tuple(mask.shape)), x.dtype, x.device)


def _masked_scatter_cpu(spec, x, mask, source):
    out = np.array(np.broadcast_to(x, spec.shape))
    chosen = np.broadcast_to(mask, spec.shape)
    count = int(np.count_nonzero(chosen))
    if count > source.size:
        raise RuntimeError("Number of elements of source < number of ones in mask")
    out[chosen] = source.reshape(-1)[:count]
    return out


defop("masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor", meta=_masked_scatter_meta,
      cpu=_masked_scatter_cpu, kind="index", variants=("function", "method", "inplace"),
      overlap=None,  # torch's kernel checks no overlap with mask or source (fuzz seed 7500064)
      doc="A copy of ``self`` (broadcast with the bool ``mask``) whose elements where ``mask`` is True are the "
          "first elements of ``source``, in order.")


_INDEX_REDUCES = ("prod", "mean", "amax", "amin")


def _index_reduce(x, dim, index, source, reduce, include_self):
    if reduce not in _INDEX_REDUCES:
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    if index.dtype not in (_dt.int32, _dt.int64):
        raise RuntimeError(f"index_reduce_(): Expected dtype int32/int64 for index but got: {scalar_name(index.dtype)}")
    d = wrap_dim(dim, x.ndim)
    along = source.shape[d] if source.ndim else 1
    if index.numel() != along:
        raise RuntimeError(f"index_reduce_(): Number of indices ({index.numel()}) should be equal to "
                           f"source.size(dim): ({along}), for dim: {dim}")
    if x.dtype is not source.dtype:
        raise RuntimeError(f"index_reduce_(): self ({scalar_name(x.dtype)}) and source ({scalar_name(source.dtype)}) "
                           "must have the same scalar type")
    check("indices_in_range", [index], x.shape[d] if x.ndim else 1)  # (torch's error, not scatter_reduce's)
    spread = index.to(_dt.int64).reshape([-1 if i == d else 1 for i in range(source.ndim)]).expand(source.shape)
    return x.scatter_reduce(d, spread, source, reduce, include_self=include_self)


defop("index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) "
      "-> Tensor", composite=_index_reduce, kind="index", variants=("function", "method", "inplace", "out"),
      doc="A copy of ``self`` whose slices ``index[i]`` along ``dim`` are reduced (prod, mean, amax or amin) with "
          "slice ``i`` of ``source`` (and with their own values if ``include_self``).")


def _unravel_index(indices, shape):
    if indices.dtype.is_floating_point or indices.dtype is _dt.bool:
        raise TypeError(f"expected 'indices' to be integer dtype, but got jitorch.{indices.dtype.name}")
    if any(n < 0 for n in shape):
        raise ValueError(f"'shape' cannot have negative values, but got {tuple(shape)}")
    flat = indices.to(_dt.int64)
    coords, stride = [], 1
    for n in reversed(shape):
        coords.append(flat.floor_divide(stride).remainder(n))
        stride *= n
    return tuple(reversed(coords))


defop("unravel_index(Tensor indices, int[] shape) -> Any", composite=_unravel_index, kind="index",
      variants=("function",),
      doc="The coordinates in a tensor of ``shape`` of each flat index in ``indices``, one int64 tensor per dim.")
