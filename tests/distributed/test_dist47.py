"""all_reduce's data travelling in its agreement's block (session 47), under the launcher: one launch per rank
count holds every check (`dist47_check.py`)."""

import re

import pytest

from .test_collectives import launch


@pytest.mark.parametrize("nproc", [2, 4])
def test_small_all_reduces_travel_in_the_agreement_and_disagreements_raise_on_every_rank(nproc):
    """Every op and dtype inline (no MPI all-reduce of its own) and through MPI against NumPy, equal bits on every
    rank; NaN kept by MIN and MAX on both paths; on 2 ranks, ranks disagreeing on dtype, shape, count, op or the
    collective (inline, MPI-sized and one of each) raise on every rank with the tensor unwritten, the group
    usable after each."""
    done = launch(nproc, "dist47_check.py", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = re.findall(rf"rank (\d) of {nproc}: (\d+) checks passed", done.stdout)
    assert sorted(int(r) for r, _ in passed) == list(range(nproc)), done.stdout
    assert all(int(n) >= 100 for _, n in passed), passed
