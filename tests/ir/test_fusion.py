"""Fusion: group counts and contents for known functions, and the partition's invariants (every
node in one group, groups in dataflow order, inputs and outputs exact, one kernel form per group)
on traced functions, random programs and random graphs."""

from __future__ import annotations

import logging

import networkx as nx
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch.codegen.lowering import kind_of
from jitorch.ir.passes import fusion
from jitorch.ir.passes.fusion import (Group, dependent_reductions, fuse, reduction_sides, row_reduction,
                                      same_reduction)
from jitorch.jit import trace
from tests.ir.graphs import graphs


def check(graph, groups):
    """Assert the contract of `fuse` on ``graph``; returns ``groups``."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    placed = [n for g in groups for n in g.nodes]
    assert len(placed) == len(graph.nodes) and set(placed) == set(graph.nodes)
    sinks = set(graph.output_values()) | {v for _, v in graph.mutations}
    available = set(graph.inputs) | set(graph.constants.values())
    for i, g in enumerate(groups):
        members = set(g.nodes)
        assert g.nodes == sorted(g.nodes, key=order.__getitem__)
        reads = [v for n in g.nodes for v in n.input_values() if v.node not in members]
        assert g.inputs == list(dict.fromkeys(reads))
        assert all(v in available for v in g.inputs), f"group {i} ({g}) reads a value not computed yet"
        later = {v for h in groups[i + 1:] for v in h.inputs}
        assert g.outputs == [v for n in g.nodes for v in n.outputs if v in sinks or v in later]
        available.update(g.outputs)
        check_form(g)
    assert sinks <= available
    return groups


def check_form(g):
    """The group has the kernel form its kind says: views read values from outside or other views;
    every value it writes has the shape of the space it is computed over, and every value it computes
    broadcasts to that space (a reduction's prologue runs over its input, the rest over its output)."""
    kinds = [kind_of(n) for n in g.nodes]
    members = set(g.nodes)
    if g.kind == "external":
        assert kinds == ["external"]
        return
    assert "external" not in kinds
    for n in g.nodes:
        if kind_of(n) == "view":
            assert all(v.node not in members or kind_of(v.node) == "view" for v in n.input_values())
    space = {n: g.shape for n in g.nodes}
    if g.kind == "reduction":
        # (several reductions only where they may share a loop, none depending on another but row reductions)
        reds = g.reductions
        assert len(reds) == kinds.count("reduction") >= 1 and reds[0] is g.reduction
        assert all(same_reduction(reds[0], r) for r in reds[1:])
        assert not dependent_reductions(reds, g.nodes) or (
            fusion.DEPENDENT_ROW_REDUCTIONS and row_reduction(reds[0].args[0].type.shape, reds[0].outputs[0].type.shape))
        red = g.reduction
        assert g.shape == red.args[0].type.shape
        inside, epilogue, rows = reduction_sides(reds, g.nodes)
        assert not (inside & epilogue) and not (rows & (inside | epilogue))
        assert not set(reds) & (inside | epilogue | rows)
        out_space = red.outputs[0].type.shape
        for r in reds:
            space[r] = out_space
        # siblings (what the reduction does not read) never join a full reduction (its kernel would not split)
        assert np.prod(out_space) > 1 or inside == ancestors(red, members)
        assert not rows or row_reduction(g.shape, out_space)
        for n in epilogue:
            space[n] = red.outputs[0].type.shape
            assert not any(v.node in inside for v in n.input_values())
    else:
        assert "reduction" not in kinds
        assert (g.kind == "view") == (set(kinds) == {"view"})
    for n in g.nodes:
        for v in n.outputs:
            if v in g.outputs and (len(g.nodes) > 1 or g.kind != "view"):
                assert v.type.shape == space[n]
            if kind_of(n) == "pointwise":
                assert np.broadcast_shapes(v.type.shape, space[n]) == space[n]


def ancestors(node, members):
    """The nodes of ``members`` that ``node`` depends on through ``members``."""
    found, stack = set(), [node]
    while stack:
        for v in stack.pop().input_values():
            if v.node in members and v.node not in found:
                found.add(v.node)
                stack.append(v.node)
    return found


def fused(fn, *args, **kwargs):
    graph = trace(fn, *args)
    return check(graph, fuse(graph, **kwargs))


def ops(group):
    return [n.op.name for n in group.nodes]


def kinds(groups):
    return [g.kind for g in groups]


X = jt.randn(8, 16)
Y = jt.randn(8, 16)
Z = jt.randn(8, 16)


def gelu(x):
    return 0.5 * x * (1 + jt.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


def chain10(a, b, c):
    t = (a * b + c).sin() * a - b / c.exp()
    return jt.where(t > 0, t, t * 0.1)


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def test_gelu_is_one_pointwise_group():
    (g,) = fused(gelu, X)
    assert g.kind == "pointwise" and len(g.nodes) == 8 and g.shape == (8, 16)
    assert [v.name for v in g.inputs] == ["x"]


def test_ten_op_chain_over_three_inputs_is_one_group():
    (g,) = fused(chain10, X, Y, Z)
    assert len(g.nodes) == 10 and [v.name for v in g.inputs] == ["a", "b", "c"]
    assert {"where.self", "gt", "sin", "exp", "true_divide"} <= set(ops(g))


def test_reduction_absorbs_its_prologue():
    (g,) = fused(lambda a, b: (a * b).sum(), X, Y)
    assert g.kind == "reduction" and ops(g) == ["mul", "sum"] and g.shape == (8, 16)
    assert g.reduction is g.nodes[1] and len(g.outputs) == 1


def test_pointwise_epilogue_joins_the_reduction():
    (g,) = fused(lambda x: x.sum(1, keepdim=True) / x.shape[1], X)
    assert ops(g) == ["sum", "true_divide"] and g.outputs == [g.nodes[1].outputs[0]]
    (g,) = fused(lambda x: x.mean(0) * 2, X)
    assert ops(g) == ["mean", "mul"]


def test_epilogue_over_the_rows_joins_as_a_row_epilogue_and_over_columns_is_another_group():
    (g,) = fused(lambda x: x.sum(1, keepdim=True) + x, X)
    assert ops(g) == ["sum", "add"] and g.outputs == [g.nodes[1].outputs[0]]
    groups = fused(lambda x: x.sum(0, keepdim=True) + x, X)
    assert kinds(groups) == ["reduction", "pointwise"]


def test_hand_written_softmax_takes_one_group(monkeypatch):
    """The division is the sum's row epilogue, which computes ``exp(x - max)`` again rather than reading it; the
    sum reads the row max, a row reduction before it in the group (`fusion.DEPENDENT_ROW_REDUCTIONS`; without,
    two groups)."""
    (group,) = fused(softmax, X)
    assert ops(group) == ["amax", "sub", "exp", "sum", "true_divide"]
    assert len(group.outputs) == 1  # exp(x - max) is written nowhere
    monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)
    groups = fused(softmax, X)
    assert [ops(g) for g in groups] == [["amax"], ["sub", "exp", "sum", "true_divide"]]
    assert [len(g.outputs) for g in groups] == [1, 1]


def test_prologue_outputs_can_be_refused():
    def f(x):
        e = x.exp()
        return e.sum(0), e
    assert [ops(g) for g in fused(f, X)] == [["exp", "sum"]]
    assert [ops(g) for g in fused(f, X, prologue_outputs=False)] == [["exp"], ["sum"]]
    # (a softmax's division, its row epilogue, computes the exponentials again: no prologue output)
    groups = fused(softmax, X, prologue_outputs=False)
    assert [ops(g) for g in groups] == [["amax", "sub", "exp", "sum", "true_divide"]]


def test_broadcast_input_never_breaks_a_group():
    (g,) = fused(lambda a, b, w: a * (1 - w) + b * w, X, Y, jt.randn(16))
    assert ops(g) == ["sub", "mul", "mul", "add"] and g.shape == (8, 16)
    (g,) = fused(lambda a, w: (a * (1 - w)).sum(0), X, jt.randn(8, 1))
    assert g.kind == "reduction" and len(g.nodes) == 3


def test_broadcast_value_needed_elsewhere_is_materialised():
    def f(a, w):
        v = 1 - w
        return a * v, v

    groups = fused(f, X, jt.randn(16))
    assert [ops(g) for g in groups] == [["sub"], ["mul"]]


def test_view_of_an_input_folds_into_its_consumer():
    (g,) = fused(lambda x, y: x.t() + y, X, jt.randn(16, 8))
    assert ops(g) == ["t", "add"] and g.shape == (16, 8) and [v.name for v in g.inputs] == ["x", "y"]


def test_view_of_a_computed_value_ends_its_group():
    groups = fused(lambda x: (x + 1).t() * 2, X)
    assert [ops(g) for g in groups] == [["add"], ["t", "mul"]]
    assert groups[0].outputs == groups[1].inputs


def test_view_needed_outside_is_its_own_group_unless_a_consumer_writes_it():
    groups = fused(lambda x, w: x.t() @ w, X, jt.randn(8, 4))
    assert kinds(groups) == ["view", "external"]
    (g,) = fused(lambda x: (x.t(), x.t().exp()), X)
    assert g.kind == "pointwise" and len(g.outputs) == 2


def test_matmul_splits_external_and_pointwise():
    groups = fused(lambda x, w, b: jt.relu(x @ w + b), X, jt.randn(16, 4), jt.randn(4))
    assert [(g.kind, ops(g)) for g in groups] == [("external", ["matmul"]), ("pointwise", ["add", "relu"])]


def test_value_used_by_two_reductions_is_materialised_once():
    def f(a, b):
        t = a * b
        return t.sum(0), t.amax(1)

    groups = fused(f, X, Y)
    producer = [g for g in groups if any(n.op.name == "mul" for n in g.nodes)]
    assert len(groups) == 2 and len(producer) == 1
    t = producer[0].nodes[0].outputs[0]
    assert t in producer[0].outputs and sum(t in g.inputs for g in groups) == 1


def test_siblings_over_one_space_share_a_kernel():
    (g,) = fused(lambda x: (x + 1, x * 2, x.exp()), X)
    assert len(g.outputs) == 3


def test_no_group_cycles_through_an_external_op():
    def f(x, w):
        y = x.exp()
        return y @ w + y  # the add cannot join exp's group: that group would feed the matmul and read it

    groups = fused(f, jt.randn(4, 4), jt.randn(4, 4))
    assert [ops(g) for g in groups] == [["exp"], ["matmul"], ["add"]]


def test_mutations_and_literal_outputs_are_outputs():
    def f(x, y):
        x.add_(y)
        return y * 2, 3

    (g,) = fused(f, X.clone(), Y)
    assert len(g.outputs) == 2


def test_fusion_logs_its_kernels(caplog):
    caplog.set_level(logging.INFO, logger="jitorch.fusion")
    fused(softmax, X)
    assert "5 nodes in 1 groups" in caplog.text and "reduction[8, 16]: amax, sub, exp, sum, true_divide" in caplog.text


# Random programs: chains of pointwise ops, broadcasts, reductions, views and matmuls ---------------

N = 3
_UNARY = [jt.exp, jt.neg, jt.relu, lambda t: t * 2, lambda t: t.t(), lambda t: t.sum(-1, keepdim=True),
          lambda t: t.amax(0, keepdim=True), lambda t: t.mean(), lambda t: t[:, :1], lambda t: t.float()]
_BINARY = [jt.add, jt.mul, jt.maximum, jt.matmul, lambda a, b: jt.where(a > b, a, b)]


@st.composite
def programs(draw):
    """A list of steps ``(op, i, j)``: apply op to values i (and j) of the values so far."""
    steps = []
    for k in range(draw(st.integers(1, 10))):
        n = 3 + k  # the three inputs, then one value per step
        if draw(st.booleans()):
            steps.append((draw(st.sampled_from(_UNARY)), draw(st.integers(0, n - 1)), None))
        else:
            steps.append((draw(st.sampled_from(_BINARY)), draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))))
    return steps, draw(st.lists(st.integers(0, 12), min_size=1, max_size=3))


