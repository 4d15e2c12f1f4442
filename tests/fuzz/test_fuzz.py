"""The differential fuzzer on a fixed set of seeds: each random program (see tests/fuzz/generator.py) runs
alike on torch, jitorch eager, compiled, the reference interpreter and, for every fourth seed, the emulated
CUDA device; with a gradient run where torch can differentiate it. A failure shows the program minimised.

Every 30th seed's program (2, 32, 62, 92) draws 40% of its statements from the view-of-gather chains (a pad
then a pool's windows, a gather then views: `generator.Generator.pad_windows`, `gather_views`).

``python -m tests.fuzz --hours 1`` runs the same check on new seeds for as long as asked (``--chains 0.3``: with
those chains).
"""

import pytest

from tests.fuzz.__main__ import describe
import torch

from tests.fuzz.generator import AMONG_TIES, INTEGER_OPERAND, _ties, generate, grad_valid, op_table
from tests.fuzz.minimise import minimise
from tests.fuzz.oracle import CPU_MODES, MODES, check

SEEDS = range(120)
TABLE = op_table()


def _chains(seed):
    return 0.4 if seed % 30 == 2 else 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_program_runs_alike_in_every_mode(seed):
    program, _ = generate(seed, table=TABLE, chains=_chains(seed))
    modes = MODES if seed % 4 == 0 else CPU_MODES
    found = check(program, modes).mismatches
    if found:
        small = minimise(program, found[0], modes, budget=30)
        pytest.fail("the modes differ on this program (minimised):\n"
                    + describe(small, check(small, modes).mismatches or found), pytrace=False)


def test_the_generator_is_deterministic():
    assert generate(7, table=TABLE)[0] == generate(7, table=TABLE)[0]


def test_the_op_table_comes_from_the_registry():
    """Ops are fuzzed by the registry's declarations: every public deterministic op torch also has."""
    names = {e.op.name for e in TABLE}
    assert {"add", "matmul", "as_strided", "diagonal", "scatter_reduce", "max.dim", "cumsum"} <= names
    assert not any(e.op.kind == "random" or e.name.startswith("_") for e in TABLE)
    assert all(e.forms for e in TABLE)


def test_half_types_reach_no_op_documented_to_differ_there_seed_7600518():
    """Seed 7600518 called matrix_exp on a float16 tensor: torch's CPU kernel computes in float16 and gave NaN,
    jitorch's in float32 (a documented difference); the generator now leaves half operands out of such ops."""
    program, _ = generate(7600518, table=TABLE, chains=0.2)
    assert "matrix_exp" not in describe(program, [])  # (its other statements are drawn as before)
    assert not check(program, CPU_MODES).mismatches


def test_xlogy_takes_no_half_operand_in_any_place_seed_7920026():
    """Seed 7920026 (``--chains 0.3``) drew ``T.xlogy(c1, x1, out=v2)`` of a 0-d float32 ``c1`` and a bfloat16
    ``x1``: a bfloat16 result, whose log torch rounds to bfloat16 before the product (docs/differences-from-
    torch.md), which ``.float().exp()`` then showed at float32's tolerance. Half operands of `HALF_DIFFERS` ops
    were left out only as ``self``."""
    program, _ = generate(7920026, table=TABLE, chains=0.3)
    assert "xlogy" not in [s.tag for s in program.body]
    assert not check(program, CPU_MODES).mismatches


def test_atan2_of_an_integer_takes_no_gradient_run_against_torch():
    """torch's atan2 gradient wraps an integer operand's square (fuzz seed 7805681): seed 7805400's program
    calls atan2 on an integer tensor, and would otherwise have a gradient run."""
    program, _ = generate(7805400, table=TABLE)
    assert [s.tag for s in program.body if "atan2" in s.tag] == ["atan2" + INTEGER_OPERAND]
    assert grad_valid(program) and not program.grad


def test_addcmul_of_an_integer_takes_no_gradient_run_against_torch_seed_7901612():
    """Seed 7901612's ``x0.addcmul(x1, x2, value=-1)`` of uint8 x0, x1 and a float32 x2: torch's gradient of x2 is
    ``x1 * value`` in uint8 (3 * -1 = 253); the program keeps its value runs and has no gradient run against torch."""
    program, _ = generate(7901612, table=TABLE)
    assert [s.tag for s in program.body if "addcmul" in s.tag] == ["addcmul" + INTEGER_OPERAND]
    assert grad_valid(program) and not program.grad
    assert not check(program, CPU_MODES).mismatches


