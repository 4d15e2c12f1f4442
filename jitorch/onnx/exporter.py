"""`export`: trace a model or function with jitorch's tracer and write the graph as an ONNX model."""

from __future__ import annotations

import enum
import os
import tempfile
from collections import Counter
from types import SimpleNamespace

from ..export.capture import export as export_program, module_tensor_names
from ..export.dynamic import Dim
from ..export.errors import ExportError
from ..export.graphs import rename_constants
from ..ir.graph import Value
from ..jit.tracer import input_names as argument_names, trace_with_inputs
from ..runtime.grad_mode import no_grad
from ..runtime.pytree import tree_flatten, tree_unflatten
from ..runtime.version import __version__
from ..tensor import Tensor
from .builder import Builder, onnx_type
from .errors import OnnxExporterError, UnsupportedOperatorError, require_onnx
from .rules import RULES
from .symbolic import Symbolic, SymInt

DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 20


class TrainingMode(enum.IntEnum):
    """torch.onnx.TrainingMode: the mode a module is traced in. Only evaluation exports (PRESERVE: a module
    already in eval mode)."""

    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


def export(model, args, f, *, kwargs=None, export_params=True, verbose=False, training=TrainingMode.EVAL,
           input_names=None, output_names=None, opset_version=None, do_constant_folding=True, dynamic_axes=None):
    """Export ``model`` (an ``nn.Module`` or a function) called on ``args`` to the ONNX file ``f``.

    As ``torch.onnx.export`` (the TorchScript exporter): ``model(*args, **kwargs)`` is traced once, in
    evaluation mode (a module's training flags are restored afterwards) and without autograd; its tensor
    inputs, in flattened order, become the ONNX graph's inputs, named by ``input_names``; its tensor outputs
    (``None``s left out) its outputs, named by ``output_names``; parameters and buffers become initializers
    named as in ``state_dict()``. ``dynamic_axes`` maps input and output names to the axes that stay
    symbolic, as ``{name: {axis: "dim name"}}`` or ``{name: [axis, ...]}``; sizes that move with them are
    computed from the inputs' shapes in the model. ``opset_version``: 13 to 20 (default 17).
    ``export_params=False`` makes the parameters graph inputs (named as in ``state_dict()``) instead of
    initializers; ``verbose`` prints the ONNX graph; ``do_constant_folding`` is accepted as torch's and changes
    nothing (the traced graph is exported as it is, each parameter once, under its name).

    ``f`` is a path (written atomically) or a binary file object. Returns the ``onnx.ModelProto``.
    Raises UnsupportedOperatorError listing every op without an ONNX form, OnnxExporterError where the
    model cannot be exported as asked, ValueError for a bad argument, ImportError without ``onnx``.
    """
    onnx = require_onnx()
    opset = DEFAULT_OPSET if opset_version is None else opset_version
    if type(opset) is not int or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"Unsupported ONNX opset version: {opset_version!r} (jitorch.onnx exports opsets "
                         f"{MIN_OPSET} to {MAX_OPSET})")
    if opset > onnx.defs.onnx_opset_version():
        raise OnnxExporterError(f"the onnx package installed ({onnx.__version__}) knows opsets up to "
                                f"{onnx.defs.onnx_opset_version()}, not {opset}: pip install -U onnx")
    training = TrainingMode(training)
    if training is TrainingMode.TRAINING or training is TrainingMode.PRESERVE and getattr(model, "training", False):
        raise OnnxExporterError("jitorch.onnx exports in evaluation mode only (training=TrainingMode.EVAL): a "
                                "training-mode graph draws random numbers (dropout) and updates buffers")
    if not callable(model):
        raise TypeError(f"jitorch.onnx.export expected a module or a function, got {type(model).__name__}")
    args = (args,) if isinstance(args, Tensor) else args
    if not isinstance(args, tuple):
        raise TypeError(f"jitorch.onnx.export expected args as a tuple or a tensor, got {type(args).__name__}")
    kwargs = dict(kwargs or {})
    leaves, tree = tree_flatten((args, kwargs))
    tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    names = _input_names(model, args, kwargs, leaves, input_names)
    dims, shown = _dynamic_dims(dynamic_axes, names, tensors)
    flat = _Flat(model, leaves, tree)
    with _eval_mode(model), no_grad():
        try:
            program = export_program(flat, tuple(tensors), None, None)
        except ExportError as e:
            raise OnnxExporterError(f"the model cannot be traced for ONNX export: {e}") from None
        graph = program.graph
        if graph.mutations:
            written = ", ".join(f"%{target.name}" for target, _ in graph.mutations)
            raise OnnxExporterError(f"the model writes into {written} in place, which an ONNX model cannot do")
        unsupported = Counter(node.op.name for node in graph.nodes if node.op.name not in RULES)
        if unsupported:
            raise UnsupportedOperatorError(unsupported)
        symbolic = Symbolic(graph, lambda sizes: _retrace(flat, tensors, dims, sizes), _ranges(dims, tensors))
    outputs = [v for v in tree_flatten(graph.outputs)[0] if v is not None]
    for v in outputs:
        if not isinstance(v, Value):
            raise OnnxExporterError(f"the model returns {v!r}, which is not a tensor; ONNX models return tensors")
    out_names = _output_names(output_names, len(outputs))
    clash = set(names) & set(out_names) | (set(names) | set(out_names)) & set(graph.constants)
    if clash:
        raise ValueError(f"{sorted(clash)} each name two of an input, an output and a parameter (parameters keep "
                         "their state_dict names)")
    unknown = set(dynamic_axes or {}) - set(names) - set(out_names)
    if unknown:
        raise ValueError(f"dynamic_axes names {sorted(unknown)}, which are neither input names {names} nor output "
                         f"names {out_names}")
    b = Builder(opset, symbolic, reserved=[*names, *out_names, *graph.constants])
    graph_inputs = []
    for name, value in zip(names, graph.inputs):
        b.bind(value, name)
        for k, n in enumerate(symbolic.shapes[value]):
            if isinstance(n, SymInt) and n.dims() is not None:
                b.dim_sources.setdefault(n.dims(), (name, k))
        graph_inputs.append(_value_info(onnx, name, value, symbolic.shapes[value], shown, {}))
    for name, value in graph.constants.items():
        if export_params:
            b.bind(value, b.initializer(name, graph.constant_tensors[name].cpu().numpy(), value.type.dtype))
        else:
            b.bind(value, name)
            graph_inputs.append(_value_info(onnx, name, value, value.type.shape, shown, {}))
    _lower(b, graph)
    graph_outputs = []
    for name, value in zip(out_names, outputs):
        b.nodes.append(onnx.helper.make_node("Identity", [b.name(value)], [name]))
        ndim = max(value.type.ndim, 1)
        axes = {k % ndim: label for k, label in _axes_of(dynamic_axes, name).items()}
        graph_outputs.append(_value_info(onnx, name, value, symbolic.shapes[value], shown, axes))
    model_proto = _model(onnx, b, graph_inputs, graph_outputs, opset)
    if verbose:
        print(onnx.printer.to_text(model_proto.graph))
    _write(model_proto.SerializeToString(), f)
    return model_proto


