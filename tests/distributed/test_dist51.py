"""The agreement's wide lane for mid-sized all-reduces, and DDP's averaged gradients in both of its gradient layouts
(session 51), under the launcher (`dist51_check.py`)."""

import re

from .test_collectives import launch


def test_wide_lane_all_reduces_match_numpy_disagreements_raise_and_ddp_grads_are_the_ranks_mean():
    """Mid-sized all-reduces given again take the wide lane (values against NumPy, every op, sync and async, at
    every call); small calls and other collectives there take the group back; disagreements in the wide lane
    raise on every rank naming each rank's call, the tensor unwritten, every rank back in the narrow lane; DDP's
    gradients equal the ranks' mean with ``gradient_as_bucket_view`` off and on, and a kept gradient stays."""
    done = launch(2, "dist51_check.py", timeout=240, PYTHONWARNINGS="error::DeprecationWarning")
    assert done.returncode == 0, done.stdout + done.stderr
    counts = dict(re.findall(r"rank (\d) of 2: (\d+) checks passed", done.stdout))
    assert sorted(counts) == ["0", "1"], done.stdout + done.stderr
    assert set(counts.values()) == {"256"}, counts
