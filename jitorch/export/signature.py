"""Input and output specs of an exported program, their JSON form, and the check of a call's inputs.

A spec is a pytree structure (tuples, lists, dicts and namedtuples) with one
`LeafSpec` per leaf: a tensor (name, shape, dtype, device, requires_grad) or a
Python value the program was specialised to. A tensor dim is an int, or the
name of a symbolic dim (`Dim`) whose range the signature holds.
"""

from __future__ import annotations

import collections
import keyword
import math
import re
from dataclasses import dataclass, field

from ..runtime import dtypes as _dt
from ..runtime.device import to_device
from ..tensor import Tensor
from ..runtime.pytree import TreeSpec, tree_flatten
from .errors import ExportError

DTYPE_NAMES = tuple(d.name for d in _dt.ALL)
_LITERAL_TYPES = (type(None), bool, int, float, str)


def dtype_named(name):
    """The jitorch dtype called ``name`` (as written in a file); ExportError otherwise."""
    if name not in DTYPE_NAMES:
        raise ExportError(f"unknown dtype {name!r} (expected one of {', '.join(DTYPE_NAMES)})")
    return getattr(_dt, name)


@dataclass
class LeafSpec:
    """One input or output leaf: a tensor's type, or the Python value it was specialised to."""

    kind: str                   # "tensor" or "value"
    name: str = ""
    shape: tuple = ()           # ints and symbolic dim names
    dtype: object = None
    device: object = None
    requires_grad: bool = False
    value: object = None

    def shape_text(self):
        return "[" + ", ".join(str(n) for n in self.shape) + "]"

    def to_json(self):
        if self.kind == "value":
            return {"kind": "value", "name": self.name, "value": self.value}
        return {"kind": "tensor", "name": self.name, "shape": list(self.shape), "dtype": self.dtype.name,
                "device": str(self.device), "requires_grad": self.requires_grad}

    @classmethod
    def from_json(cls, data):
        kind = _get(data, "kind", str)
        name = _get(data, "name", str)
        if kind == "value":
            value = data.get("value")
            if not isinstance(value, _LITERAL_TYPES):
                raise ExportError(f"leaf {name!r}: a value leaf holds None, a bool, a number or a string")
            return cls("value", name, value=value)
        if kind != "tensor":
            raise ExportError(f"leaf {name!r}: unknown kind {kind!r}")
        shape = _get(data, "shape", list)
        if not all(isinstance(n, str) or type(n) is int and n >= 0 for n in shape):
            raise ExportError(f"leaf {name!r}: a shape holds non-negative ints and dim names, not {shape!r}")
        try:
            device = to_device(_get(data, "device", str))
        except (RuntimeError, TypeError, ValueError) as e:
            raise ExportError(f"leaf {name!r}: bad device: {e}") from None
        return cls("tensor", name, tuple(shape), dtype_named(_get(data, "dtype", str)), device,
                   bool(data.get("requires_grad", False)))


@dataclass
class TreeSignature:
    """A pytree of leaves: its structure and a spec per leaf."""

    tree: TreeSpec
    leaves: list

    def to_json(self):
        return {"tree": tree_to_json(self.tree), "leaves": [leaf.to_json() for leaf in self.leaves]}

    @classmethod
    def from_json(cls, data):
        tree = tree_from_json(_get(data, "tree", dict))
        leaves = [LeafSpec.from_json(_check_dict(x)) for x in _get(data, "leaves", list)]
        if tree.num_leaves != len(leaves):
            raise ExportError(f"the structure {tree!r} has {tree.num_leaves} leaves, the file lists {len(leaves)}")
        return cls(tree, leaves)

    def structure(self):
        return repr(self.tree)


@dataclass
class DimRange:
    """A symbolic dim: its name, inclusive range and the size it was traced at."""

    name: str
    min: int
    max: int
    example: int

    def to_json(self):
        return {"name": self.name, "min": self.min, "max": self.max, "example": self.example}

    @classmethod
    def from_json(cls, data):
        name = _get(data, "name", str)
        lo, hi, ex = (_get(data, k, int) for k in ("min", "max", "example"))
        if not 0 <= lo <= ex <= hi:
            raise ExportError(f"dim {name!r}: the range [{lo}, {hi}] must hold its example size {ex}")
        return cls(name, lo, hi, ex)


