"""torch's checks on an op that writes memory one of its inputs reads.

An in-place op writes its ``self``, an ``out=`` op its ``out`` tensors. Where an input shares memory with
such a written tensor, torch either refuses the call before writing, or computes in an order of its own
kernel's choosing (a result no user can rely on). jitorch raises torch's error where torch raises, and
otherwise always computes from the inputs' values as they were before the call (its kernels compute a new
result, then write it): docs/differences-from-torch.md.

torch decides from each (written, input) pair's overlap status, as ``get_overlap_status`` in ATen:

* ``FULL``: the same elements in the same layout (``x.add_(x)``);
* ``PARTIAL``: some elements shared otherwise (``x[:4].add_(x[2:])``, ``x.add_(x.t())``);
* ``TOO_HARD``: one of the two has gaps or repeats (``x[::2]``, an expanded tensor), which torch does
  not analyse: it runs the op;
* ``NO``: nothing shared.

and from the op's rule for each tensor argument (`RULES`):

* ``"partial"``: TensorIterator's ``assert_no_partial_overlap``: a PARTIAL overlap is an error, a FULL
  one is fine (an elementwise op reads each element before writing it);
* ``"any"``: ``assert_no_overlap`` (the index ops, ``cat``): FULL or PARTIAL is an error;
* no rule: not checked (reductions, ``mm``, ``softmax``: torch computes whatever its kernel gives).
"""

from __future__ import annotations

from math import prod

from ..runtime.strided import contiguous_strides, is_non_overlapping_and_dense

NO, FULL, PARTIAL, TOO_HARD = "no", "full", "partial", "too hard"

# The rule of an op by its kind, where the op does not give its own ``overlap`` attribute (a rule for
# every tensor argument, a dict by argument name, or a function of the arguments giving either; None:
# unchecked).
RULES = {"pointwise": "partial", "scan": "partial", "sort": "partial", "index": "any", "shape": "any"}
# The kinds whose torch kernels resize an ``out=`` tensor of another shape before they check it (structured
# kernels' meta functions); TensorIterator's ops check the tensor as given (``cumsum(y, 0, out=y[0])`` runs,
# ``add(y, 1, out=y[0])`` raises).
RESIZED_FIRST = frozenset({"scan", "sort"})

ERROR = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
         "memory location. Please clone() the tensor before performing the operation.")


def overlap_status(a, b):
    """How the elements of tensors ``a`` and ``b`` share memory: NO, FULL, PARTIAL or TOO_HARD."""
    if a is b:
        return FULL
    if a._storage is not b._storage:
        return NO
    na, nb = a.numel(), b.numel()
    if not na or not nb:
        return NO
    if not (is_non_overlapping_and_dense(a._shape, a._stride) and is_non_overlapping_and_dense(b._shape, b._stride)):
        return TOO_HARD
    a0, b0 = a._offset, b._offset
    if a0 == b0 and na == nb:
        return FULL if tuple(a._stride) == tuple(b._stride) else PARTIAL
    return PARTIAL if a0 < b0 + nb and b0 < a0 + na else NO


class Footprint:
    """The memory of a tensor's elements in some geometry, without the tensor: what `overlap_status` reads."""

    __slots__ = ("_storage", "_offset", "_shape", "_stride")

    def __init__(self, storage, offset, shape, stride):
        self._storage, self._offset, self._shape, self._stride = storage, offset, tuple(shape), tuple(stride)

    def numel(self):
        return prod(self._shape)


def written_resized(out, shape):
    """Where a kernel writes ``out`` for a result of ``shape``: ``out`` resized to ``shape`` first, as torch's
    ``resize_output`` (contiguous over the same memory when it fits; None: new memory, shared with nothing)."""
    if tuple(out._shape) == tuple(shape):
        return out
    if out._offset + prod(shape) > out._storage.size:
        return None
    return Footprint(out._storage, out._offset, shape, contiguous_strides(tuple(shape)))


