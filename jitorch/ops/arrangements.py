"""Composite shape ops that arrange whole tensors: ``atleast_{1,2,3}d``, ``ravel``, ``adjoint``, ``rot90``,
``tensor_split`` with ``hsplit``/``vsplit``/``dsplit``, ``meshgrid``, ``cartesian_prod``, ``combinations``
and ``block_diag``.

Each is written with other ops as torch writes it (views where torch gives views), so tracing and
gradients come from the parts.
"""

from __future__ import annotations

from ..runtime import dtypes as _dt
from ..runtime.strided import list_str, wrap_dim
from . import functions
from .registry import OPS, defop, meta_warn, scalar_name
from .shape_ops import at_least
from .views import contiguous_format


# atleast_nd, ravel, adjoint ----------------------------------------------------------------------------

def _atleast(ndim):
    def composite(tensors):
        viewed = tuple(at_least(t, ndim) for t in tensors)
        return viewed[0] if len(viewed) == 1 else viewed
    return composite


for _n, _how in ((1, "a scalar becomes (1,)"), (2, "a scalar (1, 1), a vector a row (1, n)"),
                 (3, "a scalar (1, 1, 1), a vector (1, n, 1), a matrix (m, n, 1)")):
    defop(f"atleast_{_n}d(Tensor... tensors) -> Any", composite=_atleast(_n), kind="view", variants=("function",),
          doc=f"Each tensor viewed with at least {_n} dims ({_how}); one tensor, or a tuple for several.")


def _ravel(x):
    # torch's is contiguous().view(-1): a copy unless the tensor is contiguous, where reshape(-1) would view
    # a tensor whose strides merge (every other element of a vector)
    return x.contiguous().view(-1)


defop("ravel(Tensor self) -> Tensor", composite=_ravel, kind="view", variants=("function", "method"),
      doc="The elements as a 1-D tensor: a view of a contiguous tensor, else a copy (as torch's).")


def _adjoint(x):
    if x.ndim == 0:
        meta_warn("adjoint() is deprecated on 0-D tensors. Consider using x.conj().")
        return x.conj()
    if x.ndim < 2:
        raise RuntimeError(f"tensor.adjoint() is only supported on matrices or batches of matrices. Got {x.ndim}-D "
                           "tensor.")
    return x.transpose(-2, -1)


defop("adjoint(Tensor self) -> Tensor", composite=_adjoint, kind="view", variants=("function", "method"),
      doc="A view with the last two dims swapped (the conjugate transpose of real matrices).")


def _rot90(x, k, dims):
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if x.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {x.ndim}")
    if dims[0] == dims[1] or abs(dims[0] - dims[1]) == x.ndim:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} and dim1 = {dims[1]}")
    d0, d1 = (wrap_dim(d, x.ndim) for d in dims)
    turns = k % 4
    if turns == 1:
        return x.flip([d1]).transpose(d0, d1)
    if turns == 2:
        return x.flip([d0, d1])
    if turns == 3:
        return x.flip([d0]).transpose(d0, d1)
    return x.clone(memory_format=contiguous_format)


defop("rot90(Tensor self, int k=1, int[] dims=[0,1]) -> Tensor", composite=_rot90, kind="shape",
      variants=("function", "method"),
      doc="``self`` rotated by ``k`` quarter turns in the plane of ``dims``, from the first dim towards the second.")


# tensor_split and its fixed-dim forms --------------------------------------------------------------------

def _split_dim(name, x, dim):
    if x.ndim == 0:
        raise RuntimeError(f"{name} expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    return wrap_dim(dim, x.ndim)


def _split_at(x, d, indices):
    """The parts of ``x`` between consecutive ``indices`` along ``d`` (Python slice bounds, as torch's)."""
    bounds = [0, *indices, None]
    return tuple(OPS["slice"](x, d, start, end, 1) for start, end in zip(bounds, bounds[1:]))


def _split_sections(x, sections, dim):
    d = _split_dim("tensor_split", x, dim)
    if sections <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
    size, extra = divmod(x.shape[d], sections)
    ends, end = [], 0
    for i in range(sections - 1):
        end += size + (i < extra)
        ends.append(end)
    return _split_at(x, d, ends)


def _split_indices(x, indices, dim):
    return _split_at(x, _split_dim("tensor_split", x, dim), indices)


def _split_tensor(x, indices_or_sections, dim):
    t = indices_or_sections
    if t.ndim > 1:
        raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                           f"one-dimensional tensor, but got a tensor with {t.ndim} dims")
    if t.dtype is not _dt.int64:
        raise RuntimeError("tensor_split expected tensor_indices_or_sections to have dtype of long, but got "
                           f"{scalar_name(t.dtype)}")
    if t.ndim == 0:
        return _split_sections(x, int(t.item()), dim)
    return _split_indices(x, t.tolist(), dim)


_SPLIT_DOC = "Views of ``self`` along ``dim``: "
defop("tensor_split.sections(Tensor self, int sections, int dim=0) -> Tensor[]", composite=_split_sections,
      kind="view", variants=("function", "method"),
      doc=_SPLIT_DOC + "``sections`` parts of near-equal sizes (the first ones one longer).")
defop("tensor_split.indices(Tensor self, int[] indices, int dim=0) -> Tensor[]", composite=_split_indices,
      kind="view", variants=("function", "method"), doc=_SPLIT_DOC + "the parts between the ``indices``.")
