"""A concatenation whose inputs are copies, written in one pass: each copy's source goes straight into its
slice of the result.

An attention's backward in a GPT gives the gradients of q, k and v laid out ``[B, H, T, D]``; the model's
``split`` then ``view`` then ``transpose(1, 2)`` have, as their backward, a ``transpose(1, 2)`` then ``view``
of each (a copy kernel: `kernel.build_copy`) and a ``cat`` of the three: every element is copied twice. Where
a copy's only reader is the ``cat``, the ``cat`` reads the copy's source through its strides and writes it
into its slice of the result, viewed as the copied value's shape (a dense slice, so that view needs no copy):
the copy kernel, its buffer and its pass over memory are gone, and the result holds the same elements, moved
bit for bit.

Where the pieces' sources are themselves the results of one op that can write them at any strides (`WRITERS`:
the attention's backward, whose kernel writes each tile where it lies), that op writes them straight into their
slices of the cat's result (`fold_writers_into_cats`): the cat's pass goes too, and the op's results never exist
apart. The op then runs where it stood, as the cat's step; its results are the op's own, bit for bit.
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..ops.attention import attention_backward_into
from ..ops.views import SPLIT_MIN
from ..runtime import threads
from ..runtime.strided import contiguous_strides, view_strides


def cat_slices(node, pieces):
    """Per input of a ``cat`` node over a compact result: (shape, strides, offset) in elements of where it goes
    in the result; for the inputs in ``pieces`` (value -> the shape of the copied value it is the row-major
    copy of), that slice viewed as the copied value's shape. None where a slice cannot be so viewed."""
    tensors, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    out = node.outputs[0].type
    dim %= len(out.shape)
    strides = contiguous_strides(out.shape)
    slices, start = [], 0
    for t in tensors:
        shape = tuple(t.type.shape)
        if t in pieces:
            viewed = view_strides(shape, strides, pieces[t])
            if viewed is None:
                return None
            slices.append((tuple(pieces[t]), tuple(viewed), start * strides[dim]))
        else:
            slices.append((shape, tuple(strides), start * strides[dim]))
        start += shape[dim]
    return slices


def strided_read(t, geometry):
    """The array of a copy's source tensor ``t`` (compact, from offset 0) at ``geometry`` (shape, strides,
    offset): the copied value, where it lies."""
    shape, strides, offset = geometry
    arr = t._array()
    item = arr.itemsize
    if prod(shape) == 0:
        return np.empty(shape, arr.dtype)
    return np.ndarray(shape, arr.dtype, arr, offset * item, tuple(s * item for s in strides))


