"""`ExportedProgram`: a traced graph with its signature and constants, callable, savable, loadable."""

from __future__ import annotations

import os
from collections import OrderedDict

from ..ir.graph import Value
from ..ir.printer import print_graph
from ..runtime import dtypes as _dt
from ..runtime.device import to_device
from ..tensor import Tensor
from ..runtime.pytree import tree_flatten, tree_unflatten
from . import archive, artifacts
from .dynamic import Param, apply_params
from .errors import ExportError
from .graphs import copy_graph, graph_from_text, retype
from .signature import Signature, dim_size, same_value
from .views import viewed, views_from_json, views_to_json, written_expanded

# Specialisations (one per set of symbolic sizes) kept compiled per program.
MAX_SPECIALISATIONS = 8


class ExportedProgram:
    """An exported function: ``.graph`` (its IR), ``.signature``, ``.constants`` (parameters,
    buffers and captured tensors by name), callable like the function, savable with `save`.

    Calls check their inputs against the signature (TypeError or ValueError
    naming the input), run the compiled graph, and write in-place updates back
    into the inputs and into ``.constants``. Outputs carry no autograd history.
    """

    def __init__(self, graph, signature, constants, params=(), objects=None, artifact_notes=(), views=None):
        self.graph = graph
        self.signature = signature
        self.constants = constants
        self.params = list(params)
        self.views = dict(views or {})  # the outputs that view an input (`views.input_views`)
        self._objects = objects  # object code and PTX from a file, by kernel key
        self.artifact_notes = list(artifact_notes)
        self._compiled = OrderedDict()
        self._artifact_cache = None

    # Calling ------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        tensors, sizes = self.signature.bind(args, kwargs)
        written = written_expanded(self.graph, tensors) if self.graph.mutations else None
        if written is not None:  # (raised before any write, as eager's refusals)
            raise RuntimeError(f"the exported program writes into input {written} "
                               f"({list(tensors[written].shape)}), which is expanded (strides "
                               f"{list(tensors[written].stride())}): its write-back of the whole value cannot write "
                               f"memory the input's elements share; pass a clone")
        result = tree_flatten(self.specialise(sizes).run(tensors))[0]
        if self.views:  # (after the call's writes into its inputs, which such a view shows)
            result = viewed(result, tensors, self.views)
        # the graph's text has no namedtuples: give the outputs the signature's structure
        return tree_unflatten(result, self.signature.outputs.tree)

    def specialise(self, sizes=None):
        """The compiled graph for symbolic dims at ``sizes`` (name -> size; the example sizes by default)."""
        full = {name: d.example for name, d in self.signature.dims.items()}
        full.update(sizes or {})
        key = tuple(sorted(full.items()))
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._executable(self.graph_at(full), example=all(
                full[n] == d.example for n, d in self.signature.dims.items()))
            self._compiled[key] = compiled
            if len(self._compiled) > MAX_SPECIALISATIONS:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(key)
        return compiled

    def graph_at(self, sizes):
        """A copy of the graph specialised to the symbolic dims at ``sizes`` (name -> size): params substituted,
        every node re-typed by its meta rule."""
        graph = copy_graph(self.graph)
        # the same tensors, so write-backs land in this program's constants; a dict of its own,
        # since constant folding adds entries
        graph.constant_tensors = dict(self.constants)
        if all(sizes[n] == d.example for n, d in self.signature.dims.items()):
            return graph
        for value, spec in zip(graph.inputs, self.signature.tensor_inputs()):
            shape = tuple(sizes[n] if isinstance(n, str) else n for n in spec.shape)
            value.type = type(value.type)(shape, value.type.dtype, value.type.device)
        apply_params(graph, self.params, sizes)
        retype(graph)
        return graph

    def _executable(self, graph, example):
        from ..jit.executor import CompiledGraph, kernel_cache
        cache = kernel_cache()
        if example and self._objects is not None:
            cache = self._artifact_cache = artifacts.ArtifactCache(self._objects)
        return CompiledGraph(graph, cache)

    @property
    def artifact_stats(self):
        """How many kernels of the example specialisation came from the file's object code or PTX and
        how many were rebuilt from the IR (None for a program that was not loaded, or not yet called)."""
        c = self._artifact_cache
        return None if c is None else {"used": c.used, "rebuilt": c.rebuilt}

    def module(self):
        """A callable object running this program (``forward`` too), as torch's ``ep.module()``."""
        return ExportedModule(self)

    # Files --------------------------------------------------------------------------------

    def save(self, path_or_file, artifacts_for=("cpu", "cuda")):
        """Write this program to one file (see docs/export-format.md) with the compiled code of its
        kernels for the targets in ``artifacts_for`` ("cpu": object code, "cuda": PTX; a program has
        kernels for the device of its inputs only); ``artifacts_for=()`` leaves out compiled code,
        which loading then rebuilds from the IR."""
        if isinstance(path_or_file, (str, os.PathLike)):
            path_or_file = os.fspath(path_or_file)
        constants = []
        for i, (name, t) in enumerate(self.constants.items()):
            arr = t.detach().cpu().contiguous().numpy()
            if t.dtype is _dt.bfloat16:
                arr = arr.view("uint16")
            constants.append(({"name": name, "member": f"constants/{i}.npy", "dtype": t.dtype.name,
                               "shape": list(t.shape), "device": str(t.device)}, arr))
        records = artifacts.target_records(self.specialise(), artifacts_for)
        archive.write(path_or_file, self.manifest(constants, records), print_graph(self.graph),
                      constants, records)

    def manifest(self, constants=(), records=()):
        """The manifest's content, member hashes aside."""
        from ..runtime.version import __version__
        return {
            "format": archive.FORMAT, "format_version": archive.FORMAT_VERSION, "jitorch_version": __version__,
            "signature": self.signature.to_json(),
            "graph": {"member": archive.GRAPH, "grad_targets": list(self.graph.grad_targets),
                      "outputs_require_grad": bool(self.graph.outputs_require_grad),
                      "input_views": views_to_json(self.views)},
            "dynamic": {"params": [p.to_json() for p in self.params]},
            "constants": [record for record, _ in constants],
            "artifacts": [record for record, _ in records],
        }

    def to_c_library(self, out_dir, name):
        """Write ``lib<name>.so`` and ``<name>.h`` into ``out_dir`` (see `jitorch.export.clib`)."""
        from .clib import build_c_library
        return build_c_library(self, out_dir, name)

    def __repr__(self):
        return "ExportedProgram(\n  " + "\n  ".join(self.signature.describe()) + "\n)"


