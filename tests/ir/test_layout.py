"""`jitorch.ir.layout`: the layered drawing the HTML report uses."""

import random

from jitorch.ir.layout import GAP, layered_layout


def _random_dag(n, seed):
    rng = random.Random(seed)
    vertices = list(range(n))
    edges = {(rng.randrange(b), b) for b in range(1, n) for _ in range(rng.randint(1, 3))}
    return vertices, sorted(edges)


def _check(layout, vertices, edges, widths, height):
    for a, b in edges:
        route = layout.routes[(a, b)]
        assert route[0] == (layout.positions[a][0], layout.positions[a][1] + height / 2)
        assert route[-1] == (layout.positions[b][0], layout.positions[b][1] - height / 2)
        assert all(y0 < y1 for (_, y0), (_, y1) in zip(route, route[1:]))  # values flow downwards
    rows = {}
    for v in vertices:
        x, y = layout.positions[v]
        assert widths[v] / 2 <= x <= layout.width - widths[v] / 2 and height / 2 <= y <= layout.height - height / 2
        rows.setdefault(y, []).append((x - widths[v] / 2, x + widths[v] / 2))
    for boxes in rows.values():  # no two boxes of a row overlap
        boxes.sort()
        assert all(right + GAP <= left + 1e-6 for (_, right), (left, _) in zip(boxes, boxes[1:]))


def test_random_dags_flow_down_without_overlaps():
    for seed in range(5):
        vertices, edges = _random_dag(60, seed)
        widths = {v: 40 + 7 * (v % 5) for v in vertices}
        layout = layered_layout(vertices, edges, widths, height=20)
        _check(layout, vertices, edges, widths, 20)


def test_sources_sit_above_their_first_reader_and_chains_stay_straight():
    # a -> b -> c -> d, and a weight w (with its transpose t) read only by d
    vertices = ["a", "b", "c", "w", "t", "d"]
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("w", "t"), ("t", "d")]
    widths = dict.fromkeys(vertices, 40)
    layout = layered_layout(vertices, edges, widths)
    y = {v: layout.positions[v][1] for v in vertices}
    assert y["a"] < y["b"] < y["c"] < y["d"] and layout.layers == 4
    assert y["t"] == y["c"] and y["w"] == y["b"]  # not on the top row, far from where they are read
    assert len({layout.positions[v][0] for v in "abc"}) == 1  # a chain alone is one column
    _check(layout, vertices, edges, widths, 28)


def test_long_edges_bend_through_one_point_per_layer():
    vertices = ["a", "b", "c", "d"]
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]
    layout = layered_layout(vertices, edges, dict.fromkeys(vertices, 40))
    assert len(layout.routes[("a", "d")]) == 2 + 2 and len(layout.routes[("a", "b")]) == 2
    xs = [x for x, _ in layout.routes[("a", "d")][1:-1]]
    assert all(abs(x - layout.positions["b"][0]) >= 20 + GAP / 2 for x in xs)  # beside b and c, not through them
