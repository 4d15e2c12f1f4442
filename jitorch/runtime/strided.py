"""Index maths of the strided layout: every view op is one of these functions.

Shapes and strides are tuples of ints, strides counted in elements. Nothing
here touches data, so eager views, the tracer's meta rules and the compiler's
view folding all share it.
"""

from __future__ import annotations

from math import prod


def contiguous_strides(shape):
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


# Contiguous strides of shapes seen so far; hot paths look them up instead of computing.
CONTIGUOUS_STRIDES: dict = {}


def contiguous_strides_cached(shape):
    """`contiguous_strides`, remembered per shape (a tuple)."""
    strides = CONTIGUOUS_STRIDES.get(shape)
    if strides is None:
        if len(CONTIGUOUS_STRIDES) > 4096:
            CONTIGUOUS_STRIDES.clear()
        strides = CONTIGUOUS_STRIDES[shape] = contiguous_strides(shape)
    return strides


def is_contiguous(shape, strides):
    """torch's rule: dims of size 1 may have any stride; empty tensors are contiguous (whatever the strides of
    the dims inside the empty one: ``np.zeros((0, 3))`` wraps with strides (0, 0))."""
    if 0 in shape:
        return True
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def is_non_overlapping_and_dense(shape, strides):
    """True when the elements fill a block of memory exactly once (any order)."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n != 1)
    expected = 1
    for s, n in dims:
        if n == 0:
            return True
        if s != expected:
            return False
        expected *= n
    return True


def may_overlap(size, stride):
    """Whether two elements of a geometry may share a storage element."""
    extent = 1
    for n, s in sorted(((n, s) for n, s in zip(size, stride) if n > 1), key=lambda ns: ns[1]):
        if s < extent:
            return True
        extent = s * (n - 1) + extent
    return False


def wrap_dim(dim, ndim):
    """Normalise a possibly negative dim, with torch's IndexError when out of range."""
    if dim.__class__ is int and 0 <= dim < ndim:  # the commonest: nothing to do
        return dim
    try:
        dim = dim.__index__()
    except AttributeError:
        raise TypeError(f"dim must be an int, got {type(dim).__name__}") from None
    n = max(ndim, 1)  # a 0-d tensor accepts dims 0 and -1, as torch does
    if dim < -n or dim >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim + n if dim < 0 else dim


def wrap_dims(dims, ndim):
    """Normalise a dim list; a repeated dim is a RuntimeError, as in torch."""
    out = tuple(wrap_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        for d in out:
            if out.count(d) > 1:
                raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return out


def broadcast_shapes(*shapes):
    """The shape all arguments broadcast to, or torch's RuntimeError naming the sizes."""
    if len(shapes) == 2:
        a, b = shapes
        if a == b:
            return a
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        off = ndim - len(shape)
        for i in range(len(shape) - 1, -1, -1):
            n = shape[i]
            j = off + i
            m = out[j]
            if m == n or n == 1:
                continue
            if m == 1:
                out[j] = n
            else:
                raise RuntimeError(
                    f"The size of tensor a ({m}) must match the size of tensor b ({n}) "
                    f"at non-singleton dimension {j}"
                )
    return tuple(out)


def infer_size(shape, numel):
    """Resolve one -1 in a requested shape against ``numel``."""
    if shape.__class__ is tuple and shape and min(shape) >= 0 and prod(shape) == numel:
        return shape  # (the commonest: every size given, and right; C calls only)
    shape = list(shape)
    infer = None
    known = 1
    for i, n in enumerate(shape):
        if n == -1:
            if infer is not None:
                raise RuntimeError("only one dimension can be inferred")
            infer = i
        elif n < 0:
            raise RuntimeError(f"invalid shape dimension {n}")
        else:
            known *= n
    if infer is not None:
        if known == 0 and numel == 0:
            raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {list_str(shape)} because the "
                               "unspecified dimension size -1 can be any value and is ambiguous")
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list_str(shape)}' is invalid for input of size {numel}")
        shape[infer] = numel // known
    elif known != numel:
        raise RuntimeError(f"shape '{list_str(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def list_str(shape):
    return "[" + ", ".join(str(n) for n in shape) + "]"


def view_strides(shape, strides, new_shape):
    """Strides that view ``shape``/``strides`` as ``new_shape`` without a copy,
    or None when no such view exists (torch's computeStride)."""
    if isinstance(shape, tuple) and CONTIGUOUS_STRIDES.get(shape) == strides:  # the commonest: contiguous stays so
        return contiguous_strides_cached(tuple(new_shape))
    numel = prod(shape)
    if numel == 0 or not shape:
        # empty tensors, and 0-d ones (one element): any contiguous layout is a view
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1] if strides else 1
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


