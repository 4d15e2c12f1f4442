"""Public functions that are not single registry ops (compositions, queries)."""

from .ops.views import contiguous_format, memory_format, preserve_format
from .runtime import strided as _strided
from .runtime.grad_mode import is_inference_mode_enabled
from .runtime.layout import layout, strided
from .tensor import Size, Tensor

__all__: list = ["memory_format", "preserve_format", "contiguous_format", "broadcast_shapes", "detach", "detach_",
                 "get_device", "layout", "strided", "is_inference_mode_enabled"]


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