class ExportedModule:
    """``ExportedProgram.module()``: call it, or its ``forward``, like the exported module."""

    def __init__(self, program):
        self.program = program

    def forward(self, *args, **kwargs):
        return self.program(*args, **kwargs)

    __call__ = forward

    def named_buffers(self):
        """The program's constants (parameters, buffers and captured tensors), by name."""
        return iter(self.program.constants.items())


def load(path_or_file, *, trust_object_code=False, max_bytes=None):
    """Read an exported program (a path or a binary file object); ExportError for a damaged,
    foreign or newer file.

    By default no code from the file runs: its kernels are compiled again from the graph (and
    cached locally). ``trust_object_code=True`` uses the file's object code and PTX where they were
    made for this machine, after checking that each object is well-formed ELF of the kind jitorch
    makes (`codegen.elf.validate`): only for files you would run as programs, since the machine
    code itself is run as it is. ``max_bytes``: what the file's members may declare in all
    (default: proportional to the file's size; see `runtime.zipfiles`)."""
    if isinstance(path_or_file, (str, os.PathLike)):
        path_or_file = os.fspath(path_or_file)
    contents = archive.read(path_or_file, trust_object_code, max_bytes)
    try:
        return _program(contents, trust_object_code)
    except _MALFORMED as e:  # what a check above missed: still a bad file, not a crash
        raise ExportError(f"the file is malformed: {type(e).__name__}: {e}") from None


# Errors that the parsing of a file's fields can raise on input no check anticipated.
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError, OverflowError,
              UnicodeError)


def _program(contents, trust_object_code):
    from ..ops.creation import from_numpy
    m = contents.manifest
    signature = Signature.from_json(m.get("signature"))
    graph_info = m.get("graph")
    if not isinstance(graph_info, dict):
        raise ExportError("manifest.json has no 'graph' entry")
    records = [(artifacts.check_record(r, objs), objs) for r, objs in contents.artifacts]
    constants = {}
    for record in m.get("constants", []):
        device = _constant_device(record)
        arr = contents.constants[record["name"]]  # read into memory of its own: no copy needed
        t = from_numpy(arr) if record["dtype"] != "bfloat16" else Tensor._from_array(arr.view(_dt.bfloat16.np),
                                                                                    _dt.bfloat16)
        constants[record["name"]] = t if device.type == "cpu" else _to_device(record["name"], t, device)
    graph = graph_from_text(contents.graph_text, constants, _grad_targets(graph_info.get("grad_targets", [])),
                            graph_info.get("outputs_require_grad") is True)
    _check_against_graph(signature, graph)
    params = [Param.from_json(p, signature.dims) for p in _params(m)]
    _check_params(graph, params, signature)
    # (files written before output views were recorded have none)
    views = views_from_json(graph_info.get("input_views", []), len(graph.inputs), len(signature.outputs.leaves))
    if not trust_object_code:  # every kernel rebuilt (and counted so in artifact_stats)
        return ExportedProgram(graph, signature, constants, params, {}, artifacts.ignored(records), views)
    objects, notes = artifacts.matching_objects(records)
    return ExportedProgram(graph, signature, constants, params, objects, notes, views)


