"""torch's ops that, on jitorch's real strided tensors, are another op or the tensor itself: the conjugation
and lazy-negation family (the identity on real dtypes, as torch returns ``self``), ``positive``,
``narrow_copy``, ``sum_to_size`` and the ``unsafe_`` splits (sharing ``self``'s memory, but no views in
autograd's sense, as torch's)."""

from __future__ import annotations

from ..runtime import dtypes as _dt
from ..runtime.strided import list_str
from . import registry
from .registry import defop
from .views import contiguous_format


def _identity(x):
    return x


for _name, _what in (("conj", "the conjugate"), ("conj_physical", "the materialised conjugate"),
                     ("resolve_conj", "``self`` with its lazy conjugation applied"),
                     ("resolve_neg", "``self`` with its lazy negation applied"), ("real", "the real part")):
    defop(f"{_name}(Tensor self) -> Tensor", composite=_identity, kind="view",
          variants=("function",) if _name == "real" else ("function", "method"),
          doc=f"{_what[0].upper()}{_what[1:]}: ``self`` itself for jitorch's real dtypes, as torch returns.")


def _positive(x):
    if x.dtype is _dt.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return x


defop("positive(Tensor self) -> Tensor", composite=_positive, kind="view", variants=("function", "method"),
      doc="``+self``: ``self`` itself (RuntimeError for bool, as torch).")


def _narrow_copy(x, dim, start, length):
    if x.ndim and dim >= x.ndim:  # (torch's narrow_copy checks a dim past the last before wrapping: not IndexError)
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.  "
                           "(Could this error message be improved?  If so, please report an enhancement request to "
                           "PyTorch.)")
    return x.narrow(dim, start, length).clone(memory_format=contiguous_format)


defop("narrow_copy(Tensor self, int dim, int start, int length) -> Tensor", composite=_narrow_copy, kind="shape",
      variants=("function", "method"), doc="A contiguous copy of ``self.narrow(dim, start, length)``.")


def _sum_to_size(x, size):
    if not size:  # torch's sum_to: the whole sum, a new tensor of the sum's dtype (bool and ints to int64)
        return x.sum()
    lead = x.ndim - len(size)
    if lead < 0 or any(s != n and s != 1 for s, n in zip(size, x.shape[lead:])):
        raise RuntimeError(f"size {{{list_str(size)}}} is not expandable to size {{{list_str(x.shape)}}}.")
    dims = tuple(range(lead)) + tuple(lead + i for i, (s, n) in enumerate(zip(size, x.shape[lead:]))
                                      if s == 1 and n != 1)
    if not dims:
        return x
    return x.sum(dims, keepdim=True).view(size)


defop("sum_to_size(Tensor self, int... size) -> Tensor", composite=_sum_to_size, kind="reduction",
      variants=("method",), doc="``self`` summed down to ``size``, which it must expand from (self if equal).")


_KEPT = ("_trace_value", "_fw_tangents")  # not a no-grad view's marks: the outputs are no views to autograd


def untracked(view):
    """``view``'s memory and history as a tensor that is no view in autograd's sense (no ``_base``): in-place
    ops on it are allowed under grad and rebase no other tensor's history, as on torch's ``unsafe_`` splits'
    outputs (fuzz seeds 7101099, 7101504, 7103254). It shares the storage's version counter, where torch
    gives each output its own (docs/differences-from-torch.md)."""
    t = registry.Tensor._make(view._storage, view._shape, view._stride, view._offset)
    for kept in _KEPT:  # what transforms keep on the view: a traced fake's value, forward-AD tangents (seed 7840219)
        found = view.__dict__.get(kept)
        if found is not None:
            t.__dict__[kept] = found
    if view.grad_fn is not None:  # (not a view made without grad mode, which requires grad with no history)
        t.grad_fn = view.grad_fn
        t._requires_grad = True
        t._output_nr = view._output_nr
    t.__dict__["_split_from"] = view._base
    return t


def history_root(t):
    """The tensor whose value ``t`` is part of for gradients: its view base, and for an ``unsafe_`` split's
    output (no view in autograd's sense) the root of the tensor it was split from. A gradient given to the
    root at ``t``'s place reaches the inputs as one given to ``t`` does (a compiled call's outputs over one
    storage get the gradient of its base there: `jit.output_bases`; fuzz seed 7952220)."""
    while True:
        source = t._base if t._base is not None else t.__dict__.get("_split_from")
        if source is None:
            return t
        t = source


def _unsafe(name):
    def split(x, *args):
        return tuple(untracked(v) for v in getattr(x, name)(*args))
    return split


for _schema, _base in (("unsafe_chunk(Tensor self, int chunks, int dim=0) -> Tensor[]", "chunk"),
                       ("unsafe_split(Tensor self, int split_size, int dim=0) -> Tensor[]", "split"),
                       ("unsafe_split_with_sizes(Tensor self, int[] split_sizes, int dim=0) -> Tensor[]",
                        "split_with_sizes")):
    defop(_schema, composite=_unsafe(_base), kind="view", variants=("function", "method"),
          doc=f"``{_base}`` as tensors sharing ``self``'s memory that autograd does not track as views (in-place "
              "ops on them are allowed under grad), as torch's.")
