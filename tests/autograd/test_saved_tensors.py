"""Saved tensors as torch's: a node saves only what its derivative formula reads and checks only
those tensors' version counters, so in-place writes to anything else are no error, and writes to
a saved tensor raise torch's error."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.autograd.rule import RULES, Unsaved
from jitorch.ops import registry
from tests.autograd.inplace_programs import RAISING, WORKING, inputs, torch_message


def torch_grads(program):
    x, w = inputs(torch)
    program(torch, x, w).sum().backward()
    return [t.grad.numpy() if t.grad is not None else None for t in (x, w)]


@pytest.mark.parametrize("program", WORKING, ids=lambda p: p.__name__)
def test_in_place_writes_to_tensors_no_formula_saved_differentiate_as_torch(program):
    x, w = inputs(jt)
    program(jt, x, w).sum().backward()
    for got, want in zip((x.grad, w.grad), torch_grads(program)):
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("program", RAISING, ids=lambda p: p.__name__)
def test_writing_a_saved_tensor_in_place_raises_torchs_error(program):
    x, w = inputs(jt)
    y = program(jt, x, w).sum()
    with pytest.raises(RuntimeError) as e:
        y.backward()
    assert str(e.value) == torch_message(program)


def test_a_node_keeps_only_the_geometry_of_tensors_its_rule_does_not_read():
    x = jt.randn(3, 4, requires_grad=True)
    y = x * 2
    assert isinstance(y.grad_fn.args[0], Unsaved) and isinstance(y.grad_fn.out, Unsaved)
    assert y.grad_fn.versions == []
    e = x.exp()
    assert e.grad_fn.out is e and isinstance(e.grad_fn.args[0], Unsaved)


def test_an_in_place_op_copies_the_old_self_only_when_its_rule_reads_it():
    x = jt.randn(3, requires_grad=True)
    y = x * 1
    y.add_(1)
    assert isinstance(y.grad_fn.args[0], Unsaved)  # add reads no self: the old history alone
    old = y.detach().clone()
    y.mul_(x)
    kept = y.grad_fn.args[0]  # x's gradient reads the old y: a copy of it
    assert kept._storage is not y._storage
    np.testing.assert_array_equal(kept.detach().numpy(), old.numpy())


def test_a_rule_reading_a_tensor_it_does_not_declare_is_an_error_not_a_stale_value(monkeypatch):
    rule = RULES["mul"]
    # a rule whose ``self`` formula reads ``self`` but declares that it reads ``other`` alone
    backward = lambda g, a, out: {"self": g * a.self.sign()}  # noqa: E731
    backward.saves = lambda needed: {"other"}
    monkeypatch.setitem(registry.OPS["mul"].pieces, "derivative", type(rule)("mul", backward))
    x = jt.randn(3, requires_grad=True)
    y = x * x.detach()
    with pytest.raises(AttributeError, match="derivative rule of 'mul' uses .* argument 'self'"):
        y.sum().backward()


@pytest.mark.parametrize("values, view", [
    (1.5, lambda t: t.squeeze()),
    ([1.5, -2.0, 0.5], lambda t: t[:]),
    ([[1.5, -2.0], [0.5, 3.0]], lambda t: t.reshape(4).reshape(2, 2)),
])
def test_an_in_place_op_reading_a_view_of_its_target_reads_it_before_the_write(values, view):
    """``x.add_(v)`` with ``v`` a view of ``x``: the op's edge for ``v`` is v's history before the write,
    and v's own history is stale after it (fuzz seed 3001177: the edge was taken after the write and
    marked v's history current, so a backward through v missed the write: x.grad 1 where torch's is 2)."""
    grads = []
    for T in (torch, jt):
        leaf = T.tensor(values, requires_grad=True)
        x = leaf.clone()
        v = view(x)
        x.add_(v)
        (v * 3.0).sum().backward()
        grads.append(leaf.grad.tolist())
    assert grads[1] == grads[0]
    assert np.all(np.asarray(grads[0]) == 6.0)