def _to_device(name, t, device):
    """A CUDA program's constants go to its device, so loading one needs CUDA, as in torch (ExportError,
    a RuntimeError, with the device's reason)."""
    try:
        return t.to(device)
    except RuntimeError as e:
        raise ExportError(f"constant {name!r} lives on {device}: {e}") from None


def _params(manifest):
    """The manifest's symbolic parameter records (a list, maybe empty)."""
    dynamic = manifest.get("dynamic", {})
    params = dynamic.get("params", []) if isinstance(dynamic, dict) else None
    if not isinstance(params, list):
        raise ExportError(f"manifest.json: 'dynamic' must be an object with a list of 'params', found {dynamic!r}")
    return params


def _constant_device(record):
    """The device a constant lives on (files older than CUDA support record none: the CPU)."""
    name = record.get("device", "cpu")
    try:
        device = to_device(name) if isinstance(name, str) else None
    except (RuntimeError, ValueError, TypeError):  # what device() raises for a malformed string
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ExportError(f"constant {record.get('name')!r}: bad device {name!r} (cpu or cuda:N)")
    return device


def _grad_targets(value):
    if not isinstance(value, list) or not all(type(i) in (int, str) for i in value):
        raise ExportError(f"manifest.json: grad_targets must be a list of input indices and constant names, "
                          f"found {value!r}")
    return value


def _check_against_graph(signature, graph):
    """The signature must describe the graph: one tensor input per graph input, of its type."""
    specs = signature.tensor_inputs()
    if len(specs) != len(graph.inputs):
        raise ExportError(f"the signature lists {len(specs)} tensor inputs, the graph takes {len(graph.inputs)}")
    for spec, v in zip(specs, graph.inputs):
        shape = tuple(signature.dims[n].example if isinstance(n, str) else n for n in spec.shape)
        if (shape, spec.dtype, spec.device) != (v.type.shape, v.type.dtype, v.type.device):
            raise ExportError(f"input {spec.name!r} is {spec.shape_text()} {spec.dtype} in the signature, but the "
                              f"graph's input %{v.name} is {v.type}")
    outputs = tree_flatten(graph.outputs[0] if graph.grad_targets else graph.outputs)[0]
    if len(outputs) != len(signature.outputs.leaves):
        raise ExportError(f"the signature lists {len(signature.outputs.leaves)} outputs, the graph returns "
                          f"{len(outputs)}")
    example = signature.example_sizes()
    for spec, out in zip(signature.outputs.leaves, outputs):
        _check_output(spec, out, example)


def _check_output(spec, out, sizes):
    """An output leaf of the signature must be what the graph returns there: a tensor of its type, or
    the same Python value."""
    if spec.kind == "value":
        if isinstance(out, Value) or type(out) is not type(spec.value) or not same_value(out, spec.value):
            raise ExportError(f"output {spec.name!r} is the value {spec.value!r} in the signature, but the graph "
                              f"returns {out!r} there")
        return
    shape = tuple(dim_size(n, sizes) for n in spec.shape)
    if not isinstance(out, Value) or (shape, spec.dtype, spec.device) != (out.type.shape, out.type.dtype,
                                                                         out.type.device):
        found = out.type if isinstance(out, Value) else repr(out)
        raise ExportError(f"output {spec.name!r} is {spec.shape_text()} {spec.dtype} {spec.device} in the signature, "
                          f"but the graph returns {found} there")


def _check_params(graph, params, signature):
    """Each symbolic parameter must point at a literal holding its value at the example sizes."""
    example = {n: d.example for n, d in signature.dims.items()}
    probe = copy_graph(graph)
    before = [n.args for n in probe.nodes]
    apply_params(probe, params, example)
    if [n.args for n in probe.nodes] != before:
        raise ExportError("a symbolic parameter does not match the graph's literal at the example sizes")
