"""A layered drawing of a dataflow graph (Sugiyama's method, kept small): what `jitorch.explain`'s
HTML report draws as SVG, without a graphviz binary.

Vertices get layers by longest path from the sources (values flow downwards); then, from the last
vertex up, one with at least as many readers as operands that other vertices make moves down to just
above its first reader, so that inputs, constants and what only they feed (a weight's transpose, a
backward's product of two saved values) sit where they are read rather than all on the top rows. An
edge over several layers passes through a dummy point per layer it crosses, so that it bends around
the vertices between. The order within each layer comes from sweeps of barycentres (each vertex
moves towards the mean position of its neighbours in the layer above, then below), and the x
coordinates from repeated pulls towards the neighbours' mean that keep each layer's order and gaps.
"""

from __future__ import annotations

from dataclasses import dataclass

SWEEPS = 6        # ordering sweeps (down then up): crossings stop falling after a few
PULLS = 8         # coordinate passes
GAP = 16          # horizontal space between vertices of a layer
DUMMY_WIDTH = 6   # the width an edge passing through a layer takes there


@dataclass
class Layout:
    """Where each vertex is (its centre), the points each edge passes through (from its source's bottom
    to its target's top), and the drawing's size."""

    positions: dict
    routes: dict
    width: float
    height: float
    layers: int


def layered_layout(vertices, edges, widths, height=28, layer_gap=34, margin=20):
    """Lay out a directed acyclic graph top to bottom.

    ``vertices`` in topological order (each edge goes from an earlier one to a later one), ``edges``
    (source, target) pairs, ``widths`` each vertex's box width; every box is ``height`` tall and rows are
    ``layer_gap`` apart. Returns a `Layout`.
    """
    preds = {v: [] for v in vertices}
    succs = {v: [] for v in vertices}
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)
    layer = {}
    for v in vertices:
        layer[v] = 1 + max((layer[p] for p in preds[v]), default=-1)
    for v in reversed(vertices):
        # a vertex with no fewer readers than operands made by other vertices waits above its first reader
        # (a source always): moving it down shortens more edges than it stretches, since the sources it
        # reads move after it
        if succs[v] and len(succs[v]) >= sum(1 for p in preds[v] if preds[p]):
            layer[v] = max(layer[v], min(layer[s] for s in succs[v]) - 1)
    depth = 1 + max(layer.values(), default=0)

    # every edge as a chain of unit steps through dummy points
    up = {v: [] for v in vertices}
    down = {v: [] for v in vertices}
    routes = {}
    for a, b in edges:
        chain = [a]
        for k in range(layer[a] + 1, layer[b]):
            d = ("dummy", a, b, k)
            layer[d] = k
            up[d], down[d] = [], []
            chain.append(d)
        chain.append(b)
        for x, y in zip(chain, chain[1:]):
            down[x].append(y)
            up[y].append(x)
        routes[(a, b)] = chain

    rows = [[] for _ in range(depth)]
    for v in vertices:
        rows[layer[v]].append(v)
    for chain in routes.values():
        for d in chain[1:-1]:
            rows[layer[d]].append(d)
    _order(rows, up, down)

    width_of = {v: widths[v] for v in vertices}
    x = _coordinates(rows, up, down, lambda v: width_of.get(v, DUMMY_WIDTH))
    left = min((x[v] - width_of.get(v, DUMMY_WIDTH) / 2 for v in x), default=0)
    right = max((x[v] + width_of.get(v, DUMMY_WIDTH) / 2 for v in x), default=0)
    shift = margin - left

    def point(v):
        return x[v] + shift, margin + layer[v] * (height + layer_gap) + height / 2

    positions = {v: point(v) for v in vertices}
    drawn = {}
    for (a, b), chain in routes.items():
        ax, ay = positions[a]
        bx, by = positions[b]
        drawn[(a, b)] = [(ax, ay + height / 2)] + [point(d) for d in chain[1:-1]] + [(bx, by - height / 2)]
    return Layout(positions, drawn, right - left + 2 * margin, 2 * margin + depth * (height + layer_gap) - layer_gap,
                  depth)


def _order(rows, up, down):
    """Reorder each row, in place, by the barycentres of its neighbours in the row above (sweeping down)
    or below (sweeping up); a vertex without neighbours there keeps its place."""
    pos = {}

    def number(row):
        for i, v in enumerate(row):
            pos[v] = i

    for row in rows:
        number(row)
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        sequence = rows[1:] if downward else rows[-2::-1]
        for row in sequence:
            near = up if downward else down
            keyed = []
            for i, v in enumerate(row):
                ns = near[v]
                keyed.append((sum(pos[n] for n in ns) / len(ns) if ns else i, i, v))
            keyed.sort(key=lambda t: (t[0], t[1]))
            row[:] = [v for _, _, v in keyed]
            number(row)


def _coordinates(rows, up, down, width):
    """x of each vertex: rows packed left to right, then pulled towards their neighbours' mean x while
    keeping order and gaps (a pass per direction, then a pass settling each row's overlaps both ways)."""
    x = {}
    for row in rows:
        at = 0.0
        for v in row:
            x[v] = at + width(v) / 2
            at += width(v) + GAP
    for k in range(PULLS):
        downward = k % 2 == 0
        for row in (rows[1:] if downward else rows[-2::-1]):
            near = up if downward else down
            wanted = {}
            for v in row:
                ns = near[v] or (down[v] if downward else up[v])
                wanted[v] = sum(x[n] for n in ns) / len(ns) if ns else x[v]
            _place(row, wanted, x, width)
    return x


def _place(row, wanted, x, width):
    """Put a row's vertices as near their wanted x as order and gaps allow: a left-to-right pass that
    pushes right, a right-to-left pass that pushes left, and the mean of the two."""
    forward = {}
    edge = float("-inf")
    for v in row:
        half = width(v) / 2
        forward[v] = max(wanted[v], edge + half)
        edge = forward[v] + half + GAP
    backward = {}
    edge = float("inf")
    for v in reversed(row):
        half = width(v) / 2
        backward[v] = min(wanted[v], edge - half)
        edge = backward[v] - half - GAP
    edge = float("-inf")
    for v in row:  # the mean of two orderly placements, made orderly again
        half = width(v) / 2
        x[v] = max((forward[v] + backward[v]) / 2, edge + half)
        edge = x[v] + half + GAP