@dataclass
class Signature:
    """What an exported program takes and returns."""

    inputs: TreeSignature
    outputs: TreeSignature
    dims: dict = field(default_factory=dict)   # name -> DimRange

    def to_json(self):
        return {"inputs": self.inputs.to_json(), "outputs": self.outputs.to_json(),
                "dims": [d.to_json() for d in self.dims.values()]}

    @classmethod
    def from_json(cls, data):
        data = _check_dict(data)
        dims = {}
        for d in _get(data, "dims", list):
            d = DimRange.from_json(_check_dict(d))
            dims[d.name] = d
        sig = cls(TreeSignature.from_json(_get(data, "inputs", dict)),
                  TreeSignature.from_json(_get(data, "outputs", dict)), dims)
        tree = sig.inputs.tree
        if tree.kind != "tuple" or [c.kind for c in tree.children] != ["tuple", "dict"]:
            raise ExportError(f"the inputs must be structured as ((args), {{kwargs}}), not {tree!r}")
        for leaf in sig.inputs.leaves:  # output dims may be expressions of these ("2*batch")
            for n in leaf.shape:
                if isinstance(n, str) and n not in dims:
                    raise ExportError(f"leaf {leaf.name!r} names dim {n!r}, which the signature does not define")
        example = sig.example_sizes()
        for leaf in sig.outputs.leaves:
            for n in leaf.shape:
                dim_size(n, example)
        return sig

    def example_sizes(self):
        """The size of each symbolic dim at the example inputs, by name."""
        return {name: d.example for name, d in self.dims.items()}

    def tensor_inputs(self):
        return [leaf for leaf in self.inputs.leaves if leaf.kind == "tensor"]

    def describe(self):
        """Readable lines: one per input and output leaf, and the dims' ranges."""
        lines = [f"inputs {self.inputs.structure()}:"]
        lines += ["  " + _describe_leaf(leaf) for leaf in self.inputs.leaves]
        lines.append(f"outputs {self.outputs.structure()}:")
        lines += ["  " + _describe_leaf(leaf) for leaf in self.outputs.leaves]
        for d in self.dims.values():
            lines.append(f"dim {d.name}: {d.min} <= {d.name} <= {d.max} (exported at {d.example})")
        return lines

    def bind(self, args, kwargs):
        """The tensors of a call, in graph-input order, and the symbolic dims' sizes; TypeError or
        ValueError, naming the input, where the call does not match the signature."""
        leaves, tree = tree_flatten((tuple(args), dict(kwargs)))
        if tree_to_json(tree) != tree_to_json(self.inputs.tree):
            raise TypeError(f"the exported program takes inputs structured as {self.inputs.structure()} "
                            f"((args), {{kwargs}}), but was called with {tree!r}")
        tensors, sizes = [], {}
        for spec, leaf in zip(self.inputs.leaves, leaves):
            if spec.kind == "value":
                if type(leaf) is not type(spec.value) or not same_value(leaf, spec.value):
                    raise ValueError(f"input {spec.name!r} was {spec.value!r} when the program was exported and "
                                     f"non-tensor inputs are fixed, but got {leaf!r}")
                continue
            self._check_tensor(spec, leaf, sizes)
            tensors.append(leaf)
        return tensors, sizes

    def _check_tensor(self, spec, t, sizes):
        if not isinstance(t, Tensor):
            raise TypeError(f"input {spec.name!r} must be a Tensor, got {type(t).__name__}")
        if t.dtype is not spec.dtype:
            raise ValueError(f"input {spec.name!r} must have dtype {spec.dtype}, got {t.dtype}")
        if t.device != spec.device:
            raise ValueError(f"input {spec.name!r} must be on device {spec.device}, got {t.device}")
        shape = tuple(t.shape)
        if len(shape) != len(spec.shape):
            raise ValueError(f"input {spec.name!r} must have shape {spec.shape_text()} ({len(spec.shape)} dims), "
                             f"got {list(shape)}")
        for d, (want, got) in enumerate(zip(spec.shape, shape)):
            if isinstance(want, int):
                if got != want:
                    raise ValueError(f"input {spec.name!r} must have shape {spec.shape_text()}, got {list(shape)}: "
                                     f"dim {d} is fixed at {want}")
                continue
            rng = self.dims[want]
            if not rng.min <= got <= rng.max:
                raise ValueError(f"input {spec.name!r} has shape {list(shape)}: dim {d} ({want}) is {got}, outside "
                                 f"its range [{rng.min}, {rng.max}]")
            if sizes.setdefault(want, got) != got:
                raise ValueError(f"input {spec.name!r} has shape {list(shape)}: dim {d} ({want}) is {got}, but "
                                 f"{want} is {sizes[want]} in an earlier input")


