"""Telling a new trace from the last one: a function whose first trace set up Python state (an
optimizer's buffers, see `jitorch.compiler.eager_state`) is traced again on its second call, and
that trace is usually the same graph. Its fingerprint says so, and the compiled graph of the first
trace then serves the second, given the second's captured tensors and Python checks.

A fingerprint is taken of the traced graph before the passes rewrite it in place, and compared with the
next trace's. It holds what `print_graph` would print of the graph, as it is (inputs, constants, each
node's op, arguments and outputs, the values written back, the outputs), and compares it part by part:
the first trace's fingerprint cost a print of the whole graph and the second's another (a GPT training
step's: a twentieth of its warm first call). The comparison is stricter than comparing the printed texts:
ops by identity, arguments by type and value (floats by their repr, as printed), values by name and type.
"""

from __future__ import annotations

from ..ir.graph import Value
from ..ops.random_ops import Generator
from ..ops.views import memory_format
from ..runtime import dtypes as _dt
from ..runtime.device import device as _device
from ..runtime.pytree import tree_flatten

# Graph attributes that hold the Python side of a trace (tensors, objects, closures): not compared but
# handed over (`transplant`); or held by the fingerprint's parts; or bookkeeping.
_HANDED_OVER = ("constant_tensors", "traced_constants", "objects", "grad_constants", "python_guards", "refreshers",
                "one_shot")
_HELD = ("inputs", "constants", "nodes", "outputs", "mutations")
_BOOKKEEPING = ("_next_id", "_names", "_suffixes")
# Argument classes compared by ``==`` (their printed text is a function of their value, and ``==`` of two
# of them is True or False); floats by repr, Values by name, containers item by item; any other is unequal
# to everything (it does not print either).
_BY_VALUE = (int, bool, type(None), str, _dt.dtype, _device, memory_format, Generator)


class Fingerprint:
    """Equal for two traced (not yet optimised) graphs exactly when one's compiled form runs the other, once
    `transplant` has given it the other's Python side: the graph's parts as they were when taken (the passes
    rewrite nodes' arguments and the graph's outputs later), the names of its captured tensors, its objects
    (the same objects: nodes hold them), and every other attribute, with Values by name. An attribute
    holding an object without a value repr (``at 0x...``) makes it unequal to every other."""

    __slots__ = ("_rest", "_inputs", "_constants", "_mutations", "_outputs", "_nodes")

    def __init__(self, graph):
        rest = {k: v for k, v in vars(graph).items() if k not in _HANDED_OVER + _HELD + _BOOKKEEPING}
        objects = sorted((name, id(obj)) for name, obj in graph.objects.items())
        self._rest = "\n".join([repr(sorted(graph.constant_tensors)), repr(objects),
                                repr(sorted(graph.grad_constants)), _describe(rest)])
        self._inputs = [(v.name, v.type, v.requires_grad) for v in graph.inputs]
        self._constants = [(name, v.name, v.type) for name, v in graph.constants.items()]
        self._mutations = [(target.name, value.name) for target, value in graph.mutations]
        leaves, spec = tree_flatten(graph.outputs)
        self._outputs = (repr(spec), [_described_leaf(leaf) for leaf in leaves])
        # (a node's arguments are a tuple the passes replace, never change; its outputs a list they may extend)
        self._nodes = [(node.op, node.args, tuple(node.outputs)) for node in graph.nodes]

    def __eq__(self, other):
        if not isinstance(other, Fingerprint):
            return NotImplemented
        if (self._rest != other._rest or self._inputs != other._inputs or self._constants != other._constants
                or self._mutations != other._mutations or self._outputs != other._outputs
                or len(self._nodes) != len(other._nodes)):
            return False
        for (op, args, outputs), (other_op, other_args, other_outputs) in zip(self._nodes, other._nodes):
            if op is not other_op or len(outputs) != len(other_outputs) or not _same_args(args, other_args):
                return False
            for a, b in zip(outputs, other_outputs):
                if a.name != b.name or a.type != b.type:
                    return False
        return True

    __hash__ = None


def graph_fingerprint(graph):
    """The `Fingerprint` of a traced graph, taken now."""
    return Fingerprint(graph)


def _same_args(a, b):
    """Whether two node arguments (or argument lists) are the same: same classes throughout, Values of the
    same name, floats of the same repr, other values as `_BY_VALUE` says."""
    cls = type(a)
    if cls is not type(b):
        return False
    if cls is Value:
        return a.name == b.name
    if cls is tuple or cls is list:
        return len(a) == len(b) and all(_same_args(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    if cls is dict:
        return len(a) == len(b) and all(_same_args(k, l) and _same_args(a[k], b[l]) for k, l in zip(a, b))
    return isinstance(a, _BY_VALUE) and a == b


def _described_leaf(leaf):
    if isinstance(leaf, Value):
        return ("%", leaf.name)
    return (type(leaf).__name__, repr(leaf))


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
    g.traced_constants = new.traced_constants
    g.grad_constants = new.grad_constants
    g.python_guards = new.python_guards
    g.refreshers = new.refreshers
    g.one_shot = new.one_shot
    return g
