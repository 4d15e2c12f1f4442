"""Exact GELU as ``x * Phi(x)`` (`jitorch.nn.functional._gelu_exact`, the op ``_normal_cdf`` and its derivative
``_normal_pdf``): float32 kernels against a float64 oracle and torch, compiled against eager, what the kernels
fuse, gradients, special values and the other dtypes.

The bounds are those tools/gelu_ulp.py measured over every float32 with 2**-20 <= |x| < 16 (docs/codegen-design.md
"Math functions"), here on a sample of them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.ir import interpret
from jitorch.ir.passes import optimize
from jitorch.jit import trace
from jitorch.jit.executor import KernelStep

_erfc = np.vectorize(math.erfc)
ROOT = -0.7517915756  # the derivative's zero: relative error is unbounded around it for any float formula


def exact(x):
    """(GELU, its derivative) in float64 from libm's erfc: relative-accurate where Phi is tiny."""
    x = x.astype(np.float64)
    cdf = 0.5 * _erfc(-x / math.sqrt(2))
    return x * cdf, cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def ulps(got, want):
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / np.maximum(spacing, 2.0 ** -149)


def sample():
    """Every 2**12-th float32 with 2**-20 <= |x| < 16, both signs."""
    first, last = (int(np.float32(v).view(np.int32)) for v in (2.0 ** -20, 16.0))
    pos = np.arange(first, last, 1 << 12, dtype=np.int32).view(np.float32)
    return np.concatenate([-pos, pos])


def kernels(dtype=jt.float32):
    form = F._GELU_FORMS["none"]
    return F._gelu_kernel(form, dtype), F._gelu_kernel(form, dtype, backward=True)


def test_float32_gelu_kernels_stay_within_their_ulp_bounds_of_float64():
    x = sample()
    forward, backward = kernels()
    want_y, want_d = exact(x)
    y, d = forward(x)[0], backward(x, np.ones_like(x))[0]
    normal = x >= -13  # below, GELU is denormal and x * Phi rounds Phi's denormal, |x| / 2 ulps there
    assert ulps(y, want_y)[normal].max() <= 7
    assert ulps(y, want_y)[~normal].max() <= 12
    away = np.abs(x - ROOT) >= 2.0 ** -6
    assert ulps(d, want_d)[away & (x >= -1) & (x < 0)].max() <= 160  # the zero's cancellation, as torch's 290
    assert ulps(d, want_d)[away & ((x < -1) | (x >= 0)) & normal].max() <= 10
    assert np.abs(d - want_d)[~away].max() <= 2 * 2.0 ** -24


def test_float32_gelu_keeps_relative_accuracy_where_torchs_cancels():
    """Far below 0 torch's 1 + erf(x / sqrt(2)) loses every digit (0 from -5.9); Phi(x) does not."""
    x = np.array([-3.0, -5.0, -8.0, -10.0, -12.5], np.float32)
    x = np.repeat(x, 4096 // 5 + 1)  # (a kernel from 4096 elements)
    want_y, want_d = exact(x)
    y = F.gelu(jt.from_numpy(x)).numpy()
    assert ulps(y, want_y).max() <= 7
    t = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    assert ulps(t, want_y).max() > 1e4  # (what this test is about: not a bound on torch)
    xt = jt.from_numpy(x).requires_grad_()
    F.gelu(xt).sum().backward()
    assert ulps(xt.grad.numpy(), want_d).max() <= 10


def test_gelu_values_match_torch_float64_and_float32():
    rng = np.random.default_rng(45)
    for n in (300, 5000):  # the eager ops, then the eager kernel
        a = rng.standard_normal(n) * 3
        # (torch's 1 + erf(x / sqrt(2)) cancels for x below 0: its error there is absolute, ~1e-7 in float32)
        for dtype, rtol, atol in ((np.float64, 1e-14, 1e-15), (np.float32, 3e-6, 2e-6)):
            x = a.astype(dtype)
            xj, xt = jt.from_numpy(x.copy()).requires_grad_(), torch.from_numpy(x.copy()).requires_grad_()
            g = rng.standard_normal(n).astype(dtype)
            yj, yt = F.gelu(xj), torch.nn.functional.gelu(xt)
            yj.backward(jt.from_numpy(g))
            yt.backward(torch.from_numpy(g))
            np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=rtol, atol=atol)
            np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)


def test_eager_float32_phi_is_the_kernels_formula_in_float64_within_an_ulp():
    x = sample()
    got = jt.ops.registry.FUNCTIONS["_normal_cdf"](jt.from_numpy(x)).numpy()
    assert ulps(got, 0.5 * _erfc(-x.astype(np.float64) / math.sqrt(2))).max() <= 0.75


def test_compiled_gelu_equals_eager_within_the_bound():
    """Small eager calls run the ops (float32 Phi from float64, within 1 ulp); the kernels' Phi is float
    arithmetic: at most 8 ulp apart (forward) on the sample."""
    x = sample()[::3].copy()
    x = x[x >= -13]
    compiled = jt.compile(lambda t: F.gelu(t))
    got = compiled(jt.from_numpy(x)).numpy()
    want = np.concatenate([F.gelu(jt.from_numpy(x[i:i + 1000])).numpy() for i in range(0, x.size, 1000)])
    assert ulps(got, want.astype(np.float64)).max() <= 8


