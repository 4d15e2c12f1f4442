"""Run on 2 ranks by a plain ``mpiexec -n 2`` (session 53's checks); prints "rank R of N: K checks passed".

- init_process_group's ``rank`` and ``world_size`` against MPI's: ValueError naming both, no group made; given
  as MPI has them (and ``init_method="env://"``) they are accepted, and without a backend named, on a machine
  without CUDA, the backend is "mpi"; a second init raises torch's ValueError.
- The hot path of all-reduces through MPI (`collectives._Plan.run`): a tensor all-reduced again, 8 to 64 KB,
  runs its bound persistent all-reduce as the group's hot all-reduce, new values each call against NumPy, every
  op, sync and async; a rank that gives another tensor of the signature meanwhile, or another shape or op,
  against a rank on the hot path: right values, or a RuntimeError on every rank with the tensor unwritten, and
  the hot tensor bound again after; a mid-sized tensor moves from the hot plan to the wide lane's inline path.
"""

import numpy as np
from mpi4py import MPI

import jitorch as jt
import jitorch.distributed as dist
from checking import check, data, raises
from jitorch.distributed import collectives
from jitorch.distributed.process_group import resolve

collectives.FUSED_MAX = 0  # the slim lane and bound all-reduces checked here: fused lanes (session 56), which carry
# sums of up to 8 KB, would take some of these calls (dist56_check.py checks those)

mpi_rank = MPI.COMM_WORLD.Get_rank()
raises(f"init_process_group(rank={1 - mpi_rank}) but MPI started this process as rank {mpi_rank}",
       lambda: dist.init_process_group(rank=1 - mpi_rank), ValueError)
raises("WORLD_SIZE (or world_size) is 1, but mpiexec started 2 processes",
       lambda: dist.init_process_group(world_size=1), ValueError)
assert not dist.is_initialized()
dist.init_process_group(init_method="env://", rank=mpi_rank, world_size=2)
assert not jt.cuda.is_available() and dist.get_backend() == "mpi"
raises("trying to initialize the default process group twice!", dist.init_process_group, ValueError)
rank, size = dist.get_rank(), dist.get_world_size()
assert (rank, size) == (mpi_rank, 2)
pg = resolve(None)
R = dist.ReduceOp
FOLD = {"SUM": np.sum, "AVG": np.mean, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max}


def values(r, n, call):
    """Rank ``r``'s ``n`` values at its ``call``-th call."""
    return data(r + size * call, shape=(n,)) % 97  # (small: PRODUCT exact in float32)


def reduce_into(t, op, call, async_op=False):
    """Fill ``t`` with this rank's values of ``call``, all-reduce it, and check it against NumPy."""
    n = t.numel()
    t.copy_(jt.from_numpy(values(rank, n, call)))
    work = dist.all_reduce(t, op=getattr(R, op), async_op=async_op)
    if async_op:
        assert work.result() == [t]
    check(t, FOLD[op](np.stack([values(r, n, call) for r in range(size)]), axis=0))


def hot_and_bound(t, op="SUM"):
    """``t`` is the group's hot all-reduce, through its plan's persistent all-reduce bound to ``t``'s memory."""
    plan = pg.signatures.plans[(t.dtype, t._shape, getattr(R, op))]
    assert pg.signatures.hot[0]() is t._arr and pg.signatures.hot[2] is plan
    assert plan.bound is not None and plan.bound_array() is t._arr and not plan.busy


for n in (2048, 4096, 16384):  # 8, 16 and 64 KB: through MPI after the agreement
    for op in FOLD:
        t = jt.zeros(n)
        for call in range(5):
            reduce_into(t, op, call, async_op=call == 4)
        hot_and_bound(t, op)

t = jt.zeros(2048)
for call in range(3):
    reduce_into(t, "SUM", call)
hot_and_bound(t)
# rank 1 gives two tensors in turn while rank 0 gives its hot one: no rank starts its bound all-reduce
pair = [jt.zeros(2048), jt.zeros(2048)]
for call in range(4):
    reduce_into(t if rank == 0 else pair[call % 2], "SUM", call)
for call in range(3):
    reduce_into(t, "SUM", call)
hot_and_bound(t)
# another shape, then another op, against the hot tensor: every rank raises, naming each call, t unwritten
other = jt.ones(2049)
before = t.clone()
raises("the ranks disagree on the collective or on the tensors' dtype and shape: rank 0: all_reduce(float32[2048]); "
       "rank 1: all_reduce(float32[2049])", lambda: dist.all_reduce(t if rank == 0 else other))
assert jt.equal(t, before)
raises("the ranks disagree on the reduce op: rank 0: all_reduce(float32[2048], SUM); rank 1: "
       "all_reduce(float32[2048], MAX)", lambda: dist.all_reduce(t, op=R.MAX if rank else R.SUM))
assert jt.equal(t, before)
for call in range(3):
    reduce_into(t, "SUM", call)
hot_and_bound(t)

# mid-sized (more than INLINE, at most WIDE_INLINE bytes): MPI, then the wide lane's block once the group moves
mid = jt.zeros(collectives.INLINE // 4 + 100)
for call in range(4):
    reduce_into(mid, "SUM", call)
assert pg.signatures.lane is pg.signatures.wide and isinstance(pg.signatures.hot[2], collectives._Inline)

print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
dist.destroy_process_group()
