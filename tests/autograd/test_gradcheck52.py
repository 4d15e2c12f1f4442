"""gradgradcheck takes its finite differences of the gradients' values without recording the backward pass's
own graph; the analytical side still differentiates that graph, so a backward whose values are right but whose
graph is wrong is still caught. gradcheck's and gradgradcheck's ``fast_mode`` checks the same derivatives through
random projections."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.autograd import Function, GradcheckError, gradcheck, gradgradcheck
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


def _random_leaf(*shape, seed=0):
    return jt.tensor(np.random.default_rng(seed).standard_normal(shape), requires_grad=True)


# fast_mode (torch's): v^T J u for random unit vectors, from one directional difference per input and one backward
# call per output; it accepts right derivatives, rejects wrong first and second ones as the full check does, and
# evaluates the function a fixed number of times whatever the inputs' sizes.


def _two_outputs(x, w):
    return jt.tanh(x @ w) ** 2, x.sin()


class SquareOffByFivePercent(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a * 2.1


@pytest.mark.parametrize("check", [gradcheck, gradgradcheck])
def test_fast_mode_accepts_right_derivatives_of_several_outputs_as_the_full_check(check):
    x, w = _random_leaf(3, 4), _random_leaf(4, 5, seed=1)
    assert check(_two_outputs, (x, w), fast_mode=True)
    assert check(_two_outputs, (x, w))


def test_fast_mode_rejects_a_wrong_first_derivative():
    x = _random_leaf(3, 4)
    with pytest.raises(GradcheckError, match="fast mode"):
        gradcheck(SquareOffByFivePercent.apply, (x,), fast_mode=True)
    assert gradcheck(SquareOffByFivePercent.apply, (x,), fast_mode=True, raise_exception=False) is False


def test_fast_mode_gradgradcheck_rejects_a_backward_whose_graph_is_detached():
    x = _random_leaf(5)
    assert gradcheck(CubeWithDetachedBackward.apply, (x,), fast_mode=True)
    assert not gradgradcheck(CubeWithDetachedBackward.apply, (x,), fast_mode=True, raise_exception=False)


def test_fast_mode_takes_an_unused_input_and_an_output_cut_from_the_graph_as_zero_jacobians():
    x, y = _random_leaf(4), _random_leaf(3, seed=1)
    assert gradcheck(lambda x, y: (x * 2, jt.ones(3, dtype=jt.float64)), (x, y), fast_mode=True)
    with pytest.raises(GradcheckError, match="output 1 with respect to input 1"):
        gradcheck(lambda x, y: (x * 2, SquareOffByFivePercent.apply(y)), (x, y), fast_mode=True)


@pytest.mark.parametrize("n", [2, 50])
def test_fast_mode_evaluates_the_function_a_fixed_number_of_times_whatever_the_size(n):
    calls = []

    def f(x, w):
        calls.append(1)
        return x * w.sum()

    x, w = _random_leaf(n), _random_leaf(3, seed=1)
    assert gradcheck(f, (x, w), fast_mode=True)
    assert len(calls) == 1 + 2 * 2  # (the outputs with their graph; two differences per input)


def test_fast_mode_perturbs_transposed_and_half_precision_inputs_where_they_lie():
    """A transposed leaf is moved through its strided NumPy view; a float16 one, which has no such view, through
    ``copy_`` (the directional difference's other path); both come back to their values."""
    x = jt.tensor(np.random.default_rng(2).standard_normal((3, 4))).t().requires_grad_()
    before = x.detach().clone()
    assert gradcheck(lambda t: t.tanh() * t, (x,), fast_mode=True)
    assert gradgradcheck(lambda t: t.sin() * t, (x,), fast_mode=True)
    assert (x.detach() == before).all()
    with pytest.warns(UserWarning, match="not a double precision"):
        h = jt.tensor(np.linspace(-1, 1, 6), dtype=jt.float16, requires_grad=True)
        kept = h.detach().clone()
        assert gradcheck(lambda t: t * 2, (h,), fast_mode=True, eps=1e-2, atol=1e-1, rtol=1e-1)
        assert not gradcheck(lambda t: SquareOffByFivePercent.apply(t * 4), (h,), fast_mode=True, eps=1e-2,
                             atol=1e-2, rtol=1e-2, raise_exception=False)
    assert (h.detach() == kept).all()