def cat_pieces_into(arrays, out, slices):
    """Each array into its slice of ``out`` (compact): `cat_slices`' places. A large result is written in parts
    on the thread team (`views.SPLIT_MIN`, as a large copy is): each part the same range of each input's first
    dim, disjoint places in ``out``."""
    item = out.itemsize
    pairs = [(np.ndarray(shape, out.dtype, out, offset * item, tuple(s * item for s in strides)), arr)
             for arr, (shape, strides, offset) in zip(arrays, slices) if prod(shape)]
    parts = min(threads.get_num_threads(), out.size // (SPLIT_MIN // 2))
    if out.size < SPLIT_MIN or parts < 2:
        _copy(pairs)
        return
    shares = [[] for _ in range(parts)]
    for target, arr in pairs:
        for share, (lo, hi) in zip(shares, threads.bounds(target.shape[0], parts)):
            share.append((target[lo:hi], arr[lo:hi]))
    threads.run_parts(_copy, [(share,) for share in shares if share])


def _copy(pairs):
    for target, arr in pairs:
        np.copyto(target, arr)


def _attention_backward_writes(node):
    """Whether an ``_attention_backward`` node can write its gradients of q, k and v at any strides: on the CPU,
    without the scores' gradient (its fourth result, then empty)."""
    return node.outputs[0].type.device.type == "cpu" and not (len(node.args) > 7 and node.args[7])


# Ops whose first results can be written into arrays at any strides: name -> (how many results, whether a node
# qualifies, the writer of ``(those arrays, the op's arguments as tensors and numbers)``).
WRITERS = {"_attention_backward": (3, _attention_backward_writes, attention_backward_into)}


def fold_writers_into_cats(steps, escaping):
    """``steps`` with each eager op of `WRITERS` whose written results are read only as the pieces of one cat
    (`cat_slices`: every input of that cat is one of them, each once), and leave the call no other way (nor do
    its other results, read by no step), folded into that cat: the cat's step moves to the op's place and
    notes, per such cat node, (the op's node, where each written result lies in the cat's result: shape, strides,
    offset in elements) in ``producers``; the op's step is gone. The cat's result is the same, bit for bit."""
    readers = {}
    for step in steps:
        for v in step.reads():
            readers[v] = readers.get(v, 0) + 1
    made_by = {}  # value -> (the step of one qualifying node of WRITERS, that node)
    for step in steps:
        nodes = getattr(step, "nodes", ())
        if hasattr(step, "producers") and len(nodes) == 1 and nodes[0].op.name in WRITERS \
                and WRITERS[nodes[0].op.name][1](nodes[0]):
            made_by.update((v, (step, nodes[0])) for v in nodes[0].outputs)
    moved = {}  # the op's step -> the cat's step that takes its place
    for step in steps:
        if not getattr(step, "slices", None) or len(step.nodes) != 1:  # (an eager step's cat of pieces alone)
            continue
        (node,) = step.nodes
        inputs = node.args[0]
        if node not in step.slices or not all(t in step.pieces for t in inputs):
            continue
        sources = [step.pieces[t][0] for t in inputs]
        found = {made_by.get(v, (None, None)) for v in sources}
        if len(found) != 1:
            continue
        ((op_step, op_node),) = found
        if op_step is None or op_step in moved:
            continue
        count = WRITERS[op_node.op.name][0]
        written, rest = op_node.outputs[:count], op_node.outputs[count:]
        if sorted(map(id, sources)) != sorted(map(id, written)) or any(
                readers.get(v) != 1 or v in escaping for v in written) or any(
                v in readers or v in escaping for v in rest):
            continue
        places = {}
        for t, (shape, strides, offset) in zip(inputs, step.slices[node]):
            source, geometry = step.pieces[t]
            place = _source_place(source, geometry, (shape, strides, offset))
            if place is None:
                break
            places[source] = place
        else:
            step.producers[node] = (op_node, tuple(places[v] for v in written))
            moved[op_step] = step
    if not moved:
        return steps
    taken = set(moved.values())
    return [moved.get(step, step) for step in steps if step not in taken]


def _source_place(source, geometry, place):
    """Where the compact ``source`` lies in a cat's result, (shape, strides, offset) in elements, given the value
    copied from it (``geometry``: its shape, strides and offset over ``source``) and where that copied value
    lies (``place``); None unless the copied value is ``source`` with its dims permuted (dims of one element
    aside)."""
    shape, strides, offset = geometry
    to_shape, to_strides, to_offset = place
    if offset != 0 or tuple(shape) != tuple(to_shape):
        return None
    by_stride = {s: j for j, (n, s) in enumerate(zip(shape, strides)) if n > 1}
    if len(by_stride) != sum(n > 1 for n in shape):
        return None
    own = contiguous_strides(source.type.shape)
    result = []
    for n, s in zip(source.type.shape, own):
        if n == 1:
            result.append(0)
            continue
        j = by_stride.pop(s, None)
        if j is None or shape[j] != n:
            return None
        result.append(to_strides[j])
    return (tuple(source.type.shape), tuple(result), to_offset) if not by_stride else None


def write_pieces(node, args, out, places):
    """Node ``node`` of `WRITERS` run on ``args`` (its arguments as tensors and numbers), its written results
    going into their ``places`` in ``out`` (the compact array of the cat that joins them)."""
    item = out.itemsize
    arrays = [np.ndarray(shape, out.dtype, out, offset * item, tuple(s * item for s in strides))
              for shape, strides, offset in places]
    WRITERS[node.op.name][2](arrays, *args)
