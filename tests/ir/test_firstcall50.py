"""Work the compile of a warm first call skipped (issue 19), checked to leave the same graph: the sink pass's
walks where no pointwise node reads a batch-first view of its shape (`sink._has_batch_first_view`), and
merge_repeats' reduction sides of groups where no two nodes repeat each other (made only where they do, of the
values the nodes read before the merges), and the Rewriter's walk over every mutation per `_written` question,
quadratic in a GPT's layers (a set kept up by `replace_node` instead)."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.ir.interpreter import interpret
from jitorch.ir.passes import fusion, optimize, recompute, sink
from jitorch.ir.passes.cse import literal_key
from jitorch.ir.passes.fusion import _reduction_sides_of, _side, fuse, merge_repeats
from jitorch.ir.passes.rewrite import Rewriter, has_effects
from jitorch.ir.printer import print_graph
from jitorch.jit import trace
from tests.ir.test_fusion import check


def batch_last_chain(x, w):
    """A convolution's batch-first view (``permute(y, (2, 0, 1))`` of a ``(C, H, N)`` value) read by pointwise
    ops whose result a reduction reads (a batch norm's statistics): the pass runs them batch-last."""
    return ((x.permute(2, 0, 1) * w).relu() + 1).sum((0, 2))


def heads(x):
    """Attention's head transposes: permutations, none of them a batch-first rotation."""
    q = x.view(2, 8, 4, 4).transpose(1, 2)
    return (q * 2).exp().transpose(1, 2).reshape(2, 8, 16)


def rotation_read_by_a_sum(x):
    """A batch-first view that only a reduction reads: the pass rewrites nothing."""
    return x.permute(2, 0, 1).sum(0) * 2


CASES = [(batch_last_chain, (jt.randn(4, 3, 5), jt.randn(1, 4, 3))), (heads, (jt.randn(2, 8, 16),)),
         (rotation_read_by_a_sum, (jt.randn(4, 3, 5),))]


@pytest.mark.parametrize("fn, args", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_sink_skipped_only_where_its_full_walk_rewrites_nothing(fn, args, monkeypatch):
    """Where the check says no node could sink, the pass run over the whole graph rewrites nothing; where it says
    one could, the pass runs (and for the batch-last chain, rewrites)."""
    skipped, full = trace(fn, *args), trace(fn, *args)
    found = sink._has_batch_first_view(skipped)
    assert found is (fn is batch_last_chain)
    with monkeypatch.context() as m:
        m.setattr(sink, "_has_batch_first_view", lambda graph: True)
        full_count = sink.run(full)
    assert sink.run(skipped) == full_count
    assert print_graph(skipped) == print_graph(full)
    assert (full_count > 0) is found
    np.testing.assert_allclose(interpret(skipped, list(args))[0].numpy(), fn(*args).numpy(), rtol=1e-5, atol=1e-6)


def merge_repeats_every_side(graph, groups):
    """merge_repeats as it was: every group's reduction sides made before the walk (the reference)."""
    owner = {n: (i, _side(n, sides)) for i, g in enumerate(groups) for sides in [_reduction_sides_of(g)]
             for n in g.nodes}
    rw = Rewriter(graph)
    first = {}
    for node in graph.nodes:
        rw.update_args(node)
        if fusion.kind_of(node) != "pointwise" or has_effects(node):
            continue
        key = (owner[node], node.op, literal_key(node.args), tuple(o.type for o in node.outputs))
        earlier = first.setdefault(key, node)
        if earlier is not node:
            rw.replace_node(node, earlier.outputs)
    if not rw.dropped:
        return 0
    rw.finish()
    order = {n: i for i, n in enumerate(graph.nodes)}
    for g in groups:
        g.nodes = [n for n in g.nodes if n not in rw.dropped]
        g.inputs = list(dict.fromkeys(rw.resolve(v) for v in g.inputs))
        g.outputs = sorted(dict.fromkeys(rw.resolve(v) for v in g.outputs), key=lambda v: (order[v.node], v.index))
    return len(rw.dropped)


def repeats(x, w):
    h = (x @ w).relu()
    return h.sum(0), (h * 3 + 1).exp().softmax(-1), h.sum(0) * (h * 3 + 1)


def two_sums(x, w):
    """Repeats in two reduction groups (the recompute pass's copies of ``relu(x @ w)`` and ``h * 3 + 1``)."""
    h = (x @ w).relu()
    return h.sum(0), h.sum(1), (h * 3 + 1).exp().softmax(-1), (h * 3 + 1).sum(0) * h


def std_next_to_exp(x):
    return (x * 2).std(), (x * 2).exp()


def norm_step(x, w):
    """A layer norm's forward and backward (autograd's), whose reductions' groups hold repeats on both sides."""
    x = x.detach().requires_grad_()
    y = jt.nn.functional.layer_norm(x, (x.shape[-1],), w) * 2
    (g,) = jt.autograd.grad(y.exp().sum(), x)
    return y, g


MERGE_CASES = [(repeats, lambda: (jt.randn(8, 6), jt.randn(6, 4))), (two_sums, lambda: (jt.randn(8, 6), jt.randn(6, 4))),
               (std_next_to_exp, lambda: (jt.randn(3, 5),)),
               (std_next_to_exp, lambda: (jt.randn(()),)), (norm_step, lambda: (jt.randn(6, 8), jt.randn(8)))]


@pytest.mark.parametrize("fn, make", MERGE_CASES, ids=["repeats", "two_sums", "std_next_to_exp", "std_0d", "norm_step"])
def test_merge_repeats_drops_what_it_dropped_with_every_groups_sides_made(fn, make):
    """The same nodes dropped, the same groups (nodes, inputs, outputs) and the same graph as the pass that made
    every group's sides before its walk; values as eager's."""
    args = make()
    graphs = []
    for _ in range(2):
        graph = optimize(trace(fn, *args))
        recompute.run(graph)
        graphs.append((graph, fuse(graph)))
    (graph, groups), (ref_graph, ref_groups) = graphs
    dropped = merge_repeats(graph, groups)
    assert dropped == merge_repeats_every_side(ref_graph, ref_groups)
    assert dropped == {"repeats": 1, "two_sums": 5}.get(fn.__name__, 0)
    assert print_graph(graph, canonical=True) == print_graph(ref_graph, canonical=True)
    position, ref_position = ({v: i for i, v in enumerate(g.values())} for g in (graph, ref_graph))
    for g, r in zip(groups, ref_groups, strict=True):
        assert [graph.nodes.index(n) for n in g.nodes] == [ref_graph.nodes.index(n) for n in r.nodes]
        assert [position[v] for v in g.inputs] == [ref_position[v] for v in r.inputs]
        assert [position[v] for v in g.outputs] == [ref_position[v] for v in r.outputs]
    check(graph, groups)
    with np.errstate(invalid="ignore"):
        got, want = interpret(graph, list(args))[0], fn(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)


def writes(x, w, v):
    """Values written back into three inputs, one of them through a chain the test replaces."""
    w.copy_(x * 2)
    v.add_(x.exp())
    x.mul_(3)
    return x.t().clone(), (w + v).sum()


def scanned_written(rw, v):
    """`Rewriter._written` as it was: every mutation resolved at each question (the reference)."""
    return any(rw.resolve(value) is v for _, value in rw.graph.mutations)


def test_written_answers_as_the_scan_of_the_mutations_across_replacements_and_resolves_each_once():
    """`Rewriter._written` keeps the set of values standing for those written back, made at its first question:
    its answers are the scan's for every value of the graph, after replacements (a written value replaced by
    another, that one by a third) and after the mutations list is replaced; the mutations are resolved once per
    set made, not at each question (a walk per question was quadratic in a GPT's layers)."""
    graph = trace(writes, jt.randn(3, 3), jt.randn(3, 3), jt.randn(3, 3))
    rw = Rewriter(graph)
    values = list(graph.values())
    resolves = []
    resolve = rw.resolve
    rw.resolve = lambda v: resolves.append(v) or resolve(v)
    assert [rw._written(v) for v in values] == [scanned_written(rw, v) for v in values]
    assert sum(rw._written(v) for v in values) == 3
    resolves.clear()
    answers = [rw._written(v) for v in values * 3]
    assert not resolves  # (the set made at the first question answers the others)
    assert answers == [scanned_written(rw, v) for v in values * 3]
    rw.resolve = resolve
    written = [v for _, v in graph.mutations]
    stand_in = [n.outputs[0] for n in graph.nodes if n.outputs and n.outputs[0].type == written[0].type
                and n.outputs[0] not in written]
    first, second = stand_in[:2]
    assert rw.replace_node(written[0].node, [first])
    assert rw.replace_node(first.node, [second])
    assert [rw._written(v) for v in values] == [scanned_written(rw, v) for v in values]
    assert rw._written(second) and not rw._written(first) and not rw._written(written[0])
    graph.mutations = graph.mutations[1:]
    rw.resolve = lambda v: resolves.append(v) or resolve(v)
    resolves.clear()
    answers = [rw._written(v) for v in values]
    assert len(resolves) == len(graph.mutations)  # (made again once, for the new list)
    rw.resolve = resolve
    assert answers == [scanned_written(rw, v) for v in values]
    assert not rw._written(second)