def _resized_or_new(out, shape):
    """`written_resized`, or, where ``out``'s memory is too small, its storage grown (torch grows the storage in
    place, so that the views of ``out`` see the new memory: ``stack([e, e], out=e)`` raises)."""
    resized = written_resized(out, shape)
    return Footprint(out._storage, out._offset, shape, contiguous_strides(tuple(shape))) if resized is None else resized


def written_with_dim(out, shape, dim):
    """Where a kernel that writes its result with the reduced ``dim`` kept (torch's max/min/median.dim
    kernels ``unsqueeze_`` their out tensors there) writes ``out``, for a result of ``shape``: `written_resized`,
    then a size-1 dim inserted at ``dim`` as ``unsqueeze`` inserts it (its stride: the next dim's extent, 1 at
    the end)."""
    resized = written_resized(out, shape)
    if resized is None:
        return None
    strides = resized._stride
    step = shape[dim] * strides[dim] if dim < len(shape) else 1
    return Footprint(out._storage, out._offset, shape[:dim] + (1,) + tuple(shape[dim:]),
                     strides[:dim] + (step,) + tuple(strides[dim:]))


def _rules(op, args):
    """{argument index: rule} for the tensor arguments ``op`` checks on these ``args``."""
    rule = op.attrs.get("overlap", RULES.get(op.kind))
    if callable(rule):
        rule = rule(*args)
    if rule is None:
        return {}
    names = op.arg_names
    if isinstance(rule, str):
        return {i: rule for i, _ in op.tensor_args}
    return {i: rule[names[i]] for i, _ in op.tensor_args if names[i] in rule}


def _tensors(value):
    if isinstance(value, (list, tuple)):
        return [t for t in value if hasattr(t, "_storage")]
    return [value] if hasattr(value, "_storage") else []


def check_write_overlap(op, written, args, skip=None):
    """Raise torch's error if an input of ``op`` (``args`` in schema order; the argument at index ``skip``
    is the in-place ``self``, which the op reads and writes) shares memory with the tensor or tensors
    ``written`` in a way the op's rule refuses. Called before anything is written."""
    if hasattr(written, "_storage"):  # (one tensor, the commonest: done at once where no input shares its storage)
        storage = written._storage
        for i, _ in op.tensor_args:
            if i != skip:
                v = args[i]
                if (getattr(v, "_storage", None) is storage or isinstance(v, (list, tuple))
                        and any(getattr(t, "_storage", None) is storage for t in v)):
                    break
        else:
            return
    written = _tensors(written)
    storages = {id(w._storage) for w in written}
    shared = [(i, t) for i, _ in op.tensor_args if i != skip
              for t in _tensors(args[i]) if id(t._storage) in storages]
    if not shared:
        return
    checked_as = op.attrs.get("overlap_as")  # (*args) -> (op, args): the op whose kernel torch checks (stack: cat)
    if checked_as is not None:
        inner, inner_args = checked_as(*args)
        return check_write_overlap(inner, written, inner_args, skip)
    rules = _rules(op, args)
    as_written = op.attrs.get("overlap_written")  # (tensor, *args) -> where the kernel writes it, or None
    # (pairs of the tensor written and where the kernel writes it: torch's status of a tensor with itself is FULL,
    # resized or not)
    if as_written is not None:
        written = [(w, f) for w, f in ((w, as_written(w, *args)) for w in written) if f is not None]
    elif op.kind in RESIZED_FIRST or op.attrs.get("resized_first"):
        spec = op.meta(*args)
        specs = spec if isinstance(spec, (list, tuple)) else [spec]
        written = [(w, _resized_or_new(w, s.shape)) for w, s in zip(written, specs)]
    else:
        written = [(w, w) for w in written]
    skipped = op.attrs.get("overlap_skips")  # (shape) -> whether torch's kernel leaves an input of it unchecked
    for i, t in shared:
        rule = rules.get(i)
        if rule is None:
            continue
        for w, at in written:
            if skipped is not None and skipped(at._shape if t is w else t._shape):
                continue
            status = FULL if t is w else overlap_status(at, t)
            if status == PARTIAL or (status == FULL and rule == "any"):
                raise RuntimeError(ERROR)
