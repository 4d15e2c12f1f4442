"""Kernels the CUDA backend generates from small graphs, and the caches that keep every kernel it makes.

An eager op without a kernel of its own runs as its one-op graph's kernel (generated.py). A large full
reduction is computed in parts (the split reductions of codegen/kernel.py), which a second kernel combines
on the device: the graph here of the reduction of the parts, a mean's division by the count and the cast to
the result's dtype, fused into one kernel, as the CPU executor combines the parts on the host.
"""

from __future__ import annotations

from ...codegen.cache import default_cache
from ...codegen.errors import CompileError
from ...codegen.kernel import build, is_row_softmax
from ...codegen.nvptx.ptx import ptx_kernel
from ...codegen.nvptx.target import NVPTX
from ...ir.fake import add_op
from ...ir.graph import Graph, TensorType
from ...ir.passes.fusion import fuse

_COMBINERS: dict = {}   # (split, result dtype, device) -> (kernel, group) of the combining graph





def cached(table, key, make):
    """``table[key]``, made on first use; a table grows to 4096 entries at most (programs of ever new
    shapes; the PTX stays cached on disk)."""
    if key not in table:
        if len(table) > 4096:
            table.clear()
        table[key] = make()
    return table[key]


def graph_kernel(g, node, name, layouts):
    """(NVPTX kernel, fusion group) of graph ``g`` when it fuses into one pointwise or reduction group that
    computes ``node`` (or is a row softmax), its buffers laid out as ``layouts`` says; None when it does not,
    or when NVPTX cannot compile the group."""
    groups = fuse(g)
    if len(groups) != 1 or node not in groups[0].nodes:
        return None
    group = groups[0]
    if group.kind not in ("pointwise", "reduction") and not (len(group.nodes) == 1 and is_row_softmax(node)):
        return None
    try:
        return ptx_kernel(build(group, name, NVPTX, layouts=layouts), default_cache()), group
    except CompileError:
        return None


def combining_kernel(split, dtype, device):
    """(kernel, group) that combine the partial results of a split full reduction (``split``: the parts, the
    reduction's name, the count of elements it reduced, the accumulator dtype of the parts) into its result
    in ``dtype`` on ``device``."""
    return cached(_COMBINERS, (split, dtype, device), lambda: _combining(*split, dtype, device))


def _combining(parts, name, count, acc_dtype, dtype, device):
    g = Graph()
    v = g.add_input(TensorType((parts,), acc_dtype, device))
    v = add_op(g, "sum" if name == "mean" else name, v)
    if name == "mean":
        v = add_op(g, "true_divide", v, count)
    if v.type.dtype is not dtype:
        v = add_op(g, "_to_copy", v, dtype, device)
    g.outputs = v
    made = graph_kernel(g, v.node, f"jitorch_combine_{name}", {})
    if made is None:
        raise RuntimeError(f"no CUDA kernel combines the parts of a split {name} into {dtype}")
    return made
