"""The graph verifier: SSA form, argument kinds, and types re-derived by the ops' meta rules.

`verify(graph)` returns None for a well-formed graph and otherwise raises
`VerifyError` naming the offending line of the graph's text and what is wrong
with it. It checks that

* every value is defined once (by an input, a constant or a node) with a
  well-formed type, and used only after its definition in this graph;
* every node names a registered primitive op (graphs hold no composites) with
  one argument per schema entry: values where the schema wants tensors (a
  Python number is also accepted where a pointwise op takes one), literals
  elsewhere;
* each node's output types are what its op's meta rule gives when re-run on
  compact fake tensors of its input types (an error the rule raises is
  reported too);
* every constant is bound to a tensor of its type, outputs are defined, and
  mutations write a defined value of the target's type into an input or a
  constant.
"""

from __future__ import annotations

from numbers import Number

from ..ops import registry
from ..runtime import dtypes as _dt
from ..runtime.device import device as _device_cls
from ..runtime.pytree import tree_leaves
from .fake import fake_args
from .graph import TensorType, Value, iter_values
from .printer import format_args, format_output


class VerifyError(RuntimeError):
    """A graph that breaks the IR's rules; the message names the line and the rule."""


class _Names(dict):
    """Value -> printed name, for values the graph may not define (the printer needs every name)."""

    def __missing__(self, value):
        return value.name


def _show(format, x, fallback):
    """``format(x)`` as the printer writes it, or ``fallback`` where the text form cannot hold it
    (a literal it has no syntax for, or an op that is no OpDef)."""
    try:
        return format(x, _Names())
    except (TypeError, AttributeError):
        return fallback


def node_line(node):
    """A node as the graph's text prints it: ``%2 : f32[3] = add(%0, %1)``."""
    outs = ", ".join(f"%{o.name} : {o.type}" for o in node.outputs)
    args = _show(format_args, node, ", ".join(map(repr, node.args)))
    return f"{outs} = {getattr(node.op, 'name', node.op)}({args})"


def _fail(where, what):
    raise VerifyError(f"{where}: {what}")


def verify(graph):
    """Check ``graph`` against the IR's rules; raise `VerifyError` at the first broken one."""
    _Checker(graph).run()


class _Checker:
    def __init__(self, graph):
        self.graph = graph
        self.everywhere = {id(v) for v in graph.values()}  # to tell "later" from "elsewhere"
        self.defined = {}  # id(value) -> value, in definition order
        self.names = {}    # name -> value

    def run(self):
        g = self.graph
        for v in g.inputs:
            self.define(v, f"input %{v.name} : {v.type}")
        for name, v in g.constants.items():
            self.check_constant(name, v)
        for node in g.nodes:
            self.check_node(node)
        where = f"return {_show(format_output, g.outputs, repr(g.outputs))}"
        for v in tree_leaves(g.outputs):
            if isinstance(v, Value):
                self.check_use(v, where)
        for target, v in g.mutations:
            self.check_mutation(target, v)

    # Definitions and uses -------------------------------------------------------

    def define(self, v, where, node=None, index=0):
        if id(v) in self.defined or v.name in self.names:
            _fail(where, f"%{v.name} is defined twice")
        if v.node is not node or v.index != index:
            _fail(where, f"%{v.name} records another definition ({v.node!r}, output {v.index})")
        _check_type(v, where)
        self.defined[id(v)] = v
        self.names[v.name] = v

    def check_use(self, v, where):
        if id(v) in self.defined:
            return
        if id(v) in self.everywhere:
            _fail(where, f"%{v.name} is used before its definition")
        _fail(where, f"%{v.name} is not defined in this graph")

    def check_constant(self, name, v):
        where = f"%{v.name} : {v.type} = constant[{name!r}]"
        self.define(v, where)
        if v.name != name:
            _fail(where, f"constant {name!r} is held by a value named %{v.name}")
        if name not in self.graph.constant_tensors:
            _fail(where, f"constant {name!r} has no tensor")
        t = self.graph.constant_tensors[name]
        got = TensorType(tuple(t.shape), t.dtype, t.device)
        if got != v.type:
            _fail(where, f"constant {name!r} is bound to a tensor of type {got}")

    def check_mutation(self, target, v):
        where = f"%{target.name} <- %{v.name}"
        is_input = any(target is x for x in self.graph.inputs)
        if not is_input and self.graph.constants.get(target.name) is not target:
            _fail(where, f"%{target.name} is neither an input nor a constant of this graph")
        self.check_use(v, where)
        if v.type != target.type:
            _fail(where, f"a value of type {v.type} is written into %{target.name} of type {target.type}")

    # Nodes ---------------------------------------------------------------------

    def check_node(self, node):
        where = node_line(node)
        op = node.op
        if not isinstance(op, registry.OpDef) or registry.OPS.get(op.name) is not op:
            _fail(where, f"{getattr(op, 'name', op)!r} is not an op of the registry")
        if op.composite is not None:
            _fail(where, f"{op.name} is a composite op; graphs hold only primitive ops")
        schema_args = op.schema.args
        if len(node.args) != len(schema_args):
            _fail(where, f"{len(node.args)} arguments, but {op.name} takes {len(schema_args)}: {op.schema}")
        for arg, value in zip(schema_args, node.args):
            _check_arg_kind(op, arg, value, where)
        for v in node.input_values():
            self.check_use(v, where)
        expected = _meta_types(op, node.args, where)
        if len(expected) != len(node.outputs):
            _fail(where, f"{op.name} gives {len(expected)} outputs, the node has {len(node.outputs)}")
        for i, (o, t) in enumerate(zip(node.outputs, expected)):
            self.define(o, where, node, i)
            if o.type != t:
                _fail(where, f"%{o.name} has type {o.type}, but the meta rule of {op.name} gives {t}")


