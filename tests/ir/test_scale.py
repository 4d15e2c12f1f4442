"""Programs as deep as they are long: the IR's text form, verifier, passes and fusion follow no
recursion over a 10,000-node graph (at Python's default recursion limit), and fusion merges in time
linear in the graph."""

import math
import sys

from jitorch.ir import parse, print_graph, verify
from jitorch.ir.passes import fusion
from jitorch.ir.passes.manager import optimize
from tests.deep import DEEP_STEPS, deep_chain_text


def test_a_10000_node_chain_parses_prints_verifies_optimises_and_fuses():
    assert sys.getrecursionlimit() <= 1000
    text = deep_chain_text()
    graph = parse(text)
    assert len(graph.nodes) == 2 * DEEP_STEPS
    assert print_graph(graph) == text
    verify(graph)
    assert print_graph(optimize(graph, verify=False)) == text  # nothing to rewrite
    groups = fusion.fuse(graph)
    # groups of at most MAX_GROUP_NODES nodes, which follow the chain in order
    assert len(groups) == math.ceil(2 * DEEP_STEPS / fusion.MAX_GROUP_NODES)
    assert {g.kind for g in groups} == {"pointwise"}
    assert [n for g in groups for n in g.nodes] == graph.nodes
    assert all(len(g.inputs) == len(g.outputs) == 1 for g in groups)


def forward_and_backward_text(steps):
    """A chain ``a = sin(a)`` and, as a traced backward reads them, its values again in reverse
    order (``b = b * a``): every value of the first half is needed by the second."""
    lines = ["graph(%x: f32[8]):", "  %a0 : f32[8] = sin(%x)"]
    lines += [f"  %a{i} : f32[8] = sin(%a{i - 1})" for i in range(1, steps)]
    lines.append(f"  %b{steps - 1} : f32[8] = mul(%a{steps - 1}, %a{steps - 1})")
    lines += [f"  %b{i} : f32[8] = mul(%b{i + 1}, %a{i})" for i in reversed(range(steps - 1))]
    lines.append("  return %b0")
    return "\n".join(lines)


def test_fusing_a_cluster_whose_values_are_all_read_outside_is_linear(monkeypatch):
    # Each merge scanned every value the growing cluster had to write and every cluster reading it:
    # fusing this 10,000-node graph took about 40 s. Without the group cap, the whole graph is one group.
    monkeypatch.setattr(fusion, "MAX_GROUP_NODES", math.inf)
    graph = parse(forward_and_backward_text(5_000))
    (group,) = fusion.fuse(graph)
    assert group.nodes == graph.nodes and group.outputs == [graph.outputs]
