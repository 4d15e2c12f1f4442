"""all_reduce of a tensor given again whose data travels in the agreement's block: the group's hot all-reduce
(`collectives._Blocks.hot`, session 49), under the launcher (`smallar49_check.py`)."""

import re

import numpy as np
import pytest

import jitorch as jt
import jitorch.distributed as dist
from jitorch.distributed import threads

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
    the hot tensor right afterwards; new signatures on every rank, two groups' hot tensors, a world made again;
    a freed hot tensor's memory goes (the group holds its array weakly)."""
    done = launch(nproc, "smallar49_check.py", "disagree", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert passed(done, nproc) == {33}, done.stdout


@pytest.mark.parametrize("size", [2, 4])
def test_a_thread_worlds_agreement_is_persistent_and_its_hot_all_reduce_matches_numpy(size):
    """Ranks that are threads (`threads.ThreadWorld`, the fake NCCL's) start a persistent all-gather for their
    agreement, as MPI's ranks do, and take the hot path: values against NumPy every call, every op, and a
    disagreement after raises on every thread with the tensor unwritten."""
    ops = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")

    def body(pg):
        rank = pg.rank()
        got = []
        for op in ops:
            t = jt.zeros(5)
            for call in range(4):
                t.copy_(jt.from_numpy(np.arange(5, dtype=np.float32) + rank + call))
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=pg)
                got.append(t.numpy().copy())
            assert pg.signatures.hot[0]() is t._arr
        assert isinstance(pg.signatures.persistent, threads._Persistent)
        mine = t if rank else jt.zeros(6)
        before = mine.clone()
        try:
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=pg)
        except RuntimeError as error:
            assert jt.equal(mine, before)
            return got, str(error)
        finally:
            dist.destroy_process_group(pg)
        raise AssertionError("no error")

    results = threads.run(size, body, timeout=120, backend="mpi", group_timeout=60)
    rows = lambda call: np.stack([np.arange(5, dtype=np.float32) + r + call for r in range(size)])  # noqa: E731
    reductions = {"SUM": np.sum, "AVG": np.mean, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max}
    want = [reductions[op](rows(call), axis=0).astype(np.float32) for op in ops for call in range(4)]
    described = "; ".join(f"rank {r}: all_reduce(float32[{5 if r else 6}])" for r in range(size))
    for got, message in results:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        assert described in message, message
