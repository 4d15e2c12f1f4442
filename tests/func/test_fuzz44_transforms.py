"""vmap, vmap(grad) and jvp findings of the transform fuzzer (tests/fuzz/transforms.py) in session 44, each against
torch and a second oracle: torch's autograd on each sample, the per-sample loop, float64 values."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch

import jitorch


def _scatter_prod_loss(T, include_self):
    index = T.tensor([3, 2, 0, 3])

    def loss(x):
        v = x[T.tensor([0, 0, 0, 0])].clone()
        v.scatter_reduce_(0, index, x * T.tensor([-1.75, 0.0, 0.625, 1.875], dtype=x.dtype), "prod",
                          include_self=include_self)
        return (v * T.arange(1, 5, dtype=x.dtype)).sum()
    return loss


@pytest.mark.parametrize("include_self", [False, True])
def test_vmap_grad_of_scatter_reduce_prod_runs_where_torch_raises_its_data_dependent_error_seed_8400167(include_self):
    """Seed 8400167: ``v.scatter_reduce_(0, index, src, 'prod', include_self=False)`` under vmap(grad): torch's
    backward of a 'prod' scatter asks whether the source holds a zero, which its vmap refuses ("vmap: It looks like
    you're either (1) calling .item() on a Tensor ..."), while its plain vmap of the same function runs. jitorch's
    vmap(grad) gives the gradients of torch's autograd on each sample and of its own per-sample loop; the transform
    fuzzer now takes that refusal as torch's (`transforms._torch_differentiation_refused`)."""
    rows = np.array([[0.5, -1.5, 2.0, 0.75], [1.0, 0.0, -0.25, 3.0], [2.0, 1.5, 0.5, -1.0]])
    with pytest.raises(RuntimeError, match=r"vmap: It looks like you're either \(1\) calling \.item\(\)"):
        torch.func.vmap(torch.func.grad(_scatter_prod_loss(torch, include_self)))(torch.tensor(rows))
    torch.func.vmap(_scatter_prod_loss(torch, include_self))(torch.tensor(rows))
    got = jitorch.func.vmap(jitorch.func.grad(_scatter_prod_loss(jitorch, include_self)))(jitorch.tensor(rows))
    loop = [jitorch.func.grad(_scatter_prod_loss(jitorch, include_self))(jitorch.tensor(r)).tolist() for r in rows]
    want = []
    for r in rows:
        x = torch.tensor(r, requires_grad=True)
        want.append(torch.autograd.grad(_scatter_prod_loss(torch, include_self)(x), x)[0].numpy())
    np.testing.assert_allclose(got.numpy(), loop, rtol=1e-12, atol=0)
    np.testing.assert_allclose(got.numpy(), np.stack(want), rtol=1e-12, atol=1e-15)


def test_the_transform_fuzzer_judges_seed_8400167_by_torch_autograd_on_each_sample(monkeypatch):
    """The harness side of seed 8400167: its program passes, and its vmap(grad) check ran against torch.autograd
    (a jitorch gradient made wrong there is caught, not waved through with torch's refusal)."""
    from tests.fuzz import transforms
    from tests.fuzz.generator import generate, op_table

    program, _ = generate(8400167, table=op_table())
    assert "scatter_reduce_" in [s.tag for s in program.body]
    real = transforms._torch_autograd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = transforms.check(program)
        assert not outcome.mismatches and outcome.ran["vmap-grad"] == 1
        monkeypatch.setattr(transforms, "_torch_autograd", lambda program, floats: transforms.Run(outputs=[
            dataclasses.replace(o, values=o.values * 2 + 1) for o in real(program, floats).outputs]))
        wrong = transforms.check(program).mismatches
    assert wrong and all(m.mode == "vmap-grad" and m.reference == "torch.autograd" for m in wrong)


@pytest.mark.parametrize("seed", [8410191, 8410202])
def test_finite_differences_leave_out_programs_of_special_functions_torch_gives_no_derivative(seed):
    """Seeds 8410191 and 8410202 of ``--namespaced``: ``T.special.hermite_polynomial_h(x0, 1.5)`` (and a Bessel-family
    function) under jvp, where torch's jvp refused the program (it writes a captured tensor), so central differences
    judged it: they see the polynomial's slope (0.75), where torch gives these functions no derivative (their results
    take no tangent: torch.func.jvp's tangent is 0, and torch.autograd finds no graph) and jitorch does the same. The
    differences now leave out programs of an op declared nondifferentiable (`transforms.NONDIFFERENTIABLE`)."""
    from tests.fuzz import transforms
    from tests.fuzz.generator import generate, op_table

    assert {"special_hermite_polynomial_h", "special_bessel_j0", "special_modified_bessel_k1"} <= \
        transforms.NONDIFFERENTIABLE and not {"view", "exp", "special_ndtr", "argmax"} & transforms.NONDIFFERENTIABLE
    for T in (torch, jitorch):
        x, n = T.tensor(0.3, dtype=T.float64), T.tensor(1.5, dtype=T.float64)
        primal, tangent = T.func.jvp(lambda x: T.special.hermite_polynomial_h(x, n), (x,), (T.ones_like(x),))
        assert primal.item() == pytest.approx(0.6) and tangent.item() == 0.0
        assert not T.special.hermite_polynomial_h(x.requires_grad_(), n).requires_grad
    program, _ = generate(seed, table=op_table(True))
    assert transforms._fd_blind(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not transforms.check(program).mismatches


@pytest.mark.parametrize("values, correction", [([], 0), ([], 1), ([1.0, 3.0], 2), ([2.0], 1), ([1.0, 3.0], 1)])
def test_var_tangent_with_no_degrees_of_freedom_over_a_dim_is_torchs_seed_8431497(values, correction):
    """Seed 8431497 (``--namespaced --out-views 0.5``): ``v2.var([0], False, False)`` of an empty ``v2`` (a mask that
    selected nothing) had tangent NaN where torch.func.jvp's (and torch.autograd's, through the program) is 0: the
    backward rule for 0 degrees of freedom over a dim put the infinite factor on ``g``, so its transpose multiplied
    the tangents' sum by inf (0 over no elements: NaN; 1 for [1, 3] with correction 2: inf where torch's sum of
    -inf and 2 inf is NaN). The factor now scales each element, as torch's var_jvp; the backward is unchanged."""
    t = np.arange(1.0, len(values) + 1)
    got = jitorch.func.jvp(lambda x: x.var(0, correction=correction), (jitorch.tensor(values),), (jitorch.tensor(t),))
    want = torch.func.jvp(lambda x: x.var(0, correction=correction), (torch.tensor(values),), (torch.tensor(t),))
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    x, tx = jitorch.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    x.var(0, correction=correction).backward()
    tx.var(0, correction=correction).backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_fuzz_seed_8431497_runs_alike_under_the_transforms():
    from tests.fuzz import transforms
    from tests.fuzz.generator import generate, op_table

    program, _ = generate(8431497, table=op_table(True), out_views=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not transforms.check(program).mismatches


@pytest.mark.parametrize("make, values", [
    (lambda x: x[0:1:2, 0:1].view_as(x), [[-2.5]]), (lambda x: x[:, 1:].view_as(x[:, :1]), [[1.5, -2.5]]),
    (lambda x: x[:, ::2].expand_as(x[:, 1:]), [[-2.5, 1.5]])], ids=["view_as base", "view_as sibling", "expand_as"])
def test_an_in_place_write_through_view_as_of_a_view_reaches_the_base_tangent_seed_8405951(make, values):
    """Seed 8405951: ``v5 = x0[0:1:2, 0:1].view_as(x0); v5.relu_()`` left x0's tangent at -0.25 where torch's (and
    the central differences') is 0: ``view_as``'s ``other`` shares the viewed memory too, so the forward mode took
    the view for a copy (two operands sharing its memory) and the write reached the copy's tangent alone. The
    viewed operand is ``self``; ``other`` gives sizes only."""
    got = []
    for T in (torch, jitorch):
        def f(x):
            make(x).relu_()
            return x * 1
        x = T.tensor(values, dtype=T.float64)
        got.append(T.func.jvp(f, (x,), (T.full_like(x, -0.25),))[1].tolist())
    assert got[0] == got[1]
