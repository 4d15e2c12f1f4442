"""Tangent findings of session 44's transform fuzzer (tests/fuzz/transforms.py), each against torch.func.jvp and
torch's reverse mode."""

import pytest
import torch

import jitorch
import jitorch.func


def _j(t):
    return jitorch.tensor(t.numpy())


@pytest.mark.parametrize("weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_jvp_of_lerp_with_a_0d_bool_weight_runs_as_torch_funcs_seed_8406632(weight, dtype):
    """Transform-fuzz seed 8406632: ``v7.lerp(v4, v5)`` with ``v5`` a 0-d bool tensor (eager torch takes it):
    jitorch's jvp raised "Subtraction, the `-` operator, with a bool tensor", its forward mode transposing the
    reverse rule's ``1 - weight``; torch.func.jvp runs its forward formula ``lerp(self_t, end_t, weight)``. The
    primal and tangent equal torch.func's, out of place and in place."""
    g = torch.Generator().manual_seed(0)
    a, b, ta, tb = (torch.randn(3, generator=g, dtype=dtype) for _ in range(4))
    w = torch.tensor(weight)
    for f in (lambda T, w: lambda x, y: T.lerp(x, y, w), lambda T, w: lambda x, y: x.clone().lerp_(y, w)):
        want = torch.func.jvp(f(torch, w), (a, b), (ta, tb))
        got = jitorch.func.jvp(f(jitorch, _j(w)), (_j(a), _j(b)), (_j(ta), _j(tb)))
        for x, y in zip(got, want):
            assert x.dtype.name == str(y.dtype).split(".")[-1]
            assert torch.equal(torch.from_numpy(x.numpy()), y)


def test_backward_of_lerp_with_a_bool_weight_raises_torchs_error_seed_8406632():
    """torch's reverse mode of the same lerp raises RuntimeError ("with two bool tensors": its formula computes
    ``1 - weight`` with a bool 1); jitorch's backward raises the same."""
    a, b = torch.randn(3), torch.randn(3)
    for T, x, y, w in ((torch, a, b, torch.tensor(True)), (jitorch, _j(a), _j(b), jitorch.tensor(True))):
        x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
            T.lerp(x, y, w).sum().backward()


ROUNDING = ["sgn", "sign", "round", "floor", "ceil", "trunc"]
POLES = ["arcsin", "arccos", "atanh", "log", "log2", "log1p", "rsqrt", "sqrt", "reciprocal", "acosh"]


def _pole_after_zero_tangent(rounding, pole):
    return lambda x: getattr(getattr(x, rounding)(), pole)()


@pytest.mark.parametrize("pole", POLES)
@pytest.mark.parametrize("rounding", ROUNDING)
def test_zero_tangent_of_a_rounding_op_meets_a_pole_as_in_torch_func_seed_8443740(rounding, pole):
    """Transform-fuzz seed 8443740 (``--out-views 0.5``): ``x1.sgn().arcsin_()``. torch.func's zero tangent of a
    rounding op is a plain zero, so a pole after it (``arcsin`` at 1, ``log`` at 0, ``sqrt`` at 0...) gives
    0 * inf = NaN, and jitorch's gives the same, element for element, on inputs of several elements."""
    x = torch.tensor([0.0, 1.0, -1.0, 0.3, 0.7, -0.7, 2.5])
    t = torch.linspace(-1, 1, 7)
    want = torch.func.jvp(_pole_after_zero_tangent(rounding, pole), (x,), (t,))
    got = jitorch.func.jvp(_pole_after_zero_tangent(rounding, pole), (_j(x),), (_j(t),))
    for g, w in zip(got, want):
        assert torch.equal(torch.from_numpy(g.numpy()).isnan(), w.isnan())
        assert torch.allclose(torch.from_numpy(g.numpy()), w, equal_nan=True)


def test_sgn_of_one_element_keeps_the_formulas_nan_where_torchs_zero_tensor_gives_0_seed_8443740():
    """The difference left (docs/differences-from-torch.md): torch's ``sgn`` of a tensor of one element gives a
    ZeroTensor tangent, which stays 0 through ``arcsin`` at 1; of two elements, a plain zero, NaN there. jitorch's
    tangent is NaN for both, as torch.func's for two elements and as 0 * inf."""
    for shape in [(), (1,), (2,)]:
        x, t = torch.full(shape, 0.7), torch.ones(shape)
        _, want = torch.func.jvp(lambda a: a.sgn().arcsin(), (x,), (t,))
        _, got = jitorch.func.jvp(lambda a: a.sgn().arcsin(), (_j(x),), (_j(t),))
        assert bool(torch.from_numpy(got.numpy()).isnan().all())
        assert bool(want.isnan().all()) == (x.numel() > 1)