def _check_type(v, where):
    t = v.type
    ok = (isinstance(t, TensorType) and isinstance(t.shape, tuple)
          and all(type(n) is int and n >= 0 for n in t.shape)
          and isinstance(t.dtype, _dt.dtype) and isinstance(t.device, _device_cls))
    if not ok:
        _fail(where, f"%{v.name} has no valid tensor type (shape of non-negative ints, dtype, device): {t!r}")


def _check_arg_kind(op, arg, value, where):
    """Values exactly where the schema has tensors."""
    if arg.type != "Tensor":
        if next(iter_values([value]), None) is not None:
            _fail(where, f"argument '{arg.name}' takes a literal {arg.type_str()}, not a tensor value")
        return
    if value is None and arg.optional:
        return
    if arg.list or arg.varargs:
        if not isinstance(value, (list, tuple)):
            _fail(where, f"argument '{arg.name}' must be a list of values, not {value!r}")
        for x in value:
            if not (isinstance(x, Value) or x is None and arg.elem_optional):
                _fail(where, f"argument '{arg.name}' must hold tensor values, not {x!r}")
        return
    # pointwise ops take Python numbers for tensors, as in eager
    if not (isinstance(value, Value) or op.kind == "pointwise" and isinstance(value, Number)):
        _fail(where, f"argument '{arg.name}' must be a tensor value, not {value!r}")


def _meta_types(op, args, where):
    """The output types of ``op(*args)`` by its meta rule, with its argument checks as in eager dispatch."""
    try:
        fake = op.convert(fake_args(args))
        if op.multi_tensor:
            registry.check_same_device(op, fake)
        spec = registry.quiet_meta(op, fake)
    except Exception as e:  # the rule's own verdict on these arguments, whatever its type
        raise VerifyError(f"{where}: the meta rule of {op.name} rejects the arguments: "
                          f"{type(e).__name__}: {e}") from e
    types = []
    for s in spec if isinstance(spec, (tuple, list)) else [spec]:
        if not isinstance(s, registry.TensorSpec):
            _fail(where, f"the meta rule of {op.name} gives {s!r}, not a tensor")
        if any(n is None for n in s.shape):
            _fail(where, f"the meta rule of {op.name} gives a data-dependent shape {list(s.shape)}")
        types.append(TensorType(tuple(s.shape), s.dtype, s.device))
    return types
