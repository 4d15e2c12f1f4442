"""The sums pass (jitorch/ir/passes/sums.py): a sum through a reshape becomes the sum of the reshape's source,
a sum of a one-hot along the summed dim becomes the picked value; what it leaves; the rewritten graphs compute
the originals' bits (NaN, infinities and signed zeros included), through every default pass."""

from __future__ import annotations

import numpy as np

import jitorch as jt
from jitorch.ir.passes import sums
from jitorch.jit import trace
from tests.ir.test_passes import assert_runs_the_same, ops

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.5, 2.0], np.float32)


def values(shape, seed=0):
    """float32 values of ``shape`` with NaN, infinities, signed zeros and a subnormal among them."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(np.float32).reshape(-1)
    a[rng.integers(0, a.size, 8)] = SPECIALS
    return jt.tensor(a.reshape(shape))


def one_hot(v, index, classes):
    """nll_loss's gradient through gather (`autograd.rules.structural._gather_grad`), written out."""
    positions = jt.arange(classes)
    checked = positions.index_select(0, index.reshape(-1)).view(index.shape)
    return jt.where(positions.view(1, -1) == checked, v + 0, 0)


def test_sum_over_dims_a_view_split_is_the_sum_of_its_source():
    g = trace(lambda x: (x * 2).view(5, 4, 6).sum((0, 1), keepdim=True), jt.ones(20, 6))
    assert sums.run(g) == 1
    reduced = [n for n in g.nodes if n.op.name == "sum"][-1]
    assert reduced.args[0].node.op.name == "mul" and list(reduced.args[1]) == [0]
    assert ops(g)[-1] == "view" and g.nodes[-1].outputs[0].type.shape == (1, 1, 6)


def test_sum_through_reshape_computes_the_same_bits():
    x = values((20, 6))
    for fn in (lambda x: (x * 2).view(5, 4, 6).sum((0, 1), keepdim=True),
               lambda x: (x * 2).view(5, 4, 6).sum((0, 1)),
               lambda x: (x * 2).view(5, 4, 3, 2).sum((2, 3)),
               lambda x: (x * 2).view(120).sum(0),
               lambda x: (x * 2).view(1, 20, 6).sum((0, 1)),
               lambda x: (x * 2).view(5, 4, 6).sum()):
        g = trace(fn, x)
        assert_runs_the_same(g, [x])
        assert "mul" in ops(g)


def test_sum_across_a_merge_it_does_not_cover_or_of_a_view_source_is_left():
    x = jt.ones(20, 6)
    g = trace(lambda x: (x * 2).view(4, 30).sum(0), x)  # (rows 4 of 30 mix the source's rows and columns)
    assert sums.run(g) == 0
    g = trace(lambda x: (x * 2).view(5, 4, 6).sum(1), x)  # (part of the source's dim 0)
    assert sums.run(g) == 0
    g = trace(lambda x: x.t().reshape(3, 2, 20).sum((0, 1)), x)  # (a strided source: its own loops)
    assert sums.run(g) == 0


def test_one_hot_row_sum_becomes_the_picked_value():
    v, index = jt.ones(7, 1), jt.tensor([3, 0, 9, 9, 1, 2, 5])
    g = trace(lambda v, i: one_hot(v, i.view(-1, 1), 10).sum(1, keepdim=True), v, index)
    assert sums.run(g) == 1
    assert ops(g).count("sum") == 0 and ops(g)[-1] == "add"  # (index_select raises out of range: no test)


def test_one_hot_row_sum_computes_the_same_bits():
    index = jt.tensor([3, 0, 9, 9, 1, 2, 5, 4])
    for v in (values((8, 1)), values((1, 1), seed=1), values((8, 1), seed=2) * 0 - 0.0):
        for keepdim in (True, False):
            g = trace(lambda v, i: one_hot(v, i.view(-1, 1), 10).sum(1, keepdim=keepdim), v, index)
            assert_runs_the_same(g, [v, index])
            assert "sum" not in ops(g)


def test_one_hot_of_any_index_tests_its_range():
    """q of other values than the positions (out of range too): a position matches where q is in [0, n)."""
    v = values((6, 1))
    q = jt.tensor([[3], [-1], [10], [0], [9], [42]])
    fn = lambda v, q: jt.where(jt.arange(10).view(1, 10) == q, v, 0).sum(-1)  # noqa: E731
    g = trace(fn, v, q)
    assert_runs_the_same(g, [v, q])
    assert "sum" not in ops(g) and {"ge", "lt", "logical_and"} <= set(ops(g))
    np.testing.assert_array_equal(fn(v, q).numpy(), jt.compile(fn)(v, q).numpy())


def test_sums_that_are_no_one_hot_are_left():
    v, q = jt.ones(6, 1), jt.tensor([[3], [1], [2], [0], [4], [5]])
    for fn in (lambda v, q: jt.where(jt.arange(10).view(1, 10) == q, v, 0).sum(0),  # (across lines)
               lambda v, q: jt.where(jt.arange(1, 11).view(1, 10) == q, v, 0).sum(1),  # (not from 0)
               lambda v, q: jt.where(jt.arange(10).view(1, 10) == q, v, 1).sum(1),  # (1 elsewhere)
               lambda v, q: jt.where(jt.arange(10).view(1, 10) <= q, v, 0).sum(1),  # (no one-hot)
               lambda v, q: jt.where(jt.arange(10).view(1, 10) == q, v.expand(6, 10) * 1, 0).sum(1)):
        g = trace(fn, v, q)
        assert sums.run(g) == 0, g
