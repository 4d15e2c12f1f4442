"""Session 55's fuzz campaigns: statements at the dtype and layout rules' edges (``--edges``,
`generator.Generator.edge_pattern`), inputs laid out channels-last or expanded (`program.EDGE_LAYOUTS`), and the
``--models`` gradient penalty differentiated by ``autograd.grad``; with the bug that last one finds."""


import numpy as np
import pytest

import torch

import jitorch
from tests.fuzz.generator import EDGE_KINDS, generate
from tests.fuzz.models import DOUBLE_BACKWARD, check_model, generate_model, model_source
from tests.fuzz.oracle import CPU_MODES, check
from tests.fuzz.program import TensorDecl, make_tensor


pytestmark = pytest.mark.usefixtures("quiet_warnings")


def test_edges_draws_every_kind_of_edge_statement_that_torch_runs():
    seen = set()
    for seed in range(5500100, 5500104):
        _, g = generate(seed, 8, edges=0.9)
        seen |= {tag.removeprefix("edge ") for tag in g.accepted if tag.startswith("edge ")}
    assert seen == set(EDGE_KINDS)


def test_edge_layouts_are_channels_last_and_expanded_inputs_of_the_declared_values():
    decl = TensorDecl("x0", (3, 2, 2, 2), "float32", 7)
    values = decl.values()
    t, base = make_tensor(jitorch, decl, "cpu", "channels_last")
    assert t.is_contiguous(memory_format=jitorch.channels_last) and not t.is_contiguous()
    np.testing.assert_array_equal(t.numpy(), values)
    t, base = make_tensor(jitorch, decl, "cpu", "expanded")
    assert t.stride()[0] == 0 and tuple(base.shape) == (1, 2, 2, 2)
    np.testing.assert_array_equal(t.numpy(), np.broadcast_to(values[:1], values.shape))
    # (neither applies: a 2-d input channels-last is permuted, an input of no dim of two elements is not expanded)
    small = TensorDecl("x1", (1, 1), "int64", 8)
    assert make_tensor(jitorch, small, "cpu", "expanded")[0].stride() == (1, 1)
    assert make_tensor(jitorch, TensorDecl("x2", (2, 3), "int64", 9), "cpu", "channels_last")[0].stride() == (1, 2)


def test_edges_program_with_channels_last_and_expanded_inputs_checks_clean_seed_5500129():
    program, _ = generate(5500129, 8, edges=0.9)
    layouts = {layout for call in program.layouts for layout in call}
    assert {"channels_last", "expanded"} <= layouts and any(len(t.shape) == 4 for t in program.inputs)
    assert program.grad
    assert check(program, CPU_MODES).mismatches == []


def test_models_gradient_penalty_by_autograd_grad_through_a_compiled_call_raises_seed_291():
    """Fuzz seed 291 of ``--models`` (its ``double backward`` scenario, the penalised loss now differentiated by
    ``autograd.grad`` for the inputs half the time): the compiled model's backward graph read nothing requiring grad, so
    the node that raises torch.compile's double-backward error hung on a leaf of its own; ``autograd.grad`` runs only
    the nodes on a way to the tensors asked for, skipped it, and gave the gradient without the penalty's second-order
    term (0.405 where torch's is -0.781). It raises now (`jit.differentiable._without_double_backward`)."""
    program = generate_model(291)
    assert program.scenario_kind == "double backward"
    assert "gg = T.autograd.grad(l + pen, " in model_source(program)
    outcome = check_model(program)
    assert outcome.mismatches == []
    assert DOUBLE_BACKWARD in outcome.runs["compiled"].error and not outcome.runs["torch"].error


def test_edges_never_calls_median_over_a_dim_where_an_input_is_expanded_seed_5560417():
    """Fuzz seed 5560417 of ``--edges 0.5``: ``T.median(x2, 0)[0]`` of an int16 input laid out expanded in the second
    call; torch's median over a dim of an expanded tensor returns values no element holds (5 for a column of -1s,
    docs/differences-from-torch.md), jitorch's is the median of the values, torch's on a contiguous copy. An oracle
    issue, not jitorch's: such programs no longer call median or nanmedian (`generator.TORCH_WRONG_ON_EXPANDED`)."""
    row = [[1, -1, 5, 2]]
    got = jitorch.median(jitorch.tensor(row, dtype=jitorch.int16).expand(3, 4), 0)[0]
    want = torch.median(torch.tensor(row, dtype=torch.int16).expand(3, 4).contiguous(), 0)[0]
    assert got.tolist() == want.tolist() == row[0]
    program, g = generate(5560417, 14, edges=0.5)
    assert any("expanded" in call for call in program.layouts) and g.expanded_inputs
    assert not any(tag.startswith(("median", "nanmedian")) for tag in g.accepted)
    assert check(program, CPU_MODES).mismatches == []
