"""Fusion plans on disk: a fresh process compiling a graph an earlier process compiled skips fusion's
search for merges.

Fusion was the largest part of compiling a warm-cache graph (a GPT training step's 2,000 nodes make
5,000 merge attempts for 1,500 merges). Its plan, the partition it found (`fusion.fuse_with_plan`), is
stored in the kernel cache's folder under a key of the optimised graph's canonical text, the device's
target (the CPU's triple, name and features), `MAX_GROUP_NODES` and fusion's and the lse pass's switches as set
when the key is made (`PLAN_SWITCHES`), this format's number, the code generator's
sources (`kernel.generator_fingerprint`: fusion's rules and the lowerings' kinds) and, through
`cache_key`, the versions of jitorch and llvmlite. The graph's text holds every node's op, arguments
(attributes and constants included), dtype, shape and device, the graph's outputs and the values written
back: everything fusion reads. The recompute pass (`ir.passes.recompute`) runs between the passes and fusion,
and its copies are a function of that graph and of the IR's code, which the generator's fingerprint covers:
the entry keyed by the graph before the copies holds them, as (reader, original) pairs of its node numbers in
the order the pass makes them, and a compile that finds it makes those copies (`recompute.apply`) without the
pass's search (`recompute.copies`: 10-12 ms of the GPT-4x128 step's warm first call), giving the graph, value
names included, that the search gives. So with the ``lse`` pass, which runs first (its rewrites are a function
of the optimised graph, its layouts and the IR's code): the key is the text of the graph before it, which the
passes printed (printing the graph again after it took 4-5 ms of the GPT step's warm first call), and the
entry's node numbers are those of the graph it gives. Its copies into reductions (`recompute.into_reductions`,
one walk over the reductions of the graph those copies give) are made anew on every compile.

An entry is untrusted input: the kernel cache checks that it is a whole entry made for this key from this
graph's text (so a foreign, truncated or damaged file is a miss), its size is bounded before it is read,
it is JSON of integers only (nothing in it runs), each copy must keep the graph's meaning
(`recompute.refused`: a pointwise node without effects whose value the call does not keep, copied for a
later node, each pair once), and every group it names must pass fusion's own rules for a kernel, with no
cycle between the groups. An entry that fails any of this is logged ("fusion"
stage), counted as rejected, and the graph is fused anew, which writes a good entry in its place.

The optimisation passes' last round is skipped the same way (`optimize_cached`): they run in rounds until
one rewrites nothing, and for a traced graph that is mostly the second round, which then only confirms the
first's result at a third of the passes' time. The graph's canonical text after the first round and the code
generator's sources (which hold the passes': a build with one pass more rewrites in its second round what
another's did not) key an entry that says "the second round rewrote nothing", written when it did; a process
that finds it stops after the first round. Its payload is one fixed JSON object, compared whole: nothing in
it is read as a value, and a wrong entry could at worst leave a rewrite undone (each pass keeps the graph's
meaning). The text is also fusion's key (`fuse_cached`), so printing it costs nothing extra.
"""

from __future__ import annotations

import functools
import json

from ..codegen.cache import KernelCache, cache_key
from ..codegen.kernel import generator_fingerprint
from ..ir.passes import fold, fusion, lse, optimize, recompute, simplify
from ..ir.passes.fusion import fuse, fuse_with_plan, merge_repeats
from ..ir.printer import print_graph
from ..runtime import logs
from ..runtime.forks import module_lock

FORMAT = 4
# Graphs of fewer nodes fuse in a few milliseconds at most: no entry is written (nor read) for them.
MIN_NODES = 64
# A plan holds a number per node; a bound on the bytes read keeps a damaged or hostile entry from costing
# memory or time before it is checked.
MAX_ENTRY_BYTES = 8 << 20

# The payload of a fixed-point entry (see `optimize_cached`), compared byte for byte.
FIXED_POINT = json.dumps({"format": FORMAT, "passes": "fixed point after one round"}).encode()

_counts = dict.fromkeys(("hits", "misses", "rejected", "writes", "fixed_point_hits",
                                 "fixed_point_writes"), 0)
_lock = module_lock(globals(), "_lock")


@functools.cache
def _store() -> KernelCache:
    """The kernel cache's folder, through a cache of its own, so that `default_cache`'s counts stay the
    kernels'."""
    return KernelCache()


def _count(name):
    with _lock:
        _counts[name] += 1


