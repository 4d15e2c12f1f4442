"""The outputs of an exported program that view its inputs: recorded at export, made at each call over the caller's
tensors, as eager's, `torch.export`'s and `jitorch.compile`'s calls return them.

The compiled graph of an exported program computes every output; where the traced function returned a view of an
input (``x[::2]``, ``x.t()``, ``x`` itself after ``x.add_(1)``, a slice of ``x`` after ``x[:] = y``), that output was
a new tensor or a view of the graph's own copy of the input (an input in another layout than the graph reads, or a
value the graph then wrote back): the right values, but the caller's writes through it no longer reached the input,
nor the input's later writes it (fuzz seed 1005: ``x1[:, ::1] = x0; return x1[0:4:2, 2]``). The tracer's
`output_aliases` say which outputs are such views, as strides over the example input; an exported program keeps
them so, for inputs of the example's strides (at any offset: fuzz seed 3000768, ``x0.reshape(-1, 1)``), and as steps
over the input's indices (`index_view`), which hold for an input in any layout.
"""

from __future__ import annotations

from ..tensor import Tensor


def input_views(graph, examples):
    """{output leaf: `InputView`} for the outputs of a traced ``graph`` that view an input, from its `output_aliases`
    and the example inputs (graph-input order) it was traced on. The pieces of an unsafe split are left out (the
    computed output stands). (An export refuses a call that reshapes an input in place, ``x.t_()``.)"""
    views = {}
    aliases = graph.output_aliases
    for k, (owner, geometry) in aliases.items():
        if isinstance(owner, tuple) and owner[0] == "leaf":  # the same tensor again (fuzz seed 3000353)
            owner, geometry = aliases.get(owner[1], (None, None))
        if not isinstance(owner, int):
            continue
        example = examples[owner]
        whole = geometry is None
        if whole:
            geometry = (tuple(example.shape), tuple(example.stride()), 0, False)
        shape, strides, offset, history = geometry
        if not isinstance(history, tuple):
            # (the input itself is every index once, whatever the example's strides: an expanded one's too)
            index = (tuple(tuple(int(d == i) for d in range(example.ndim)) for i in range(example.ndim)),
                     (0,) * example.ndim) if whole else index_view(example, shape, strides, offset)
            views[k] = InputView(owner, tuple(example.stride()), tuple(strides), offset, index)
    return views


class InputView(tuple):
    """An output's view of input ``input``: over an input of the example's strides (``example``, at any storage
    offset) it has ``strides`` and ``offset`` from the input's own, as the trace saw it; over one of other strides,
    the steps over the input's indices that `index_view` gives (``index``, None where there are none: a view
    merging dims, ``x.reshape(-1)``, which eager makes of such an input only where its layout allows)."""

    def __new__(cls, input, example, strides, offset, index):
        return super().__new__(cls, (input, example, strides, offset, index))

    input = property(lambda self: self[0])
    example = property(lambda self: self[1])
    strides = property(lambda self: self[2])
    offset = property(lambda self: self[3])
    index = property(lambda self: self[4])


def index_view(t, shape, strides, offset):
    """A strided view (``shape``, ``strides``, ``offset`` from ``t``'s own) of ``t``'s memory as steps over ``t``'s
    indices: (per view dim, the index step in each of ``t``'s dims; the index of the view's first element), or None
    where the view holds an element outside ``t``'s."""
    if any(n == 0 for n in shape) or expanded(t):
        # (an empty view addresses nothing; over an expanded example each element's memory is several indices', so no
        # steps say which: fuzz seed 5580050 of ``--export --edges 0.4``, ``x1[5:]`` of an expanded ``x1``, divided
        # by its stride 0)
        return None
    order = sorted((d for d, n in enumerate(t.shape) if n > 1), key=lambda d: -t.stride()[d])
    start = _unravel(offset, order, t)
    if start is None:
        return None
    reach = list(start)
    steps = []
    for n, s in zip(shape, strides):
        step = [0] * t.ndim if n == 1 else _unravel(s, order, t)
        if step is None:
            return None
        for d, k in enumerate(step):
            reach[d] += (n - 1) * k
        steps.append(tuple(step))
    if any(r >= n for r, n in zip(reach, t.shape)):
        return None
    return tuple(steps), tuple(start)


