"""Main-fuzzer seeds of session 44 found only with options, whose programs differentiate ``renorm_``: each runs
alike in torch, eager and compiled (tests/autograd/test_grads44.py holds their minimised cases)."""

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
