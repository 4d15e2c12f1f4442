"""Fusion's reach between tie points (`fusion.tie_links`) as bit sets: the same answers as a walk of the graph.

The reach was a set per node of every tie point below it, which made `tie_links` quadratic in the graph's size
(generate()'s 64 unrolled decode steps, compiled cold, spent seconds in it); it is a bit set per node now.
"""

from __future__ import annotations

import jitorch as jt
from jitorch.ir.passes import fusion, optimize
from jitorch.jit import trace


def layers(x, w1, w2):
    """Three layers of two products and a row mean each: products and reductions of one kind, tie points that
    reach one another down the layers and are independent within one."""
    outs = []
    for _ in range(3):
        a, b = x @ w1, x @ w2
        x = (a * b).tanh() - a.mean(-1, keepdim=True) + b.mean(-1, keepdim=True)
        outs.append(x)
    return outs


def walked(p, q, users):
    """Whether a path of the graph leads from node ``p`` to node ``q`` (a depth-first walk of the readers)."""
    stack, seen = [p], {p}
    while stack:
        for v in stack.pop().outputs:
            for u in users.get(v, ()):
                if u is q:
                    return True
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
    return False


def test_tie_links_reach_between_tie_points_is_the_graphs_reachability():
    graph = optimize(trace(layers, jt.randn(32, 64), jt.randn(64, 64), jt.randn(64, 64)))
    users = {}
    for n in graph.nodes:
        for v in n.input_values():
            users.setdefault(v, []).append(n)
    points = fusion.tie_points(graph.nodes, fusion.kind_of)
    assert len(points) >= 6  # (the products and the row means of the three layers)
    _, _, reach = fusion.tie_links(graph.nodes, users, fusion.kind_of)
    pairs = [(p, q) for p in points for q in points if p is not q]
    assert any(reach(p, q) for p, q in pairs) and not all(reach(p, q) for p, q in pairs)
    for p, q in pairs:
        assert reach(p, q) == walked(p, q, users), (p, q)