def run_program(steps, outs, *inputs):
    values = list(inputs)
    for op, i, j in steps:
        a, b = values[i], values[j] if j is not None else None
        if op is jt.matmul and (a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]):
            op = jt.add
        try:
            values.append(op(a) if b is None else op(a, b))
        except (RuntimeError, IndexError):  # shapes that do not broadcast: skip the step
            values.append(a)
    return tuple(values[k % len(values)] for k in outs)


def merged(graph, groups, i, j):
    """Groups ``i`` and ``j`` as one `Group` (None if its outputs share no shape, so no kernel form)."""
    nodes = sorted(groups[i].nodes + groups[j].nodes, key=graph.nodes.index)
    members = set(nodes)
    needed = set(graph.output_values()) | {v for _, v in graph.mutations} | \
        {v for k, g in enumerate(groups) if k not in (i, j) for v in g.inputs}
    outputs = [v for n in nodes for v in n.outputs if v in needed]
    inputs = list(dict.fromkeys(v for n in nodes for v in n.input_values() if v.node not in members))
    node_kinds = {kind_of(n) for n in nodes}
    kind = next((k for k in ("external", "reduction", "pointwise") if k in node_kinds), "view")
    if kind == "reduction":
        shape = next(n for n in nodes if kind_of(n) == "reduction").args[0].type.shape
    else:
        shapes = {v.type.shape for v in outputs}
        if len(shapes) != 1:
            return None
        shape = shapes.pop()
    return Group(kind, nodes, inputs, outputs, shape)


