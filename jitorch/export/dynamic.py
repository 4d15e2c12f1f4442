"""Symbolic dims: `Dim`, reading ``dynamic_shapes``, and finding where a dim's size enters a graph.

The IR has concrete shapes, so a dim is made symbolic by tracing more than
once: at the example sizes, once per `Dim` with only that dim's size changed,
and once with every dim changed together. The graphs must have the same
nodes; node arguments that differ (a ``view`` size, the divisor of a
``mean``'s backward) must be affine in the dims' sizes with integer
coefficients (``2 * batch + 1``), fitted from the single-dim traces and
checked against the all-dims one. Those arguments become `Param`s; a call at
new sizes re-specialises the graph: it substitutes the params, re-derives each
node's types with its op's meta rule, verifies and compiles it.

Limits: Python control flow that branches on a dim's size is only checked at
the traced sizes, and a size that enters an argument non-affinely (``1 /
batch`` as a float, ``batch * seq``) is refused with ExportError naming the op.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from numbers import Number

from ..ir.graph import Value
from ..tensor import Tensor
from ..runtime.pytree import tree_flatten
from .errors import ExportError

INT_MAX = 2 ** 63 - 1


class Dim:
    """A symbolic dim for ``dynamic_shapes``: ``Dim("batch", min=2, max=64)`` (inclusive bounds).

    Use one Dim object wherever two inputs must share the size.
    """

    def __init__(self, name, *, min=None, max=None):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"Dim's name must be an identifier, got {name!r}")
        lo = 0 if min is None else min
        hi = INT_MAX if max is None else max
        if type(lo) is not int or type(hi) is not int or not 0 <= lo <= hi:
            raise ValueError(f"Dim {name!r}: need integers 0 <= min <= max, got min={min!r}, max={max!r}")
        self.__name__ = name
        self.min = lo
        self.max = hi

    def __repr__(self):
        bounds = "".join(f", {k}={v}" for k, v, d in (("min", self.min, 0), ("max", self.max, INT_MAX)) if v != d)
        return f"Dim({self.__name__!r}{bounds})"


@dataclass
class Param:
    """A literal in the graph whose value is ``const + sum(coeffs[d] * size(d))``."""

    node: int
    path: tuple       # argument index, then indices into nested lists
    coeffs: dict      # dim name -> int
    const: int
    is_float: bool

    def value(self, sizes):
        v = self.const + sum(c * sizes[d] for d, c in self.coeffs.items())
        return float(v) if self.is_float else v

    def to_json(self):
        return {"node": self.node, "path": list(self.path), "coeffs": self.coeffs, "const": self.const,
                "float": self.is_float}

    @classmethod
    def from_json(cls, data, dims):
        try:
            node, path, coeffs, const = data["node"], tuple(data["path"]), dict(data["coeffs"]), data["const"]
            is_float = data["float"]
        except (KeyError, TypeError, ValueError) as e:
            raise ExportError(f"bad symbolic parameter {data!r}: {e}") from None
        ints = [node, const, *path, *coeffs.values()]
        if not path or not all(type(x) is int for x in ints) or type(is_float) is not bool \
                or not set(coeffs) <= set(dims):
            raise ExportError(f"bad symbolic parameter {data!r}")
        return cls(node, path, coeffs, const, is_float)


def leaf_dims(fn, args, kwargs, dynamic_shapes):
    """Per flattened input leaf, ``{dim index: Dim}`` from torch-style ``dynamic_shapes``: a dict
    by argument name or a sequence by position, each entry for a tensor a ``{dim: Dim}`` dict or a
    per-dim sequence of Dims and Nones, nested like the argument for pytrees."""
    if dynamic_shapes is None:
        return [{} for _ in tree_flatten((args, kwargs))[0]]
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        named = list(bound.arguments.items())
    except (TypeError, ValueError):
        named = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - {n for n, _ in named}
        if unknown:
            raise ExportError(f"dynamic_shapes names {sorted(unknown)}, which are not arguments of the function "
                              f"({', '.join(n for n, _ in named)})")
        specs = [dynamic_shapes.get(n) for n, _ in named]
    else:
        specs = list(dynamic_shapes)
        if len(specs) != len(named):
            raise ExportError(f"dynamic_shapes has {len(specs)} entries for {len(named)} arguments")
    # a ``*args`` parameter binds a tuple; order leaves as tree_flatten((args, kwargs)) does
    per_name = {}
    for (name, value), spec in zip(named, specs):
        per_name[name] = _match(name, value, spec)
    out = []
    for name, value in named:
        out.extend(per_name[name])
    if len(out) != len(tree_flatten((args, kwargs))[0]):
        raise ExportError("dynamic_shapes could not be matched to the arguments' leaves")
    return out


def _match(where, value, spec):
    if isinstance(value, Tensor):
        return [_tensor_dims(where, value, spec)]
    leaves, _ = tree_flatten(value)
    if spec is None:
        return [{} for _ in leaves]
    if isinstance(value, dict):
        if not isinstance(spec, dict):
            raise ExportError(f"dynamic_shapes[{where!r}] must be a dict like the argument")
        return [d for k in value for d in _match(f"{where}[{k!r}]", value[k], spec.get(k))]
    if isinstance(value, (list, tuple)):
        if not isinstance(spec, (list, tuple)) or len(spec) != len(value):
            raise ExportError(f"dynamic_shapes[{where!r}] must be a sequence of {len(value)} entries like the argument")
        return [d for i, (v, s) in enumerate(zip(value, spec)) for d in _match(f"{where}[{i}]", v, s)]
    if spec is not None:
        raise ExportError(f"dynamic_shapes gives dims for {where!r}, which is a {type(value).__name__}, not a tensor")
    return [{}]


def _tensor_dims(where, t, spec):
    if spec is None:
        return {}
    items = spec.items() if isinstance(spec, dict) else enumerate(spec)
    dims = {}
    for d, dim in items:
        if dim is None:
            continue
        if not isinstance(dim, Dim):
            raise ExportError(f"dynamic_shapes for {where!r}: dim {d} must be a jitorch.export.Dim or None, "
                              f"got {dim!r}")
        if type(d) is not int or not -t.ndim <= d < t.ndim:
            raise ExportError(f"dynamic_shapes for {where!r}: dim {d} is out of range for shape {list(t.shape)}")
        dims[d % t.ndim] = dim
    return dims


# Comparing traces ------------------------------------------------------------------------------

def literal_sites(graph):
    """Every numeric literal in the nodes' arguments, by (node index, path), with its op's name."""
    sites = {}
    for i, node in enumerate(graph.nodes):
        for j, a in enumerate(node.args):
            _sites(a, (j,), i, node.op.name, sites)
    return sites


def _sites(a, path, i, op, sites):
    if isinstance(a, Value):
        return
    if isinstance(a, (list, tuple)):
        for k, x in enumerate(a):
            _sites(x, path + (k,), i, op, sites)
    elif isinstance(a, Number) and not isinstance(a, bool):
        sites[(i, path)] = (op, a)


def check_same_structure(base, other, dim_name):
    """``other`` (traced with ``dim_name`` changed) must differ from ``base`` only in sizes."""
    what = f"tracing again with dim {dim_name!r} at another size"
    if len(base.nodes) != len(other.nodes):
        raise ExportError(f"{what} gave a graph of {len(other.nodes)} nodes instead of {len(base.nodes)}: the "
                          f"function's Python code depends on the size of {dim_name!r}")
    index_b = {v: k for k, v in enumerate(base.values())}
    index_o = {v: k for k, v in enumerate(other.values())}
    for nb, no in zip(base.nodes, other.nodes):
        if nb.op is not no.op:
            raise ExportError(f"{what} records {no.op.name} where the example recorded {nb.op.name}")
        vb = [index_b.get(v) for v in nb.input_values()]
        vo = [index_o.get(v) for v in no.input_values()]
        same_literals = _strip(nb.args) == _strip(no.args)
        if vb != vo or not same_literals:
            raise ExportError(f"{what} changes the arguments of {nb.op.name} beyond its sizes")
    if [index_b[v] for v in base.output_values()] != [index_o[v] for v in other.output_values()] or \
            _strip(base.outputs) != _strip(other.outputs):
        raise ExportError(f"{what} changes the outputs (the function returns something computed from the size "
                          f"of {dim_name!r}, such as a Python int)")
    if [(index_b[t], index_b[v]) for t, v in base.mutations] != [(index_o[t], index_o[v]) for t, v in other.mutations]:
        raise ExportError(f"{what} changes which inputs are written")
    if list(base.constants) != list(other.constants):
        raise ExportError(f"{what} captures other constants")


def _strip(a):
    """Arguments with values and numbers blanked (what must not change at all between traces)."""
    if isinstance(a, Value):
        return "%"
    if isinstance(a, (list, tuple)):
        return tuple(_strip(x) for x in a)
    if isinstance(a, dict):
        return {k: _strip(x) for k, x in a.items()}
    if isinstance(a, Number) and not isinstance(a, bool):
        return "#"
    return a


def fit_params(base, singles, joint, dims, joint_sizes):
    """The params of ``base``'s literals from traces with one dim changed (``singles``: name ->
    (graph, size)) and all changed (``joint``, at ``joint_sizes``, or None)."""
    base_sites = literal_sites(base)
    coeffs = {}
    for name, (graph, size) in singles.items():
        step = size - dims[name].example
        for key, (op, v) in literal_sites(graph).items():
            v0 = base_sites[key][1]
            if v == v0:
                continue
            c = (v - v0) / step
            if c != int(c):
                raise ExportError(f"the size of dim {name!r} enters an argument of {op} non-linearly "
                                  f"({v0} at {dims[name].example}, {v} at {size})")
            coeffs.setdefault(key, {})[name] = int(c)
    params = []
    for key, cs in coeffs.items():
        op, v0 = base_sites[key]
        const = v0 - sum(c * dims[d].example for d, c in cs.items())
        if const != int(const):
            raise ExportError(f"an argument of {op} is not an integer combination of dim sizes")
        params.append(Param(key[0], key[1], cs, int(const), isinstance(v0, float)))
    if joint is not None:
        predicted = {(p.node, p.path): p.value(joint_sizes) for p in params}
        for key, (op, v) in literal_sites(joint).items():
            if predicted.get(key, base_sites[key][1]) != v:
                raise ExportError(f"the sizes of dims {sorted(dims)} enter an argument of {op} in a way that is not "
                                  f"an integer affine combination (a product of sizes?)")
    return params


def apply_params(graph, params, sizes):
    """Substitute the params' values at ``sizes`` into ``graph``'s node arguments."""
    for p in params:
        if not 0 <= p.node < len(graph.nodes):
            raise ExportError(f"symbolic parameter for node {p.node}, but the graph has {len(graph.nodes)} nodes")
        node = graph.nodes[p.node]
        node.args = _replace(node.args, p.path, p.value(sizes), node.op.name)


def _replace(seq, path, value, op):
    if not isinstance(seq, (list, tuple)) or not 0 <= path[0] < len(seq):
        raise ExportError(f"a symbolic parameter of {op} points at no argument")
    items = list(seq)
    if len(path) == 1:
        old = items[path[0]]
        if isinstance(old, Value) or not isinstance(old, Number) or isinstance(old, bool):
            raise ExportError(f"a symbolic parameter of {op} points at {old!r}, not a number")
        items[path[0]] = value
    else:
        items[path[0]] = _replace(items[path[0]], path[1:], value, op)
    return type(seq)(items)


def alternative_sizes(dim, example, taken):
    """Two sizes in ``dim``'s range other than ``example`` (and, where possible, not in ``taken``,
    nor 0 or 1, whose broadcasting could hide a dependence); fewer when the range is small."""
    lo = max(dim.min, 2)
    found = []
    for candidate in (example + 1, example + 2, example - 1, example - 2, example + 3, example + 5):
        if lo <= candidate <= dim.max and candidate != example and candidate not in found:
            found.append(candidate)
    preferred = [s for s in found if s not in taken] + [s for s in found if s in taken]
    return preferred[:2]
