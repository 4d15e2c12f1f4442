"""Fusion plans on disk: a fresh process compiling a graph an earlier process compiled skips fusion's
search for merges.

Fusion was the largest part of compiling a warm-cache graph (a GPT training step's 2,000 nodes make
5,000 merge attempts for 1,500 merges). Its plan, the partition it found (`fusion.fuse_with_plan`), is
stored in the kernel cache's folder under a key of the optimised graph's canonical text, the device's
target (the CPU's triple, name and features), `MAX_GROUP_NODES`, this format's number and, through
`cache_key`, the versions of jitorch and llvmlite. The graph's text holds every node's op, arguments
(attributes and constants included), dtype, shape and device, the graph's outputs and the values written
back: everything fusion reads.

An entry is untrusted input: the kernel cache checks that it is a whole entry made for this key from this
graph's text (so a foreign, truncated or damaged file is a miss), its size is bounded before it is read,
it is JSON of integers only (nothing in it runs), and every group it names must pass fusion's own
rules for a kernel, with no cycle between the groups. An entry that fails any of this is logged ("fusion"
stage), counted as rejected, and the graph is fused anew, which writes a good entry in its place.
"""

from __future__ import annotations

import functools
import json
import threading

from ..codegen.cache import KernelCache, cache_key
from ..ir.passes.fusion import MAX_GROUP_NODES, fuse, fuse_with_plan
from ..ir.printer import print_graph
from ..runtime import logs

FORMAT = 2
# Graphs of fewer nodes fuse in a few milliseconds at most: no entry is written (nor read) for them.
MIN_NODES = 64
# A plan holds a number per node; a bound on the bytes read keeps a damaged or hostile entry from costing
# memory or time before it is checked.
MAX_ENTRY_BYTES = 8 << 20

_counts = dict.fromkeys(("hits", "misses", "rejected", "writes"), 0)
_lock = threading.Lock()


@functools.cache
def _store() -> KernelCache:
    """The kernel cache's folder, through a cache of its own, so that `default_cache`'s counts stay the
    kernels'."""
    return KernelCache()


def _count(name):
    with _lock:
        _counts[name] += 1


def info() -> dict:
    """This process's fusion-plan cache counts: hits, misses, rejected (entries found but unusable), writes."""
    with _lock:
        return dict(_counts)


def _graph_text(graph, target_id):
    """What a plan is keyed by: the graph's canonical text (values named by definition order, as
    `print_graph` names them) and the strides of the values laid out as eager lays them out."""
    names = {v: f"v{i}" for i, v in enumerate(graph.values())}
    layouts = sorted((names[v], tuple(strides)) for v, strides in graph.layouts.items() if v in names)
    return "\n".join([f"jitorch fusion plan {FORMAT}", f"max group nodes {MAX_GROUP_NODES}", f"target {target_id}",
                      print_graph(graph, canonical=True), f"layouts {layouts}"])


def _decode(data, nodes):
    """The plan of an entry's bytes, or why it is no plan: a JSON object of this format for a graph of
    ``nodes`` nodes (`fuse_with_plan` checks the group numbers themselves)."""
    try:
        entry = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"not JSON: {e}"
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("nodes") != nodes:
        return None, "another format or another graph's"
    groups = entry.get("groups")
    if not isinstance(groups, list):
        return None, "no list of group numbers"
    return groups, None


def target_id(target):
    """The text a plan's key takes of a kernel target (None: the CPU's, its triple, CPU name and features)."""
    if target is None:
        # (imported here: `jitorch.explain` imports this module, and importing jitorch loads no LLVM)
        from ..codegen import cpu
        return cpu.target_id()
    return f"{target.name} {getattr(target, 'triple', '')}"


def fuse_cached(graph, target, store=None):
    """`fuse`'s groups of ``graph`` (optimised) for the kernel ``target`` (None: the CPU), made from a stored
    plan when the cache (``store``, default: the kernel cache's folder) holds a valid one for this graph, else
    fused anew and the plan stored. Graphs under `MIN_NODES` nodes are fused without the cache."""
    if len(graph.nodes) < MIN_NODES:
        return fuse(graph)
    store = store if store is not None else _store()
    text = _graph_text(graph, target_id(target))
    key = cache_key("fusion plan", text)
    data = store.get(key, text, limit=MAX_ENTRY_BYTES)
    plan = None
    if data is not None:
        plan, why = _decode(data, len(graph.nodes))
        if plan is None:
            logs.log("fusion", "cached fusion plan %s rejected, fusing anew: %s", key[:16], why)
            _count("rejected")
    else:
        _count("misses")
    groups, made, taken = fuse_with_plan(graph, plan=plan)
    if taken:
        logs.log("fusion", "fusion plan %s loaded from the cache: %d groups", key[:16], len(groups))
        _count("hits")
        return groups
    if plan is not None:  # decoded, but refused (fuse_with_plan logged why)
        _count("rejected")
    store.put(key, json.dumps({"format": FORMAT, "nodes": len(graph.nodes), "groups": made},
                              separators=(",", ":")).encode(), text)
    _count("writes")
    return groups
