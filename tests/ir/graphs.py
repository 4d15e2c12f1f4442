"""Valid random graphs for IR tests, built by chaining registry ops from the sample database.

A `Case` is one sample of one op (tests/ops/samples.py) with its tensors
replaced by typed `Slot`s and its output types computed by the op's meta rule
on fake tensors, so every node built from it type-checks. Ops that are
composites (the tracer records their parts), whose meta gives a dim only the
data decides, or that return no tensors have no cases.

`graphs()` is a hypothesis strategy of graphs: each node is a case whose slots
take values of the same type already in the graph (inputs, constants, earlier
outputs) or new inputs and constants; outputs are a random pytree of values
and literals; some inputs are written back (mutations); random ops share the
graph's Generator (``@g``, in ``graph.objects``). With
``runnable=True`` it draws ``(graph, inputs)`` whose example tensors are valid
for every op (slots whose data matters, indices, masks, probabilities, always
get new inputs holding the sample's data), for the interpreter's tests.
`one_op_graph(case)` gives the one-node graph of a case with its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import jitorch as jt
from jitorch.ir.fake import fake_of_type
from jitorch.ir.graph import Graph, TensorType
from jitorch.ops import registry
from tests.ops.samples import SAMPLES, bind, samples
from tests.support import random_array


def tensor_type(t):
    """The IR type of a tensor."""
    return TensorType(tuple(t.shape), t.dtype, t.device)


@dataclass(frozen=True, eq=False)
class Slot:
    """Where a sample had a tensor: its type, its data (compact), and whether the data matters to the op."""

    type: TensorType
    data: jt.Tensor
    fresh: bool  # an index, a mask, a probability...: a runnable graph feeds the sample's own data


@dataclass(frozen=True, eq=False)
class Case:
    """One sample of ``op`` in schema order, tensors as `Slot`s (lists of them for ``Tensor[]``)."""

    op: registry.OpDef
    args: tuple
    types: tuple  # the output TensorTypes by the meta rule

    def slots(self):
        return [s for a in self.args for s in (a if isinstance(a, list) else [a]) if isinstance(s, Slot)]

    def __repr__(self):
        return f"Case({self.op.name}: {', '.join(str(s.type) for s in self.slots())} -> " \
               f"{', '.join(map(str, self.types))})"


def _slot(op, t):
    data_matters = not t.dtype.is_floating_point or op.kind == "random"
    return Slot(tensor_type(t), t.contiguous(), data_matters)


class _GeneratorArg:
    """Where a sample passed a Generator: a graph gives the one it holds in ``objects``."""

    def __repr__(self):
        return "GENERATOR"


GENERATOR = _GeneratorArg()


def _holes(op, args):
    """The converted arguments with tensors as slots and generators as `GENERATOR`."""
    out = []
    for a in args:
        if isinstance(a, jt.Tensor):
            out.append(_slot(op, a))
        elif isinstance(a, (list, tuple)) and any(isinstance(x, jt.Tensor) for x in a):
            out.append([_slot(op, x) if isinstance(x, jt.Tensor) else x for x in a])
        elif isinstance(a, jt.Generator):
            out.append(GENERATOR)
        else:
            out.append(a)
    return tuple(out)


def fill(args, pick, generator=None):
    """``args`` with each slot replaced by ``pick(slot)`` (inside lists too), `GENERATOR` by ``generator``."""
    def one(a):
        if isinstance(a, Slot):
            return pick(a)
        if a is GENERATOR:
            return generator
        if isinstance(a, list):
            return [one(x) for x in a]
        return a
    return tuple(one(a) for a in args)


def output_types(op, args):
    """The meta rule's output types for ``args`` (with slots), or None if it gives no graph node."""
    fakes = fill(args, lambda s: fake_of_type(s.type))
    try:
        spec = op.meta(*fakes)
    except (RuntimeError, IndexError, ValueError):  # a sample valid only in its own layout (as_strided bounds)
        return None
    specs = [spec] if isinstance(spec, registry.TensorSpec) else spec
    if not isinstance(specs, (list, tuple)) or not all(isinstance(s, registry.TensorSpec) for s in specs):
        return None
    if any(n is None for s in specs for n in s.shape):
        return None
    return tuple(TensorType(tuple(s.shape), s.dtype, s.device) for s in specs)


def _cases():
    out = []
    for name, op in registry.OPS.items():
        if op.composite is not None or name not in SAMPLES:
            continue
        for sample in samples(op):
            args = _holes(op, op.convert(bind(op, sample)))
            types = output_types(op, args)
            if types is not None:
                out.append(Case(op, args, types))
    return out


CASES = _cases()
CASES_BY_OP: dict = {}
for _c in CASES:
    CASES_BY_OP.setdefault(_c.op.name, []).append(_c)
# cases that can consume a value of a given type (their slot of that type need not be fresh)
CASES_BY_TYPE: dict = {}
for _c in CASES:
    for _t in {s.type for s in _c.slots() if not s.fresh}:
        CASES_BY_TYPE.setdefault(_t, []).append(_c)


def random_tensor(type, rng):
    """A contiguous tensor of ``type`` with random values."""
    return jt.tensor(random_array(type.shape, type.dtype, rng), dtype=type.dtype)