def numel(shape):
    return prod(shape)


INT64_MAX = 2 ** 63 - 1
INT64_MIN = -2 ** 63


def numel_overflows(shape):
    """Whether counting ``shape``'s elements overflows int64 at some step, as torch's checked
    multiplication does (dim by dim: a later 0 does not undo it). Unknown (None) dims count as 0."""
    if None not in shape:
        count = prod(shape)
        if count:  # no dim is 0: no partial product exceeds the whole
            return count > INT64_MAX
    count = 1
    for n in shape:
        count *= n or 0
        if count > INT64_MAX:
            return True
    return False


def check_numel(shape):
    """torch's RuntimeError for a shape whose element count overflows int64."""
    if numel_overflows(shape):
        raise RuntimeError("numel: integer multiplication overflow")
    return shape


def memory_order_strides(shape, operands, empty_steps=False):
    """Dense strides for a new tensor of ``shape`` whose memory order follows its ``operands`` ((shape,
    strides) pairs, broadcast to ``shape``), as torch's TensorIterator lays out a pointwise result.

    Dims sort innermost first by stride: the first operand with unequal nonzero strides in two dims decides
    their order; equal strides put the smaller dim inside (else the next operand decides); dims no operand
    orders (broadcast in all, or equal) keep their row-major order. With one operand this is
    infer_dense_strides (torch's preserve_format), which steps over a dim of size 0 as over one of size 1;
    ``empty_steps``: TensorIterator's own strides, which multiply by it (the dims outside it get stride 0) where
    the order is not row-major (a row-major one it allocates contiguous)."""
    ndim = len(shape)
    seen = []
    for op_shape, op_strides in operands:
        off = ndim - len(op_shape)
        st = [0] * ndim
        for i, (n, s) in enumerate(zip(op_shape, op_strides)):
            st[off + i] = 0 if n == 1 and shape[off + i] != 1 else s  # a broadcast dim orders nothing
        seen.append(st)

    def should_swap(a, b):
        for st in seen:
            sa, sb = st[a], st[b]
            if sa == 0 or sb == 0:
                continue
            if sa != sb:
                return 1 if sa > sb else -1
            if shape[a] > shape[b]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # innermost first
    for i in range(1, ndim):  # TensorIterator's insertion sort: it stops at the first "keep this order"
        j = i
        for k in range(i - 1, -1, -1):
            c = should_swap(perm[k], perm[j])
            if c > 0:
                perm[k], perm[j] = perm[j], perm[k]
                j = k
            elif c < 0:
                break
    empty_steps = empty_steps and perm != list(range(ndim - 1, -1, -1))
    out, acc = [0] * ndim, 1
    for d in perm:
        out[d] = acc
        acc *= shape[d] if empty_steps else max(shape[d], 1)
    return tuple(out)


# The dims of a channels-last layout, innermost first: NHWC of a 4-d NCHW tensor, NDHWC of a 5-d one.
CHANNELS_LAST_ORDER = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}


