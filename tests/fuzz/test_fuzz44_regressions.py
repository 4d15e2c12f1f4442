"""Failures of the differential fuzzer (tests/fuzz/oracle.py) found in session 44, each with a second oracle."""

import warnings

import numpy as np
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
