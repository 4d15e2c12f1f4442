"""Run on 2 ranks under the launcher (session 55's checks); prints "rank R of N: K checks passed", then rank 0's
error from a barrier that rank 1 reaches late.

- The hot all-reduce through MPI (`collectives._Plan.run`, whose agreement is written out there), in the slim
  lane (`collectives._Blocks`): a tensor of 8 KB all-reduced again, with calls between that write the
  agreement's block otherwise or change the lane (a broadcast of the same dtype and shape, a 12-byte all-reduce
  through MPI, a one-element all-reduce whose data travels in the slim block over the readiness byte, mid-sized
  all-reduces that move the group to the wide lane, a rank giving another shape): values against NumPy at every
  call, the group back in the narrow lane after each, and no MPI all-reduce started or bound but the tensor's
  bound one (counted on the group's communicator); each disagreement raises on every rank, the tensor unwritten.
- torch's helpers the launcher's environment answers: ``is_torchelastic_launched`` and ``get_node_local_rank``.
- ``new_group(sort_ranks=False)``: group ranks in the order given (a broadcast from group rank 0 comes from global
  rank 1, an all-gather's rows in that order); sorted by default; a rank named twice raises ValueError.
- ``barrier(timeout=)``: rank 0's barrier with a 1 s timeout raises after about 1 s, not the group's 60 s.
"""

import datetime
import os
import time

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import Counting, check, data, raises
from jitorch.distributed import collectives
from jitorch.distributed.process_group import resolve

collectives.FUSED_MAX = 0  # the slim lane and bound all-reduces checked here: fused lanes (session 56), which carry
# sums of up to 8 KB, would take some of these calls (dist56_check.py checks those)

dist.init_process_group(timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
pg = resolve(None)


pg.comm = counting = Counting(pg.comm)


def hot_call(t, call):
    """All-reduce this rank's values of ``call`` in ``t`` and check the sum against NumPy."""
    t.copy_(jt.from_numpy(data(rank + size * call, shape=(2048,)) % 97))
    dist.all_reduce(t)
    check(t, np.sum([data(r + size * call, shape=(2048,)) % 97 for r in range(size)], axis=0))


hot = jt.zeros(2048)  # 8 KB: through MPI after the agreement
for call in range(3):  # the plan, then the bound all-reduce, then the hot path
    hot_call(hot, call)
plan = pg.signatures.plans[(hot.dtype, hot._shape, dist.ReduceOp.SUM)]
assert plan.bound is not None and plan.bound_array() is hot._arr
assert pg.signatures.lane is pg.signatures.slim  # (two all-reduces of more than 4 KB in a row)
small, scalar, mid, same = jt.zeros(3), jt.zeros(()), jt.zeros(collectives.INLINE // 4 + 10), jt.zeros(2048)
for between in range(7):
    started = counting.all_reduces
    if between == 1:  # the block's header is the broadcast's, whose dtype and shape are the hot tensor's
        same.fill_(float(rank))
        dist.broadcast(same, src=1)
        check(same, np.ones(2048))
    elif between == 2:  # 12 bytes do not fit the slim lane's block: an MPI all-reduce of their own
        small.fill_(float(rank + 1))
        dist.all_reduce(small)
        check(small, np.full(3, 3.0))
        assert counting.all_reduces == started + 1
    elif between == 3:  # two mid-sized all-reduces take the group to the wide lane, where the hot one runs next
        for _ in range(2):
            mid.fill_(1.0)
            dist.all_reduce(mid)
            check(mid, np.full(mid.numel(), 2.0))
        assert pg.signatures.lane is pg.signatures.wide
    elif between == 4:  # one element travels in the slim lane's block: no MPI all-reduce
        scalar.fill_(float(rank + 1))
        dist.all_reduce(scalar)
        check(scalar, np.array(3.0))
        assert counting.all_reduces == started
    elif between == 5:  # another shape against the hot tensor in the slim lane: every rank raises, hot unwritten
        before = hot.clone()
        raises("rank 0: all_reduce(float32[2048]); rank 1: all_reduce(float32[2049])",
               lambda: dist.all_reduce(hot if rank == 0 else jt.ones(2049)))
        check(hot, before.numpy())
    if between in (1, 2, 4, 5):
        assert pg.signatures.lane is pg.signatures.narrow
    started = counting.all_reduces, counting.bound
    for call in range(3):
        hot_call(hot, 10 * between + call)
    assert (counting.all_reduces, counting.bound) == started and pg.signatures.lane is pg.signatures.slim
    assert plan.bound_array() is hot._arr

assert dist.is_torchelastic_launched()
assert dist.get_node_local_rank() == rank == int(os.environ["LOCAL_RANK"])

backwards = dist.new_group([1, 0], sort_ranks=False)
assert dist.get_rank(backwards) == 1 - rank
t = jt.full((2,), float(rank))
dist.broadcast(t, group=backwards, group_src=0)
check(t, np.ones(2))
rows = [jt.zeros(2), jt.zeros(2)]
dist.all_gather(rows, jt.full((2,), float(rank)), group=backwards)
check(jt.stack(rows), np.array([[1.0, 1.0], [0.0, 0.0]]))
assert dist.get_rank(dist.new_group([1, 0])) == rank
raises("new_group: ranks [0, 0] name a rank twice", lambda: dist.new_group([0, 0]), ValueError)

print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
if rank == 1:
    time.sleep(3)
    dist.barrier()  # (rank 0's barrier ended in its error: MPI aborts rank 0 at exit, see mpi_backend.broken)
else:
    start = time.monotonic()
    try:
        dist.barrier(timeout=datetime.timedelta(seconds=1))
    except RuntimeError as error:
        print(f"rank 0: barrier raised after {time.monotonic() - start:.0f} s: {error}", flush=True)
