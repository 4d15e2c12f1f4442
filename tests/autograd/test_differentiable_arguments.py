"""Which tensor arguments make an op's results require grad, against torch.

torch differentiates an op with respect to the arguments its derivatives.yaml
gives a formula (or its composite definition uses): ``y.view_as(x)`` and
``y.expand_as(x)`` do not require grad when only ``x`` does, ``masked_fill``'s
tensor value and ``lerp``'s weight do. jitorch's rules say which arguments
they differentiate (`Rule.differentiates`), and only those decide
``requires_grad`` and are the edges of an op's node.

The table test runs every registry op with several tensor arguments on its
samples (tests/ops/samples.py) with one floating argument at a time requiring
grad, in jitorch and in torch, and compares which floating results require
grad. (Integer and bool results never do in jitorch: docs/differences-from-torch.md.)
"""

from __future__ import annotations

import zlib

import pytest
import torch

import jitorch as jt
from jitorch.autograd.engine import grad_args
from jitorch.autograd.rule import NONDIFFERENTIABLE, RULES, defgrad, differentiates
from jitorch.ops import registry
from tests.ops.samples import samples
from tests.ops.test_against_torch import NO_TORCH_COUNTERPART, Twin, call, forms_of

# The forms compared: an out-of-place call (the first of these an op has) and the in-place one.
CALLS = ("function", "aten", "method")


def _several_tensors(op):
    return len(op.tensor_args) >= 2 or any(is_list for _, is_list in op.tensor_args)


def _samples(op):
    return samples(op, jt.float32, seed=zlib.crc32(op.name.encode()))


def _floating(sample):
    return any(t.dtype.is_floating_point for t in sample.tensors())


# Counts whose results torch's autograd fallback makes require grad (with a backward that raises) and jitorch
# does not: docs/differences-from-torch.md
COUNTS = {"bincount", "histogram.bins_tensor", "histogram.bin_ct", "histogramdd", "_histogramdd_from_bin_tensors"}
SEVERAL = sorted(name for name, op in registry.OPS.items()
                 if _several_tensors(op) and name not in NO_TORCH_COUNTERPART and name not in COUNTS)
# (the others, bitwise ops, take integers and bools only)
COMPARED = [name for name in SEVERAL if any(_floating(s) for s in _samples(registry.OPS[name]))]


def _forms(op):
    forms = forms_of(op)
    return [f for f in forms if f in CALLS][:1] + [f for f in forms if f == "inplace"]


def _slots(sample):
    """Where the sample's tensors are: (positional index or keyword, index in a list or None)."""
    named = list(enumerate(sample.args)) + list(sample.kwargs.items())
    for key, v in named:
        if isinstance(v, jt.Tensor):
            yield key, None
        elif isinstance(v, (list, tuple)):
            yield from ((key, j) for j, t in enumerate(v) if isinstance(t, jt.Tensor))


def _at(sample, slot):
    key, j = slot
    v = sample.args[key] if isinstance(key, int) else sample.kwargs[key]
    return v if j is None else v[j]


def _flat(result):
    return [x for r in result for x in _flat(r)] if isinstance(result, (tuple, list)) else [result]


def _compare(op, form, sample, slot):
    """A line saying how jitorch differs from torch when only the tensor at ``slot`` requires grad, or None."""
    mine = sample.clone()
    theirs = Twin().sample(mine)
    _at(mine, slot).requires_grad_()
    _at(theirs, slot).requires_grad_()
    want, refused = call(op, form, theirs, torch)
    if refused is not None:
        return None  # (which errors jitorch raises as torch: tests/ops/test_against_torch.py)
    got, error = call(op, form, mine, jt)
    if error is not None:
        return f"{form} {sample} with {slot} requiring grad raises {type(error).__name__}: {error}; torch runs"
    pairs = [(g.requires_grad, w.requires_grad) for g, w in zip(_flat(got), _flat(want))
             if isinstance(w, torch.Tensor) and w.dtype.is_floating_point]
    if any(g != w for g, w in pairs):
        return f"{form} {sample} with {slot} requiring grad: results require grad {pairs} (jitorch, torch)"
    return None