def is_channels_last_contiguous(shape, strides):
    """torch's ``is_contiguous(memory_format=channels_last)`` of a 4-d tensor, ``channels_last_3d`` of a 5-d one
    (dims of size 1 not looked at); False for other ranks."""
    order = CHANNELS_LAST_ORDER.get(len(shape))
    if order is None:
        return False
    expected = 1
    for d in order:
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def channels_last_strides(shape):
    """torch's ``get_channels_last_strides_2d`` / ``_3d``: channels innermost, then the spatial dims from the
    last, the batch outermost; a dim of size 0 multiplies as 0 (``empty(2, 0, 4, 5, memory_format=channels_last)``
    has strides (0, 1, 0, 0))."""
    order = CHANNELS_LAST_ORDER[len(shape)]
    out, acc = [0] * len(shape), 1
    for d in order:
        out[d] = acc
        acc *= shape[d]
    return tuple(out)


def is_strides_like_channels_last(shape, strides):
    """torch's ``is_channels_last_strides_2d`` / ``_3d`` (what ``suggest_memory_format`` asks): whether the dims,
    channels first, step outward in channels-last order. A zero channel stride, and a batch stride equal to the
    channel stride (``N111`` tensors), and an empty dim, count as contiguous, torch's fallback where the strides
    are ambiguous."""
    order = CHANNELS_LAST_ORDER.get(len(shape))
    if order is None or strides[1] == 0:
        return False
    low = 0
    for d in order:
        if shape[d] == 0 or strides[d] < low or d == 0 and low == strides[1]:
            return False
        low = strides[d] * shape[d] if shape[d] > 1 else strides[d]
    return True


def iterator_strides(shape, operands, same_shape):
    """The strides of torch's TensorIterator for a new pointwise result of ``shape`` from ``operands`` ((shape,
    strides) pairs, an operand of another dtype than the computation's given as its `like_strides` copy).
    ``same_shape``: every operand is a tensor of ``shape`` (a Python number is a 0-d operand), where torch's fast
    setups decide: contiguous where all are contiguous by its test (size-1 dims' strides not looked at),
    channels-last where all are (4-d), the operands' own strides where all share them and they are
    non-overlapping and dense. Otherwise `memory_order_strides`. None for contiguous."""
    if same_shape:
        if all(is_contiguous(shape, s) for _, s in operands):
            return None
        if len(shape) == 4 and all(is_channels_last_contiguous(shape, s) for _, s in operands):
            return channels_last_strides(shape)
        first = tuple(operands[0][1])
        if all(tuple(s) == first for _, s in operands) and torch_dense(shape, first):
            return first
    return memory_order_strides(shape, operands, empty_steps=True)


def torch_dense(shape, strides):
    """torch's ``is_non_overlapping_and_dense``: an empty tensor is (it is contiguous), else the dims of size 2 or
    more, by stride, step densely (dims of size 1 are not looked at)."""
    if 0 in shape:
        return True
    expected = 1
    for s, n in sorted((s, n) for n, s in zip(shape, strides) if n > 1):
        if s != expected:
            return False
        expected *= n
    return True


def like_strides(shape, strides):
    """The strides of torch's ``empty_like`` in preserve_format (and so of clone, casts, ``.to`` and the ``_like``
    factories): ``strides`` themselves where torch's test takes them as non-overlapping and dense, size-1 and
    empty dims' included (``ones(1, 5).t()`` keeps (1, 5)); otherwise dense strides in their order
    (infer_dense_strides). None for strides that are exactly contiguous."""
    strides = tuple(strides)
    if strides == contiguous_strides_cached(tuple(shape)):
        return None
    return strides if torch_dense(shape, strides) else dense_strides(shape, strides)


def dense_strides(shape, strides):
    """Dense strides keeping the order of ``strides`` (torch's infer_dense_strides): see
    `memory_order_strides`."""
    return memory_order_strides(shape, [(shape, strides)])


def span(shape, strides, offset=0):
    """One past the last storage element a geometry reaches from ``offset`` (0 when it has no elements):
    from a view's first element, the number of elements it spans."""
    if 0 in shape:
        return 0
    return offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))
