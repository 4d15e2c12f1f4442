"""Warm-cache first calls (session 52): the fusion plan cache's key holds every setting that changes the plan.

The key held none of fusion's switches (`fusion.SHARED_REDUCTIONS`, `DEPENDENT_ROW_REDUCTIONS`,
`REDUCTION_SIBLINGS`, `ROW_EPILOGUE_MAX`, `PRODUCT_MIN_WORK`, `UNTIED_PRODUCTS`, `UNTIED_REDUCTIONS`, which
benchmarks/multiout.py sets) nor the lse pass's bound, and `MAX_GROUP_NODES` as imported, not as set. A plan
stored under other settings was taken where it passed fusion's rules for a kernel: a compile without untied
products got the groups fused with them, silently (the results were right; the plan was not the one asked for).
"""

from __future__ import annotations

import pytest

import jitorch as jt
from jitorch.codegen.cache import KernelCache
from jitorch.ir.passes import fold, fusion, lse, optimize, simplify
from jitorch.jit import executor, plan_cache  # noqa: F401 (executor: loads the code generator, whose rule says what fuses)
from jitorch.jit.tracer import trace
from tests.ir.test_fusewaste49 import mlp_args, mlp_backward


def norms(x, w, v):
    """Layer norms (a mean, then the variance reading it: row reductions, one dependent on the other) after pairs
    of independent products, and a log-softmax: more nodes than the plan cache's minimum."""
    for _ in range(6):
        x = jt.tanh(x @ w) * (x @ v)
        d = x - x.mean(-1, keepdim=True)
        x = d / ((d * d).mean(-1, keepdim=True) + 1e-5).sqrt()
    return jt.log_softmax(x * 2.0 + 1.0, -1).sum()


def graph():
    return optimize(trace(norms, jt.randn(64, 64), jt.randn(64, 64), jt.randn(64, 64)))


def described(groups):
    return [(g.kind, [n.outputs[0].name for n in g.nodes]) for g in groups]


SWITCHES = [(fusion, "MAX_GROUP_NODES", 16), (fusion, "DEPENDENT_ROW_REDUCTIONS", False), (fusion, "SHARED_REDUCTIONS", False),
            (fusion, "REDUCTION_SIBLINGS", False), (fusion, "ROW_EPILOGUE_MAX", 0),
            (fusion, "PRODUCT_MIN_WORK", 1 << 40), (fusion, "UNTIED_PRODUCTS", False),
            (fusion, "UNTIED_REDUCTIONS", False), (lse, "MAX_CONE", 0)]


@pytest.mark.parametrize("module, name, value", SWITCHES, ids=[s[1] for s in SWITCHES])
def test_a_plan_stored_under_other_fusion_settings_is_not_taken(tmp_path, monkeypatch, module, name, value):
    first = graph()
    assert len(first.nodes) >= plan_cache.MIN_NODES
    plan_cache.fuse_cached(first, None, KernelCache(tmp_path))  # stored under the default settings
    monkeypatch.setattr(module, name, value)
    before = plan_cache.info()
    warm = plan_cache.fuse_cached(graph(), None, KernelCache(tmp_path))
    assert plan_cache.info()["hits"] == before["hits"], f"a plan made with the default {name} was taken"
    cold = plan_cache.fuse_cached(graph(), None, KernelCache(tmp_path / "cold"))
    assert described(warm) == described(cold)


def mlps(g, a, b, w):
    """Six of GPT's MLP backwards, each with its independent products (`tests/ir/test_fusewaste49.py`)."""
    outs = []
    for _ in range(6):
        dw, a, s = mlp_backward(g, a, b, w)
        outs += [dw, s]
    return outs


def test_a_plan_fused_with_untied_products_is_not_given_to_a_compile_without(tmp_path, monkeypatch):
    """The silent case: the plan with untied products passes fusion's rules for a kernel without them too."""
    def mlp_graph():
        return optimize(trace(mlps, *mlp_args(256, 64)))
    untied = plan_cache.fuse_cached(mlp_graph(), None, KernelCache(tmp_path))
    monkeypatch.setattr(fusion, "UNTIED_PRODUCTS", False)
    warm = plan_cache.fuse_cached(mlp_graph(), None, KernelCache(tmp_path))
    cold = plan_cache.fuse_cached(mlp_graph(), None, KernelCache(tmp_path / "cold"))
    assert len(cold) < len(untied)  # (the switch changes this graph's plan)
    assert described(warm) == described(cold)


@pytest.mark.parametrize("module, name, value", [(simplify, "BROADCAST_READS", False), (fold, "MAX_NUMEL", 0)],
                         ids=["BROADCAST_READS", "MAX_NUMEL"])
def test_the_passes_fixed_point_entry_is_keyed_by_their_switches(module, name, value, monkeypatch):
    text = plan_cache._fixed_point_text("graph")
    monkeypatch.setattr(module, name, value)
    assert plan_cache._fixed_point_text("graph") != text


def test_the_key_text_names_every_fusion_switch():
    text = plan_cache._graph_text(graph(), "cpu x86_64")
    assert f"max group nodes {fusion.MAX_GROUP_NODES}" in text
    for module, name, _ in SWITCHES[1:]:
        assert f"{module.__name__.rsplit('.', 1)[-1]}.{name} {getattr(module, name)!r}" in text
