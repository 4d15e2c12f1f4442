"""Session 57's triage of the fuzz failures found at the end of session 56 (``--edges 0.4 --out-views 0.4
--regions 0.2``) and in session 57's runs: those that were torch's or the fuzzer's, not jitorch's."""

import numpy as np
import pytest

import torch

import jitorch
from tests.fuzz.generator import TORCH_WRITES_THROUGH_OVERLAP, generate, probe
from tests.fuzz.oracle import EXPORTED, SkippedChecks, check

EAGER_MODES = ("torch", "eager")


pytestmark = pytest.mark.usefixtures("quiet_warnings")

OVERLAP = "more than one element of the written-to tensor refers to a single memory location"


def _session56_program(seed):
    return generate(seed, 14, out_views=0.4, regions=0.2, edges=0.4)


@pytest.mark.parametrize("n", [3, 12])
def test_baddbmm_into_an_expanded_self_raises_before_writing_on_every_path_seed_5642397(n):
    """Fuzz seed 5642397: ``x2.baddbmm_(a, b)`` of a bfloat16 input laid out expanded; torch 2.13 wrote through it
    (its naive kernel, under 400 multiply-adds, where its BLAS path raises), jitorch raises torch's overlap error
    at every size, eager and compiled, before any write (docs/differences-from-torch.md). The fuzzer writes no
    expanded input with such ops now (`generator.TORCH_WRITES_THROUGH_OVERLAP`)."""
    values = np.arange(n, dtype=np.float32).reshape(1, n, 1)
    a, b = np.ones((2, n, n), np.float32), np.ones((2, n, n), np.float32)
    torch_self = torch.tensor(values).expand(2, n, n)
    if n == 3:  # (27 multiply-adds: torch's naive kernel writes through the stride-0 dims)
        torch_self.baddbmm_(torch.tensor(a), torch.tensor(b))
    else:
        with pytest.raises(RuntimeError, match=OVERLAP):
            torch_self.baddbmm_(torch.tensor(a), torch.tensor(b))

    def write(x, p, q):
        return x.baddbmm_(p, q)

    for fn in (write, jitorch.compile(write)):
        base = jitorch.tensor(values)
        with pytest.raises(RuntimeError, match=OVERLAP):
            fn(base.expand(2, n, n), jitorch.tensor(a), jitorch.tensor(b))
        np.testing.assert_array_equal(base.numpy(), values)
    with pytest.raises(RuntimeError, match=OVERLAP):
        jitorch.mv(jitorch.ones(n, n), jitorch.ones(n), out=jitorch.zeros(1).expand(n))


def test_fuzzer_writes_no_expanded_input_with_a_product_torch_writes_through_seed_5642397():
    """The seed's program now draws no in-place or ``out=`` product into its inputs laid out expanded (x1, x2),
    which elementwise ops may still write (both libraries raise there), and checks clean."""
    program, g = _session56_program(5642397)
    env = probe(program, g.facts)
    entries = {e.name: e for e in g.table}
    assert g.expanded_inputs == {"x1", "x2"} and TORCH_WRITES_THROUGH_OVERLAP <= set(entries)
    for name in TORCH_WRITES_THROUGH_OVERLAP:
        assert [g.writable_by(entries[name], env[x]) for x in ("x0", "x1", "x2")] == [True, False, False]
    assert all(g.writable_by(entries["add"], env[x]) for x in ("x0", "x1", "x2"))
    assert not any("baddbmm" in line for s in program.body for line in s.lines)
    assert check(program, EAGER_MODES).mismatches == []


def test_torch_runs_refuse_max_of_an_empty_tensor_into_out_as_the_plain_call_seed_5702180():
    """Fuzz seed 5702180: ``T.max(v3, out=v12)`` of a ``v3`` empty in the second call (a masked selection of an
    expanded input); torch 2.13's ``max.unary_out`` skips the empty check and wrote -inf, where jitorch raises the
    plain call's error, as torch's ``amax`` with ``out=`` does (docs/differences-from-torch.md). The oracle's torch
    runs raise there (`oracle.SkippedChecks`)."""
    message = "Expected reduction dim to be specified for input.numel\\(\\) == 0"
    assert torch.max(torch.zeros(0), out=torch.zeros(0)).item() == float("-inf")
    with SkippedChecks():
        for f, name in ((torch.max, "max"), (torch.min, "min")):
            with pytest.raises(RuntimeError, match=f"{name}\\(\\): {message}"):
                f(torch.zeros(0, 3), out=torch.zeros(0))
            assert f(torch.tensor([2.0, -1.0]), out=torch.zeros(0)).item() == (2.0 if name == "max" else -1.0)
        assert torch.max(torch.zeros(0, 3), 1).values.shape == (0,)
    for f in (jitorch.max, jitorch.min):
        with pytest.raises(RuntimeError, match=message):
            f(jitorch.zeros(0, 3), out=jitorch.zeros(0))
    program, _ = _session56_program(5702180)
    assert "T.max(" in "".join(line for s in program.body for line in s.lines)
    assert check(program, EAGER_MODES).mismatches == []


def test_an_export_on_a_layout_where_contiguous_views_its_input_is_compared_on_that_layout_seed_5730032():
    """Fuzz seed 5730032 of ``--export --edges 0.4``: ``v0 = x0.contiguous()`` (the input itself on the example's
    offset layout, a copy on the second call's strided one), ``x0[::3] = 2.0``, ``T.mul(v0, x0, out=x0)``: the
    exported program, fixed on its example, squares the written x0 where eager multiplies the old copy by it
    (docs/differences-from-torch.md). The oracle compares that call's outputs of either kind and inputs only where
    they do not follow the choice; the other calls in full."""
    program, _ = generate(5730032, 14, edges=0.4)
    assert "x0.contiguous()" in "".join(line for s in program.body for line in s.lines)
    assert program.layouts == (("offset",), ("strided",))
    outcome = check(program, ("eager", EXPORTED))
    assert outcome.exported and outcome.mismatches == []
