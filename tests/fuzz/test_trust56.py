"""Session 56's triage of the fuzz failures found at the end of session 55 (``--edges 0.4 --out-views 0.4
--regions 0.2``): those that were the oracle's or the generator's, not jitorch's."""

import warnings

import numpy as np
import pytest

import torch

import jitorch
from tests.fuzz.generator import Facts, Var, generate
from tests.fuzz.old_values import OldValues
from tests.fuzz.oracle import (INFERENCE_REGION, SkippedChecks, _guarded_grad, check, compare_grads,
                               plain_torch_grad)
from tests.fuzz.program import Program, Stmt, TensorDecl

EAGER_MODES = ("torch", "eager")


pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _session55_program(seed):
    return generate(seed, 14, out_views=0.4, regions=0.2, edges=0.4)


def test_triu_out_of_batches_that_do_not_flatten_is_written_only_into_a_compact_buffer_seed_5603034():
    """Fuzz seed 5603034: ``T.triu(v0, 1, out=v0)`` with ``v0`` a gather of a channels-last input (strides
    (18, 1, 6, 3) of shape (4, 3, 3, 2)); torch 2.13 steps the batches by ``out.stride(-3)`` alone and left 3.0
    where the triangle holds 0. jitorch writes each matrix's triangle (torch's into a compact out); such programs
    now call triu/tril ``out=`` of four dims into a new compact buffer only (`generator.TORCH_WRONG_INTO_BATCHES`)."""
    values = np.arange(72.0).reshape(4, 3, 3, 2)
    want = torch.triu(torch.tensor(values), 1)
    for T in (jitorch, torch):
        out = T.tensor(values).contiguous(memory_format=T.channels_last)
        assert out.stride() == (18, 1, 6, 3)
        T.triu(T.tensor(values), 1, out=out)
        if T is jitorch:
            np.testing.assert_array_equal(out.numpy(), want.numpy())
        else:  # (torch's own error, which the fuzzer no longer meets)
            assert not torch.equal(out, want)
    program, g = _session55_program(5603034)
    assert "index_tensor" in g.accepted and "triu(out)" not in g.accepted
    assert check(program, EAGER_MODES).mismatches == []


def test_torch_runs_refuse_a_tensor_q_outside_the_unit_range_as_torch_without_a_mode_seed_5600577():
    """Fuzz seed 5600577: ``v1.nanquantile(v8, 0)`` of a 0-d ``v8`` of -1.76; torch skips its range check of a
    tensor ``q`` while a Python dispatch mode is active (the oracle's torch runs hold three) and clamped it, where
    jitorch raises torch's error. The oracle's torch runs make the check (`oracle.SkippedChecks`)."""
    x, q = torch.tensor([2.5, -0.5]), torch.tensor(-1.75)
    with OldValues():
        assert torch.nanquantile(x, q).item() == -0.5
        with SkippedChecks(), pytest.raises(RuntimeError, match=r"q values must be in the range \[0, 1\]"):
            x.nanquantile(q)
        with SkippedChecks():
            assert x.quantile(torch.tensor([0.0, 1.0])).tolist() == [-0.5, 2.5]
    with pytest.raises(RuntimeError, match=r"q values must be in the range \[0, 1\]"):
        jitorch.tensor([2.5, -0.5]).nanquantile(jitorch.tensor(-1.75))
    program, _ = _session55_program(5600577)
    assert "nanquantile" in "".join(line for s in program.body for line in s.lines)
    assert check(program, EAGER_MODES).mismatches == []


# the two programs as the fuzzer minimised them (the generator now draws others from these seeds)
INFERENCE_PROGRAMS = {
    5601338: (((2, 1, 3), (2, 2, 3)), (
        Stmt(("with T.inference_mode():", "    v16 = T.hamming_window(1, device=D, requires_grad=True)"), ("v16",)),),
        ("v16",)),
    5601341: (((3,), (3,), (3,)), (
        Stmt(("v0 = x2.flip(0)",), ("v0",)),
        Stmt(("v9 = x0.reshape(-1).repeat(8)[:24].reshape((1, 4, 2, 3)).contiguous(memory_format=T.channels_last)",),
             ("v9",)),
        Stmt(("v10 = v9.flatten(1)",), ("v10",)),
        Stmt(("with T.inference_mode():", "    v12 = T.hsplit(v10, [1])[-1]"), ("v12",))),
        ("v0", "v12")),
}


@pytest.mark.parametrize("seed", sorted(INFERENCE_PROGRAMS))
def test_programs_with_an_inference_mode_region_compare_gradients_with_torch_without_modes(seed):
    """Fuzz seeds 5601338 (backward through ``T.hamming_window(1, device=D, requires_grad=True)`` made in inference
    mode: torch found nothing requiring grad) and 5601341 (``T.hsplit(v10, [1])[-1]`` in inference mode of a
    tensor requiring grad: torch's did not require grad): torch's autograd of tensors made in inference mode
    differs under the oracle's dispatch modes; without them it is jitorch's. Such programs are compared with
    torch's run without modes (`oracle.INFERENCE_REGION`), as those holding `TORCH_MODE_FORMULAS`."""
    shapes, body, outputs = INFERENCE_PROGRAMS[seed]
    inputs = tuple(TensorDecl(f"x{i}", shape, "float32", seed + i) for i, shape in enumerate(shapes))
    program = Program(seed, inputs, body=body, outputs=outputs, grad=True,
                      layouts=(("contiguous",) * len(inputs),) * 2)
    assert any(s.lines[0] == INFERENCE_REGION for s in program.body)
    moded, eager = _guarded_grad(program, "torch"), _guarded_grad(program, "eager")
    assert compare_grads(eager, moded, "eager", "torch", against_torch=True, program=program)
    assert compare_grads(eager, plain_torch_grad(program, moded), "eager", "torch", against_torch=True,
                         program=program) == []
    assert check(program, EAGER_MODES, grad_modes=EAGER_MODES).mismatches == []


def test_moments_without_degrees_of_freedom_are_not_drawn_seed_5592326():
    """Fuzz seed 5592326: ``v5.std([2], correction=3)`` over three copies of -1.73168194 (float64): torch's Welford
    update over a dim sums exact zeros and gives NaN, jitorch's two passes subtract the rounded mean and give inf,
    as torch's own two passes over every element do (docs/differences-from-torch.md). Statements torch warns have
    no degrees of freedom are no longer drawn (`generator.NO_DEGREES_OF_FREEDOM`)."""
    row = [[-1.73168194] * 3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.tensor(row, dtype=torch.float64).std(correction=3).item() == float("inf")
        assert torch.tensor(row * 2, dtype=torch.float64).std(1, correction=3).isnan().all()
        assert jitorch.tensor(row, dtype=jitorch.float64).std(correction=3).item() == float("inf")
    program, g = _session55_program(5592326)
    assert not any("correction=3" in line for s in program.body for line in s.lines)
    assert check(program, EAGER_MODES).mismatches == []
    env = {"v": Var("v", torch.ones(2, 3), Facts())}
    assert g.evaluate(env, "v.std(1, correction=3)") is None and g.evaluate(env, "v.std(1, correction=2)") is not None
