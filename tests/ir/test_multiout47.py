"""Reduction groups with more than one kind of output (issue 19): pointwise siblings over a reduction's input
that it does not read join its group as values its loop writes, and a row reduction's epilogue over its input
(a value broadcast back over the reduced row) is computed in a second pass over the row. What fusion does:
group kinds, how many groups, which values each writes, and where it declines."""

from __future__ import annotations

import jitorch as jt
from jitorch.ir.passes import fusion
from jitorch.ir.passes.fusion import fuse, reduction_sides
from jitorch.jit import trace
from tests.ir.test_fusion import check


def fused(fn, *args):
    graph = trace(fn, *args)
    return graph, check(graph, fuse(graph))


def ops(group):
    return [n.op.name for n in group.nodes]


def producer_and_sum(x, w):
    """A producer writing one value the column sum reads and one it does not (a bias gradient beside)."""
    d = x * w
    other = (x + 1).sin()
    return d.sum(0), d, other


def log_softmax_backward(g, out):
    return g - out.exp() * g.sum(-1, keepdim=True)


X, W = jt.randn(64, 32), jt.randn(32)


def test_a_sibling_over_the_reductions_input_joins_it_as_an_output():
    graph, groups = fused(producer_and_sum, X, W)
    (group,) = groups
    assert group.kind == "reduction" and group.shape == (64, 32)
    assert ops(group) == ["mul", "add", "sin", "sum"]
    assert [tuple(v.type.shape) for v in group.outputs] == [(64, 32), (64, 32), (32,)]
    inside, epilogue, rows = reduction_sides(group.reduction, group.nodes)
    assert {n.op.name for n in inside} == {"mul", "add", "sin"} and not epilogue and not rows


def test_without_siblings_the_producer_stays_a_kernel_of_its_own():
    saved = fusion.REDUCTION_SIBLINGS
    fusion.REDUCTION_SIBLINGS = False
    try:
        _, groups = fused(producer_and_sum, X, W)
    finally:
        fusion.REDUCTION_SIBLINGS = saved
    assert sorted(g.kind for g in groups) == ["pointwise", "reduction"]


def test_a_sibling_that_the_reduction_reads_through_a_cycle_stays_apart():
    """A value the reduction's other operand is computed from (through a matrix product) cannot join it: the
    groups would depend on each other (a layer norm's normalised input and the gradient of the product it fed)."""
    def fn(x, w, m):
        xhat = x * 2
        y = xhat + w
        g = (y @ m) * 3
        return (g * xhat).sum(0)
    _, groups = fused(fn, X, W, jt.randn(32, 32))
    assert [g.kind for g in groups] == ["pointwise", "external", "reduction"]
    assert ops(groups[0]) == ["mul", "add"] and len(groups[0].outputs) == 2


def test_a_full_reduction_takes_no_sibling():
    """A full reduction's kernel splits across threads only where it writes nothing over its input."""
    def fn(x):
        return (x * 2).sum(), (x + 1).sin()
    _, groups = fused(fn, jt.randn(256, 256))
    assert sorted(g.kind for g in groups) == ["pointwise", "reduction"]


def test_a_row_epilogue_joins_a_reduction_of_trailing_dims():
    graph, groups = fused(log_softmax_backward, jt.randn(70, 1000), jt.randn(70, 1000))
    (group,) = groups
    assert group.kind == "reduction" and ops(group) == ["exp", "sum", "mul", "sub"]
    assert [tuple(v.type.shape) for v in group.outputs] == [(70, 1000)]
    inside, epilogue, rows = reduction_sides(group.reduction, group.nodes)
    assert not inside and not epilogue and {n.op.name for n in rows} == {"exp", "mul", "sub"}


def test_a_row_epilogue_with_a_value_over_the_output_before_it():
    """softmax's backward: ``y * (g - sum(g * y))``, with the sum scaled first (an epilogue over the output)."""
    def fn(g, y):
        s = (g * y).sum(-1, keepdim=True) * 0.5
        return y * (g - s), s
    _, groups = fused(fn, jt.randn(8, 3, 50), jt.randn(8, 3, 50))
    (group,) = groups
    inside, epilogue, rows = reduction_sides(group.reduction, group.nodes)
    assert [n.op.name for n in group.nodes if n in inside] == ["mul"]
    assert [n.op.name for n in group.nodes if n in epilogue] == ["mul"]
    assert sorted(n.op.name for n in rows) == ["mul", "sub"]
    assert [tuple(v.type.shape) for v in group.outputs] == [(8, 3, 1), (8, 3, 50)]  # (in definition order)


def test_no_row_epilogue_where_the_reduction_keeps_the_inner_dim_or_the_row_is_long():
    def cols(g):
        return g - g.sum(0, keepdim=True)
    _, groups = fused(cols, jt.randn(40, 30))
    assert sorted(g.kind for g in groups) == ["pointwise", "reduction"]
    saved = fusion.ROW_EPILOGUE_MAX
    fusion.ROW_EPILOGUE_MAX = 999
    try:
        _, groups = fused(log_softmax_backward, jt.randn(7, 1000), jt.randn(7, 1000))
    finally:
        fusion.ROW_EPILOGUE_MAX = saved
    assert sorted(g.kind for g in groups) == ["pointwise", "reduction"]


def test_a_row_value_that_another_reduction_reads_is_left_to_that_reductions_prologue(monkeypatch):
    """A layer norm's ``x - mean`` feeds the variance's sum: it stays that sum's prologue (computed there) rather
    than a row epilogue of the mean written out and read back; in one group with the mean
    (`fusion.DEPENDENT_ROW_REDUCTIONS`), written nowhere."""
    def fn(x):
        d = x - x.mean(-1, keepdim=True)
        return (d * d).mean(-1, keepdim=True)
    _, (group,) = fused(fn, jt.randn(16, 64))
    assert group.kind == "reduction" and len(group.outputs) == 1
    assert ops(group) == ["mean", "sub", "mul", "mean"]
    monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)
    _, groups = fused(fn, jt.randn(16, 64))
    assert [g.kind for g in groups] == ["reduction", "reduction"]
    assert [len(g.outputs) for g in groups] == [1, 1]
    assert ops(groups[1])[:2] == ["sub", "mul"]
