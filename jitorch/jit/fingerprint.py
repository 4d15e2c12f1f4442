"""Telling a new trace from the last one: a function whose first trace set up Python state (an
optimizer's buffers, see `jitorch.compiler.eager_state`) is traced again on its second call, and
that trace is usually the same graph. Its fingerprint says so, and the compiled graph of the first
trace then serves the second, given the second's captured tensors and Python checks."""

from __future__ import annotations

from ..ir.graph import Value
from ..ir.printer import print_graph

# Graph attributes that hold the Python side of a trace (tensors, objects, closures): not compared but
# handed over (`transplant`); or printed by `print_graph`; or bookkeeping.
_HANDED_OVER = ("constant_tensors", "objects", "grad_constants", "python_guards", "refreshers", "one_shot")
_PRINTED = ("inputs", "constants", "nodes", "outputs", "mutations")
_BOOKKEEPING = ("_next_id", "_names", "_suffixes")


def graph_fingerprint(graph):
    """A text equal for two traced (not yet optimised) graphs exactly when one's compiled form runs the
    other, once `transplant` has given it the other's Python side: the printed graph, the names of its
    captured tensors, its objects (the same objects: nodes hold them), and every other attribute, with
    Values by name. An attribute holding an object without a value repr (`at 0x...`) makes it unequal
    to every other."""
    rest = {k: v for k, v in vars(graph).items() if k not in _HANDED_OVER + _PRINTED + _BOOKKEEPING}
    objects = sorted((name, id(obj)) for name, obj in graph.objects.items())
    return "\n".join([print_graph(graph), repr(sorted(graph.constant_tensors)), repr(objects),
                      repr(sorted(graph.grad_constants)), _describe(rest)])


def _describe(x):
    if isinstance(x, Value):
        return f"%{x.name}"
    if isinstance(x, dict):
        items = sorted(x.items(), key=lambda kv: repr(kv[0]))
        return "{" + ", ".join(f"{_describe(k)}: {_describe(v)}" for k, v in items) + "}"
    if isinstance(x, (list, tuple)):
        return type(x).__name__ + "(" + ", ".join(_describe(v) for v in x) + ")"
    return repr(x)


def transplant(new, compiled):
    """``compiled`` (the `CompiledGraph` of a graph whose fingerprint was ``new``'s) made to run ``new``:
    its graph takes ``new``'s captured tensors and Python checks, and is returned."""
    g = compiled.graph
    for name in g.constant_tensors:
        # (constants the passes made, which the trace has not, keep their values)
        if name in new.constant_tensors:
            g.constant_tensors[name] = new.constant_tensors[name]
    g.grad_constants = new.grad_constants
    g.python_guards = new.python_guards
    g.refreshers = new.refreshers
    g.one_shot = new.one_shot
    return g
