"""Constant folding keeps a broadcast of a folded value a view: the graph after it does not depend on whether the
traced code broadcast a 0-d value or one of size-1 dims."""

import numpy as np

import jitorch as jt
from jitorch.autograd.rules import reductions
from jitorch.autograd.rules.common import unreduce
from jitorch.ir.passes import dce, fold
from jitorch.jit import trace
from tests.codegen.test_windows import _conv_pair, _step


def _ops(graph):
    return [n.op.name for n in graph.nodes]


def test_fold_keeps_the_expand_of_a_folded_scalar_a_view():
    """``expand`` of a 0-d ``ones`` (a full reduction's gradient, ``g.expand(x.shape)``) folded into an f32[8, 2, 12,
    12] constant, every element in memory, where the same gradient traced as ``unsqueeze`` x4 then ``expand`` kept
    a [1, 1, 1, 1] one."""
    g = trace(lambda x: x * jt.ones(()).expand(8, 2, 12, 12), jt.ones(8, 2, 12, 12))
    fold.run(g)
    dce.run(g)
    assert _ops(g) == ["ones", "expand", "mul"] and not g.constant_tensors
    g = trace(lambda x: x * (jt.ones(()).expand(3, 2) * 2), jt.ones(3, 2))  # (a value computed from it folds)
    fold.run(g)
    dce.run(g)
    assert _ops(g) == ["mul"]
    np.testing.assert_array_equal(next(iter(g.constant_tensors.values())).numpy(), np.full((3, 2), 2.0))


def _conv_step_graph(monkeypatch, broadcast):
    """The optimised graph of tests/codegen/test_windows.py's compiled convolution step (a convolution, a
    transposed one, ``tanh().sum()`` and backward) with a full sum's 0-d gradient broadcast by ``broadcast``."""
    monkeypatch.setattr(reductions, "expand_reduced", broadcast)
    ours, _ = _conv_pair((3, 4, 3, 1, 1), (4, 2, 4, 2, 1))
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
    return jt.compile(_step).lower(*ours, jt.from_numpy(x)).optimized_graph


def _unsqueezed(g, x, dim, keepdim):
    return unreduce(g, x, dim, keepdim).expand(x.shape)


def _expanded(g, x, dim, keepdim):
    return g.expand(x.shape) if g.ndim == 0 else _unsqueezed(g, x, dim, keepdim)


def test_a_compiled_conv_step_is_the_same_graph_whichever_way_the_scalar_gradient_was_broadcast(monkeypatch):
    """Session 55's unexplained break: an eager rule broadcasting a full sum's 0-d gradient by ``expand`` alone (not
    after ``unsqueeze``s) made tests/codegen/test_windows.py's compiled conv step copy its transposed convolution's
    gradient across (a transposing kernel). fold made that expand an f32[2, 2, 8, 8] constant of every element, no
    broadcast, which the sink pass could not read batch-last, so the chain after it ran batch-first."""
    graphs = [_conv_step_graph(monkeypatch, broadcast) for broadcast in (_unsqueezed, _expanded)]
    for g in graphs:
        assert (2, 2, 8, 8) not in [tuple(t.shape) for t in g.constant_tensors.values()]
    # (nor a permute of the unsqueezed [1, 1, 1, 1] scalar, which simplify reads as the 0-d value in the other)
    assert [n.op.name for n in graphs[0].nodes if not _broadcasts_a_scalar(n)] == \
        [n.op.name for n in graphs[1].nodes if not _broadcasts_a_scalar(n)]


def _broadcasts_a_scalar(node):
    return node.op.name == "expand" or node.op.name == "permute" and set(node.outputs[0].type.shape) == {1}
