"""View ops: each is a stride transform ``(args) -> (shape, strides, offset)``; none copies."""

from __future__ import annotations

from ..runtime.strided import infer_size, list_str, view_strides, wrap_dim, wrap_dims
from .registry import defop


def _view(x, size):
    shape = infer_size(size, x.numel())
    strides = view_strides(x.shape, x._stride, shape)
    if strides is None:
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at least one dimension spans "
            "across two contiguous subspaces). Use .reshape(...) instead."
        )
    return shape, strides, x._offset


def _permute(x, dims):
    if len(dims) != x.ndim:
        raise RuntimeError(
            f"permute(sparse_coo): number of dimensions in the tensor input does not match the length of the "
            f"desired ordering of dimensions i.e. input.dim() = {x.ndim} is not equal to len(dims) = {len(dims)}"
            .replace("(sparse_coo)", "")
        )
    dims = wrap_dims(dims, x.ndim)
    return tuple(x.shape[d] for d in dims), tuple(x._stride[d] for d in dims), x._offset


def _transpose(x, dim0, dim1):
    n = max(x.ndim, 1)
    d0, d1 = wrap_dim(dim0, n), wrap_dim(dim1, n)
    if x.ndim == 0:
        return (), (), x._offset
    shape, strides = list(x.shape), list(x._stride)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    strides[d0], strides[d1] = strides[d1], strides[d0]
    return tuple(shape), tuple(strides), x._offset


defop("view(Tensor self, int... size) -> Tensor", view=_view, kind="view",
      doc="A view with another shape; RuntimeError if the strides do not allow one.")
defop("permute(Tensor self, int... dims) -> Tensor", view=_permute, kind="view",
      doc="A view with the dims reordered.")
defop("transpose(Tensor self, int dim0, int dim1) -> Tensor", view=_transpose, kind="view",
      variants=("function", "method", "inplace"), doc="A view with two dims swapped.")

__all__ = ["list_str"]
