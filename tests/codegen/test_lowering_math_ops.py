"""Compiled kernels of copysign, fmax/fmin, heaviside, xlogy, deg2rad/rad2deg, sinc, angle, isposinf/isneginf,
signbit, ldexp and logit equal eager on edge values, and each op runs inside a generated kernel."""

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.codegen.test_compiled import assert_matches
from tests.codegen.test_kernels import fused_result

EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, 0.25, 0.75, 2.5, -2.5, 1e-30, -1e-30, 1e30, -1e30, np.inf, -np.inf, np.nan,
         -np.nan, 3.0, 100.0, -7.25]
FLOATS = [jt.float32, jt.float64, jt.float16, jt.bfloat16]

UNARY = {
    "deg2rad": jt.deg2rad, "rad2deg": jt.rad2deg, "sinc": jt.sinc, "angle": jt.angle, "isposinf": jt.isposinf,
    "isneginf": jt.isneginf, "signbit": jt.signbit, "logit": jt.logit,
}
BINARY = {"copysign": jt.copysign, "fmax": jt.fmax, "fmin": jt.fmin, "heaviside": jt.heaviside, "xlogy": jt.xlogy,
          "ldexp": jt.ldexp}


def edge_tensor(dtype):
    return jt.tensor(np.array(EDGES)).to(dtype)


# half logit rounds every step to the half type in eager: it runs as an external op (tested below)
UNARY_CASES = [(name, dtype) for name in sorted(UNARY) for dtype in FLOATS
               if not (name == "logit" and dtype in (jt.float16, jt.bfloat16))]


@pytest.mark.parametrize("name, dtype", UNARY_CASES, ids=str)
def test_unary_math_ops_fuse_and_equal_eager(name, dtype):
    x = edge_tensor(dtype)
    fn = UNARY[name]
    assert_matches(fused_result(lambda t: fn(t * 1), x, ops=[name]), fn(x), name)


# ldexp rounds its power to a half exponent's dtype in eager (torch's pow(2.0, other)): it runs as an external op
BINARY_CASES = [(name, dtype) for name in sorted(BINARY) for dtype in FLOATS
                if not (name == "ldexp" and dtype in (jt.float16, jt.bfloat16))]


@pytest.mark.parametrize("name, dtype", BINARY_CASES, ids=str)
def test_binary_math_ops_fuse_and_equal_eager(name, dtype):
    s = np.array(EDGES)
    a, b = (jt.tensor(g.ravel()).to(dtype) for g in np.meshgrid(s, s))
    fn = BINARY[name]
    assert_matches(fused_result(lambda p, q: fn(p * 1, q), a, b, ops=[name]), fn(a, b), name)


@pytest.mark.parametrize("eps", [0.1, 0.6, 1.0])  # over 1/2, lo > hi: torch's clamp gives lo below lo, hi above hi
def test_logit_with_eps_fuses_and_equals_eager(eps):
    x = jt.tensor(np.linspace(-0.5, 1.5, 101))
    assert_matches(fused_result(lambda t: jt.logit(t * 1, eps=eps), x, ops=["logit"]), jt.logit(x, eps=eps))


def test_half_logit_stays_an_external_op():
    from tests.codegen.test_kernels import kernel_ops
    x = jt.tensor([0.25, 0.5]).half()
    assert "logit" not in kernel_ops(lambda t: jt.logit(t * 1), x)


@pytest.mark.parametrize("x_dtype, other_dtype", [(torch.float32, torch.bfloat16), (torch.float16, torch.float16),
                                                  (torch.float64, torch.float32), (torch.float32, torch.int8),
                                                  (torch.float32, torch.float32)], ids=str)
def test_ldexp_rounds_its_power_to_the_exponents_dtype_as_torch(x_dtype, other_dtype):
    """Fuzz seed 7300007: torch's ldexp is ``mul(self, pow(2.0, other))``, the power rounded to ``other``'s dtype (a
    bfloat16 exponent's power is a bfloat16; an integer's the default float dtype); jitorch's was unrounded (3 parts
    in 1000 off for a bfloat16 exponent). A kernel computes the power in the result's compute dtype, so ldexp fuses
    only where that is the power's dtype, and runs as an external op otherwise."""
    from tests.codegen.test_kernels import kernel_ops
    x = torch.tensor([1.5, 3.3, -2.0, 0.7, 1e-3]).to(x_dtype)
    other = torch.tensor([0.3, 0.9, 2.0, -1.7, 5.0] if other_dtype.is_floating_point else [1, 3, -2, 0, 5])
    other = other.to(other_dtype)
    want = torch.ldexp(x, other)
    a, b = (jt.tensor(t.double().numpy()).to(getattr(jt, str(t.dtype)[6:])) for t in (x, other))
    fn = lambda p, q: jt.ldexp(p * 1, q)  # noqa: E731
    for got in (fn(a, b), jt.compile(fn)(a, b)):
        # (within an ulp of a float32 power: NumPy's exp2 is not torch's pow)
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=1.2e-7)
    fused = "ldexp" in kernel_ops(fn, a, b)
    assert fused == ((x_dtype, other_dtype) in ((torch.float32, torch.int8), (torch.float32, torch.float32)))


@pytest.mark.parametrize("x_dtype, other_dtype", [(torch.float64, torch.float16), (torch.float64, torch.float32),
                                                  (torch.float16, torch.bfloat16)], ids=str)
def test_ldexp_by_a_0d_exponent_computes_its_power_unrounded_as_torch(x_dtype, other_dtype):
    """Fuzz seed 101: torch 2.13's ldexp by a 0-d exponent does not round the power to the exponent's dtype
    (``ldexp(float64 tensor, 0-d float16)`` is exact), eager and compiled."""
    x = torch.tensor([1.5, 3.3, -2.0, 0.7]).to(x_dtype)
    other = torch.tensor(0.3).to(other_dtype)
    want = torch.ldexp(x, other)
    a, b = (jt.tensor(t.double().numpy()).to(getattr(jt, str(t.dtype)[6:])) for t in (x, other))
    fn = lambda p, q: jt.ldexp(p * 1, q)  # noqa: E731
    for got in (fn(a, b), jt.compile(fn)(a, b)):
        assert str(got.dtype) == str(want.dtype).replace("torch", "jitorch")
        np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=1e-15)
