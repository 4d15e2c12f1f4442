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


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_gradients_into_a_wider_input_round_once_as_torchs_seed_7902232(op, dtype, compiled):
    """Fuzz seed 7902232: the float64 gradient of ``softmax(x, 2, bfloat16)`` rounded each op of the rule to
    bfloat16 (-0.35546875 where torch's is -0.357421875, the exact value -0.35799): torch's
    ``_softmax_backward_data`` (and log_softmax's) compute in float32 and round once, and so does jitorch's rule
    now, bit for bit with torch's kernel on the same result; along the last dim and another."""
    rng = np.random.default_rng(7902232)
    x, g = rng.uniform(-3, 3, (4, 6, 5)), rng.normal(size=(4, 6, 5))
    t = getattr(torch, dtype)
    for dim in (2, 1):
        leaf = jt.tensor(x, dtype=jt.float64, requires_grad=True)
        fn = lambda v: getattr(jt, op)(v, dim, getattr(jt, dtype))  # noqa: E731
        y = (jt.compile(fn) if compiled else fn)(leaf)
        assert y.dtype == getattr(jt, dtype)
        y.backward(jt.tensor(g, dtype=y.dtype))
        kernel = getattr(torch.ops.aten, f"_{op}_backward_data")
        want = kernel(torch.tensor(g).to(t), torch.tensor(y.detach().to(jt.float64).numpy()).to(t), dim, t)
        np.testing.assert_array_equal(leaf.grad.numpy(), want.double().numpy())
