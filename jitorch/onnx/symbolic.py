"""Symbolic dims of an exported graph: which sizes and literals move with the ``dynamic_axes``.

`jitorch.export` traces the function again with each dynamic dim changed and fits the literals that
move (a ``view`` size) as integer affine combinations of the dims (`export.dynamic.Param`). Here the
same graph is re-typed at two other sizes of each dim (the params substituted, every node's meta rule
run again), so that every dim of every value is known as an `Affine` of the dims, or a plain int.
"""

from __future__ import annotations

from ..export.dynamic import alternative_sizes
from .errors import OnnxExporterError


class Affine:
    """``const + sum(c * dim)``: an integer that depends on symbolic dims (by name)."""

    __slots__ = ("const", "coeffs")

    def __init__(self, const, coeffs):
        self.const = const
        self.coeffs = tuple(sorted((n, c) for n, c in coeffs.items() if c))

    def value(self, sizes):
        return self.const + sum(c * sizes[n] for n, c in self.coeffs)

    def __eq__(self, other):
        return isinstance(other, Affine) and (self.const, self.coeffs) == (other.const, other.coeffs)

    def __hash__(self):
        return hash((self.const, self.coeffs))

    def __str__(self):
        text = "+".join(n if c == 1 else f"{c}*{n}" for n, c in self.coeffs)
        return text + (f"{self.const:+d}" if self.const else "")

    __repr__ = __str__


def affine(const, coeffs):
    """An `Affine`, or ``const`` itself where no coefficient is nonzero."""
    return Affine(const, coeffs) if any(coeffs.values()) else const


class Symbolic:
    """Per value of ``program.graph`` its dims (ints and Affines); ``alternatives``: the graph re-typed at
    other sizes, as ``[(sizes, graph)]``, whose nodes correspond one to one with ``program.graph``'s."""

    def __init__(self, program):
        self.graph = graph = program.graph
        self.dims = program.signature.dims
        self.examples = examples = {n: d.example for n, d in self.dims.items()}
        values = list(graph.values())
        base = [v.type.shape for v in values]
        coeffs = [[{} for _ in shape] for shape in base]
        self.alternatives = []
        for name, rng in self.dims.items():
            checked = None
            for size in alternative_sizes(rng, rng.example, set()):
                sizes = dict(examples, **{name: size})
                other = program.graph_at(sizes)
                self.alternatives.append((sizes, other))
                found = _moves(base, [v.type.shape for v in other.values()], size - rng.example)
                if checked is None:
                    checked = found
                elif found != checked:
                    raise OnnxExporterError(f"a size in the graph depends on dynamic dim {name!r} in a way that is "
                                            f"not affine (a product of sizes?), which ONNX export cannot express")
            for i, k, c in checked or ():
                coeffs[i][k][name] = c
        self.shapes = {v: tuple(affine(n - sum(c * examples[d] for d, c in cs.items()), cs)
                                for n, cs in zip(shape, cs_of))
                       for v, shape, cs_of in zip(values, base, coeffs)}
        for p in program.params:
            node = graph.nodes[p.node]
            node.args = _replace(node.args, p.path, Affine(p.const, p.coeffs))

    def is_static(self, value):
        return all(type(n) is int for n in self.shapes[value])


def _moves(base, other, step):
    """[(value index, dim, coefficient)] of the dims that differ between two typings."""
    out = []
    for i, (a, b) in enumerate(zip(base, other)):
        for k, (n, m) in enumerate(zip(a, b)):
            if n != m:
                c, r = divmod(m - n, step)
                if r:
                    raise OnnxExporterError(f"a size moves by {m - n} when a dynamic dim moves by {step}: not an "
                                            "integer multiple, which ONNX export cannot express")
                out.append((i, k, c))
    return out


def _replace(seq, path, value):
    items = list(seq)
    items[path[0]] = value if len(path) == 1 else _replace(items[path[0]], path[1:], value)
    return type(seq)(items)