@pytest.mark.parametrize("name", COMPARED)
def test_only_differentiable_arguments_make_results_require_grad(name):
    op = registry.OPS[name]
    found = [_compare(op, form, sample, slot) for form in _forms(op) for sample in _samples(op)
             for slot in _slots(sample) if _at(sample, slot).dtype.is_floating_point]
    found = [f for f in found if f is not None]
    assert not found, f"{name} differs from torch:\n" + "\n".join(found)


def test_ops_left_out_of_the_table_take_no_floating_tensors():
    left_out = set(SEVERAL) - set(COMPARED)
    assert left_out <= NONDIFFERENTIABLE, sorted(left_out - NONDIFFERENTIABLE)
    x = jt.ones(2)
    for name in left_out:
        with pytest.raises(RuntimeError):
            registry.call(registry.OPS[name], (x, x))


def test_every_rule_differentiates_arguments_of_its_op():
    for name, rule in RULES.items():
        unknown = rule.differentiates - set(registry.OPS[name].arg_names)
        assert not unknown, f"the rule of {name} differentiates arguments it does not have: {sorted(unknown)}"
        assert rule.differentiates, f"the rule of {name} differentiates no argument (declare it nondifferentiable)"


def test_a_rule_that_does_not_say_what_it_differentiates_is_refused():
    with pytest.raises(ValueError, match="does not say which arguments it differentiates"):
        defgrad("no such op", lambda g, a, out: {"self": g})
    assert "no such op" not in RULES
    assert differentiates("self src", lambda g, a, out: {}).differentiates == frozenset({"self", "src"})


def test_view_as_and_expand_as_of_other_do_not_require_grad():
    x = jt.randn(2, 3, requires_grad=True)
    y = jt.randn(2, 3)
    assert not y.view_as(x).requires_grad
    assert not y[:1].expand_as(x).requires_grad
    assert y.view_as(x)._base is y  # still a view, tracked on its base (`track_views`)
    assert x.view_as(y).requires_grad and x[:1].expand_as(y).requires_grad


def test_in_place_logical_op_on_a_leaf_requiring_grad_is_no_autograd_write():
    """torch's logical in-place ops write through their out= form, which autograd does not see: no refusal of
    a leaf that requires grad, and an ``other`` that requires grad gives the result no history."""
    leaf = jt.tensor([1.0, 0.0, 2.0], requires_grad=True)
    assert leaf.logical_and_(jt.tensor([1.0, 1.0, 0.0])).tolist() == [1.0, 0.0, 0.0]
    assert leaf.grad_fn is None
    x = jt.tensor([1.0, 0.0])
    x.logical_or_(jt.tensor([0.0, 0.0], requires_grad=True))
    assert not x.requires_grad


@pytest.mark.parametrize("build", [
    lambda T, x, m, i: T.where(m, x, x.detach() * 2),
    lambda T, x, m, i: x.masked_fill(m, T.tensor(3.0)),
    lambda T, x, m, i: x.index_put((i,), T.tensor(1.0)),
    lambda T, x, m, i: x.index_select(0, i),
    lambda T, x, m, i: x.detach().expand_as(x) + x.view_as(x),
], ids=["where", "masked_fill", "index_put", "index_select", "view_as"])
def test_node_edges_are_the_differentiable_inputs_as_torchs_next_functions(build):
    def edges(T):
        x = T.arange(4.0).requires_grad_()
        out = build(T, x, x.detach() > 1, T.tensor([0, 2]))
        fn = out.grad_fn
        return [[nxt is None for nxt, _ in fn.next_functions]] + [
            [nxt is None for nxt, _ in n.next_functions] for n, _ in fn.next_functions if n is not None]
    assert edges(jt) == edges(torch)


def test_nondifferentiable_ops_have_no_differentiable_arguments():
    for name in NONDIFFERENTIABLE & set(registry.OPS):
        assert grad_args(registry.OPS[name]) == ((), ())