def row_value_reduced_elsewhere(graph, group):
    """Whether a value of ``group``'s row epilogue is read by a reduction outside it, or through views (fusion
    leaves such a value to that reduction's prologue)."""
    if group.kind != "reduction":
        return False
    rows = reduction_sides(group.reduction, group.nodes)[2]
    reached = {v for n in rows for v in n.outputs if v in group.outputs}
    for n in graph.nodes:  # (in dataflow order: a view's readers come after it)
        if reached & set(n.input_values()):
            if kind_of(n) == "reduction" and n not in group.nodes:
                return True
            if kind_of(n) == "view":
                reached |= set(n.outputs)
    return False


def has_kernel_form(group):
    try:
        check_form(group)
    except AssertionError:
        return False
    return True


def check_maximal(graph, groups):
    """No two groups joined by a dataflow edge could merge into one with a kernel form without
    making the graph of groups cyclic."""
    owner = {n: k for k, g in enumerate(groups) for n in g.nodes}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(groups)))
    dag.add_edges_from((owner[v.node], owner[n]) for n in graph.nodes for v in n.input_values()
                       if v.node is not None and owner[v.node] != owner[n])
    for i, j in dag.edges:
        if "external" in (groups[i].kind, groups[j].kind):
            continue
        candidate = merged(graph, groups, i, j)
        if candidate is not None and row_value_reduced_elsewhere(graph, candidate):
            continue
        acyclic = nx.is_directed_acyclic_graph(nx.contracted_nodes(dag, i, j, self_loops=False))
        assert candidate is None or not acyclic or not has_kernel_form(candidate), \
            f"{groups[i]} and {groups[j]} could be one group"


