"""gradcheck's and gradgradcheck's ``fast_mode`` (torch's): ``v^T J u`` for random unit vectors, from one
directional difference per input and one backward call per output; it accepts right derivatives, rejects wrong
first and second ones as the full check does, and evaluates the function a fixed number of times whatever the
inputs' sizes."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.autograd import Function, GradcheckError, gradcheck, gradgradcheck


def _leaf(*shape, seed=0):
    return jt.tensor(np.random.default_rng(seed).standard_normal(shape), requires_grad=True)


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


class CubeWithDetachedBackward(Function):
    """Right first derivative (3 x^2 g) from a detached x: the second derivative through it is 6 x g short."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * (x.detach() * x.detach())


@pytest.mark.parametrize("check", [gradcheck, gradgradcheck])
def test_fast_mode_accepts_right_derivatives_of_several_outputs_as_the_full_check(check):
    x, w = _leaf(3, 4), _leaf(4, 5, seed=1)
    assert check(_two_outputs, (x, w), fast_mode=True)
    assert check(_two_outputs, (x, w))


def test_fast_mode_rejects_a_wrong_first_derivative():
    x = _leaf(3, 4)
    with pytest.raises(GradcheckError, match="fast mode"):
        gradcheck(SquareOffByFivePercent.apply, (x,), fast_mode=True)
    assert gradcheck(SquareOffByFivePercent.apply, (x,), fast_mode=True, raise_exception=False) is False


def test_fast_mode_gradgradcheck_rejects_a_backward_whose_graph_is_detached():
    x = _leaf(5)
    assert gradcheck(CubeWithDetachedBackward.apply, (x,), fast_mode=True)
    assert not gradgradcheck(CubeWithDetachedBackward.apply, (x,), fast_mode=True, raise_exception=False)


def test_fast_mode_takes_an_unused_input_and_an_output_cut_from_the_graph_as_zero_jacobians():
    x, y = _leaf(4), _leaf(3, seed=1)
    assert gradcheck(lambda x, y: (x * 2, jt.ones(3, dtype=jt.float64)), (x, y), fast_mode=True)
    with pytest.raises(GradcheckError, match="output 1 with respect to input 1"):
        gradcheck(lambda x, y: (x * 2, SquareOffByFivePercent.apply(y)), (x, y), fast_mode=True)


@pytest.mark.parametrize("n", [2, 50])
def test_fast_mode_evaluates_the_function_a_fixed_number_of_times_whatever_the_size(n):
    calls = []

    def f(x, w):
        calls.append(1)
        return x * w.sum()

    x, w = _leaf(n), _leaf(3, seed=1)
    assert gradcheck(f, (x, w), fast_mode=True)
    assert len(calls) == 1 + 2 * 2  # (the outputs with their graph; two differences per input)
