"""``cat`` and the ops torch runs as a cat (``stack``, ``hstack``, ``vstack``, ``row_stack``, ``dstack``,
``column_stack``, ``concat``, ``concatenate``) with an ``out=`` tensor that an operand shares memory with: torch
resizes ``out`` first, then refuses an operand that overlaps it (``out`` itself, even empty) unless the operand is
1-D and empty then; stack and the stackers are checked as the cat of the operands they give it (views of the
inputs). Fuzz seed 8662059 (``--namespaced --out-views 0.5``): ``hstack([e, e, e], out=e)`` of a 1-D empty ``e``."""

import warnings

import pytest
import torch

import jitorch

FUNCTIONS = ["cat", "concat", "concatenate", "hstack", "vstack", "row_stack", "stack", "column_stack", "dstack"]


def _case(T, case):
    """(operands, out) of a named case."""
    if case == "all_out_1d_empty":
        e = T.zeros(0)
        return [e, e, e], e
    if case == "out_1d_empty_resized":
        e, x = T.zeros(0), T.arange(3.0)
        return [x, e, x], e
    if case == "out_1d_empty_others_apart":
        e, x = T.zeros(0), T.arange(3.0)
        return [x, x], e
    if case == "out_2d_empty":
        e = T.zeros(0, 3)
        return [e, e], e
    if case == "empty_view_of_empty_out":
        e = T.zeros(0)
        return [e[0:0], e], e
    if case == "out_nonempty":
        e = T.arange(3.0)
        return [e, e], e
    if case == "disjoint_slices":
        b = T.arange(6.0)
        return [b[3:]], b[:3]
    if case == "overlapping_slices":
        b = T.arange(6.0)
        return [b[2:5]], b[:3]
    if case == "empty_view_of_nonempty_out":
        e = T.zeros(4)
        return [e[:0], T.ones(4)], e
    if case == "empty_2d_view_of_nonempty_out":
        e = T.zeros(4, 1)
        return [e[:0], T.ones(4, 1)], e
    raise AssertionError(case)


CASES = ["all_out_1d_empty", "out_1d_empty_resized", "out_1d_empty_others_apart", "out_2d_empty",
         "empty_view_of_empty_out", "out_nonempty", "disjoint_slices", "overlapping_slices",
         "empty_view_of_nonempty_out", "empty_2d_view_of_nonempty_out"]


def _run(T, name, case):
    tensors, out = _case(T, case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's warning on resizing an out= tensor of elements)
        try:
            result = getattr(T, name)(tensors, out=out)
        except RuntimeError as e:
            return "error", str(e)
    assert result is out
    return tuple(result.shape), result.flatten().tolist()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_cat_family_out_overlapping_an_operand_raises_or_runs_as_torch_seed_8662059(name, case):
    """Each function on each case: torch's error (RuntimeError, its message) or torch's result written into out."""
    assert _run(jitorch, name, case) == _run(torch, name, case)


def test_hstack_of_a_1d_empty_tensor_into_itself_runs_seed_8662059():
    """The fuzzer's statement: jitorch raised the overlap error where torch skips the 1-D empty operands."""
    e = jitorch.zeros(0)
    assert jitorch.hstack([e, e, e], out=e) is e and tuple(e.shape) == (0,)


def test_the_fuzz_program_of_seed_8662059_runs_alike():
    """The differential fuzzer's program of seed 8662059 (``--namespaced --out-views 0.5``) now passes its check
    (jitorch raised the overlap error where torch ran)."""
    from tests.fuzz.generator import generate, op_table
    from tests.fuzz.oracle import CPU_MODES, check

    program, _ = generate(8662059, table=op_table(True), out_views=0.5)
    assert any(s.tag.startswith("hstack") for s in program.body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check(program, CPU_MODES).mismatches
