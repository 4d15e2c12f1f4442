"""Symbolic dims: which sizes and literals of a traced graph move with the ``dynamic_axes``.

The IR has concrete shapes, so, as `jitorch.export` does, the function is traced again with the dynamic
dims at other sizes: twice with each dim changed alone, once with each pair changed together, and once with
all changed. The graphs must have the same nodes (`export.dynamic.check_same_structure`); every dim of
every value and every numeric literal (a ``slice`` end, an ``as_strided`` stride) is fitted as a polynomial
of the dims, linear in each (``batch * length + 1``: a view that merges two dynamic dims), with integer
coefficients, and checked against the trace with all dims changed. A size that fits no such polynomial is
refused with OnnxExporterError.
"""

from __future__ import annotations

import itertools
import math

from ..export.dynamic import check_same_structure, literal_sites
from ..export.errors import ExportError
from .errors import OnnxExporterError


class SymInt:
    """``const + sum(c * product of dims)``: an integer that depends on symbolic dims (by name); ``terms``
    are ``((dim names...), c)`` pairs, one or two names each."""

    __slots__ = ("const", "terms")

    def __init__(self, const, terms):
        self.const = const
        self.terms = tuple(sorted((tuple(sorted(names)), c) for names, c in terms.items() if c))

    def value(self, sizes):
        return self.const + sum(c * math.prod(sizes[n] for n in names) for names, c in self.terms)

    def dims(self):
        """The one dim this size is, or None (``batch``, not ``2*batch`` or ``batch*length``)."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1:
            return self.terms[0][0][0]
        return None

    def renamed(self, names):
        return SymInt(self.const, {tuple(names.get(n, n) for n in ns): c for ns, c in self.terms})

    def __eq__(self, other):
        return isinstance(other, SymInt) and (self.const, self.terms) == (other.const, other.terms)

    def __hash__(self):
        return hash((self.const, self.terms))

    def __str__(self):
        text = "+".join("*".join(ns) if c == 1 else f"{c}*{'*'.join(ns)}" for ns, c in self.terms)
        return text + (f"{self.const:+d}" if self.const else "")

    __repr__ = __str__


def symint(const, terms):
    """A `SymInt`, or ``const`` itself where no term is nonzero."""
    return SymInt(const, terms) if any(terms.values()) else const


class Symbolic:
    """The graph traced at the example sizes, with per value its dims (ints and SymInts) and its node arguments'
    literals replaced by SymInts where they move; ``alternatives``: ``[(sizes, graph)]`` traced at other sizes,
    whose nodes correspond one to one with ``graph``'s.

    ``trace(sizes)`` traces the function at ``sizes`` (dim name -> size) and returns the graph; ``dims``: dim
    name -> `export.signature.DimRange`-like (``min``, ``max``, ``example``).
    """

    def __init__(self, graph, trace, dims):
        self.graph = graph
        self.examples = {n: d.example for n, d in dims.items()}
        self.alternatives, self._plans = [], []
        steps = {}
        for name, d in dims.items():
            # two other sizes, larger ones first; one the model refuses to trace at (a length above its block
            # size) is passed over, but a graph that differs at another size is an error
            refusal = None
            for size in _candidates(d):
                try:
                    other = trace(dict(self.examples, **{name: size}))
                except OnnxExporterError as e:
                    refusal = refusal or e
                    continue
                self._add(lambda sizes: other, graph, "single", (name,), (size - d.example,))
                steps.setdefault(name, []).append(size - d.example)
                if len(steps[name]) == 2:
                    break
            if refusal is not None and name not in steps:
                raise refusal
        for a, b in itertools.combinations(steps, 2):
            self._add(trace, graph, "pair", (a, b), (steps[a][0], steps[b][0]))
        if len(steps) > 2:
            self._add(trace, graph, "all", tuple(steps), tuple(ss[-1] for ss in steps.values()))
        values = list(graph.values())
        others = [list(g.values()) for _, g in self.alternatives]
        self.shapes = {v: tuple(self.fit(n, [o[i].type.shape[k] for o in others], f"dim {k} of %{v.name}")
                                for k, n in enumerate(v.type.shape))
                       for i, v in enumerate(values)}
        sites = [literal_sites(g) for _, g in self.alternatives]
        for (node, path), (op, v0) in literal_sites(graph).items():
            moved = [s[(node, path)][1] for s in sites]
            if all(v == v0 for v in moved):
                continue
            if not all(float(v).is_integer() for v in [v0, *moved]):
                raise OnnxExporterError(f"an argument of {op} ({v0}) changes with a dynamic axis in a way ONNX "
                                        "export cannot express (a division by a size?)")
            fitted = self.fit(int(v0), [int(v) for v in moved], f"an argument of {op}")
            graph.nodes[node].args = _replace(graph.nodes[node].args, path, fitted)

    def _add(self, trace, graph, kind, names, moved):
        """Trace at the example sizes with the dims ``names`` moved by ``moved``; the graph must be the same."""
        sizes = dict(self.examples, **{n: self.examples[n] + s for n, s in zip(names, moved)})
        other = trace(sizes)
        try:
            check_same_structure(graph, other, ", ".join(names))
        except ExportError as e:
            raise OnnxExporterError(f"a dynamic axis changes the traced graph: {e}") from None
        self.alternatives.append((sizes, other))
        self._plans.append((kind, names, moved))

    def fit(self, v0, moved, what):
        """The polynomial through ``v0`` (at the example sizes) and ``moved`` (one value per alternative)."""
        linear, cross = {}, {}
        for (kind, names, steps), v in zip(self._plans, moved):
            if kind == "single":
                c, rest = divmod(v - v0, steps[0])
                if rest or linear.setdefault(names[0], c) != c:
                    raise self._refused(what)
        for (kind, names, steps), v in zip(self._plans, moved):
            if kind == "pair":
                c, rest = divmod(v - v0 - sum(linear.get(n, 0) * s for n, s in zip(names, steps)), math.prod(steps))
                if rest:
                    raise self._refused(what)
                cross[names] = c
        for (kind, names, steps), v in zip(self._plans, moved):
            if kind == "all":
                step = dict(zip(names, steps))
                predicted = v0 + sum(c * step[n] for n, c in linear.items()) + \
                    sum(c * step[a] * step[b] for (a, b), c in cross.items())
                if predicted != v:
                    raise self._refused(what)
        e = self.examples
        terms = {(n,): c - sum(cc * e[b if a == n else a] for (a, b), cc in cross.items() if n in (a, b))
                 for n, c in linear.items()}
        terms.update(cross)
        const = v0 - sum(c * e[n] for n, c in linear.items()) + sum(c * e[a] * e[b] for (a, b), c in cross.items())
        return symint(const, terms)

    @staticmethod
    def _refused(what):
        return OnnxExporterError(f"{what} changes with the dynamic axes in a way ONNX export cannot express (not "
                                 "a polynomial of the dims, linear in each, with integer coefficients)")

    def is_static(self, value):
        return all(type(n) is int for n in self.shapes[value])


def _candidates(dim):
    """Sizes in ``dim``'s range to trace at besides its example (not 0 or 1, whose broadcasting could hide a
    dependence), the closest larger ones first."""
    e = dim.example
    return [s for s in (e + 1, e + 2, e - 1, e - 2, e + 3, e - 3) if max(dim.min, 2) <= s <= dim.max]


def _replace(seq, path, value):
    items = list(seq)
    items[path[0]] = value if len(path) == 1 else _replace(items[path[0]], path[1:], value)
    return type(seq)(items)