def info() -> dict:
    """This process's fusion-plan cache counts: hits, misses, rejected (entries found but unusable), writes;
    and the passes' fixed-point entries found and written (fixed_point_hits, fixed_point_writes)."""
    with _lock:
        return dict(_counts)


# The module switches that change fusion's plan (and the lse pass's rewrites, which the plan's node numbers
# follow), read when a key is made: a process that sets them (benchmarks/multiout.py compares the steps fused
# with and without) must not be handed the plan fused under others. UNTIED_PRODUCTS and PRODUCT_MIN_WORK plans
# pass fusion's rules for a kernel either way, and were taken.
PLAN_SWITCHES = ((fusion, ("SHARED_REDUCTIONS", "DEPENDENT_ROW_REDUCTIONS", "REDUCTION_SIBLINGS", "ROW_EPILOGUE_MAX",
                           "PRODUCT_MIN_WORK", "UNTIED_PRODUCTS", "UNTIED_REDUCTIONS")), (lse, ("MAX_CONE",)))
# The passes' switches, which decide whether a second round rewrites what the first left (`optimize_cached`).
PASS_SWITCHES = ((simplify, ("BROADCAST_READS", "MAX_INTEGER_POWER")), (fold, ("MAX_NUMEL",)))


def _switches(switches):
    """The text of ``switches``' current values: ``module.NAME value``, one a line."""
    return "\n".join(f"{module.__name__.rsplit('.', 1)[-1]}.{name} {getattr(module, name)!r}"
                     for module, names in switches for name in names)


def _graph_text(graph, target_id, printed=None):
    """What a plan is keyed by: the graph's canonical text (values named by definition order, as
    `print_graph` names them; ``printed``: that text, where the caller has it) and the strides of the
    values laid out as eager lays them out."""
    names = {v: f"v{i}" for i, v in enumerate(graph.values())}
    layouts = sorted((names[v], tuple(strides)) for v, strides in graph.layouts.items() if v in names)
    # (and the code generator's sources: fusion's rules and the lowerings' kinds decide the partition, and an
    # edit of them, which does not change jitorch's version, would otherwise adopt the plans of the code before)
    # (and the recompute pass's bounds, read now: a process that sets them, as `benchmarks/kernel_audit.py`
    # does to build a step without the pass, must not be handed the copies made under others)
    return "\n".join([f"jitorch fusion plan {FORMAT}", f"max group nodes {fusion.MAX_GROUP_NODES}", f"target {target_id}",
                      f"recompute max cone {recompute.MAX_CONE} small leaf {recompute.SMALL_LEAF} "
                      f"reductions {recompute.REDUCTIONS} leaf bytes {recompute.REDUCTION_LEAF_BYTES} "
                      f"barriers {recompute.BARRIERS} written leaves {recompute.WRITTEN_LEAVES}",
                      _switches(PLAN_SWITCHES), f"generator {generator_fingerprint()}",
                      printed if printed is not None else print_graph(graph, canonical=True), f"layouts {layouts}"])


def _fixed_point_text(printed):
    # (with the generator's sources, which hold the passes': another build's entry would skip this one's rewrites)
    return "\n".join([f"jitorch passes fixed point {FORMAT}", _switches(PASS_SWITCHES),
                      f"generator {generator_fingerprint()}", printed])


def optimize_cached(graph, store=None):
    """(``graph`` optimised in place, its canonical text or None): the passes' second round skipped where
    the cache (``store``, default: the kernel cache's folder) says that round rewrote nothing for the graph
    the first round made (see the module docstring), else run, and where it rewrote nothing, that stored.
    The text is the optimised graph's where it was printed (`fuse_cached` takes it). Graphs under `MIN_NODES`
    nodes are optimised without the cache."""
    if len(graph.nodes) < MIN_NODES:
        return optimize(graph), None
    store = store if store is not None else _store()
    printed = {}

    def settled(g, confirmed):
        if confirmed:  # the second round rewrote nothing: the first round's text is the result's
            text = _fixed_point_text(printed["text"])
            store.put(cache_key("passes fixed point", text), FIXED_POINT, text)
            _count("fixed_point_writes")
            printed["final"] = True
            return True
        printed["text"] = print_graph(g, canonical=True)
        text = _fixed_point_text(printed["text"])
        if store.get(cache_key("passes fixed point", text), text, limit=len(FIXED_POINT)) == FIXED_POINT:
            logs.log("passes", "the second round of passes skipped: the cache says it rewrites nothing")
            _count("fixed_point_hits")
            printed["final"] = True
            return True
        return False

    optimize(graph, settled=settled)
    # (the first round's text is the result's when the passes stopped there or the second round confirmed it)
    return graph, printed["text"] if printed.get("final") else None