def test_in_place_addcdiv_of_an_integer_takes_no_gradient_run_against_torch_seed_8501812():
    """Seed 8501812's ``v9.addcdiv_(v2, x1, value=-1)`` of a uint8 ``v2``: torch's gradient of x1 multiplies ``v2``
    by ``value`` in uint8 (3 * -1 = 253: -1012 where the derivative, and jitorch's, is 12). An in-place statement's
    tag ends in "_" after the marker, which `torch_gradient_untrusted` missed; the program keeps its value runs."""
    program, _ = generate(8501812, table=TABLE)
    assert [s.tag for s in program.body if "addcdiv" in s.tag] == ["addcdiv" + INTEGER_OPERAND + "_"]
    assert grad_valid(program) and not program.grad
    assert not check(program, CPU_MODES).mismatches


def test_topk_among_ties_takes_no_gradient_run_against_torch_seed_7805437():
    """Seed 7805437's ``x0.topk(3, 0, False)`` selects among equal values, whose gradient torch and jitorch give
    to different ones of them; the program keeps its value runs and has no gradient run against torch."""
    program, _ = generate(7805437, table=TABLE)
    assert [s.tag for s in program.body if "topk" in s.tag] == ["topk" + AMONG_TIES]
    assert grad_valid(program) and not program.grad
    assert not check(program, CPU_MODES).mismatches


def test_ties_are_equal_neighbours_or_for_computed_values_near_ones():
    row = torch.tensor([[-1.0, 0.5, 0.5, 2.0]])
    assert _ties(row, 1, exact=True) and not _ties(row[:, 2:], 1, exact=True)
    assert _ties(torch.tensor([1.0, float("nan"), float("nan")]), 0, exact=True)
    assert not _ties(torch.tensor([1.0, float("nan")]), 0, exact=True)
    near = torch.tensor([1.0, 1.0 + 2 ** -20, 3.0])
    assert _ties(near, 0, exact=False) and not _ties(near, 0, exact=True)
    assert _ties(torch.tensor([[2, 2], [1, 3]]), 1, exact=True) and not _ties(torch.tensor([[1, 2]]), 1, True)


@pytest.mark.parametrize("seed, chains", [(8601569, 0.0),  # session 44 fuzz
                                          (7610840, 0.0), (7610939, 0.0), (7612221, 0.0), (7612269, 0.0),
                                          (7612101, 0.0), (7701141, 0.2), (7701876, 0.2), (7802351, 0.0),
                                          (7802475, 0.0), (7802741, 0.0),
                                          (7811027, 0.2), (7811197, 0.2),
                                          (7803691, 0.0), (7804472, 0.0), (7805681, 0.0), (7805437, 0.0),
                                          (7820309, 0.0), (7820783, 0.0), (7822517, 0.0), (7822899, 0.0),
                                          (7860540, 0.0), (7861512, 0.0), (7860971, 0.0),
                                          (7901612, 0.0), (7902232, 0.0), (7902920, 0.0), (7920026, 0.3)])
