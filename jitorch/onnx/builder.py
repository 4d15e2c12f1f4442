"""`Builder`: the ONNX graph under construction, as the lowering rules see it.

It names every ONNX value (fresh names, never a clash with the inputs, outputs and initializers), makes
constants and casts, and turns symbolic sizes (`symbolic.SymInt`) into int64 tensors computed from the
inputs' shapes at run time, so that no dynamic size is baked into the model.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np

from ..runtime import dtypes as _dt
from .errors import OnnxExporterError, require_onnx
from .symbolic import SymInt

# jitorch dtype name -> onnx.TensorProto's name
DTYPES = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "FLOAT16", "bfloat16": "BFLOAT16", "int64": "INT64",
          "int32": "INT32", "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "uint16": "UINT16",
          "uint32": "UINT32", "uint64": "UINT64", "bool": "BOOL"}


class Builder:
    """Nodes, initializers and names of the ONNX graph, and the symbolic sizes of the jitorch graph."""

    def __init__(self, opset, symbolic, reserved=()):
        self.onnx = require_onnx()
        self.opset = opset
        self.symbolic = symbolic
        self.nodes, self.initializers = [], []
        self.used = set(reserved)
        self.names = {}          # jitorch Value -> ONNX name
        self._constants = {}     # (dtype, shape, bytes) -> name, for small constants
        self._sizes = {}         # SymInt -> int64 [1] tensor
        self.dim_sources = {}    # dim name -> (ONNX input name, axis)
        self._index = {node: i for i, node in enumerate(symbolic.graph.nodes)}

    # Names ----------------------------------------------------------------------------------------

    def fresh(self, hint):
        hint = re.sub(r"[^A-Za-z0-9_.:/]", "_", str(hint)) or "v"
        name, k = hint, 0
        while name in self.used:
            k += 1
            name = f"{hint}_{k}"
        self.used.add(name)
        return name

    def bind(self, value, name):
        self.names[value] = name

    def name(self, value):
        """The ONNX name of a jitorch value (an error where its op's lowering did not give it one)."""
        try:
            return self.names[value]
        except KeyError:
            op = value.node.op.name if value.node is not None else "?"
            raise OnnxExporterError(f"output {value.index} of {op} (%{value.name}) has no ONNX form, and a later "
                                    "op reads it") from None

    # Nodes and constants ------------------------------------------------------------------------------

    def node(self, op_type, inputs, outputs=1, **attrs):
        """Append an ONNX node; its output name (a list of them where ``outputs`` > 1)."""
        outs = [self.fresh(op_type) for _ in range(outputs)]
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0] if outputs == 1 else outs

    def initializer(self, name, array, dtype):
        """A named initializer from a NumPy array of the jitorch ``dtype`` (bfloat16 included)."""
        array = np.array(array, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if dtype is _dt.bfloat16:
            array = array.view(np.uint16)
        tensor = self.onnx.helper.make_tensor(name, onnx_type(self.onnx, dtype), array.shape,
                                              array.astype(array.dtype.newbyteorder("<")).tobytes(), raw=True)
        self.initializers.append(tensor)
        return name

    def const(self, array, dtype=None, hint="const"):
        """A constant (an initializer; small ones shared) from an array of ``dtype`` (default: the array's)."""
        dtype = dtype or _dt.from_numpy_dtype(np.asarray(array).dtype)
        array = np.asarray(array, dtype=dtype.np)
        key = (dtype.name, array.shape, array.tobytes()) if array.size <= 64 else None
        if key is not None and key in self._constants:
            return self._constants[key]
        name = self.initializer(self.fresh(hint), array, dtype)
        if key is not None:
            self._constants[key] = name
        return name

    def scalar(self, value, dtype):
        return self.const(np.array(value), dtype, "scalar")

    def cast(self, name, src, dst):
        return name if src is dst else self.node("Cast", [name], to=onnx_type(self.onnx, dst))

    def operand(self, x, dtype):
        """A tensor argument (a Value or a Python number, or a symbolic size) as an ONNX name of ``dtype``."""
        if isinstance(x, SymInt):
            size = self.node("Reshape", [self.size(x), self.const(np.zeros(0, np.int64))])
            return self.cast(size, _dt.int64, dtype)
        if not hasattr(x, "type"):
            return self.scalar(x, dtype)
        return self.cast(self.name(x), x.type.dtype, dtype)

    # Types and sizes -------------------------------------------------------------------------------------

    def dims(self, value):
        """A value's dims: ints, and `SymInt`s for those that move with dynamic axes."""
        return self.symbolic.shapes[value]

    def alternatives(self, node):
        """``[(sizes, the node as typed at those sizes)]`` for the other sizes of the dynamic axes (see
        `symbolic.Symbolic`)."""
        i = self._index[node]
        return [(sizes, graph.nodes[i]) for sizes, graph in self.symbolic.alternatives]

    def example(self, x):
        """``x`` (a literal, or nested lists of them) with its sizes at the example input's sizes."""
        if isinstance(x, SymInt):
            return x.value(self.symbolic.examples)
        if isinstance(x, (list, tuple)):
            return type(x)(self.example(v) for v in x)
        return x

    def static(self, x, what):
        """``x`` (a literal or a size), which must not depend on a dynamic axis here."""
        if isinstance(x, SymInt) or isinstance(x, (list, tuple)) and any(isinstance(v, SymInt) for v in x):
            raise OnnxExporterError(f"{what} depends on a dynamic axis ({x}), which this op's ONNX form cannot "
                                    "take; export with fewer dynamic_axes")
        return x

    def size(self, x):
        """An int or `SymInt` as an int64 tensor of shape [1], computed from the inputs' shapes."""
        if not isinstance(x, SymInt):
            return self.const(np.array([x], np.int64))
        if x not in self._sizes:
            total = None
            for names, c in x.terms:
                term = self._dim(names[0])
                for other in names[1:]:
                    term = self.node("Mul", [term, self._dim(other)])
                if c != 1:
                    term = self.node("Mul", [term, self.const(np.array([c], np.int64))])
                total = term if total is None else self.node("Add", [total, term])
            if x.const:
                total = self.node("Add", [total, self.const(np.array([x.const], np.int64))])
            self._sizes[x] = total
        return self._sizes[x]

    def _dim(self, dim):
        key = SymInt(0, {(dim,): 1})
        if key not in self._sizes:
            source, axis = self.dim_sources[dim]
            shape = self.node("Shape", [source])
            self._sizes[key] = self.node("Gather", [shape, self.const(np.array([axis], np.int64))], axis=0)
        return self._sizes[key]

    def shape(self, dims):
        """A shape (ints and SymInts) as an int64 1-D tensor: a constant where no dim is symbolic."""
        dims = list(dims)
        if all(not isinstance(n, SymInt) for n in dims):
            return self.const(np.array(dims, np.int64).reshape(len(dims)))
        parts, run = [], []
        for n in dims:
            if isinstance(n, SymInt):
                if run:
                    parts.append(self.const(np.array(run, np.int64)))
                    run = []
                parts.append(self.size(n))
            else:
                run.append(n)
        if run:
            parts.append(self.const(np.array(run, np.int64)))
        return self.node("Concat", parts, axis=0)

    def ints(self, values):
        """Static ints as an int64 1-D constant (axes, starts, ...)."""
        return self.const(np.array(list(values), np.int64).reshape(len(values)))


def onnx_type(onnx, dtype):
    try:
        return getattr(onnx.TensorProto, DTYPES[dtype.name])
    except KeyError:
        raise OnnxExporterError(f"ONNX has no type for jitorch dtype {dtype}") from None


def spec(value):
    """What dtype promotion reads of a value (dtype, ndim)."""
    return SimpleNamespace(dtype=value.type.dtype, ndim=value.type.ndim)
