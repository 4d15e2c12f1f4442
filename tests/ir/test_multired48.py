"""Reductions sharing a group (issue 19): fusion puts reductions over one input space and the same dims in one
group (`fusion.same_reduction`), which one kernel computes side by side, where none depends on another; and
simplify lets a pointwise op read ``x`` for its operand ``expand(x)``, so that a mean's backward (an expand of
the row's value) does not keep a row's value out of the kernel computing it. What fusion does: group kinds,
which reductions share a group, where it declines, and a stored plan adopted or refused."""

from __future__ import annotations

import pytest

import jitorch as jt
from jitorch.ir.passes import dce, fusion, optimize, simplify
from jitorch.ir.passes.fusion import (dependent_reductions, fuse, fuse_with_plan, reduced_dims, reduction_sides,
                                      same_reduction)
from jitorch.jit import trace
from tests.ir.test_fusion import check


def fused(fn, *args):
    graph = trace(fn, *args)
    return graph, check(graph, fuse(graph))


def ops(group):
    return [n.op.name for n in group.nodes]


def layer_norm_backward(g, x, w):
    """A layer norm's input, weight and bias gradients written out: two row sums and two column sums."""
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    rstd = (xc * xc).mean(-1, keepdim=True).add(1e-5).rsqrt()
    xhat = xc * rstd
    gw = g * w
    a = gw.sum(-1, keepdim=True)
    b = (gw * xhat).sum(-1, keepdim=True)
    n = x.shape[-1]
    return (gw * n - a - xhat * b) * rstd / n, (g * xhat).sum(0), g.sum(0)


G, X, W = jt.randn(64, 32), jt.randn(64, 32), jt.randn(32)


def test_two_row_sums_of_the_same_rows_share_a_group():
    def fn(g, y):
        return g.sum(-1), (g * y).sum(-1)
    _, groups = fused(fn, G, X)
    (group,) = groups
    assert group.kind == "reduction" and [r.op.name for r in group.reductions] == ["sum", "sum"]
    assert [tuple(v.type.shape) for v in group.outputs] == [(64,), (64,)]


def test_two_column_sums_share_a_group():
    def fn(g, y):
        return (g * y).sum(0), g.sum(0)
    _, groups = fused(fn, G, X)
    (group,) = groups
    assert ops(group) == ["mul", "sum", "sum"]


def test_a_layer_norm_backwards_row_sums_share_a_group_with_dx(monkeypatch):
    """(Traced as it is, ``g * xhat`` joins the row group as a sibling, which writes it, so the column sums read
    nothing in common and stay two groups; in a compiled call, the recompute pass copies ``xhat`` into the
    column sums' group, where they share it: tests/codegen/test_multired48.py.) Without the groups of dependent
    row reductions (tests/codegen/test_gptln50.py), which put the mean, the variance and the row pair in one."""
    monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)
    graph, groups = fused(layer_norm_backward, G, X, W)
    assert [g.kind for g in groups] == ["reduction"] * 5
    assert [len(g.reductions) for g in groups] == [1, 1, 2, 1, 1]
    rows = groups[2]
    assert [reduced_dims(r)[1] for r in rows.reductions] == [(1,), (1,)]
    inside, epilogue, row_pass = reduction_sides(rows.reductions, rows.nodes)
    # dx, in the row pass, reads both sums' results
    dx = graph.output_values()[0]
    assert dx in rows.outputs and dx.node in row_pass and not epilogue
    saved = fusion.SHARED_REDUCTIONS
    fusion.SHARED_REDUCTIONS = False
    try:
        _, alone = fused(layer_norm_backward, G, X, W)
    finally:
        fusion.SHARED_REDUCTIONS = saved
    assert [len(g.reductions) for g in alone] == [1] * 6