def _decode(data, nodes):
    """(the copies, the plan) of an entry's bytes, or (None, why it is none): a JSON object of this format for a
    graph of ``nodes`` nodes, its copies pairs of node numbers (`recompute.refused` checks what they copy;
    `fuse_with_plan` the group numbers)."""
    try:
        entry = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"not JSON: {e}"
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("nodes") != nodes:
        return None, "another format or another graph's"
    copies, groups = entry.get("copies"), entry.get("groups")
    if not isinstance(copies, list) or not all(
            type(pair) is list and len(pair) == 2 and all(type(k) is int and 0 <= k < nodes for k in pair)
            for pair in copies):
        return None, f"no list of pairs of node numbers below {nodes}"
    if not isinstance(groups, list):
        return None, "no list of group numbers"
    return (copies, groups), None


def target_id(target):
    """The text a plan's key takes of a kernel target (None: the CPU's, its triple, CPU name and features)."""
    if target is None:
        # (imported here: `jitorch.explain` imports this module, and importing jitorch loads no LLVM)
        from ..codegen import cpu
        return cpu.target_id()
    return f"{target.name} {getattr(target, 'triple', '')}"


def _stored(store, key, text, graph):
    """(the copies as (reader, original) nodes, as node numbers, the plan) of the valid entry under ``key``,
    or None: a miss, or an entry rejected (logged); counted either way."""
    data = store.get(key, text, limit=MAX_ENTRY_BYTES)
    if data is None:
        _count("misses")
        return None
    entry, why = _decode(data, len(graph.nodes))
    if entry is not None:
        pairs, plan = entry
        made = [(graph.nodes[r], graph.nodes[o]) for r, o in pairs]
        why = recompute.refused(graph, made)
        if why is None:
            return made, pairs, plan
    logs.log("fusion", "cached fusion plan %s rejected, fusing anew: %s", key[:16], why)
    _count("rejected")
    return None


def fuse_cached(graph, target, store=None, printed=None):
    """The recompute pass's copies made in ``graph`` (optimised), then `fuse`'s groups of it for the kernel
    ``target`` (None: the CPU): both from a stored entry when the cache (``store``, default: the kernel cache's
    folder) holds a valid one for this graph, else made anew and stored. ``printed``: the graph's canonical
    text, where the caller has it (`optimize_cached`). Graphs under `MIN_NODES` nodes are done without the
    cache. (An entry whose copies check out but whose plan does not leaves its copies made, which keep the
    graph's meaning, and is written again with the plan fusion finds for them.) The ``lse`` pass runs first, on
    the optimised graph (its copies of a log-softmax input's cone are the original nodes again where no reshape
    lies between: the passes' cse would merge them back); the key is the text of the graph before it."""
    if len(graph.nodes) < MIN_NODES:
        lse.run(graph)
        recompute.run(graph)
        groups = fuse(graph)
        merge_repeats(graph, groups)
        return groups
    store = store if store is not None else _store()
    # (keyed by the graph before the lse pass, whose text the passes printed: see the module docstring)
    text = _graph_text(graph, target_id(target), printed)
    key = cache_key("fusion plan", text)
    lse.run(graph)
    nodes, stored = len(graph.nodes), _stored(store, key, text, graph)
    if stored is not None:
        made, pairs, plan = stored
    else:
        made, _ = recompute.copies(graph)
        position = {node: i for i, node in enumerate(graph.nodes)}
        pairs, plan = [[position[r], position[o]] for r, o in made], None
    if made:
        recompute.apply(graph, made)
    if recompute.REDUCTIONS:  # (not cached: one walk over the reductions, a function of the graph made so far)
        recompute.into_reductions(graph)
    groups, grouped, taken = fuse_with_plan(graph, plan=plan)
    # (after the plan is taken or made: a plan numbers the nodes of the graph before it)
    merge_repeats(graph, groups)
    if taken:
        logs.log("fusion", "fusion plan %s loaded from the cache: %d groups, %d copies", key[:16], len(groups),
                 len(pairs))
        _count("hits")
        return groups
    if plan is not None:  # decoded, but refused (fuse_with_plan logged why)
        _count("rejected")
    store.put(key, json.dumps({"format": FORMAT, "nodes": nodes, "copies": pairs, "groups": grouped},
                              separators=(",", ":")).encode(), text)
    _count("writes")
    return groups
