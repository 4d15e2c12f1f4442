"""Derivative rules of reductions against torch where the generic gradchecks cannot tell: how a full
max/min/median hands its gradient to the elements (torch's CPU rule fills a mask)."""

import numpy as np
import pytest
import torch

import jitorch as jt


@pytest.mark.parametrize("op", ["max", "min", "median"])
@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.5, 1.0, -1.0, 0.5], [float("nan"), 1.0, 2.0]],
                         ids=["distinct", "ties", "nan"])
def test_a_nan_gradient_of_a_full_max_min_or_median_stays_on_its_elements(op, values):
    # fuzz seed 4002078: x.median().std([]) (std of one element: NaN) gave every element of x a NaN gradient
    grads = []
    for lib in (jt, torch):
        x = lib.tensor(values, requires_grad=True)
        with pytest.warns(UserWarning, match="degrees of freedom"):
            getattr(x, op)().std([]).backward()
        grads.append(np.asarray(x.grad.tolist()))
    np.testing.assert_array_equal(*grads)


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("kwargs", [{"dim": 0, "correction": 5}, {"dim": 1, "correction": 4}, {"dim": (0, 1, 2), "correction": 61},
                                    {"correction": 60}, {"correction": 70}],
                         ids=["dims_past_n", "dims_at_n", "all_dims_past_n", "whole_at_n", "whole_past_n"])
def test_var_and_std_gradients_with_no_degrees_of_freedom_are_torchs(op, kwargs):
    """torch's var_backward clamps nothing over given dims: ``2 / (N - correction)`` is an infinite factor at
    0 (signed by the gradient and ``x - mean``) and a negative one past it (std's gradient then 0); only a
    reduction of every element takes inf (NaN where x is the mean). jitorch gave inf/NaN for all of them.
    Eager and compiled; the signs of zeros and infinities included."""
    x = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(np.float32)
    tx = torch.from_numpy(x).requires_grad_()
    with pytest.warns(UserWarning, match="degrees of freedom"):
        getattr(tx, op)(**kwargs).sum().backward()
    for f in (lambda t: getattr(t, op)(**kwargs).sum(), jt.compile(lambda t: getattr(t, op)(**kwargs).sum())):
        jx = jt.tensor(x).requires_grad_()
        with pytest.warns(UserWarning, match="degrees of freedom"):
            f(jx).backward()
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-5)  # (the mean's rounding)
        np.testing.assert_array_equal(np.signbit(jx.grad.numpy()), np.signbit(tx.grad.numpy()))
