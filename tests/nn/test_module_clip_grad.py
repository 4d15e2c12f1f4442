"""nn.utils: clip_grad_norm_ and clip_grad_value_ against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jitorch as jt
from jitorch.nn import Parameter
from jitorch.nn.utils import clip_grad_norm_, clip_grad_value_


def _params_with_grads(rng, shapes):
    params = []
    for shape in shapes:
        p = Parameter(jt.zeros(shape, dtype=jt.float64))
        p.grad = jt.tensor(rng.normal(size=shape) * 3)
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm(rng, norm_type, max_norm):
    params = _params_with_grads(rng, [(3, 4), (5,)])
    grads = [p.grad.numpy().copy() for p in params]
    flat = np.concatenate([g.ravel() for g in grads])
    expected = np.abs(flat).max() if norm_type == math.inf else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = clip_grad_norm_(iter(params), max_norm, norm_type)
    np.testing.assert_allclose(total.item(), expected, rtol=1e-10)
    coef = min(1.0, max_norm / (expected + 1e-6))
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-10)


def test_clip_grad_norm_skips_missing_grads_and_empty():
    p = Parameter(jt.ones(2))
    assert clip_grad_norm_(p, 1.0).item() == 0.0
    q = Parameter(jt.ones(2))
    q.grad = jt.tensor([3.0, 4.0])
    assert clip_grad_norm_([p, q], 1.0).item() == pytest.approx(5.0)
    np.testing.assert_allclose(q.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_clip_grad_norm_non_finite():
    p = Parameter(jt.ones(2))
    p.grad = jt.tensor([math.inf, 1.0])
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients from `parameters` is non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert p.grad.tolist() == [math.inf, 1.0]


def test_clip_grad_value(rng):
    params = _params_with_grads(rng, [(4, 4)])
    g = params[0].grad.numpy().copy()
    clip_grad_value_(params, 1.5)
    np.testing.assert_array_equal(params[0].grad.numpy(), np.clip(g, -1.5, 1.5))
