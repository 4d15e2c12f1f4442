"""gradgradcheck takes its finite differences of the gradients' values without recording the backward pass's
own graph; the analytical side still differentiates that graph, so a backward whose values are right but whose
graph is wrong is still caught."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.autograd import Function, gradgradcheck
from jitorch.autograd import engine


def _leaf(values):
    return jt.tensor(np.array(values, dtype=np.float64), requires_grad=True)


class CubeWithDetachedBackward(Function):
    """x ** 3 whose backward gives the right values, 3 x^2 g, from a detached x: its graph is wrong (no path
    from the gradient back to x), so the second derivative through it is 6 x g short."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x.detach() ** 2


def test_gradgradcheck_catches_a_backward_with_right_values_and_a_detached_graph():
    x = _leaf([0.3, -0.8, 1.1])
    assert jt.autograd.gradcheck(CubeWithDetachedBackward.apply, (x,))
    with pytest.raises(jt.autograd.GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(CubeWithDetachedBackward.apply, (x,))
    assert gradgradcheck(lambda t: t * t * t, (x,))


def test_gradgradchecks_finite_differences_record_no_graph_of_the_backward(monkeypatch):
    """The backward passes of the finite differences (two per element of the inputs and the output gradients)
    run with ``create_graph=False``; only the analytical side's asks for the graph."""
    asked = []
    run_backward = engine.run_backward

    def recording(outputs, grads, retain, create_graph, **kwargs):
        asked.append(create_graph)
        return run_backward(outputs, grads, retain, create_graph, **kwargs)

    monkeypatch.setattr(engine, "run_backward", recording)
    x = _leaf([0.3, -0.8, 1.1])
    assert gradgradcheck(lambda t: (t * t).exp(), (x,))
    # the analytical side: one vjp with its graph, then a backward of that graph per element of its output (3);
    # the numerical side: two vjp calls per element of x (3) and of the output gradient (3), then one per input
    # for the outputs' shapes
    assert asked.count(True) == 1
    assert asked.count(False) == 3 + 2 * (3 + 3) + 2