def test_a_reduction_that_reads_another_stays_apart_without_dependent_row_reductions(monkeypatch):
    """A layer norm's variance reads its mean: one loop cannot compute both, and without
    `fusion.DEPENDENT_ROW_REDUCTIONS` (tests/codegen/test_gptln50.py: one kernel, a loop each) two groups do."""
    def fn(x):
        d = x - x.mean(-1, keepdim=True)
        return (d * d).mean(-1, keepdim=True)
    monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)
    graph, groups = fused(fn, X)
    assert [len(g.reductions) for g in groups] == [1, 1]
    reds = [n for n in graph.nodes if n.op.name == "mean"]
    assert same_reduction(*reds) and dependent_reductions(reds, graph.nodes)


@pytest.mark.parametrize("fn", [
    lambda x: (x.sum(-1), x.sum(0)),                      # other dims
    lambda x: (x.sum(-1), x.sum(-1, keepdim=True)),       # other output shapes
    lambda x: (x.sum(), (x * x).sum()),                   # full reductions: their kernel splits for one
    lambda x: (x.sum(-1), x.argmax(-1)),                  # an index kept
    lambda x: (x.amax(-1), x.max(-1)),                    # (max.dim: values and indices)
], ids=["dims", "keepdim", "full", "argmax", "max.dim"])
def test_reductions_that_cannot_share_a_loop_stay_apart(fn):
    _, groups = fused(fn, X)
    assert all(len(g.reductions) <= 1 for g in groups)


def test_a_plan_of_shared_reductions_is_adopted_and_one_of_other_dims_refused():
    def fn(g, y):
        return g.sum(-1), (g * y).sum(-1), y.sum(0)
    graph = trace(fn, G, X)
    groups, plan, taken = fuse_with_plan(graph)
    assert not taken and sorted(len(g.reductions) for g in groups) == [1, 2]
    again, _, taken = fuse_with_plan(graph, plan=plan)
    assert taken and [ops(g) for g in again] == [ops(g) for g in groups]
    order = {n: i for i, n in enumerate(graph.nodes)}
    column = next(n for n in graph.nodes if n.op.name == "sum" and reduced_dims(n)[1] == (0,))
    row = next(n for n in graph.nodes if n.op.name == "sum" and reduced_dims(n)[1] == (1,))
    forced = list(plan)
    forced[order[column]] = plan[order[row]]
    _, _, taken = fuse_with_plan(graph, plan=forced)
    assert not taken  # (refused: fused anew)


def simplified(fn, *args):
    graph = trace(fn, *args)
    optimize(graph, [simplify.run, dce.run], verify=True)
    return [n.op.name for n in graph.nodes]


def test_a_pointwise_op_reads_the_value_an_expand_broadcasts():
    def fn(x, s):
        return x * s.expand(64, 32) + 1
    assert simplified(fn, X, jt.randn(64, 1)) == ["mul", "add"]


@pytest.mark.parametrize("fn, args", [
    (lambda s: s.expand(64, 32) * 2, (jt.randn(64, 1),)),              # the expand makes the result's shape
    (lambda x, s: x * s.expand(32), (jt.randn(32).half(), jt.tensor(2.0))),  # a 0-d value: promoted below dims
    (lambda x, s: x * s.expand(64, 32).double(), (X, jt.randn(64, 1))),  # read by a cast first
], ids=["shape", "0-d", "cast"])
def test_an_expand_stays_where_reading_its_source_would_change_the_op(fn, args):
    assert "expand" in simplified(fn, *args)


def test_a_0d_expand_keeps_the_float32_result_of_a_float64_number():
    """torch: a float32 tensor times a 0-d float64 tensor is float32; times its expand, float64 (the expand has
    dims): the traced result keeps its dtype either way."""
    x, s = jt.randn(4), jt.tensor(2.0, dtype=jt.float64)
    graph = trace(lambda x, s: x * s.expand(4), x, s)
    optimize(graph, [simplify.run, dce.run], verify=True)
    assert "expand" in [n.op.name for n in graph.nodes]
    assert graph.output_values()[0].type.dtype == jt.float64