@given(programs())
def test_random_programs_partition_validly_and_maximally(program):
    steps, outs = program
    graph = trace(lambda x, y, w: run_program(steps, outs, x, y, w), jt.randn(N, N), jt.randn(N, N), jt.randn(N))
    check_maximal(graph, check(graph, fuse(graph)))
    check(graph, fuse(graph, prologue_outputs=False))


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graphs())
def test_random_graphs_partition_validly_and_maximally(graph):
    check_maximal(graph, check(graph, fuse(graph)))


def test_one_element_groups_that_share_nothing_are_one_kernel():
    # an optimizer's step counters, one ``add_(1)`` per parameter: one kernel call, not one each
    def f(*counts):
        for c in counts:
            c.add_(1)
        return X * 2

    groups = fused(f, *[jt.zeros(()) for _ in range(5)])
    (one,) = [g for g in groups if g.shape == ()]
    assert ops(one) == ["add"] * 5 and len(one.outputs) == 5
    assert len(groups) == 2


def test_one_element_groups_linked_through_other_groups_stay_apart():
    # merging the count with the sum after it would close a cycle through the product and the dot product
    def f(count, x, w):
        c = count + 1
        return c, (x * c) @ w + 1

    groups = fused(f, jt.zeros(()), jt.randn(4), jt.randn(4))
    assert [ops(g) for g in groups] == [["add"], ["mul"], ["matmul"], ["add"]]
