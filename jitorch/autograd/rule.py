"""The derivative rule table: one entry per differentiable registry op (see docs/autograd-design.md).

A rule says which tensors its formulas read (``reads``): an argument name, or
``result`` for the outputs (``result1`` for output 1 alone). The engine saves
only those, as torch's derivatives.yaml saves only what a formula names, and
checks only their version counters before the rule runs; of the other tensor
arguments a node keeps their geometry (`Unsaved`).

A rule also says which arguments it differentiates (`differentiates`): torch's
differentiable inputs, those derivatives.yaml gives a formula (``expand_as``'s
``self``, not ``other``; ``index_put``'s ``self`` and ``values``, not ``indices``).
Only these make an op's results require grad, and only these are edges of its node.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

from ..ops.registry import Pieces, attach

# Each op's rule is its "derivative" piece in the registry (``op.pieces``); these are views of them by name.
RULES = Pieces("derivative")                                # op full name -> Rule
NONDIFFERENTIABLE = Pieces("nondifferentiable").keys()      # the ops whose outputs never require grad
EVERYTHING = None         # a rule that does not say what it reads reads every tensor argument and its result


@dataclass(frozen=True)
class Rule:
    name: str
    backward: object      # (g, args, out) -> {argument name: gradient}

    def saves(self, needed):
        """The names the rule reads when the arguments ``needed`` (a set of names) want a gradient,
        or `EVERYTHING`."""
        saves = getattr(self.backward, "saves", EVERYTHING)
        return saves(needed) if callable(saves) else saves

    @property
    def differentiates(self):
        """The names of the arguments the rule gives gradients for (a frozenset)."""
        return self.backward.differentiates


def reads(names, formula):
    """``formula`` (a rule, or a per-argument formula of `common.per_input`), declared to read the
    tensors ``names`` ("self other", "result", "" for none) and only their geometry of the others."""
    saves = frozenset(names.split())
    if getattr(formula, "saves", saves) != saves:
        raise ValueError(f"{formula} is declared to read both {sorted(formula.saves)} and {sorted(saves)}")
    formula.saves = saves
    return formula


def differentiates(names, rule):
    """``rule``, declared to give gradients for the arguments ``names`` ("self", "self src") and no others."""
    rule.differentiates = frozenset(names.split())
    return rule


class _Linearizing(threading.local):
    depth = 0


_LINEARIZING = _Linearizing()


@contextmanager
def linearizing():
    """Within: the backward pass by which forward-mode AD linearizes one op (`forward_ad._jvp`). It records a
    graph, as create_graph does, but a rule that refuses what torch's double backward refuses (a singular
    matrix) answers here as torch's forward-mode formula does."""
    _LINEARIZING.depth += 1
    try:
        yield
    finally:
        _LINEARIZING.depth -= 1


def is_linearizing():
    """Whether the rules running now linearize an op for forward-mode AD (`linearizing`)."""
    return _LINEARIZING.depth > 0


class DerivativeNotImplemented(NotImplementedError):
    """torch's ``not_implemented`` derivative formula, raised when a gradient reaches it: "the derivative for
    '``what``' is not implemented.". ``forward`` is the op's name in torch's forward-mode error ("Trying to use
    forward AD with ``forward`` ..."), which forward-mode AD raises instead (`forward_ad`); by default ``what``
    up to its colon."""

    def __init__(self, what, forward=None):
        super().__init__(f"the derivative for '{what}' is not implemented.")
        self.forward = forward or what.split(":")[0]


def not_implemented(what, forward=None):
    """Raise `DerivativeNotImplemented` (for a formula's body: a rule whose gradient torch does not implement)."""
    raise DerivativeNotImplemented(what, forward)


def only_with_grads_of(outputs, rule):
    """``rule`` (of an op with several outputs), which gives no gradient at all, as torch's undefined one,
    when none of the outputs at ``outputs`` (indices) received a gradient: torch's slogdet passes nothing
    back from its sign alone, where the zeros the engine fills in for it would give a zero gradient."""
    rule.grads_of = tuple(outputs)
    return rule


def undefined_grads(rule):
    """``rule`` (of an op with several outputs), which takes None, as torch's undefined gradient, for an output
    that received no gradient, where the zeros the engine fills in would change its result: torch's svd_backward
    from the singular values' gradient alone is ``U diag(gS) Vh``, where zeros for U's and Vh's gradients divide
    0 by the differences of repeated singular values (the nuclear norm's gradient at a zero matrix was NaN)."""
    rule.undefined_grads = True
    return rule


def only_if(predicate, rule):
    """``rule``, which gives no gradient at all, as torch's undefined one, unless ``predicate(a)`` holds of
    the op's arguments (from their geometry alone, which a compiled trace fixes): torch's
    householder_product passes nothing back without reflectors, where the rule's zeros would be a gradient."""
    rule.gives_gradient = predicate
    return rule


def defgrad(names, backward):
    """Declare ``backward`` the derivative rule of the ops ``names`` (full names such as ``max.dim``,
    separated by spaces; an op's aliases share it). The rule says which arguments it differentiates
    (`differentiates`; `common.per_input` rules say so by their formulas)."""
    if not isinstance(getattr(backward, "differentiates", None), frozenset):
        raise ValueError(f"the derivative of {names} does not say which arguments it differentiates "
                         "(jitorch.autograd.rule.differentiates)")
    for name in names.split():
        _check_undeclared(name, "nondifferentiable")
    attach("derivative", names, Rule(names.split()[0], backward))
    return backward


def nondifferentiable(*names):
    """Declare ops whose outputs never require grad (comparisons, indices, rounding, ...)."""
    for name in names:
        _check_undeclared(name, "derivative")
        attach("nondifferentiable", name, True)


def _check_undeclared(name, piece):
    if name in Pieces(piece):
        raise ValueError(f"op {name} is declared both differentiable and nondifferentiable")


class Args:
    """An op's arguments by schema name: ``a.self``, ``a.dim`` (plain attributes: rules read them often)."""

    def __init__(self, schema, values, names=None):
        """``names``: the schema's argument names, when the caller has them at hand (``OpDef.arg_names``)."""
        if names is None:
            names = [x.name for x in schema.args]
        self.__dict__.update(zip(names, values))


class Unsaved:
    """What a backward node keeps of a tensor its rule does not read: shape, strides, offset, dtype,
    device and whether it required grad. Reading anything else (its values) is a rule that reads
    more than it declares, which would miss the version check: an error, never a stale value."""

    __slots__ = ("shape", "_stride", "_offset", "dtype", "device", "requires_grad", "what")
    # (slot, the tensor's attribute it keeps): the engine's generated recorders write __init__ out from it
    KEPT = (("shape", "shape"), ("_stride", "_stride"), ("_offset", "_offset"), ("dtype", "dtype"),
            ("device", "device"), ("requires_grad", "_requires_grad"))

    def __init__(self, t, what):
        self.shape = t.shape
        self._stride = t._stride
        self._offset = t._offset
        self.dtype = t.dtype
        self.device = t.device
        self.requires_grad = t._requires_grad
        self.what = what          # (op name, argument name), for the error

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def stride(self, dim=None):
        return self._stride if dim is None else self._stride[dim]

    def storage_offset(self):
        return self._offset

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __getattr__(self, name):
        op, arg = self.what
        raise AttributeError(f"the derivative rule of '{op}' uses '{name}' of its argument '{arg}', which it does "
                             f"not declare it reads (jitorch.autograd.rule.reads)")