class _Flat:
    """``model`` called on its tensor arguments alone (the other leaves of ``args`` and ``kwargs`` fixed), with
    the module's named parameters and buffers, so that `jitorch.export` names its constants by them."""

    def __init__(self, model, leaves, tree):
        self.model, self.leaves, self.tree = model, leaves, tree

    def forward(self, *tensors):
        it = iter(tensors)
        args, kwargs = tree_unflatten([next(it) if isinstance(x, Tensor) else x for x in self.leaves], self.tree)
        return self.model(*args, **kwargs)

    __call__ = forward

    def named_parameters(self):
        named = getattr(self.model, "named_parameters", None)
        return named() if callable(named) else iter(())

    def named_buffers(self):
        named = getattr(self.model, "named_buffers", None)
        return named() if callable(named) else iter(())


class _eval_mode:
    """A module in evaluation mode for the trace; every submodule's training flag restored after it."""

    def __init__(self, model):
        modules = getattr(model, "modules", None)
        self.modules = list(modules()) if callable(modules) and hasattr(model, "training") else []

    def __enter__(self):
        self.flags = [m.training for m in self.modules]
        for m in self.modules:
            m.training = False

    def __exit__(self, *exc):
        for m, flag in zip(self.modules, self.flags):
            m.training = flag


def _input_names(model, args, kwargs, leaves, given):
    forward = getattr(model, "forward", model)
    traced = argument_names(forward, args, kwargs)
    if len(traced) != len(leaves):
        traced = [f"input{i}" for i in range(len(leaves))]
    defaults = [n for n, leaf in zip(traced, leaves) if isinstance(leaf, Tensor)]
    given = list(given or ())
    if len(given) > len(defaults):
        raise ValueError(f"input_names has {len(given)} names for {len(defaults)} tensor inputs")
    names = given + defaults[len(given):]
    _check_names(names, "input_names")
    return names


def _output_names(given, count):
    given = list(given or ())
    if len(given) > count:
        raise ValueError(f"output_names has {len(given)} names for {count} tensor outputs")
    defaults = ["output"] if count == 1 else [f"output{i}" for i in range(count)]
    names = given + defaults[len(given):]
    _check_names(names, "output_names")
    return names


def _check_names(names, what):
    for n in names:
        if not isinstance(n, str) or not n:
            raise ValueError(f"{what} must be non-empty strings, got {n!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} has a name twice: {names}")


