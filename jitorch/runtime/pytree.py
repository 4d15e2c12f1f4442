"""Pytrees: nested tuples, lists, dicts and namedtuples with leaves at the bottom.

`tree_flatten(tree) -> (leaves, spec)` and `tree_unflatten(leaves, spec)` are
inverse; a spec compares equal for trees of the same structure, so it can key
a cache. Anything that is not a container is a leaf (tensors, numbers, None).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TreeSpec:
    """The structure of a pytree: its container type, context (dict keys,
    namedtuple class) and children's specs; ``LEAF`` for a leaf."""

    kind: str            # "leaf", "tuple", "list", "dict", "namedtuple"
    context: object = None
    children: tuple = ()

    @property
    def num_leaves(self):
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.context, self.children))
            return "{" + inner + "}"
        if self.kind == "list":
            return "[" + inner + "]"
        if self.kind == "namedtuple":
            return f"{self.context.__name__}({inner})"
        return "(" + inner + ("," if len(self.children) == 1 else "") + ")"


LEAF = TreeSpec("leaf")


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def tree_flatten(tree):
    """(leaves in depth-first order, spec)."""
    leaves = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves):
    if _is_namedtuple(tree):
        return TreeSpec("namedtuple", type(tree), tuple(_flatten(c, leaves) for c in tree))
    if isinstance(tree, tuple):
        return TreeSpec("tuple", None, tuple(_flatten(c, leaves) for c in tree))
    if isinstance(tree, list):
        return TreeSpec("list", None, tuple(_flatten(c, leaves) for c in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)
        return TreeSpec("dict", keys, tuple(_flatten(tree[k], leaves) for k in keys))
    leaves.append(tree)
    return LEAF


def tree_unflatten(leaves, spec):
    """Rebuild a tree of ``spec``'s structure from ``leaves``."""
    it = iter(leaves)
    out = _unflatten(it, spec)
    rest = sum(1 for _ in it)
    if rest:
        raise ValueError(f"tree_unflatten: {rest} leaves left over for spec {spec!r}")
    return out


def _unflatten(it, spec):
    if spec.kind == "leaf":
        try:
            return next(it)
        except StopIteration:
            raise ValueError("tree_unflatten: too few leaves for the spec") from None
    children = [_unflatten(it, c) for c in spec.children]
    if spec.kind == "tuple":
        return tuple(children)
    if spec.kind == "list":
        return children
    if spec.kind == "dict":
        return dict(zip(spec.context, children))
    return spec.context(*children)


def tree_leaves(tree):
    return tree_flatten(tree)[0]


def tree_map(fn, tree):
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(x) for x in leaves], spec)
