"""The agreement's wide lane for mid-sized all-reduces, and DDP's averaged gradients in both of its gradient layouts
(session 51), under the launcher (`dist51_check.py`)."""

import re

import numpy as np
import pytest

import jitorch as jt
import jitorch.distributed as dist

from .test_collectives import launch
from .test_nccl import cuda, fake, host, run  # noqa: F401  (fake: the fixture)


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


def test_a_cpu_tensor_against_a_cuda_one_raises_on_every_rank_naming_the_devices(fake):
    """Regression: in a group of backend "nccl", a CPU tensor on one rank (through MPI) and a CUDA tensor of the
    same dtype and shape on the other (through NCCL) agreed, the headers being alike; the CPU rank's all-reduce
    travelled in the agreement's block and was reduced with the CUDA rank's block, which held no data (silently
    wrong), while the CUDA rank waited in NCCL. The header now says which path a tensor takes: both raise,
    naming each rank's device, no tensor written, and the next matching call runs."""
    def body(pg, r, n):
        given = np.full(3, r + 2.0, np.float32)
        x = jt.from_numpy(given.copy()) if r == 0 else cuda(given, r)
        with pytest.raises(RuntimeError, match=r"^all_reduce: the ranks disagree on the tensors' device \(CPU tensors "
                                               r"go through MPI, CUDA tensors through NCCL\): rank 0: "
                                               r"all_reduce\(float32\[3\] on cpu\); rank 1: "
                                               r"all_reduce\(float32\[3\] on cuda\)$"):
            dist.all_reduce(x, group=pg)
        np.testing.assert_array_equal(host(x), given)
        y = cuda(given, r)
        dist.all_reduce(y, group=pg)
        np.testing.assert_array_equal(host(y), np.full(3, 5.0, np.float32))
        return True
    assert run(2, body) == [True, True]
