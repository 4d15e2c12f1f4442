"""all_reduce's plans per signature and its agreement's persistent all-gather (session 48), under the launcher
(`allred48_check.py`)."""

import re

import pytest

from .test_collectives import launch


def passed(done, nproc):
    """Every rank's count of checks passed, after asserting that each rank reported."""
    counts = dict(re.findall(rf"rank (\d) of {nproc}: (\d+) checks passed", done.stdout))
    assert sorted(int(r) for r in counts) == list(range(nproc)), done.stdout + done.stderr
    return {int(r): int(n) for r, n in counts.items()}


@pytest.mark.parametrize("nproc", [2, 4])
def test_planned_all_reduces_match_numpy_and_disagreements_after_plans_raise_on_every_rank(nproc):
    """Signatures called again take their plan: against NumPy for every op, inline and through MPI, sync and
    async, 0-d, integer, boolean, strided and bfloat16 tensors beside a plan of their signature; ranks holding
    plans of different signatures (count, op, the collective) raise on every rank with the tensor unwritten;
    groups made, destroyed and made again. DeprecationWarnings are errors: the 2-rank reduction of MIN and MAX
    passed ``out`` as a third positional argument, which NumPy deprecates for minimum and maximum."""
    done = launch(nproc, "allred48_check.py", "plans", timeout=180, PYTHONWARNINGS="error::DeprecationWarning")
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(n >= 80 for n in passed(done, nproc).values()), done.stdout


def test_shapes_differing_past_the_ninth_dim_raise_on_every_rank():
    """Regression: the agreement's header held 9 dims, so 10-d tensors differing only in the 10th agreed, and an
    inline all-reduce read the shorter rank's stale bytes as data (silently wrong); the header now holds the
    element count and a hash of the dims past the 9th too."""
    done = launch(2, "allred48_check.py", "dims")
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(n == 6 for n in passed(done, 2).values()), done.stdout


def test_a_group_whose_agreement_timed_out_raises_at_its_next_call():
    """The persistent all-gather of a timed-out call is still started: the next call says the group cannot be
    used, instead of MPI's error on starting an active request (or pairing with a late rank's call)."""
    done = launch(2, "allred48_check.py", "timeout", timeout=60)
    assert "rank 0 of 2: 3 checks passed" in done.stdout, done.stdout + done.stderr
