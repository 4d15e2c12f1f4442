"""The SSA graph: values with tensor types, op nodes, constants and outputs.

A `Graph` is a function of its `inputs` (placeholder values). Its body is a
list of `Node`s in definition order; each node names a registry op and holds
that op's arguments in schema order, where tensors are `Value`s (lists of them
for ``Tensor[]``) and everything else is a plain Python literal (ints, floats,
bools, None, strings, tuples, dtypes, devices). A node defines one value per
tensor result of its op. Captured tensors are `constants`: values defined by
name and bound to a tensor that is read at call time, so a later in-place
change to it is seen. The graph returns `outputs`, a pytree (tuples, lists and
dicts) of values and Python literals, and may write new values back into
inputs (`mutations`): in-place ops on inputs are recorded functionally.

Values are logical tensors (shape, dtype, device): the IR is functional and
has no aliasing. View ops read their input as a compact tensor (contiguous,
offset 0); ``as_strided`` and ``as_strided_scatter`` address that layout.
"""

from __future__ import annotations

import contextlib
import re
import warnings

from ..ops import registry
from .printer import print_graph
from .values import CODE_DTYPES, DTYPE_CODES, TensorType, Value  # noqa: F401  (the IR's names, used here too)

# A name `_fresh` keeps as it is given.
_NAME_OK = re.compile(r"[A-Za-z0-9_.]+")


class Node:
    """One op application: ``outputs = op(*args)`` with args in schema order."""

    __slots__ = ("op", "args", "outputs", "_read", "kind_memo")

    def __init__(self, op, args, outputs=()):
        self.op = op
        self.args = tuple(args)
        self.outputs = list(outputs)
        self._read = None  # (the args tuple they were read from, the values it reads): see `input_values`
        # (the args tuple, the op, the outputs, the dtypes, the answer) of the code generator's `kind_of`, kept as `input_tuple`
        # keeps its answer: given again while `args` is that very tuple, and the op and outputs those
        self.kind_memo = None

    def input_values(self):
        """The values this node reads, in argument order (a new list)."""
        read = self._read
        if read is not None and read[0] is self.args:
            return list(read[1])
        return list(self.input_tuple())

    def input_tuple(self):
        """The values this node reads, in argument order, as a tuple."""
        # (the passes, fusion and the memory plan ask this of every node, several times: 26,000 calls in the
        # GPT-4x128 step's warm first call. Where the arguments are a tuple holding no list at any depth, which
        # nothing can edit in place, the answer is kept with the tuple it was read from and given again while
        # `args` is that very tuple: a pass that rewrites a node's arguments assigns a new one. Arguments
        # holding a list (a cat's tensors, which a pass may edit in place) are read anew at each call.)
        read = self._read
        args = self.args
        if read is not None and read[0] is args:
            return read[1]
        out = []
        frozen = type(args) is tuple
        for a in args:
            if isinstance(a, Value):
                out.append(a)
            elif isinstance(a, (list, tuple)):
                frozen = frozen and _frozen(a)
                out.extend(iter_values(a))
        values = tuple(out)
        self._read = (args, values) if frozen else None
        return values

    def args_frozen(self):
        """Whether ``args`` is a tuple holding no list at any depth, which nothing can edit in place: an answer
        read from it may be kept with that tuple, valid while ``args`` is that very tuple (a pass that rewrites
        a node's arguments assigns a new one)."""
        read = self._read
        if read is not None and read[0] is self.args:
            return True
        return type(self.args) is tuple and _frozen(self.args)

    def __repr__(self):
        return f"<node {', '.join(map(repr, self.outputs))} = {self.op.name}>"


def _frozen(arg):
    """Whether ``arg`` (a list or tuple) is a plain tuple holding no list at any depth: nothing edits it."""
    return type(arg) is tuple and all(not isinstance(a, (list, tuple)) or _frozen(a) for a in arg)


def substitute(args, resolve):
    """``args`` with every Value ``v`` replaced by ``resolve(v)``, inside lists and tuples too (a tuple)."""
    return tuple(_substituted(a, resolve) for a in args)


