"""all_reduce of a tensor given again whose data travels in the agreement's block: the group's hot all-reduce
(`collectives._Blocks.hot`, session 49), under the launcher (`smallar49_check.py`)."""

import re

import pytest

from .test_collectives import launch


def passed(done, nproc):
    """Every rank's count of checks passed, after asserting that each rank reported."""
    counts = dict(re.findall(rf"rank (\d) of {nproc}: (\d+) checks passed", done.stdout))
    assert sorted(int(r) for r in counts) == list(range(nproc)), done.stdout + done.stderr
    return set(int(n) for n in counts.values())


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_op_and_dtype_given_again_matches_numpy_at_every_call(nproc):
    """Every dtype and op, 1 element to the block's whole data, sync and async, at the plan's first call, its
    second (which makes it the hot one) and the hot path after, against NumPy; integers wrap, MIN and MAX keep
    any rank's NaN; two tensors over one array."""
    done = launch(nproc, "smallar49_check.py", "values", timeout=300, PYTHONWARNINGS="error::DeprecationWarning")
    assert done.returncode == 0, done.stdout + done.stderr
    assert passed(done, nproc) == {1184}, done.stdout


@pytest.mark.parametrize("nproc", [2, 4])
def test_disagreements_with_the_hot_tensor_raise_on_every_rank(nproc):
    """The hot tensor on every rank but the last, which gives another shape, dtype, op or collective, or its hot
    tensor resized or given other data: RuntimeError on every rank naming each rank's call, no tensor written,
    the hot tensor right afterwards; new signatures on every rank, two groups' hot tensors, a world made again."""
    done = launch(nproc, "smallar49_check.py", "disagree", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert passed(done, nproc) == {32}, done.stdout