def test_gelu_kernels_fuse_phi_and_its_derivative():
    forward = jt.compile(lambda t: F.gelu(t)).lower(jt.randn(64, 48)).executable
    assert [st.kernel.source.ops for st in forward.steps if type(st) is KernelStep] == [["_normal_cdf", "mul"]]

    def step(x, w):
        y = F.gelu(x @ w)
        y.sum().backward()
        return y, w.grad
    g = jt.Generator().manual_seed(3)
    args = (jt.randn(64, 32, generator=g), jt.randn(32, 48, generator=g, requires_grad=True))
    ex = jt.compile(step).lower(*args).executable
    ops = [st.kernel.source.ops for st in ex.steps if type(st) is KernelStep]
    # the activation and its gradient in one kernel after the product: Phi, its pdf (one exp between them)
    assert [o for o in ops if "_normal_cdf" in o] == [["_normal_cdf", "mul", "mul", "mul", "_normal_pdf", "mul",
                                                       "add"]]
    assert not any("erf" in o or "exp" in o for o in ops)


def test_gelu_trace_records_phi_and_the_interpreter_runs_it():
    x = jt.from_numpy(np.linspace(-14, 6, 64, dtype=np.float32))
    graph = optimize(trace(lambda t: F.gelu(t), x))
    assert sorted(n.op.name for n in graph.nodes) == ["_normal_cdf", "mul"]
    out, _ = interpret(graph, [x])
    assert np.array_equal(out.numpy(), F.gelu(x).numpy())


def test_phi_and_gelu_gradients_in_float64():
    x = jt.from_numpy(np.array([-9.0, -3.0, -0.75, -1e-3, 0.0, 0.4, 2.5, 7.0])).requires_grad_()
    for fn in (jt.ops.registry.FUNCTIONS["_normal_cdf"], jt.ops.registry.FUNCTIONS["_normal_pdf"], F.gelu):
        assert jt.autograd.gradcheck(fn, (x,))
        assert jt.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_phi_and_phi_prime_special_values_compiled_and_eager(dtype):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 14.3, -14.3, 20.0, -20.0, 40.0, -40.0],
                 dtype.np)
    cdf, pdf = (jt.ops.registry.FUNCTIONS[name] for name in ("_normal_cdf", "_normal_pdf"))
    with np.errstate(invalid="ignore"):
        want_cdf = 0.5 * _erfc(-x.astype(np.float64) / math.sqrt(2))
    for run in (lambda f, t: f(t), lambda f, t: jt.compile(f)(t)):
        c, p = run(cdf, jt.from_numpy(x)).numpy(), run(pdf, jt.from_numpy(x)).numpy()
        if dtype == jt.float32:
            np.testing.assert_allclose(c, want_cdf, rtol=5e-7, atol=2.0 ** -149)
        else:
            # (float64 Phi is erfc(-x / sqrt(2)) / 2: the rounding of x / sqrt(2) costs x**2 ulp in the tail)
            np.testing.assert_allclose(c, want_cdf, rtol=1e-13, atol=0)
        with np.errstate(invalid="ignore"):
            want_pdf = np.exp(-0.5 * x.astype(np.float64) ** 2) / math.sqrt(2 * math.pi)
        # (the float64 oracle's own x * x rounds: 1e-14 relative at 14.3)
        rtol, atol = (5e-7, 2.0 ** -149) if dtype == jt.float32 else (2e-14, 0)
        np.testing.assert_allclose(p, want_pdf, rtol=rtol, atol=atol)
    # gelu at the specials: as torch's float64 (its vectorised float32 gives NaN at +inf; the composition inf)
    y = F.gelu(jt.from_numpy(np.repeat(x, 400))).numpy()[::400]
    want = torch.nn.functional.gelu(torch.from_numpy(x.astype(np.float64))).numpy()
    tail = np.isin(np.arange(x.size), [8, 10])  # -14.3, -20: torch's float64 has cancelled to -0 there
    np.testing.assert_array_equal(y[~tail], want[~tail].astype(dtype.np))
    np.testing.assert_allclose(y[tail], (x * want_cdf)[tail], rtol=1e-13, atol=8 * 2.0 ** -149)


@pytest.mark.parametrize("dtype", [jt.float16, jt.bfloat16])
def test_half_type_gelu_compiled_equals_eager_and_torch(dtype):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(5000).astype(np.float32) * 4
    x = jt.from_numpy(a).to(dtype)
    eager = F.gelu(x).float().numpy()
    compiled = jt.compile(lambda t: F.gelu(t))(x).float().numpy()
    t = torch.nn.functional.gelu(torch.from_numpy(a).to(getattr(torch, str(dtype).split(".")[-1]))).float().numpy()
    tol = 4e-3 if dtype == jt.float16 else 2e-2
    np.testing.assert_allclose(compiled, eager, rtol=tol, atol=1e-4)
    np.testing.assert_allclose(eager, t, rtol=tol, atol=1e-3)
