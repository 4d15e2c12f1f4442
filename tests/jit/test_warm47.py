"""The fusion-plan entry keyed by the text of the graph before the ``lse`` pass (`plan_cache.fuse_cached`): the
text the passes printed (`plan_cache.optimize_cached`), so a warm compile prints its graph once (printing it again
after the pass took 4-5 ms of the GPT step's warm first call); the entry's node numbers are the rewritten graph's."""

import json

import jitorch as jt
from jitorch.codegen.cache import KernelCache, cache_key
from jitorch.ir.printer import print_graph
from jitorch.jit import executor, plan_cache  # noqa: F401 (executor: loads the code generator, whose rule says what fuses)
from jitorch.jit.tracer import trace


def _classifier(x, w, target):
    """Enough nodes for the plan cache, rewrites for the passes' first round alone (a double transpose, a product
    by one), and a log-softmax the ``lse`` pass rewrites (cross entropy's)."""
    for _ in range(24):
        x = jt.tanh(x @ w.t().t()) * 1.0 + x
    return jt.nn.functional.cross_entropy(x @ w, target)


def _compiled(store, prints):
    """(the text the passes gave or None, the optimised graph's text, the key text of the optimised graph's plan, nodes before and after
    fusion's passes, the groups) of one compile of `_classifier` over ``store``; each `print_graph` of the plan
    cache appended to ``prints``."""
    graph = trace(_classifier, jt.randn(8, 16, generator=jt.Generator().manual_seed(0)),
                  jt.randn(16, 16, generator=jt.Generator().manual_seed(1)), jt.arange(8) % 16)
    graph, printed = plan_cache.optimize_cached(graph, store)
    text = print_graph(graph, canonical=True)
    key_text, nodes = plan_cache._graph_text(graph, plan_cache.target_id(None), text), len(graph.nodes)
    groups = plan_cache.fuse_cached(graph, None, store, printed)
    return printed, text, key_text, nodes, len(graph.nodes), [(g.kind, [n.outputs[0].name for n in g.nodes]) for g in groups]


def test_a_warm_compile_prints_its_graph_once_and_keys_the_plan_by_the_text_before_lse(tmp_path, monkeypatch):
    prints, rewrites = [], []
    real, lse = plan_cache.print_graph, plan_cache.lse.run
    monkeypatch.setattr(plan_cache, "print_graph", lambda graph, **kw: prints.append(kw) or real(graph, **kw))
    monkeypatch.setattr(plan_cache.lse, "run", lambda graph: rewrites.append(lse(graph)) or rewrites[-1])
    before = plan_cache.info()
    cold = _compiled(KernelCache(tmp_path), prints)
    printed, text, key_text, nodes, rewritten, groups = _compiled(KernelCache(tmp_path), prints)  # (a new process's cache)
    after = plan_cache.info()
    assert nodes >= plan_cache.MIN_NODES and rewrites == [1, 1]  # (the lse pass rewrote the graph, each compile)
    assert cold[1:5] == (text, key_text, nodes, rewritten) and groups == cold[5]
    # one print each compile, the passes' (after their first round, which the second confirmed or the cache says
    # it would), which fusion's key takes: the text of the graph before the lse pass
    assert prints == [{"canonical": True}] * 2 and printed == text and text in key_text
    assert (after["hits"] - before["hits"], after["writes"] - before["writes"]) == (1, 1)
    assert after["fixed_point_hits"] - before["fixed_point_hits"] == 1
    entry = json.loads(KernelCache(tmp_path).get(cache_key("fusion plan", key_text), key_text))
    assert entry["nodes"] == rewritten  # (its numbers are the rewritten graph's nodes)