def _axes_of(dynamic_axes, name):
    """``{axis: dim name}`` of one input or output in torch's ``dynamic_axes`` (a list gets generated names)."""
    axes = (dynamic_axes or {}).get(name)
    if axes is None:
        return {}
    if isinstance(axes, dict):
        out = dict(axes)
    elif isinstance(axes, (list, tuple)):
        out = {a: f"{name}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
    else:
        raise ValueError(f"dynamic_axes[{name!r}] must be a dict of axis -> name or a list of axes, got {axes!r}")
    for a, n in out.items():
        if type(a) is not int or not isinstance(n, str) or not n:
            raise ValueError(f"dynamic_axes[{name!r}] must map int axes to non-empty names, got {a!r}: {n!r}")
    return out


def _dynamic_dims(dynamic_axes, names, tensors):
    """Per input index ``{axis: Dim}``, one Dim per dynamic-axis name; and Dim name -> the name to show."""
    dims, objects, shown = {}, {}, {}
    for i, (name, t) in enumerate(zip(names, tensors)):
        for a, label in _axes_of(dynamic_axes, name).items():
            if not -t.ndim <= a < t.ndim:
                raise ValueError(f"dynamic_axes[{name!r}] names axis {a}, but input {name!r} has shape {list(t.shape)}")
            ident = "".join(c if c.isalnum() or c == "_" else "_" for c in label)
            ident = ident if ident.isidentifier() else f"d_{ident}"
            dim = objects.setdefault(ident, Dim(ident))
            shown[ident] = label
            dims.setdefault(i, {})[a % t.ndim] = dim
    return dims, shown


def _ranges(dims, tensors):
    """Dim name -> its range and the size it has in the example inputs (the same wherever it occurs)."""
    ranges = {}
    for i, axes in dims.items():
        for a, dim in axes.items():
            size = tensors[i].shape[a]
            known = ranges.setdefault(dim.__name__, SimpleNamespace(min=dim.min, max=dim.max, example=size))
            if known.example != size:
                raise ValueError(f"dynamic axis {dim.__name__!r} has size {known.example} in one input and {size} "
                                 "in another")
    return ranges


def _retrace(flat, tensors, dims, sizes):
    """The graph of ``flat`` traced on inputs whose dynamic axes have ``sizes`` (dim name -> size)."""
    resized = []
    for i, t in enumerate(tensors):
        shape = [sizes[dims[i][a].__name__] if a in dims.get(i, {}) else n for a, n in enumerate(t.shape)]
        resized.append(Tensor._empty(tuple(shape), t.dtype, t.device))  # tracing reads no data
    try:
        graph, _ = trace_with_inputs(flat, tuple(resized), {})
    except Exception as e:  # whatever stops the trace at these sizes means the axes cannot move
        raise OnnxExporterError(f"the dynamic axes cannot take the sizes {sizes}: tracing at them failed: "
                                f"{type(e).__name__}: {e}") from None
    rename_constants(graph, module_tensor_names(flat))  # as the example's trace, so that they compare equal
    return graph


def _lower(b, graph):
    for node in graph.nodes:
        results = RULES[node.op.name](b, node, *node.args)
        results = [results] if isinstance(results, str) else results
        for value, name in zip(node.outputs, results, strict=True):
            if name is not None:
                b.bind(value, name)


def _value_info(onnx, name, value, dims, shown, labels):
    """An input's or output's ONNX type: dims named by dynamic_axes, others as expressions of them."""
    shape = []
    for k, n in enumerate(dims):
        if k in labels:
            shape.append(labels[k])
        elif isinstance(n, SymInt):
            shape.append(str(n.renamed(shown)))
        else:
            shape.append(n)
    return onnx.helper.make_tensor_value_info(name, onnx_type(onnx, value.type.dtype), shape)


def _live(nodes, initializers, outputs):
    """The nodes and initializers the outputs read (a rule's unused results, as a max pool's indices, dropped)."""
    needed, kept = {o.name for o in outputs}, []
    for node in reversed(nodes):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(node.input)
    return kept[::-1], [t for t in initializers if t.name in needed]


def _model(onnx, b, inputs, outputs, opset):
    nodes, initializers = _live(b.nodes, b.initializers, outputs)
    graph = onnx.helper.make_graph(nodes, "jitorch", inputs, outputs, initializer=initializers)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="jitorch", producer_version=__version__)
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise OnnxExporterError(f"the ONNX model built does not check: {e}") from None
    return model


def _write(data, f):
    """``data`` into the file object ``f``, or into the file at path ``f`` by a rename (never half written)."""
    if hasattr(f, "write"):
        f.write(data)
        return
    path = os.fspath(f)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".onnx-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
