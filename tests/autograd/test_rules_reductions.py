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