def one_op_graph(case):
    """``(graph, inputs)``: the one-node graph of ``case``, one input per slot, its outputs returned
    (a tuple for several), with the sample's tensors as inputs."""
    g = Graph()
    inputs = []

    def new_input(slot):
        inputs.append(slot.data)
        return g.add_input(slot.type)

    generator = graph_generator(g, 0) if GENERATOR in case.args else None
    node = g.add_node(case.op, fill(case.args, new_input, generator), case.types)
    g.outputs = node.outputs[0] if len(node.outputs) == 1 and len(case.types) == 1 and not _returns_list(case.op) \
        else tuple(node.outputs)
    return g, inputs


def graph_generator(graph, seed):
    """The Generator ``graph`` holds for its random ops (``@g`` in its text), seeded on first use."""
    if "g" not in graph.objects:
        graph.add_object(jt.Generator().manual_seed(seed))
    return graph.objects["g"]


def _returns_list(op):
    return any(r.list for r in op.schema.returns)


# Hypothesis strategies ------------------------------------------------------------------------

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,4}(\.[a-z0-9]{1,3})?", fullmatch=True)
OPTIONAL_NAMES = st.none() | NAMES
# leaves a traced function may return besides tensors
LITERALS = st.none() | st.booleans() | st.integers(-10 ** 20, 10 ** 20) | st.floats() | st.text(max_size=6)


class _Builder:
    """The state of one drawn graph: values by type, example tensors by input."""

    def __init__(self, draw, runnable):
        self.draw = draw
        self.runnable = runnable
        self.g = Graph()
        self.by_type: dict = {}
        self.examples: dict = {}  # input Value -> tensor
        self.rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))

    def known(self, value):
        self.by_type.setdefault(value.type, []).append(value)
        return value

    def new_source(self, type, data=None):
        """A new input or constant of ``type``."""
        draw = self.draw
        data = random_tensor(type, self.rng) if data is None else data
        if draw(st.integers(0, 3)) == 0:
            return self.known(self.g.add_constant(draw(NAMES), data, type))
        requires_grad = type.dtype.is_floating_point and draw(st.booleans())
        value = self.g.add_input(type, draw(OPTIONAL_NAMES), requires_grad=requires_grad)
        self.examples[value] = data
        return self.known(value)

    def pick(self, slot):
        """A value for ``slot``: one of the same type already defined, or a new input or constant."""
        if slot.fresh and self.runnable:
            return self.new_source(slot.type, slot.data)
        choices = self.by_type.get(slot.type, [])
        k = self.draw(st.integers(0, len(choices)))
        return choices[k - 1] if k else self.new_source(slot.type, slot.data)

    def add_case(self):
        draw = self.draw
        defined = [v for vs in self.by_type.values() for v in vs if v.type in CASES_BY_TYPE]
        if defined and draw(st.booleans()):
            case = draw(st.sampled_from(CASES_BY_TYPE[draw(st.sampled_from(defined)).type]))
        else:
            case = draw(st.sampled_from(CASES))
        names = draw(st.none() | st.lists(NAMES, min_size=len(case.types), max_size=len(case.types)))
        generator = graph_generator(self.g, draw(st.integers(0, 2 ** 31))) if GENERATOR in case.args else None
        node = self.g.add_node(case.op, fill(case.args, self.pick, generator), case.types, names)
        for v in node.outputs:
            self.known(v)

    def tree(self, values, depth):
        """A pytree of ``values`` and literals."""
        draw = self.draw
        kind = draw(st.sampled_from(["value", "value", "literal", "tuple", "list", "dict"][:3 + 3 * (depth > 0)]))
        if kind == "value":
            return draw(st.sampled_from(values))
        if kind == "literal":
            return draw(LITERALS)
        n = draw(st.integers(0, 3))
        children = [self.tree(values, depth - 1) for _ in range(n)]
        if kind == "tuple":
            return tuple(children)
        if kind == "list":
            return children
        keys = draw(st.lists(st.text(max_size=4), min_size=n, max_size=n, unique=True))
        return dict(zip(keys, children))

    def mutate(self):
        """Write a node output back into an input or constant of its type (a new one if none)."""
        draw = self.draw
        value = draw(st.sampled_from([v for node in self.g.nodes for v in node.outputs]))
        targets = [v for v in self.by_type[value.type] if v.node is None and v not in dict(self.g.mutations)]
        target = draw(st.sampled_from(targets)) if targets and draw(st.booleans()) else self.new_source(value.type)
        if target not in dict(self.g.mutations):
            self.g.mutations.append((target, value))


@st.composite
def graphs(draw, max_nodes=6, runnable=False):
    """A valid graph (``(graph, inputs)`` with ``runnable=True``: example tensors for its inputs,
    in order, and its constants bound to tensors)."""
    b = _Builder(draw, runnable)
    for _ in range(draw(st.integers(1, max_nodes))):
        b.add_case()
    outputs = [v for node in b.g.nodes for v in node.outputs]
    if not outputs:  # nodes that return empty lists (unbind of an empty dim)
        outputs = list(b.g.values())
    for _ in range(draw(st.integers(0, 2))):
        if any(node.outputs for node in b.g.nodes):
            b.mutate()
    b.g.outputs = b.tree(outputs or [None], depth=2)
    if not runnable:
        return b.g
    return b.g, [b.examples[v] for v in b.g.inputs]
