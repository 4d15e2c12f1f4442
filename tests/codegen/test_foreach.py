"""The optimizers' generated kernels over blocks of many tensors (`jitorch.codegen.foreach`): the sum of
squares against exact sums (every tail length, blocks split across tensors, threads), the Adam, SGD and
Adadelta kernels against the NumPy passes they replace, element for element (the optimizers' own tests
compare the steps with jitorch's ops and with torch)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jitorch.codegen import foreach
from jitorch.runtime import threads


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sum_squares_is_a_float64_sum_per_block(dtype, monkeypatch):
    kernel = foreach.sum_squares_kernel(dtype)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(n).astype(dtype) for n in [*range(0, 70), 1000, foreach.BLOCK + 45]]
    results = []
    for count in (1, 2):  # (through the settings the test restores, as test_attention does)
        monkeypatch.setitem(threads._settings, "threads", count)
        sums, which = foreach.run_blocks(kernel, [[a] for a in arrays], np.zeros(len(arrays)))
        results.append(sums.tobytes())
        totals = np.bincount(which, weights=sums[:, 0], minlength=len(arrays))
        for a, total in zip(arrays, totals):
            exact = math.fsum(float(x) * float(x) for x in a)  # (float32 squares are exact in float64)
            assert total == pytest.approx(exact, rel=1e-14, abs=0)
    assert results[0] == results[1]  # (the blocks' sums do not depend on the split)
    assert list(which[-2:]) == [len(arrays) - 1] * 2


def test_sum_squares_reads_unaligned_blocks():
    kernel = foreach.sum_squares_kernel("float32")
    base = np.arange(200, dtype=np.float32)
    for offset in range(1, 5):
        sums, _ = foreach.run_blocks(kernel, [[base[offset:offset + 150]]], np.zeros(1))
        assert sums[0, 0] == sum(float(x) ** 2 for x in base[offset:offset + 150])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_adam_kernel_is_the_numpy_passes(dtype, amsgrad):
    """AdamW with the lerp's second form (beta1 0.2): each element as the NumPy passes compute it."""
    rng = np.random.default_rng(1)
    n = 1037
    param, grad, exp_avg, exp_avg_sq, most = (rng.standard_normal(n).astype(dtype) for _ in range(5))
    exp_avg_sq, most = np.abs(exp_avg_sq), np.abs(most)
    lr, beta1, beta2, eps, wd, step = 0.01, 0.2, 0.9, 1e-3, 0.1, 3.0
    number = np.dtype(dtype).type
    expected = [a.copy() for a in (param, exp_avg, exp_avg_sq, most)]
    p, m, v, mx = expected
    g = np.negative(grad)  # (maximize)
    p *= number(1 - lr * wd)
    d = g - m
    m[:] = g - d * number(1 - (1 - beta1))
    v[:] = v * number(beta2) + (g * g) * number(1 - beta2)
    np.maximum(mx, v, out=mx)
    denom = np.sqrt(mx if amsgrad else v) / number(math.sqrt(1 - beta2 ** step)) + number(eps)
    p += number(-(lr / (1 - beta1 ** step))) * m / denom
    kernel = foreach.step_kernel("adam", dtype, (True, True, True, amsgrad, False))
    row = (1 - lr * wd, 1 - (1 - beta1), beta2, 1 - beta2, math.sqrt(1 - beta2 ** step), eps,
           -(lr / (1 - beta1 ** step)))
    operands = [param, grad, exp_avg, exp_avg_sq] + [most] * amsgrad
    foreach.run_blocks(kernel, [operands], [row])
    assert param.tobytes() == p.tobytes() and exp_avg.tobytes() == m.tobytes()
    assert exp_avg_sq.tobytes() == v.tobytes()
    if amsgrad:
        assert most.tobytes() == mx.tobytes()


def test_sgd_kernel_is_the_numpy_passes():
    rng = np.random.default_rng(2)
    param, grad, buf = (rng.standard_normal(300).astype(np.float32) for _ in range(3))
    lr, momentum, dampening, wd = 0.1, 0.9, 0.25, 0.01
    f = np.float32
    g = grad + param * f(wd)
    b = buf * f(momentum) + g * f(1 - dampening)
    p = param + (g + b * f(momentum)) * f(-lr)
    kernel = foreach.step_kernel("sgd", "float32", (False, True, True, True))
    foreach.run_blocks(kernel, [[param, grad, buf]], [(wd, momentum, 1 - dampening, -lr)])
    assert param.tobytes() == p.tobytes() and buf.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adadelta_kernel_is_the_numpy_passes(dtype):
    """Adadelta with maximize and weight decay: each element as `Adadelta._numpy_update`'s passes compute it."""
    rng = np.random.default_rng(3)
    n = 1037
    param, grad = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    square_avg, acc_delta = (np.abs(rng.standard_normal(n)).astype(dtype) for _ in range(2))
    lr, rho, eps, wd = 0.5, 0.3, 1e-3, 0.1
    number = np.dtype(dtype).type
    g = np.negative(grad) + param * number(wd)
    v = square_avg * number(rho) + (g * g) * number(1 - rho)
    delta = np.sqrt(acc_delta + number(eps)) / np.sqrt(v + number(eps)) * g
    u = acc_delta * number(rho) + (delta * delta) * number(1 - rho)
    p = param + delta * number(-lr)
    kernel = foreach.step_kernel("adadelta", dtype, (True, True))
    foreach.run_blocks(kernel, [[param, grad, square_avg, acc_delta]], [(wd, rho, 1 - rho, eps, -lr)])
    assert param.tobytes() == p.tobytes() and square_avg.tobytes() == v.tobytes()
    assert acc_delta.tobytes() == u.tobytes()

