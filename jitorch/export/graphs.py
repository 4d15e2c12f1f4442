"""Graph helpers for export: copies through the text form, re-typing after a size change, renaming
constants, and binding the objects (generators) a parsed graph names."""

from __future__ import annotations

from ..ir.fake import fake_args
from ..ir.graph import TensorType, Value
from ..ir.parser import ParseError, parse
from ..ir.printer import print_graph
from ..ir.verifier import VerifyError, verify
from ..ops import registry
from ..ops.random_ops import Generator, default_generator
from .errors import ExportError


def graph_from_text(text, constants, grad_targets=(), outputs_require_grad=False):
    """Parse and verify a graph's text, its constants bound to ``constants`` (name -> Tensor) and
    its generators to the process's default generator; ExportError saying what is wrong."""
    try:
        graph = parse(text)
    except ParseError as e:
        raise ExportError(f"the graph does not parse: {e}") from None
    missing = sorted(set(graph.constants) - set(constants))
    extra = sorted(set(constants) - set(graph.constants))
    if missing or extra:
        raise ExportError(f"the graph's constants and the file's differ: missing {missing}, not used {extra}")
    graph.constant_tensors = constants
    bind_generators(graph)
    graph.grad_targets = list(grad_targets)
    graph.outputs_require_grad = outputs_require_grad
    for i in graph.grad_targets:  # an input's index, or a captured parameter's constant name
        if not ((type(i) is int and 0 <= i < len(graph.inputs)) or (type(i) is str and i in constants)):
            raise ExportError(f"grad target {i!r} is neither an input nor a constant of the graph")
    _check_literals(graph)
    try:
        verify(graph)
    except VerifyError as e:
        raise ExportError(f"the graph does not verify: {e}") from None
    return graph


def _check_literals(graph):
    """Integer arguments must be what a call could pass: torch takes Python ints of up to 64 bits as
    scalars and sizes, and refuses larger ones (OverflowError) when the program runs."""
    for node in graph.nodes:
        for value in _ints(node.args):
            if not -2 ** 63 <= value < 2 ** 64:
                text = str(value) if value.bit_length() < 400 else f"of {value.bit_length()} bits"
                raise ExportError(f"%{node.outputs[0].name if node.outputs else '?'} = {node.op.name}(...): the "
                                  f"integer {text} does not fit in 64 bits")


def _ints(args):
    for a in args:
        if isinstance(a, (list, tuple)) and not isinstance(a, Value):
            yield from _ints(a)
        elif type(a) is int:
            yield a


def copy_graph(graph):
    """An independent copy of ``graph`` (passes rewrite graphs in place), sharing its constants."""
    return graph_from_text(print_graph(graph), graph.constant_tensors, graph.grad_targets,
                           graph.outputs_require_grad)


def bind_generators(graph):
    """Point every generator the graph names at ``jitorch.default_generator``."""
    fresh = {id(obj) for obj in graph.objects.values()}
    for node in graph.nodes:
        node.args = tuple(_rebind(a, fresh) for a in node.args)
    graph.objects = dict.fromkeys(graph.objects, default_generator)


def _rebind(arg, fresh):
    if isinstance(arg, Generator) and id(arg) in fresh:
        return default_generator
    if isinstance(arg, (list, tuple)) and not isinstance(arg, Value):
        return type(arg)(_rebind(a, fresh) for a in arg)
    return arg


def check_generators(graph):
    """Exported graphs draw random numbers from the default generator only."""
    for name, obj in graph.objects.items():
        if obj is not default_generator:
            raise ExportError(f"the graph uses a Generator (@{name}) other than jitorch.default_generator; an "
                              "exported program draws from the default generator of the process that runs it")


def retype(graph):
    """Re-derive every node's output types from its op's meta rule (after input shapes or literal
    sizes changed); ExportError naming the node's op where the rule refuses."""
    for node in graph.nodes:
        args = fake_args(node.args)
        try:
            spec = registry.quiet_meta(node.op, node.op.convert(args))
        except Exception as e:  # the rule's verdict on the new sizes, whatever its type
            raise ExportError(f"{node.op.name} refuses the new sizes: {type(e).__name__}: {e}") from None
        specs = spec if isinstance(spec, (tuple, list)) else [spec]
        if len(specs) != len(node.outputs) or not all(isinstance(s, registry.TensorSpec) for s in specs):
            raise ExportError(f"{node.op.name} gives a different number of outputs at the new sizes")
        for v, s in zip(node.outputs, specs):
            v.type = TensorType(tuple(s.shape), s.dtype, s.device)




def rename_constants(graph, names):
    """Rename constants bound to the tensors in ``names`` (id(tensor) -> qualified name such as
    ``fc1.weight``), so a module's parameters keep their names in the exported program."""
    renamed_values, renamed_tensors = {}, {}
    for old, value in graph.constants.items():
        tensor = graph.constant_tensors[old]
        new = names.get(id(tensor), old)
        if new != old:
            graph._names.discard(old)
            new = graph._fresh(new)
        value.name = new
        renamed_values[new] = value
        renamed_tensors[new] = tensor
    graph.constants = renamed_values
    graph.constant_tensors = renamed_tensors