def _substituted(a, resolve):
    # (a module function: a nested one that calls itself is a reference cycle, through its cell, which only the
    # cyclic collector frees, with the ``resolve`` it holds: 11,000 such objects of a GPT step's compile)
    if isinstance(a, Value):
        return resolve(a)
    if isinstance(a, (list, tuple)):
        return type(a)(_substituted(x, resolve) for x in a)
    return a


def iter_values(args):
    """Every Value inside an argument list (nested lists and tuples included)."""
    for a in args:
        if isinstance(a, Value):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from iter_values(a)


@contextlib.contextmanager
def warning_as_traced(graph):
    """Around one run of ``graph``: the warnings its ops' meta rules gave when traced, once, as an eager
    call gives them (dead code's too); the ones its nodes give again while running are dropped."""
    for category, message in graph.meta_warnings:
        warnings.warn(message, category, stacklevel=4)
    with registry.meta_warnings_into([]):
        yield


class Graph:
    """A traced program: inputs, constants, nodes, outputs and input mutations."""

    def __init__(self):
        self.inputs: list = []          # placeholder Values, in call order
        self.constants: dict = {}       # name -> Value
        self.constant_tensors: dict = {}  # name -> the captured tensor (read at call time)
        self.nodes: list = []
        self.outputs = None             # pytree of Values and literals
        self.mutations: list = []       # (input Value, Value written back into it)
        self.objects: dict = {}         # name -> a non-tensor object an op uses (a Generator), printed @name
        # set by the tracer: tensors whose .grad a traced backward() sets (input indices, constant
        # names), with the gradients as the second output
        self.grad_targets: list = []
        self.outputs_require_grad = False
        self.rewrites_history = False    # an in-place op under grad mode on an input or captured tensor
        # set by the tracer (None: not known, as in a loaded graph): per tensor output, whether it requires
        # grad; the input indices and constant names a backward from the outputs reaches
        self.output_requires_grad = None
        self.gradient_reaches = None
        # set by a traced vector-Jacobian product (`compile._vjp_of`): the input indices, constant names and
        # ("output", k) of the call's tensors that eager's nodes save (their versions checked at the backward), or
        # None: not known
        self.saved_eagerly = None
        # set by the tracer: the captured tensors as traced, by constant name (None: `constant_tensors`); a pass
        # may fold a read of one away (``fill(c, -1)``), yet eager's backward still reaches it with zeros
        self.traced_constants = None
        self.grad_constants: dict = {}   # constant name -> the tensor whose current .grad it is
        self.python_guards: list = []    # zero-argument checks of Python state the trace assumed
        self.refreshers: list = []       # run before each call: captured scalars take their new values
        # output leaf index -> (owner, view geometry or None), the owner an input index, a constant name,
        # ("output", j): the new memory leaf j stands for, or ("leaf", j): leaf j itself (returned again)
        self.output_aliases: dict = {}
        # leaf j -> the Value of the whole of the new memory it stands for, which a compiled call returns at
        # the slots of the leaves over that memory (see `Tracer.shared_new_memory`, `jit.output_bases`)
        self.output_bases: dict = {}
        # eager's layout of the outputs that are new tensors: [(storage size, ((leaf index, strides, offset),
        # ...))], one per storage; and {Value: strides} of the results whose memory they lie in, where not
        # contiguous (see `Tracer.output_layouts`)
        self.output_layouts: list = []
        self.layouts: dict = {}
        # input index or constant name -> (shape, strides, offset from its own): an in-place view op
        # (``x.t_()``) gave that tensor this geometry, which a call gives the real one
        self.geometry_changes: dict = {}
        self.one_shot = False            # valid for one call only (it initialised Python state)
        self.meta_warnings: list = []    # (category, message) its ops' meta rules gave when traced
        self._next_id = 0
        self._names: set = set()
        self._suffixes: dict = {}  # name hint -> the suffix `_fresh` tries first for it

    # Building ---------------------------------------------------------------------

    def _fresh(self, hint=None):
        if hint is not None:
            # names print as %name, which the parser reads back if made of letters, digits, '_' and '.'
            if not _NAME_OK.fullmatch(hint):
                hint = re.sub(r"[^A-Za-z0-9_.]", "_", hint) or "_"
            name = hint
            if name in self._names:
                # a trace names hundreds of constants "c": counting on from the last suffix this hint took
                # keeps that linear (from 1 each time it was quadratic); every suffix below it is taken
                k = self._suffixes.get(hint, 1)
                name = f"{hint}_{k}"
                while name in self._names:
                    k += 1
                    name = f"{hint}_{k}"
                self._suffixes[hint] = k + 1
        else:
            while str(self._next_id) in self._names:
                self._next_id += 1
            name = str(self._next_id)
            self._next_id += 1
        self._names.add(name)
        return name

    def add_input(self, type, name=None, requires_grad=False):
        value = Value(self._fresh(name or "input"), type, requires_grad=requires_grad)
        self.inputs.append(value)
        return value

    def add_constant(self, name, tensor, type):
        value = Value(self._fresh(name), type)
        self.constants[value.name] = value
        self.constant_tensors[value.name] = tensor
        return value

    def add_object(self, obj, hint="g"):
        """Register an object (a Generator) the graph's ops use; returns its name."""
        for name, known in self.objects.items():
            if known is obj:
                return name
        name = hint
        k = 0
        while name in self.objects:
            k += 1
            name = f"{hint}{k}"
        self.objects[name] = obj
        return name

    def add_node(self, op, args, types, names=None):
        """Append ``op(*args)``; returns the node, whose outputs have ``types``."""
        node = Node(op, args)
        for i, t in enumerate(types):
            node.outputs.append(Value(self._fresh(names[i] if names else None), t, node, i))
        self.nodes.append(node)
        return node

    # Reading ----------------------------------------------------------------------

    def output_values(self):
        from ..runtime.pytree import tree_leaves
        return [v for v in tree_leaves(self.outputs) if isinstance(v, Value)]

    def values(self):
        """Every value in definition order: inputs, constants, node outputs."""
        yield from self.inputs
        yield from self.constants.values()
        for node in self.nodes:
            yield from node.outputs

    def __str__(self):
        return print_graph(self)

    def __repr__(self):
        return f"<Graph {len(self.inputs)} inputs, {len(self.nodes)} nodes>"

    def __eq__(self, other):
        return isinstance(other, Graph) and print_graph(self, canonical=True) == print_graph(other, canonical=True)

    __hash__ = None

    def to_networkx(self):
        """The dataflow as a networkx.DiGraph: one vertex per node, input and constant."""
        import networkx as nx
        g = nx.DiGraph()
        for v in self.inputs:
            g.add_node(v.name, kind="input", type=str(v.type))
        for name, v in self.constants.items():
            g.add_node(name, kind="constant", type=str(v.type))
        for i, node in enumerate(self.nodes):
            key = _node_key(node)
            g.add_node(key, kind="op", op=node.op.name, type=", ".join(str(o.type) for o in node.outputs))
            for v in node.input_tuple():
                g.add_edge(_def_key(v), key)
        g.add_node("output", kind="output")
        for v in self.output_values():
            g.add_edge(_def_key(v), "output")
        for target, v in self.mutations:
            g.add_edge(_def_key(v), "output")
        return g

    def to_dot(self):
        """Graphviz text of the dataflow (render with ``dot -Tsvg``)."""
        g = self.to_networkx()
        lines = ["digraph jitorch {", "  node [shape=box, fontname=monospace];"]
        for key, attrs in g.nodes(data=True):
            label = attrs.get("op", attrs["kind"]) if attrs["kind"] == "op" else key
            if attrs.get("type"):
                label += "\\n" + attrs["type"]
            style = {"input": ", style=rounded", "constant": ", style=dashed", "output": ", shape=oval"}
            lines.append(f'  "{key}" [label="{label}"{style.get(attrs["kind"], "")}];')
        for a, b in g.edges:
            lines.append(f'  "{a}" -> "{b}";')
        lines.append("}")
        return "\n".join(lines)


def _node_key(node):
    return ",".join(o.name for o in node.outputs) or f"node{id(node)}"


def _def_key(value):
    return _node_key(value.node) if value.node is not None else value.name
