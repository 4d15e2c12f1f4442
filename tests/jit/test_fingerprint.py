"""Fingerprints of traced graphs (`jit.fingerprint`): equal for equal traces, even after the passes rewrote
the first graph in place; unequal wherever the printed graphs differ, and stricter than the print."""

from __future__ import annotations

import jitorch as jt
from jitorch.ir.passes import optimize
from jitorch.ir.printer import print_graph
from jitorch.jit.fingerprint import graph_fingerprint
from jitorch.jit.tracer import trace_with_inputs


def _traced(fn, *args):
    return trace_with_inputs(fn, args, {})[0]


FUNCTIONS = {
    "scale 0.0": lambda x: (x * 0.0).sum(dim=0),
    "scale -0.0": lambda x: (x * -0.0).sum(dim=0),
    "add 1": lambda x: (x + 1).sum(dim=0),
    "add True": lambda x: (x + True).sum(dim=0),
    "add 1.0": lambda x: (x + 1.0).sum(dim=0),
    "sum dim 1": lambda x: (x + 1).sum(dim=1),
    "sum dims [0]": lambda x: (x + 1).sum(dim=[0]),
    "sin": lambda x: x.sin(),
    "cos": lambda x: x.cos(),
    "two outputs": lambda x: (x.sin(), x.cos()),
    "two outputs swapped": lambda x: (x.cos(), x.sin()),
    "list of outputs": lambda x: [x.sin(), x.cos()],
}


def test_equal_traces_have_equal_fingerprints_after_the_first_is_optimised():
    x = jt.ones(3, 4)
    for fn in FUNCTIONS.values():
        first = _traced(fn, x)
        taken = graph_fingerprint(first)
        optimize(first)  # (rewrites the graph in place, as compiling it does)
        assert taken == graph_fingerprint(_traced(fn, x))


def test_fingerprints_differ_where_the_printed_graphs_do():
    x = jt.ones(3, 4)
    graphs = {name: _traced(fn, x) for name, fn in FUNCTIONS.items()}
    graphs["another shape"] = _traced(FUNCTIONS["sin"], jt.ones(3, 5))
    graphs["another dtype"] = _traced(FUNCTIONS["sin"], jt.ones(3, 4, dtype=jt.float64))
    prints = {name: print_graph(g) for name, g in graphs.items()}
    fingerprints = {name: graph_fingerprint(g) for name, g in graphs.items()}
    for a in graphs:
        for b in graphs:
            # never equal where the texts differ; here (no list-or-tuple twins) equal where they are equal
            assert (fingerprints[a] == fingerprints[b]) == (prints[a] == prints[b]), (a, b)
    assert fingerprints["sum dims [0]"] == fingerprints["add 1"]  # (the same graph: the dim is converted)
    for a, b in [("scale 0.0", "scale -0.0"), ("add 1", "add True"), ("add 1", "add 1.0"), ("sin", "cos"),
                 ("two outputs", "two outputs swapped"), ("two outputs", "list of outputs"),
                 ("sin", "another shape"), ("sin", "another dtype")]:
        assert fingerprints[a] != fingerprints[b], (a, b)