defop("tensor_split.tensor_indices_or_sections(Tensor self, Tensor tensor_indices_or_sections, int dim=0) "
      "-> Tensor[]", composite=_split_tensor, kind="view", variants=("function", "method"),
      doc=_SPLIT_DOC + "sections for a 0-d int64 tensor, the parts between the indices of a 1-D one.")


def _fixed_split(name, min_ndim, dim_of):
    def check(x):
        if x.ndim < min_ndim:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {min_ndim} dimension, but got a tensor "
                               f"with {x.ndim} dimensions!")
        return dim_of(x)

    def sections(x, sections):
        d = check(x)
        if sections == 0 or x.shape[d] % sections:
            raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but the size of the dimension "
                               f"{x.shape[d]} is not divisible by the split_size {sections}!")
        return _split_sections(x, sections, d)

    def indices(x, indices):
        return _split_indices(x, indices, check(x))
    return sections, indices


for _name, _min, _dim_of, _where in (("hsplit", 1, lambda x: 1 if x.ndim > 1 else 0, "horizontally (dim 1; dim 0 of "
                                      "vectors)"),
                                     ("vsplit", 2, lambda x: 0, "vertically (dim 0)"),
                                     ("dsplit", 3, lambda x: 2, "depth-wise (dim 2)")):
    _sections, _indices = _fixed_split(_name, _min, _dim_of)
    defop(f"{_name}.int(Tensor self, int sections) -> Tensor[]", composite=_sections, kind="view",
          variants=("function", "method"), doc=f"``self`` split {_where} into ``sections`` equal views.")
    defop(f"{_name}.array(Tensor self, int[] indices) -> Tensor[]", composite=_indices, kind="view",
          variants=("function", "method"), doc=f"``self`` split {_where} at ``indices``, as views.")


# Grids and combinations --------------------------------------------------------------------------------

def _grid(tensors, indexing):
    """Every tensor (0-d or 1-D, of one dtype) expanded along its own dim of the grid of all their sizes."""
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of "
                               f"shape {list_str(t.shape)}")
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    swap = indexing == "xy" and len(tensors) >= 2
    order = [1, 0, *range(2, len(tensors))] if swap else list(range(len(tensors)))
    ordered = [tensors[i] for i in order]
    shape = tuple(t.numel() for t in ordered)
    grids = [t.reshape([-1 if i == k else 1 for i in range(len(shape))]).expand(shape) for k, t in enumerate(ordered)]
    return tuple(grids[order.index(i)] for i in range(len(tensors)))


def _meshgrid(tensors, indexing):
    if indexing is None:
        meta_warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.",
                  stacklevel=3)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    return _grid(tensors, indexing)


defop("meshgrid(Tensor... tensors, *, str? indexing=None) -> Tensor[]", composite=_meshgrid, kind="view",
      variants=("function",),
      doc="Coordinate grids: each 1-D tensor expanded (a view) along its own dim of the grid of all sizes; "
          "``indexing='xy'`` swaps the first two dims.")


def _vectors_only(tensors):
    for t in tensors:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list_str(t.shape)}")


def _cartesian_prod(tensors):
    _vectors_only(tensors)
    if len(tensors) == 1:
        return OPS["alias"](tensors[0])
    return functions.stack([g.flatten() for g in _grid(tensors, "ij")], 1)


defop("cartesian_prod(Tensor... tensors) -> Tensor", composite=_cartesian_prod, kind="shape", variants=("function",),
      doc="The cartesian product of 1-D tensors of one dtype: one row per combination, in order.")


def _combinations(x, r, with_replacement):
    _vectors_only([x])
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return functions.empty((0,), dtype=x.dtype, device=x.device)
    positions = _grid([functions.arange(x.shape[0], device=x.device)] * r, "ij")
    keep = functions.full(tuple(positions[0].shape), True, device=x.device)
    for left, right in zip(positions, positions[1:]):
        keep = keep & (left <= right if with_replacement else left < right)
    return functions.stack([g.masked_select(keep) for g in _grid([x] * r, "ij")], 1)


defop("combinations(Tensor self, int r=2, bool with_replacement=False) -> Tensor", composite=_combinations,
      kind="shape", variants=("function",),
      doc="The ``r``-element combinations of the elements of a 1-D tensor, one per row, as itertools orders them.")


def _block_diag(tensors):
    mats = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{t.ndim} dimensions")
        mats.append(t.reshape(1, -1) if t.ndim < 2 else t)
    if not mats:
        return functions.empty((1, 0))
    dtype = mats[0].dtype
    for m in mats[1:]:
        dtype = _dt.promote_types(dtype, m.dtype)
    device = mats[0].device
    width = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        right = width - left - m.shape[1]
        pad = [functions.zeros((m.shape[0], n), dtype=dtype, device=device) for n in (left, right)]
        rows.append(functions.cat([pad[0], m.to(dtype), pad[1]], 1))
        left += m.shape[1]
    return functions.cat(rows, 0)


defop("block_diag(Tensor... tensors) -> Tensor", composite=_block_diag, kind="shape", variants=("function",),
      doc="A block-diagonal matrix of the tensors (scalars and vectors as one-row matrices), zeros elsewhere.")