def test_fixed_failures_run_alike_in_every_cpu_mode(seed, chains):
    """Session 44's: 8601569 (torch's gradient of a full ``median`` under a NaN is ``mask * (g / count)`` under the
    oracle's dispatch modes, its plain formula's elsewhere: `oracle.TORCH_MODE_FORMULAS`;
    tests/fuzz/test_fuzz44_regressions.py).
    Failures of helper 125's campaign, fixed: 7610840 (``as_strided_`` on a captured tensor past its
    elements, tests/jit/test_compiled_inplace_view_captures.py), 7610939 (``acosh`` of torch's float32 ``i0(0)``,
    `generator.DISCONTINUOUS`; tests/ops/test_special_functions.py), 7612221 (``matrix_power(0)`` requires grad),
    7612269 (a kron operand written afterwards: `oracle.TORCH_UNVERSIONED`; tests/autograd/test_rules_linalg.py),
    7612101 (``orgqr``'s derivative; tests/autograd/test_rules_linalg.py).
    Session 38's (``--chains 0.2``): 7701141 (``ldexp_`` by an int32 exponent: torch's gradient is wrong, and
    `generator.TORCH_WRONG_GRADIENT` now names the in-place forms too), 7701876 (a compiled call wrote a written-back
    view into a strided input's compact copy before a fused read of it: tests/jit/test_inplace_write_back.py).
    Session 39's: 7802351 (erf's gradient of a bfloat16 tensor 1 ulp off torch's: its rule multiplied by g before
    the constant, where torch's rounds the constant's product first; tests/ops/test_hunt_divergences.py),
    7802475 (torch's ``fill_diagonal_`` with ``wrap`` writes outside a strided tall input:
    `generator._hint_fill_diagonal` passes no wrap there), 7802741 (``signbit`` of a NaN from ``log_`` of a
    negative: a NaN's sign is no library's contract; `generator.DISCONTINUOUS` now names signbit), 7811027
    (``searchsorted`` of a number beside a uint8 sequence: torch wraps it into uint8; tests/ops/
    test_hunt_divergences.py), 7811197 (a float32 ``cosh_`` stacked into a float64 ``out=``: float64 results
    of narrower float data take that data's tolerance, `oracle.tolerances`), 7803691 and 7804472 (torch's
    cholesky_solve and cholesky_inverse gradients read the factor's ignored triangle:
    `generator.TORCH_WRONG_GRADIENT`), 7805681 (``atan2`` of a uint8 and a float32 tensor: jitorch's gradient
    squared the uint8 operand in uint8, and torch's does too: tests/autograd/test_rules_elementwise.py; such
    statements are `generator.TORCH_WRONG_BY_AN_INTEGER`; the op table has grown since, so today's program of
    this seed holds no atan2: `test_atan2_of_an_integer_takes_no_gradient_run_against_torch`), 7805437 (``topk``'s
    gradient among ties goes to other equal elements than torch's: `generator.AMONG_TIES`).
    Session 40's: 7820309 (a dead ``index_fill`` by a 0-d value left a check that replayed it with the value 1-d,
    raising in the compiled call: tests/jit/test_value_checks.py), 7820783 (``qr`` of a matrix with a repeated
    column: past the rank, Q's columns are rounding noise's choice; `generator._hint_full_rank`), 7822899 (the
    same), 7822517 (torch's ``pinverse`` of a rank-1 float32 matrix inverts its SVD's noise).
    Session 41's: 7860540 and 7861512 (an ``unsafe_split`` output kept the split view's bookkeeping: a write
    into its source made its backward raise the multiple-views error, a write into it was refused;
    tests/ops/test_real_identities.py), 7860971 (torch loses the gradient of a view taken before ``as_strided_``
    on its base: `generator.TORCH_WRONG_GRADIENT`; tests/autograd/test_view_base_history.py).
    Session 42's: 7901612 (torch's ``addcmul`` gradient multiplies a uint8 operand by ``value=-1`` in uint8:
    `generator.TORCH_WRONG_BY_AN_INTEGER` now names addcmul and addcdiv; tests/autograd/test_rules_elementwise.py),
    7902232 and 7902920 (the gradient of a float input through ``softmax(x, 2, bfloat16)`` and a bfloat16
    ``tanh_`` rounded each op of the rule to bfloat16, where torch's backward kernels round once:
    tests/autograd/test_rules_reductions.py, test_rules_elementwise.py), 7920026 (``--chains 0.3``: torch's
    ``xlogy`` of a 0-d float32 and a bfloat16 tensor rounds the log to bfloat16 first, a documented difference:
    `generator.HALF_DIFFERS` now names xlogy, for a half operand in any place); 7950305 of 40 statements is
    tests/fuzz/test_bessel_oracle.py's."""
    program, _ = generate(seed, table=TABLE, chains=chains)
    assert not check(program, CPU_MODES).mismatches


def test_ldexp_takes_only_whole_exponents_seed_7952512():
    """Seed 7952512 of 40 statements: ``v26 = v8.ldexp(x1); v33 = v26.tan()`` with x1 a ``rad2deg_`` result:
    the fractional power's last bit, a documented difference, times 2 ** 57 then made tan 2.38 against torch's
    -5.02. `generator._hint_ldexp` gives ldexp whole exponents only (an integer tensor or int, or an exact float
    tensor of whole values), exact in both libraries; the seed's program now holds none and runs alike."""
    from tests.fuzz.generator import Facts, Generator, Var, _whole
    g = Generator(0, table=TABLE)
    env = {"i": Var("i", torch.tensor([3, -2]), Facts()),
           "w": Var("w", torch.tensor([3.0, -2.0]), Facts()),
           "f": Var("f", torch.tensor([0.5, 2.0]), Facts()),
           "r": Var("r", torch.tensor([3.0, -2.0]), Facts(exact=False)),
           "n": Var("n", 2, Facts()), "h": Var("h", 2.0, Facts())}
    assert [_whole(g, env, ref) for ref in env] == [True, True, False, False, True, False]
    assert _whole(g, env, "T.tensor([1, 4], dtype=T.int8, device=D)") and not _whole(g, env, "0.5")
    program, _ = generate(7952512, 40, table=TABLE)
    assert not [s for s in program.body if s.tag.startswith("ldexp")]
    assert not check(program, CPU_MODES).mismatches


def test_atanh_takes_only_exact_operands_seed_8400595():
    """Seed 8400595 of 40 statements: ``T.arctanh(T.erf(x2), out=v11)`` with int16 x2 = 4: eager's float32 erf(4)
    is 1 - 2**-24, torch's and the kernels' 1.0 (within the documented 4 ulps), and atanh's pole at 1 turned that
    ulp into 8.7 against inf (then a variance of 0 against NaN). atanh is `generator.DISCONTINUOUS` (as acosh,
    NaN past its end): called on exact operands only."""
    from tests.fuzz.generator import DISCONTINUOUS
    assert {"atanh", "arctanh"} <= DISCONTINUOUS
    program, _ = generate(8400595, 40, table=TABLE)
    assert not check(program, CPU_MODES).mismatches
