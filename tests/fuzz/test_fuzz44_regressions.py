"""Failures of the differential fuzzer (tests/fuzz/oracle.py) found in session 44, each with a second oracle."""

import warnings

import numpy as np
import pytest
import torch

import jitorch
from tests.fuzz.generator import generate, op_table
from tests.fuzz.oracle import (CPU_MODES, TORCH_MODE_FORMULAS, ComputedThrough, check, compare_grads,
                               plain_torch_grad, run_grad)

TABLE = op_table()


def test_median_gradient_under_a_nan_is_torchs_plain_formula_not_its_dispatch_mode_one_seed_8601569():
    """Seed 8601569: ``T.acos(T.median(x1))`` at ``x1 = [2.875, -1.5]``: acos's gradient at the median -1.5 is NaN.
    torch's plain CPU backward gives it to the median's element alone ([0, nan]), and so does jitorch; under a
    dispatch mode (the oracle's torch runs hold three) torch takes its subclass formula ``mask * (g / count)`` and
    gives [nan, nan]. The oracle now compares such programs with torch's run without modes (`TORCH_MODE_FORMULAS`)."""
    def grad(T, mode=None):
        x = T.tensor([2.875, -1.5], dtype=T.float64, requires_grad=True)
        with mode or warnings.catch_warnings():
            T.acos(T.median(x)).backward()
        return x.grad.tolist()
    want = grad(torch)
    assert want[0] == 0.0 and np.isnan(want[1])
    moded = grad(torch, ComputedThrough())
    assert np.isnan(moded).all()  # (torch's other formula, which the oracle no longer takes for these ops)
    got = grad(jitorch)
    assert got[0] == 0.0 and np.isnan(got[1])

    program, _ = generate(8601569, table=TABLE)
    assert {"median"} <= {s.tag for s in program.body} and "median" in TORCH_MODE_FORMULAS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        moded_run = run_grad(program, "torch")
        assert compare_grads(run_grad(program, "eager"), moded_run, "eager", "torch", True, program)
        plain = plain_torch_grad(program, moded_run)[1]["x1"].values
        assert not check(program, CPU_MODES).mismatches
    assert plain[0] == 0.0 and np.isnan(plain[1])


def test_the_namespaced_table_calls_torch_special_functions_in_their_namespace():
    """``op_table(True)`` (``--namespaced``) adds the registry's ``special_*`` ops, which torch and jitorch call as
    ``T.special.*`` (the default table, by top-level names, never drew them); the default table is unchanged, so the
    fixed seeds draw the programs they drew."""
    default, namespaced = op_table(), op_table(True)
    calls = {e.call: e.forms for e in namespaced if e.call.startswith("special.")}
    assert {"special.ndtr", "special.i0e", "special.zeta", "special.hermite_polynomial_h"} <= set(calls)
    assert all(forms == ["function", "out"] for forms in calls.values())
    assert [e.op.name for e in default] == [e.op.name for e in namespaced if not e.call.startswith("special.")]
    assert not any(e.call.startswith("special.") for e in default)
    program, _ = generate(8620152, table=namespaced)
    assert "T.special.ndtr(x1, out=" in "\n".join(line for s in program.body for line in s.lines)


def _out_kind(stmt):
    if len(stmt.lines) == 2:
        return "variable"
    view = stmt.lines[1]
    marks = (("permuted", ".permute("), ("stepped", "[::2]"), ("offset", "[1:]"))
    return next((k for k, mark in marks if mark in view), "resized")


@pytest.mark.parametrize("seed, kind", [(9100000, "stepped"), (9100005, "variable"), (9100009, "permuted"),
                                        (9100018, "resized"), (9100030, "offset")])
def test_out_views_write_variables_views_and_resized_buffers_alike(seed, kind):
    """``generate(..., out_views=1.0)`` (``--out-views``) writes each ``out=`` result into a variable of the program,
    a permuted, stepped or offset view of a new buffer (which the program may return: its other elements stay
    zeros), or a buffer of another shape, which the call resizes; a program of each kind runs alike in every CPU
    mode."""
    program, _ = generate(seed, table=TABLE, out_views=1.0)
    assert kind in {_out_kind(s) for s in program.body if s.tag.endswith("(out)")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check(program, CPU_MODES).mismatches


def test_polynomials_torch_leaves_undefined_at_nan_are_never_called_seed_8660159():
    """Seed 8660159 (``--namespaced --out-views 0.5``): ``T.special.laguerre_polynomial_l(v1, v2, out=v2)`` with ``v1``
    NaN (an ``xlogy_`` by a negative): torch returns its recurrence's uninitialised variable (0.0 alone, a denormal
    into the ``out=`` that is ``n``), jitorch NaN, as the polynomial's value at NaN (1 - x at n = 1 is NaN in both).
    The generator calls none of the polynomials torch leaves undefined there (docs/differences-from-torch.md)."""
    from tests.fuzz.generator import TORCH_UNDEFINED_AT_NAN

    nan = float("nan")
    assert np.isnan(torch.special.laguerre_polynomial_l(torch.tensor([nan]), torch.tensor([1.0])).item())
    assert np.isnan(jitorch.special.laguerre_polynomial_l(jitorch.tensor([nan]), jitorch.tensor([3.0])).item())
    assert "special_laguerre_polynomial_l" in TORCH_UNDEFINED_AT_NAN
    table = op_table(True)
    for seed in (8660159, *range(9200000, 9200030)):
        program, _ = generate(seed, table=table, out_views=0.5)
        assert not any(s.tag.removesuffix("(out)") in TORCH_UNDEFINED_AT_NAN for s in program.body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check(generate(8660159, table=table, out_views=0.5)[0], CPU_MODES).mismatches


def test_arctan2_of_an_integer_takes_no_gradient_run_against_torch_seed_8442441():
    """Transform-fuzz seed 8442441 (``--out-views 0.5``): ``v2.arctan2(x1)`` of a uint8 ``v2``: torch's derivative of
    atan2 squares the integer operand in its dtype (docs/differences-from-torch.md, seed 7805681), and its alias
    arctan2 was not marked, so torch's tangents (-218.5 against 0.86) were taken as the oracle."""
    from tests.fuzz import transforms
    from tests.fuzz.generator import INTEGER_OPERAND

    program, _ = generate(8442441, table=TABLE, out_views=0.5)
    assert "arctan2" + INTEGER_OPERAND in [s.tag for s in program.body] and not program.grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not transforms.check(program).mismatches
