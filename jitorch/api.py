"""Public functions that are not single registry ops (compositions, queries)."""

import warnings

from ._lobpcg import lobpcg  # noqa: F401
from ._lowrank import pca_lowrank, svd_lowrank  # noqa: F401
from .linalg import matrix_norm as _matrix_norm, vector_norm as _vector_norm
from .ops.registry import FUNCTIONS as _FUNCTIONS
from .ops.views import channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format
from .runtime import strided as _strided
from .runtime.grad_mode import is_inference_mode_enabled
from .runtime.layout import layout, strided
from .tensor import Size, Tensor

__all__: list = ["memory_format", "preserve_format", "contiguous_format", "channels_last", "channels_last_3d",
                 "broadcast_shapes", "detach", "detach_",
                 "get_device", "layout", "strided", "is_inference_mode_enabled", "einsum", "nuclear_norm",
                 "frobenius_norm", "svd_lowrank", "pca_lowrank", "lobpcg"]


def broadcast_shapes(*shapes):
    """The shape tensors of ``shapes`` broadcast to (ints count as 1-D shapes), without making tensors."""
    return Size(_strided.broadcast_shapes(*((s,) if isinstance(s, int) else tuple(s) for s in shapes)))


def detach(input):
    """``input.detach()``: the same data, cut from the autograd graph."""
    return input.detach()


def detach_(input):
    """``input.detach_()``: cut ``input`` itself from the autograd graph."""
    return input.detach_()


def get_device(input):
    """The index of the CUDA device ``input`` is on, or -1 on the CPU."""
    return input.get_device()


def _tensor_query(name, doc):
    """``jitorch.<name>(input)``: the Tensor method of that name, for a tensor only (TypeError as torch's)."""
    def query(input, *args):
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
        return getattr(input, name)(*args)
    query.__name__ = query.__qualname__ = name
    query.__doc__ = doc
    return query


for _name, _doc in (
        ("is_complex", "Whether ``input``'s dtype is complex (never, in jitorch)."),
        ("is_floating_point", "Whether ``input``'s dtype is a floating-point type."),
        ("is_signed", "Whether ``input``'s dtype is signed."),
        ("is_nonzero", "Whether the single element of ``input`` is not zero (RuntimeError unless it has one)."),
        ("is_same_size", "Whether ``input`` and ``other`` have the same shape."),
        ("is_conj", "Whether ``input`` is a lazily conjugated view (never, in jitorch)."),
        ("is_neg", "Whether ``input`` is a lazily negated view (never, in jitorch)."),
        ("is_inference", "Whether ``input``'s memory was allocated inside ``inference_mode``.")):
    globals()[_name] = _tensor_query(_name, _doc)
    __all__.append(_name)


def _sublist_label(n):
    if n is Ellipsis:
        return "..."
    if isinstance(n, int) and 0 <= n < 26:
        return chr(ord("A") + n)
    if isinstance(n, int) and 26 <= n < 52:
        return chr(ord("a") + n - 26)
    raise ValueError("einsum(): subscript in subscript list is not within the valid range [0, 52)")


def einsum(*args):
    """Einstein summation: ``einsum('ij,jk->ik', a, b)``, ``einsum('ij,jk->ik', [a, b])``, or torch's sublist
    form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` (each operand followed by its labels, ints in [0, 52) or
    ``...``; an optional last list gives the output's), which torch turns into the equation as done here."""
    if len(args) < 2:
        raise ValueError("einsum(): must specify the equation string and at least one operand, or at least one "
                         "operand and its subscripts list")
    if isinstance(args[0], Tensor):
        equation = ",".join("".join(map(_sublist_label, labels)) for labels in args[1::2])
        if len(args) % 2:
            equation += "->" + "".join(map(_sublist_label, args[-1]))
            args = (equation, *args[:-1:2])
        else:
            args = (equation, *args[::2])
    return _FUNCTIONS["einsum"](*args)


def nuclear_norm(input, dim=None, keepdim=False, *, out=None):
    """Deprecated in torch: ``linalg.matrix_norm(input, 'nuc', dim, keepdim)``; ``nuclear_norm(input, keepdim)``
    over the last two dims."""
    warnings.warn("at::nuclear_norm is deprecated and it is just left for JIT compatibility. It will be removed in a "
                  "future PyTorch release. Please use `linalg.matrix_norm(A, 'nuc', dim, keepdim)` instead",
                  UserWarning, stacklevel=2)
    if isinstance(dim, bool):  # the overload without dims: nuclear_norm(input, keepdim)
        dim, keepdim = None, dim
    return _matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim, out=out)


def frobenius_norm(input, dim, keepdim=False, *, out=None):
    """Deprecated in torch: ``linalg.vector_norm(input, 2, dim, keepdim)`` over at most two ``dim``."""
    warnings.warn("at::frobenius_norm is deprecated and it is just left for JIT compatibility. It will be removed in "
                  "a future PyTorch release. Please use `linalg.vector_norm(A, 2., dim, keepdim)` instead",
                  UserWarning, stacklevel=2)
    dim = (dim,) if isinstance(dim, int) else tuple(dim)
    if len(dim) > 2:
        raise RuntimeError(f"Expected at most 2 dimensions, but got {len(dim)} dimensions instead.")
    return _vector_norm(input, 2, dim, keepdim, out=out)