_AFFINE = re.compile(r"(.*?)([+-]\d{1,18})?")
_TERM = re.compile(r"(?:(-?\d{1,18})\*)?([A-Za-z_][A-Za-z0-9_]*)")


def dim_size(dim, sizes):
    """The size of an output dim at ``sizes`` (name -> int): an int, or an affine expression of symbolic
    dims as export writes them (``batch``, ``2*batch+1``, ``batch+-1*len-3``); ExportError otherwise."""
    if type(dim) is int:
        return dim
    body, const = _AFFINE.fullmatch(dim).groups() if len(dim) <= 1000 else (None, None)
    terms = [_TERM.fullmatch(t) for t in (body or "").split("+")]
    if not all(terms) or any(t[2] not in sizes for t in terms):
        raise ExportError(f"bad output dim {dim!r}: an affine expression of the dims {sorted(sizes)} expected")
    return sum(int(t[1] or 1) * sizes[t[2]] for t in terms) + int(const or 0)


def same_value(a, b):
    """Python values equal as export compares them (NaN equals NaN)."""
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _describe_leaf(leaf):
    if leaf.kind == "value":
        return f"{leaf.name or '-'} = {leaf.value!r}"
    grad = " requires_grad" if leaf.requires_grad else ""
    return f"{leaf.name or '-'}: Tensor {leaf.shape_text()} {leaf.dtype} {leaf.device}{grad}"


# Pytree structures as JSON ----------------------------------------------------------------

def tree_to_json(tree):
    """A TreeSpec as JSON data (dict keys typed; namedtuples by class name and fields)."""
    if tree.kind == "leaf":
        return {"kind": "leaf"}
    data = {"kind": tree.kind, "children": [tree_to_json(c) for c in tree.children]}
    if tree.kind == "dict":
        data["keys"] = [_key_to_json(k) for k in tree.context]
    elif tree.kind == "namedtuple":
        data["name"] = tree.context.__name__
        data["fields"] = list(tree.context._fields)
    return data


MAX_TREE_DEPTH = 100  # nested containers in inputs and outputs; deeper is not a file export wrote


def tree_from_json(data, depth=0):
    """The TreeSpec of `tree_to_json`'s data; ExportError for anything else. A namedtuple class is
    rebuilt from its name and fields (checked to be identifiers; no code from the file runs)."""
    if depth > MAX_TREE_DEPTH:
        raise ExportError(f"a pytree structure nested more than {MAX_TREE_DEPTH} deep")
    data = _check_dict(data)
    kind = _get(data, "kind", str)
    if kind == "leaf":
        return TreeSpec("leaf")
    if kind not in ("tuple", "list", "dict", "namedtuple"):
        raise ExportError(f"unknown pytree node kind {kind!r}")
    children = tuple(tree_from_json(c, depth + 1) for c in _get(data, "children", list))
    context = None
    if kind == "dict":
        context = tuple(_key_from_json(k) for k in _get(data, "keys", list))
        if len(context) != len(children) or len(set(context)) != len(context):
            raise ExportError("a dict node needs one distinct key per child")
    elif kind == "namedtuple":
        context = _namedtuple(_get(data, "name", str), _get(data, "fields", list))
        if len(context._fields) != len(children):
            raise ExportError(f"namedtuple {context.__name__} has {len(context._fields)} fields, "
                              f"not {len(children)}")
    return TreeSpec(kind, context, children)


_NAMEDTUPLES: dict = {}


def _namedtuple(name, fields):
    names = [name, *fields]
    if not all(isinstance(n, str) and n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("_")
               for n in names):
        raise ExportError(f"bad namedtuple name or fields: {names!r}")
    key = (name, tuple(fields))
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def _key_to_json(k):
    if not isinstance(k, _LITERAL_TYPES):
        raise ExportError(f"dict keys in inputs and outputs must be strings, numbers, bools or None, "
                          f"not {type(k).__name__}")
    return [type(k).__name__, k]


def _key_from_json(data):
    types = {"str": str, "int": int, "float": float, "bool": bool, "NoneType": type(None)}
    if not (isinstance(data, list) and len(data) == 2 and data[0] in types
            and type(data[1]) is types[data[0]]):
        raise ExportError(f"bad dict key {data!r}")
    return data[1]


def _check_dict(data):
    if not isinstance(data, dict):
        raise ExportError(f"expected a JSON object, found {type(data).__name__}")
    return data


def _get(data, key, kind):
    value = data.get(key)
    if type(value) is not kind:  # bool is no int here
        raise ExportError(f"field {key!r} must be a {kind.__name__}, found {value!r}")
    return value
