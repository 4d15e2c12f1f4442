"""Fuzz seeds of session 44 whose gradients were silently wrong: main-fuzzer seeds found only with options, whose
programs differentiate ``renorm_`` and now run alike in torch, eager and compiled, and a transform-fuzz seed
through ``matrix_exp`` whose torch gradient is inexact (tests/autograd/test_grads44.py holds their minimised
cases)."""

import warnings

import pytest

from tests.fuzz.generator import generate, op_table
from tests.fuzz.oracle import CPU_MODES, MODES, check


@pytest.mark.parametrize("seed, options, modes", [
    # the eager gradient through a slice of NaN norm was NaN where torch's is g (-1.64)
    (8663642, {"namespaced": True, "out_views": 0.5}, CPU_MODES),
    # the compiled gradient of renorm_ raised "the derivative for 'renorm' is not implemented"
    (8670237, {"chains": 0.3}, MODES),
])
def test_renorm_gradient_programs_run_alike(seed, options, modes):
    """Seeds 8663642 (``--namespaced --out-views 0.5``) and 8670237 (``--cuda --chains 0.3``)."""
    table = op_table(options.get("namespaced", False))
    program, _ = generate(seed, table=table, chains=options.get("chains", 0.0),
                          out_views=options.get("out_views", 0.0))
    assert any(s.tag.startswith("renorm") for s in program.body) and program.grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = check(program, modes).mismatches
    assert not found, "\n".join(str(m) for m in found)


def test_matrix_exp_programs_whose_torch_gradient_is_inexact_are_judged_by_central_differences_seed_8409257():
    """Transform fuzz seed 8409257: vmap(grad) of ``expm1(matrix_exp(x))`` on 3x3 samples, where torch.func's and
    torch.autograd's gradients are both far off (2.2e17 against the exact 1.6e18 at one sample; tests/autograd/
    test_grads44.py). Such a program (`transforms.TORCH_INEXACT_GRADIENT`) is judged by central differences at
    every sample: they pass jitorch's gradients and catch them wrong at one sample alone."""
    import dataclasses

    from tests.fuzz import transforms
    from tests.fuzz.test_transforms_vander import checked_vmap_grad_run

    program, _ = generate(8409257, table=op_table())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        floats, loss_of, got = checked_vmap_grad_run(program)
        found = []
        assert transforms._torch_gradient_inexact(program, floats, loss_of, got, found) and not found
        values = got.outputs[0].values.copy()
        values[2] *= 0.9
        wrong = dataclasses.replace(got, outputs=[dataclasses.replace(got.outputs[0], values=values)])
        assert not transforms._torch_gradient_inexact(program, floats, loss_of, wrong, found)
    assert found and found[0].reference == "finite differences"