def _unravel(position, order, t):
    """``position`` (elements from ``t``'s first) as an index into ``t`` (greedily by its dims' strides, largest
    first), or None where none is (negative, or between ``t``'s elements)."""
    if position < 0:
        return None
    index = [0] * t.ndim
    for d in order:
        index[d], position = divmod(position, t.stride()[d])
    return index if position == 0 else None


def expanded(t):
    """Whether ``t``'s elements share memory through a stride-0 dim (an expanded tensor's)."""
    return any(n > 1 and s == 0 for n, s in zip(t.shape, t.stride()))


def written_expanded(graph, tensors):
    """The position among ``tensors`` (the graph's inputs, in order) of the first one the graph writes into that is
    expanded, or None. A graph's write-back is the input's whole new value, which over shared memory is not eager's
    element by element write (fuzz seeds 5580745 and 5580760 of ``--export --edges 0.4``: ``x2[:, -4] = 0.25``)."""
    positions = {v: i for i, v in enumerate(graph.inputs)}
    for target, _ in graph.mutations:
        i = positions.get(target)
        if i is not None and expanded(tensors[i]):
            return i
    return None


def viewed(leaves, inputs, views):
    """The output ``leaves`` with each in ``views`` (`input_views`) made a view of its input in ``inputs``, without
    autograd history (as an exported program's outputs are), where the computed leaf has the view's shape and the
    view lies within the input (at other sizes of a symbolic dim it may not: the computed leaf stands)."""
    out = list(leaves)
    for k, view in views.items():
        real, leaf = inputs[view.input], out[k]
        if not isinstance(leaf, Tensor) or len(view.strides) != leaf.ndim:
            continue
        geometry = _over(real, tuple(leaf.shape), view)
        if geometry is not None:
            out[k] = real.detach().as_strided(tuple(leaf.shape), *geometry)
    return out


def _over(real, shape, view):
    """(strides, storage offset) of ``view`` of ``real`` at ``shape``, or None where it has none within ``real``."""
    if tuple(real.stride()) == view.example:
        offset = real.storage_offset() + view.offset
        # (an ``as_strided`` view may reach past the input's elements, into its buffer's others: not past the buffer)
        last = offset + sum((n - 1) * s for n, s in zip(shape, view.strides))
        return (view.strides, offset) if last < real._storage.size else None
    if view.index is None:
        return None
    steps, start = view.index
    if len(steps) != len(shape) or len(start) != real.ndim or any(len(step) != real.ndim for step in steps):
        return None
    reach = [u + sum((n - 1) * step[d] for n, step in zip(shape, steps)) for d, u in enumerate(start)]
    if any(r >= n for r, n in zip(reach, real.shape)):
        return None
    strides = tuple(sum(d * r for d, r in zip(step, real.stride())) for step in steps)
    return strides, real.storage_offset() + sum(u * r for u, r in zip(start, real.stride()))


def views_to_json(views):
    """`input_views` as a manifest's list."""
    return [{"output": k, "input": v.input, "example_strides": list(v.example), "strides": list(v.strides),
             "offset": v.offset, "steps": None if v.index is None else [list(s) for s in v.index[0]],
             "start": None if v.index is None else list(v.index[1])}
            for k, v in sorted(views.items())]


def views_from_json(records, n_inputs, n_outputs):
    """A manifest's list back as `input_views`; ValueError or TypeError for a malformed one."""
    views = {}
    for r in records:
        k, i = r["output"], r["input"]
        if not (type(k) is int and 0 <= k < n_outputs and type(i) is int and 0 <= i < n_inputs):
            raise ValueError(f"an output view names output {k!r} of {n_outputs} and input {i!r} of {n_inputs}")
        index = None
        if r["steps"] is not None:
            index = (tuple(tuple(_index(x) for x in s) for s in r["steps"]), tuple(_index(x) for x in r["start"]))
        views[k] = InputView(i, tuple(_index(x) for x in r["example_strides"]), tuple(_index(x) for x in r["strides"]),
                             _index(r["offset"]), index)
    return views


def _index(x):
    if type(x) is not int or x < 0:
        raise ValueError(f"an output view's strides, offsets and steps are counts, found {x!r}")
    return x
