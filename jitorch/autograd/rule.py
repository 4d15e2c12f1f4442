"""The derivative rule table: one entry per differentiable registry op (see docs/autograd-design.md)."""

from __future__ import annotations

from dataclasses import dataclass

RULES: dict = {}          # op full name -> Rule
NONDIFFERENTIABLE: set = set()


@dataclass(frozen=True)
class Rule:
    name: str
    backward: object      # (g, args, out) -> {argument name: gradient}


def defgrad(name, backward):
    """Declare the backward formula of op ``name`` (its full name, e.g. ``max.dim``)."""
    if name in RULES:
        raise ValueError(f"derivative of {name} declared twice")
    RULES[name] = Rule(name, backward)
    return backward


def nondifferentiable(*names):
    """Declare ops whose outputs never require grad (comparisons, indices, rounding, ...)."""
    NONDIFFERENTIABLE.update(names)


class Args:
    """An op's arguments by schema name: ``a.self``, ``a.dim`` (plain attributes: rules read them often)."""

    def __init__(self, schema, values, names=None):
        """``names``: the schema's argument names, when the caller has them at hand (``OpDef.arg_names``)."""
        if names is None:
            names = [x.name for x in schema.args]
        self.__dict__.update(zip(names, values))
