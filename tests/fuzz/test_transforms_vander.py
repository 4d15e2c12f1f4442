"""vander's gradient, which torch 2.13 cannot take (its vander writes its powers in place into its result, and its
backward raises "modified by an inplace operation"): jitorch's is judged by float64 gradcheck and by the transform
fuzzer's central differences (`transforms.gradient_differences`), not by torch."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch

import jitorch
from jitorch.autograd import gradcheck, gradgradcheck
from tests.fuzz import transforms
from tests.fuzz.generator import _with_grad, grad_loss
from tests.fuzz.program import Program, Stmt, TensorDecl

# x0 float64 of 4 elements; its vander times x0, so the gradient reads every power
PROGRAM = Program(1, (TensorDecl("x0", (4,), "float64", 8104007),),
                  body=(Stmt(("v0 = T.vander(x0, 3)",), ("v0",), "vander"),
                        Stmt(("v1 = v0 * x0[:, None]",), ("v1",), "mul")),
                  outputs=("v1",))


def test_torchs_vander_has_no_gradient_and_jitorchs_passes_gradcheck():
    """Seed 8104007: torch's backward of vander raises; jitorch's vander is ``cumprod`` of the repeated column
    (jitorch/ops/diagonals.py), whose rule is cumprod's, exact at zeros: float64 gradcheck and gradgradcheck pass
    at zeros and negatives, for every N and order, and its Jacobian is torch's forward-mode one (torch.func.jacfwd
    works)."""
    x = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.vander(x).sum().backward()
    for values in ([0.5, -1.5, 2.0], [0.0, 1.0, -2.0], [0.0, 0.0, 3.0], [2.0]):
        for n in (None, 0, 1, 2, 4):
            for increasing in (False, True):
                xj = jitorch.tensor(values, dtype=jitorch.float64, requires_grad=True)
                f = lambda t: jitorch.vander(t, n, increasing)  # noqa: E731
                assert gradcheck(f, (xj,)) and gradgradcheck(f, (xj,))
                want = torch.func.jacfwd(lambda t: torch.vander(t, n, increasing))(torch.tensor(values,
                                                                                             dtype=torch.float64))
                got = jitorch.func.jacrev(f)(jitorch.tensor(values, dtype=jitorch.float64))
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def _loss_of(program, floats):
    def loss_of(T, fn, fixed):
        def loss(*xs):
            total = grad_loss(T, transforms._flatten(transforms._closing(fn, program, fixed, floats)(*xs)))
            return total if total is not None else T.zeros((), dtype=T.float64)
        return loss
    return loss_of


def vmap_grad_run(program):
    """(the float inputs, `check_vmap_grad`'s loss, jitorch's vmap(grad) Run of it over the batched float inputs,
    the others fixed at sample 0)."""
    floats, _ = transforms.float_split(program)
    loss_of = _loss_of(program, floats)
    inputs = transforms._batched(jitorch, program, [0 if i in floats else None for i in range(len(program.inputs))])
    fixed = transforms._sample(jitorch, program, 0)
    argnums = tuple(range(len(floats)))
    got = transforms._call(jitorch, program, lambda fn: lambda *xs: jitorch.func.vmap(jitorch.func.grad(
        loss_of(jitorch, fn, fixed), argnums))(*(xs[i] for i in floats)), inputs)
    return floats, loss_of, got



def checked_vmap_grad_run(program):
    """`vmap_grad_run` of ``program`` after the transform fuzzer's check has run its vmap(grad) and found no
    mismatch (call it with warnings silenced, as the check's samples warn)."""
    outcome = transforms.check(program)
    assert outcome.ran.get("vmap-grad") and not outcome.mismatches
    return vmap_grad_run(program)

def test_vmap_grad_of_vander_runs_against_the_loop_and_central_differences():
    """A program whose loss reads vander has no gradient run against torch (`generator.grad_valid`: torch raises),
    so the transform fuzzer had no oracle for it; its vmap(grad) now runs (`transforms.TORCH_NOT_DIFFERENTIABLE`)
    against the per-sample loop and central differences of the loss, which pass jitorch's gradients and catch them
    doubled."""
    program = _with_grad(PROGRAM)
    assert not program.grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        floats, loss_of, got = checked_vmap_grad_run(program)
        found = []
        transforms.gradient_differences(program, floats, loss_of, got, found)
        assert not found
        wrong = dataclasses.replace(got, outputs=[dataclasses.replace(o, values=o.values * 2) for o in got.outputs])
        transforms.gradient_differences(program, floats, loss_of, wrong, found)
    assert found and found[0].reference == "finite differences"
